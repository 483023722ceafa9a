"""Token lengths drawn from a distribution: what a synthetic workload's prompts and answers measure.

A `Lengths` is `fixed` (one value), `uniform` (integers in [min, max]), `normal` (mean, stddev) or
`lognormal` (its median and the stddev of the log, as traffic lengths usually are: most short, a long
tail). Every draw is rounded and clamped to [min, max] (at least 1), so a spec says exactly what can
reach the server. Pure: a draw depends on the `random.Random` handed in and nothing else.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

Kind = Literal["fixed", "uniform", "normal", "lognormal"]


@dataclass(frozen=True)
class Lengths:
    """A length distribution in tokens. `mean` is the value (fixed), the mean (normal) or the median
    (lognormal); `stddev` is in tokens (normal) or of the natural log (lognormal, e.g. 0.5)."""

    kind: Kind = "fixed"
    mean: float = 128
    stddev: float = 0.0
    min: int = 1
    max: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "uniform", "normal", "lognormal"):
            raise ValueError(f"unknown length distribution {self.kind!r}; valid: fixed, uniform, normal, lognormal")
        if self.min < 1:
            raise ValueError(f"min must be >= 1, got {self.min}")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        if self.kind == "uniform" and self.max is None:
            raise ValueError("a uniform length needs min and max")
        if self.kind != "uniform" and not self.mean >= 1:
            raise ValueError(f"mean must be >= 1, got {self.mean}")
        if self.stddev < 0:
            raise ValueError(f"stddev must be >= 0, got {self.stddev}")

    @classmethod
    def fixed(cls, value: int) -> Lengths:
        return cls("fixed", mean=value, min=1, max=None)

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            value = self.mean
        elif self.kind == "uniform":
            return rng.randint(self.min, self.max or self.min)
        elif self.kind == "normal":
            value = rng.gauss(self.mean, self.stddev)
        else:
            value = math.exp(rng.gauss(math.log(self.mean), self.stddev))
        return self.clamp(round(value))

    def clamp(self, value: int) -> int:
        value = max(self.min, value)
        return min(self.max, value) if self.max is not None else value

    @property
    def longest(self) -> int | None:
        """The longest length a draw can give (None: unbounded, e.g. a normal with no max)."""
        if self.kind == "fixed":
            return self.clamp(round(self.mean))
        if self.kind == "uniform" or self.max is not None:
            return self.max
        return None if self.stddev else self.clamp(round(self.mean))

    def describe(self) -> str:
        bounds = (f" in [{self.min}, {self.max}]" if self.max is not None
                  else f", min {self.min}" if self.min > 1 else "")
        if self.kind == "fixed":
            return f"{self.clamp(round(self.mean))}"
        if self.kind == "uniform":
            return f"uniform{bounds}"
        if self.kind == "normal":
            return f"normal(mean {self.mean:g}, stddev {self.stddev:g}){bounds}"
        return f"lognormal(median {self.mean:g}, sigma {self.stddev:g}){bounds}"
