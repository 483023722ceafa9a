"""The search space: typed params, conditions and constraints -> one sampled configuration.

Pure logic over an Optuna trial's `suggest_*` calls; it never launches, reads or writes anything.
Conditions and constraints are small expressions (`ubatch_size <= batch_size`, `flash_attn == 'on'`)
evaluated by a whitelist interpreter over the sampled values, never by `eval`.
"""

from __future__ import annotations

import ast
import math
import operator
import random
from collections.abc import Mapping
from typing import Any, Protocol

from autotuner.config import BoolParam, CategoricalParam, FloatParam, IntParam, SearchSpaceConfig

Params = dict[str, Any]


class Suggester(Protocol):
    """The part of optuna.Trial the space needs (so tests may pass a FixedTrial)."""

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int: ...
    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float: ...
    def suggest_categorical(self, name: str, choices: Any) -> Any: ...


class RandomSuggester:
    """A `Suggester` that draws uniformly (log-uniformly where asked) from its own random generator:
    for configs the sampler did not propose (an unmeasured config when it keeps re-proposing)."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        if log and low > 0:
            return min(high, max(low, round(math.exp(self.rng.uniform(math.log(low), math.log(high + 1))) - 0.5)))
        return self.rng.randrange(low, high + 1, step)

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        if step:
            return low + step * self.rng.randint(0, int((high - low) / step))
        if log and low > 0:
            return math.exp(self.rng.uniform(math.log(low), math.log(high)))
        return self.rng.uniform(low, high)

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        return self.rng.choice(list(choices))


class ExpressionError(ValueError):
    """An expression uses something outside the small language, or a name that does not exist."""


class _Unset(Exception):
    """The expression names a param that was not sampled (its condition was false)."""


_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
        ast.NotIn: lambda a, b: a not in b}


def parse_expression(text: str, names: set[str]) -> ast.Expression:
    """Parse and check an expression once; raises ExpressionError naming what is not allowed."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ExpressionError(f"cannot parse {text!r}: {e.msg}") from None
    allowed = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.BinOp,
               ast.Compare, ast.Name, ast.Load, ast.Constant, ast.List, ast.Tuple, *_BIN, *_CMP)
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            raise ExpressionError(f"{text!r}: {type(node).__name__} is not allowed in expressions")
        if isinstance(node, ast.Name) and node.id not in names:
            raise ExpressionError(f"{text!r}: unknown param '{node.id}' (params: {', '.join(sorted(names))})")
    return tree


def _eval(node: ast.AST, values: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body, values)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise _Unset(node.id)
        return values[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, values) for e in node.elts]
    if isinstance(node, ast.BoolOp):
        results = (_eval(v, values) for v in node.values)
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, values)
        return (not v) if isinstance(node.op, ast.Not) else -v
    if isinstance(node, ast.BinOp):
        return _BIN[type(node.op)](_eval(node.left, values), _eval(node.right, values))
    if isinstance(node, ast.Compare):
        left = _eval(node.left, values)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = _eval(comp, values)
            if not _CMP[type(op)](left, right):
                return False
            left = right
        return True
    raise ExpressionError(f"{type(node).__name__} is not allowed")  # unreachable after parse_expression


class SearchSpace:
    """A validated search space, ready to sample from."""

    def __init__(self, config: SearchSpaceConfig):
        self.config = config
        names = set(config.params)
        self._conditions = {n: parse_expression(p.condition, names - {n})
                            for n, p in config.params.items() if p.condition}
        self._constraints = [(text, parse_expression(text, names)) for text in config.constraints]

    @property
    def names(self) -> list[str]:
        return list(self.config.params)

    def suggest(self, trial: Suggester) -> Params:
        """Sample one configuration, in the file's order, skipping params whose condition is false."""
        params: Params = {}
        for name, spec in self.config.params.items():
            if self._applies(name, params):
                params[name] = _suggest_one(trial, name, spec)
        return params

    def _applies(self, name: str, params: Params) -> bool:
        """Whether `name` is part of a config holding `params` so far (its condition, if any, is true)."""
        cond = self._conditions.get(name)
        try:
            return cond is None or bool(_eval(cond, params))
        except _Unset:
            return False

    def fit(self, values: Mapping[str, Any]) -> Params:
        """`values` fitted to the space, in the file's order: each to the nearest value its param allows;
        a param without a value, or whose condition is false, is left out (for the sampler to choose)."""
        params: Params = {}
        for name, spec in self.config.params.items():
            if name in values and self._applies(name, params) and (value := _nearest(spec, values[name])) is not None:
                params[name] = value
        return params

    def at_least(self, name: str, want: float) -> Any:
        """The smallest value of numeric param `name` that is at least `want` (its largest when none is),
        None for a param the space lacks: a size that must hold something, never rounded below it."""
        spec = self.config.params.get(name)
        if isinstance(spec, CategoricalParam):
            numbers = sorted(c for c in spec.choices if isinstance(c, (int, float)) and not isinstance(c, bool))
            return next((c for c in numbers if c >= want), numbers[-1] if numbers else None)
        if isinstance(spec, (IntParam, FloatParam)):
            value = _nearest(spec, want)
            step = getattr(spec, "step", None) or 0
            return min(value + step, spec.high) if value is not None and value < want and step else value
        return None

    def broken_constraints(self, params: Mapping[str, Any]) -> list[str]:
        """The constraints this config breaks; one naming an unsampled param does not apply."""
        broken = []
        for text, tree in self._constraints:
            try:
                if not _eval(tree, params):
                    broken.append(text)
            except _Unset:
                continue
            except (TypeError, ZeroDivisionError) as e:
                broken.append(f"{text} ({e})")
        return broken

    def contains(self, params: Mapping[str, Any]) -> str | None:
        """Why `params` is outside the space, or None when every value fits its param."""
        for name, value in params.items():
            spec = self.config.params.get(name)
            if spec is None:
                return f"'{name}' is not a param of this space (params: {', '.join(self.names)})"
            if isinstance(spec, BoolParam) and not isinstance(value, bool):
                return f"'{name}' must be true or false (got {value!r})"
            if isinstance(spec, CategoricalParam) and value not in spec.choices:
                return f"'{name}' must be one of {spec.choices} (got {value!r})"
            if isinstance(spec, (IntParam, FloatParam)):
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    return f"'{name}' must be a number (got {value!r})"
                if not spec.low <= value <= spec.high:
                    return f"'{name}' must be within [{spec.low}, {spec.high}] (got {value!r})"
        return None


def _nearest(spec: Any, want: Any) -> Any:
    """The value of `spec` nearest to `want` (a tie goes to the larger); None when nothing is near."""
    number = isinstance(want, (int, float)) and not isinstance(want, bool)
    if isinstance(spec, BoolParam):
        return want if isinstance(want, bool) else None
    if isinstance(spec, CategoricalParam):
        if want in spec.choices:
            return want
        numbers = [c for c in spec.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
        return min(numbers, key=lambda c: (abs(c - want), -c)) if number and numbers else None
    if not number:
        return None
    value = min(max(want, spec.low), spec.high)
    if isinstance(spec, IntParam):
        top = spec.high - (spec.high - spec.low) % spec.step  # the highest value on the step grid
        return min(spec.low + round((value - spec.low) / spec.step) * spec.step, top)
    if spec.step:
        value = min(spec.low + round((value - spec.low) / spec.step) * spec.step, spec.high)
    return float(value)


def _suggest_one(trial: Suggester, name: str, spec: Any) -> Any:
    if isinstance(spec, IntParam):
        return trial.suggest_int(name, spec.low, spec.high, step=spec.step, log=spec.log)
    if isinstance(spec, FloatParam):
        return trial.suggest_float(name, spec.low, spec.high, step=spec.step, log=spec.log)
    if isinstance(spec, CategoricalParam):
        return trial.suggest_categorical(name, spec.choices)
    return trial.suggest_categorical(name, [False, True])
