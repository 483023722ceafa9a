"""Search-space files: each param's type and range, the conditions and constraints between params.
Pure models: reading a file is loading.py's."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from autotuner.config._base import _Strict


class _Param(_Strict):
    condition: str | None = Field(
        None, description="Expression over earlier params; the param is only sampled when it is true."
    )
    env: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The environment variable this param sets (one the engine adapter allows, e.g. NCCL_PROTO), "
                    "instead of an engine param of the same name.")


class IntParam(_Param):
    """An integer in [low, high]."""

    type: Literal["int"] = Field(description="The kind of param.")
    low: int = Field(description="The smallest value.")
    high: int = Field(description="The largest value.")
    step: int = Field(1, gt=0, description="Values are low + k * step.")
    log: bool = Field(False, description="Sample on a log scale (for ranges over orders of magnitude).")

    @model_validator(mode="after")
    def _range(self) -> IntParam:
        _check_range(self.low, self.high, self.log)
        return self


class FloatParam(_Param):
    """A number in [low, high]."""

    type: Literal["float"] = Field(description="The kind of param.")
    low: float = Field(description="The smallest value.")
    high: float = Field(description="The largest value.")
    step: float | None = Field(None, gt=0, description="Values are low + k * step (none: continuous).")
    log: bool = Field(False, description="Sample on a log scale.")

    @model_validator(mode="after")
    def _range(self) -> FloatParam:
        _check_range(self.low, self.high, self.log)
        return self


Choice = bool | int | float | str


class CategoricalParam(_Param):
    """One of a list of values."""

    type: Literal["categorical"] = Field(description="The kind of param.")
    choices: list[Choice] = Field(min_length=1, description="The values (numbers, strings, true/false).")

    @field_validator("choices")
    @classmethod
    def _unique(cls, choices: list[Choice]) -> list[Choice]:
        if len({repr(c) for c in choices}) != len(choices):
            raise ValueError("choices must not repeat")
        return choices


class BoolParam(_Param):
    """true or false (a switch flag)."""

    type: Literal["bool"] = Field(description="The kind of param.")


ParamSpec = Annotated[IntParam | FloatParam | CategoricalParam | BoolParam, Field(discriminator="type")]


def _check_range(low: float, high: float, log: bool) -> None:
    if low > high:
        raise ValueError(f"low ({low}) must not exceed high ({high})")
    if log and low <= 0:
        raise ValueError(f"log scale needs low > 0 (got {low})")


class SearchSpaceConfig(_Strict):
    """What the study may change: engine params by the adapter's names, and rules between them."""

    engine: str = Field(description="The engine these params belong to (llamacpp, vllm, sglang).")
    params: dict[str, ParamSpec] = Field(
        min_length=1, description="Each param by the adapter's name: its type and range (see the param types).")
    constraints: list[str] = Field(
        default_factory=list, description="Expressions that every launched config must satisfy."
    )

    @property
    def env_params(self) -> dict[str, str]:
        """Params that set an environment variable: {param: VARIABLE}."""
        return {name: p.env for name, p in self.params.items() if p.env is not None}


