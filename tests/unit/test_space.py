"""Sampling from a search space: types, conditions, constraints, and the small expression language."""

from __future__ import annotations

import optuna
import pytest

from autotuner.config import SearchSpaceConfig
from autotuner.config.space import ExpressionError, SearchSpace


def space(params: dict, constraints: list[str] | None = None) -> SearchSpace:
    return SearchSpace(SearchSpaceConfig.model_validate(
        {"engine": "llamacpp", "params": params, "constraints": constraints or []}))


SPACE = {
    "parallel": {"type": "int", "low": 1, "high": 32, "log": True},
    "batch_size": {"type": "categorical", "choices": [64, 512, 2048]},
    "ubatch_size": {"type": "categorical", "choices": [32, 512]},
    "cont_batching": {"type": "bool"},
    "flash_attn": {"type": "categorical", "choices": ["on", "off"]},
    "cache_type_v": {"type": "categorical", "choices": ["f16", "q8_0"], "condition": "flash_attn == 'on'"},
    "mem": {"type": "float", "low": 0.5, "high": 0.95},
}


def test_samples_stay_inside_their_domains_and_respect_conditions():
    s = space(SPACE)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen_off = seen_on = False
    for _ in range(60):
        params = s.suggest(study.ask())
        assert s.contains(params) is None
        assert 1 <= params["parallel"] <= 32 and isinstance(params["parallel"], int)
        assert isinstance(params["cont_batching"], bool)
        if params["flash_attn"] == "off":
            assert "cache_type_v" not in params
            seen_off = True
        else:
            assert params["cache_type_v"] in ("f16", "q8_0")
            seen_on = True
    assert seen_off and seen_on


def test_fixed_trial_replays_a_config():
    s = space(SPACE)
    fixed = {"parallel": 8, "batch_size": 512, "ubatch_size": 32, "cont_batching": False, "flash_attn": "off",
             "mem": 0.9}
    assert s.suggest(optuna.trial.FixedTrial(fixed)) == fixed


def test_constraints_report_what_they_break():
    s = space(SPACE, ["ubatch_size <= batch_size", "cache_type_v != 'q8_0' or parallel <= 4"])
    assert s.broken_constraints({"batch_size": 64, "ubatch_size": 512, "parallel": 2}) == ["ubatch_size <= batch_size"]
    assert s.broken_constraints({"batch_size": 512, "ubatch_size": 32, "cache_type_v": "q8_0", "parallel": 8}) == [
        "cache_type_v != 'q8_0' or parallel <= 4"]
    # A constraint over a param that was not sampled (its condition was false) does not apply.
    assert s.broken_constraints({"batch_size": 512, "ubatch_size": 32, "parallel": 8}) == []


def test_arithmetic_and_membership_in_expressions():
    s = space(SPACE, ["parallel * 2 <= batch_size // 16", "flash_attn in ['on', 'off']"])
    assert s.broken_constraints({"parallel": 2, "batch_size": 64, "flash_attn": "on"}) == []
    assert s.broken_constraints({"parallel": 4, "batch_size": 64, "flash_attn": "on"}) == ["parallel * 2 <= batch_size // 16"]


@pytest.mark.parametrize("expr, message", [
    ("__import__('os').system('true')", "Call is not allowed"),
    ("parallel.real > 1", "Attribute is not allowed"),
    ("threads > 1", "unknown param 'threads'"),
    ("parallel >", "cannot parse"),
    ("[x for x in [1]]", "is not allowed"),
])
def test_expressions_outside_the_language_are_rejected(expr, message):
    with pytest.raises(ExpressionError, match=message):
        space(SPACE, [expr])


def test_contains_explains_values_outside_the_space():
    s = space(SPACE)
    assert "must be one of" in s.contains({"batch_size": 100})
    assert "within [1, 32]" in s.contains({"parallel": 64})
    assert "not a param of this space" in s.contains({"threads": 2})
    assert "true or false" in s.contains({"cont_batching": "yes"})


def test_at_least_never_rounds_a_size_below_what_it_must_hold():
    from autotuner.config import SearchSpaceConfig
    from autotuner.config.space import SearchSpace

    space = SearchSpace(SearchSpaceConfig.model_validate({"engine": "llamacpp", "params": {
        "ctx_size": {"type": "categorical", "choices": [4096, 8192, 16384]},
        "parallel": {"type": "int", "low": 1, "high": 64, "step": 8}}}))
    assert [space.at_least("ctx_size", n) for n in (100, 4097, 9000, 99999)] == [4096, 8192, 16384, 16384]
    assert space.at_least("parallel", 10) == 17 and space.at_least("parallel", 9) == 9
    assert space.at_least("threads", 4) is None
