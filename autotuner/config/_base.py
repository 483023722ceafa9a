"""What every config model shares: the one error a user's file raises, and strict, frozen models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(Exception):
    """A user's file is wrong. The message is one line: file, field, what was expected."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
