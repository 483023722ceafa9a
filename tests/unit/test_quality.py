"""The quality gate's pure parts: the prompt set, reading answers in both log-probability shapes,
comparing answers with the reference, the bar, and the experiment's `quality:` switch."""

from __future__ import annotations

import pytest

from autotuner import quality
from autotuner.config import ExperimentConfig, QualityConfig

SETTINGS = quality.Settings(prompts=2, max_tokens=4, endpoint="completions", concurrency=1)


def answers(*token_lists: list[str], logprobs: list[list[float]] | None = None, seconds: float = 1.0) -> quality.Answers:
    lps = logprobs or [[-1.0] * len(t) for t in token_lists]
    return quality.Answers(SETTINGS, [quality.Answer("".join(t), list(t), list(lp)) for t, lp in zip(token_lists, lps, strict=True)],
                           seconds=seconds, output_tokens=sum(len(t) for t in token_lists))


def test_the_prompt_set_is_fixed_and_its_prompts_distinct():
    assert quality.prompts(16) == quality.prompts(16)
    assert quality.prompts(4) == quality.prompts(16)[:4]
    assert len(set(quality.prompts(16))) == 16 and len(quality.prompts(1)[0].split()) == quality.PROMPT_WORDS


def test_both_logprob_shapes_are_read():
    legacy = {"choices": [{"text": " a b", "logprobs": {"tokens": [" a", " b"], "token_logprobs": [-0.5, None]}}]}
    chat = {"choices": [{"message": {"content": " a b"},
                         "logprobs": {"content": [{"token": " a", "logprob": -0.5}, {"token": " b", "logprob": -1}]}}]}
    bare = {"choices": [{"text": " a b", "logprobs": None}]}
    assert quality.parse_answer(legacy) == quality.Answer(" a b", [" a", " b"], [-0.5, None])
    assert quality.parse_answer(chat) == quality.Answer(" a b", [" a", " b"], [-0.5, -1.0])
    assert quality.parse_answer(bare) == quality.Answer(" a b")


def test_identical_answers_agree_fully():
    ref = answers(["a", "b", "c", "d"], ["e", "f", "g", "h"], seconds=2.0)
    score = quality.compare(ref, answers(["a", "b", "c", "d"], ["e", "f", "g", "h"], seconds=1.0))
    assert score.token_agreement == 1.0 and score.first_divergence == 4 and score.logprob_delta == 0.0
    assert score.speed_ratio == 2.0 and score.example is None
    assert quality.judge(score, QualityConfig()) is None


def test_a_divergence_is_located_and_logprobs_compared_only_before_it():
    ref = answers(["a", "b", "c", "d"], ["e", "f", "g", "h"], logprobs=[[-1, -1, -1, -1], [-1, -1, -1, -1]])
    cand = answers(["a", "b", "X", "Y"], ["e", "f", "g", "h"], logprobs=[[-1.2, -1, -9, -9], [-1, -1, -1, -1.4]])
    score = quality.compare(ref, cand)
    assert score.token_agreement == 0.5 and score.earliest_divergence == 2 and score.first_divergence == 3.0
    assert score.logprob_delta == pytest.approx((0.2 + 0.4) / 6)  # 2 shared positions + 4: the -9s never count
    why = quality.judge(score, QualityConfig())
    assert why is not None and "token agreement 0.50 (bar 0.85)" in why and "log-prob delta 0.100" in why
    assert "prompt 1 from token 2: defaults 'cd', this config 'XY'" in why


def test_without_tokens_the_text_is_compared_by_characters():
    ref = quality.Answers(SETTINGS, [quality.Answer("hello world"), quality.Answer("same")], 1.0, 4)
    cand = quality.Answers(SETTINGS, [quality.Answer("hello there"), quality.Answer("same")], 1.0, 4)
    score = quality.compare(ref, cand)
    assert score.unit == "character" and score.token_agreement == 0.5 and score.logprob_delta is None
    assert score.earliest_divergence == 6


def test_the_bar_is_the_experiments():
    score = quality.compare(answers(["a", "b"], ["c", "d"]), answers(["a", "b"], ["c", "X"]))
    assert quality.judge(score, QualityConfig(min_token_agreement=0.5)) is None
    assert quality.judge(score, QualityConfig(min_token_agreement=0.9)) is not None
    only_logprobs = quality.Score(1.0, 4.0, None, 0.5, None)
    assert "e.g." not in (quality.judge(only_logprobs, QualityConfig()) or "")


def test_a_reference_round_trips_through_the_study():
    ref = answers(["a", "b"], ["c", "d"])
    assert quality.Answers.from_json(ref.to_json()) == ref


@pytest.mark.parametrize("value", [False, "off", "OFF", None])
def test_quality_off_in_every_spelling(value):
    cfg = ExperimentConfig.model_validate({"name": "x", "engine": "llamacpp", "model": {"path": "m"},
                                           "search_space": "s.yaml", "quality": value})
    assert cfg.quality is None


def test_quality_on_by_default_and_its_fields_checked():
    base = {"name": "x", "engine": "llamacpp", "model": {"path": "m"}, "search_space": "s.yaml"}
    assert ExperimentConfig.model_validate(base).quality == QualityConfig()
    assert ExperimentConfig.model_validate({**base, "quality": True}).quality == QualityConfig()
    with pytest.raises(ValueError, match="min_token_agreement"):
        ExperimentConfig.model_validate({**base, "quality": {"min_token_agreement": 2}})
