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
    type: Literal["int"]
    low: int
    high: int
    step: int = Field(1, gt=0)
    log: bool = False

    @model_validator(mode="after")
    def _range(self) -> IntParam:
        _check_range(self.low, self.high, self.log)
        return self


class FloatParam(_Param):
    type: Literal["float"]
    low: float
    high: float
    step: float | None = Field(None, gt=0)
    log: bool = False

    @model_validator(mode="after")
    def _range(self) -> FloatParam:
        _check_range(self.low, self.high, self.log)
        return self


Choice = bool | int | float | str


class CategoricalParam(_Param):
    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1)

    @field_validator("choices")
    @classmethod
    def _unique(cls, choices: list[Choice]) -> list[Choice]:
        if len({repr(c) for c in choices}) != len(choices):
            raise ValueError("choices must not repeat")
        return choices


class BoolParam(_Param):
    type: Literal["bool"]


ParamSpec = Annotated[IntParam | FloatParam | CategoricalParam | BoolParam, Field(discriminator="type")]


def _check_range(low: float, high: float, log: bool) -> None:
    if low > high:
        raise ValueError(f"low ({low}) must not exceed high ({high})")
    if log and low <= 0:
        raise ValueError(f"log scale needs low > 0 (got {low})")


class SearchSpaceConfig(_Strict):
    """What the study may change: engine params by the adapter's names, and rules between them."""

    engine: str = Field(description="The engine these params belong to (llamacpp, vllm, sglang).")
    params: dict[str, ParamSpec] = Field(min_length=1)
    constraints: list[str] = Field(
        default_factory=list, description="Expressions that every launched config must satisfy."
    )

    @property
    def env_params(self) -> dict[str, str]:
        """Params that set an environment variable: {param: VARIABLE}."""
        return {name: p.env for name, p in self.params.items() if p.env is not None}


