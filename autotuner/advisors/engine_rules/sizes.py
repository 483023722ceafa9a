"""Sizes the engine rules share."""

from __future__ import annotations

import math


def at_least(value: float) -> int:
    """The smallest power of two >= value: slot counts that cover a load without splitting hairs."""
    return 1 << max(math.ceil(value) - 1, 0).bit_length()
