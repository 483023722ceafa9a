"""Optional features and the pip extra that installs each (see pyproject.toml's optional-dependencies).

One place for the fact "feature F needs extra E", so every such error reads the same and names what to
install. Imports the optional module only when a feature is used; never installs anything.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ImportError):
    """A feature was used whose optional dependency is not installed; the message says what to install."""


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import `module` for `feature`, or raise MissingExtra naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing = e.name or module
        raise MissingExtra(f"{feature} needs the '{extra}' extra (module {missing} is not installed): "
                           f"pip install 'autotuner[{extra}]'") from None
