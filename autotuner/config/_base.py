"""What every config model shares: the one error a user's file raises, strict, frozen models, and how a
value is written on one line of YAML (the reference's cells, the files `init` writes)."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict


class ConfigError(Exception):
    """A user's file is wrong. The message is one line: file, field, what was expected."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def flow_yaml(value: Any) -> str:
    """`value` as one line of YAML: `true`, `0.9`, `[1, 2]`, `{a: 1}`, `""` for an empty text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str) and not value:
        return '""'
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip()
    return text.removesuffix("...").strip()
