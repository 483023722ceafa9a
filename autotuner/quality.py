"""The quality gate: a faster configuration that changes the answers does not win.

The engine's defaults answer a fixed, versioned set of prompts with greedy decoding (temperature 0, a
fixed seed, `max_tokens`), keeping each answer's tokens and, where the engine returns them, their
log-probabilities: the study's reference, stored with the study so a resumed or shared study compares
against the same answers. Each candidate answers the same prompts the same way in its own launch,
before its load levels, and is compared with the reference:

- token agreement: the share of prompts answered token for token alike;
- first divergence: where an answer first differs (in tokens; the answer's length when alike);
- log-prob delta: the mean absolute difference of the log-probabilities of the tokens both answers
  produced in the same context (the positions before they diverge).

A candidate below the experiment's bar (`quality:` in the experiment) fails as `quality`.

`prompts`, `compare` and `judge` are pure; `collect` is the one piece of I/O (one non-streamed request
per prompt).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import httpx

from autotuner.bench.client import make_client
from autotuner.workloads.synthetic import ENDPOINT_PATHS, build_prompts, derived_seed

if TYPE_CHECKING:
    from autotuner.config import QualityConfig

PROMPT_SET = "v1"  # the prompts are a function of this name and their count: a new set gets a new name
PROMPT_WORDS = 48  # words per prompt
SEED = 0  # the request's sampling seed (greedy decoding should not need it; some engines read it anyway)


@dataclass(frozen=True)
class Settings:
    """What decides the answers: a reference is only comparable with a check made the same way."""

    prompts: int
    max_tokens: int
    endpoint: str
    concurrency: int
    prompt_set: str = PROMPT_SET


@dataclass(frozen=True)
class Answer:
    text: str
    tokens: list[str] | None = None  # None: the engine sent no per-token detail (then text is compared)
    logprobs: list[float | None] | None = None  # one per token, where the engine returned them

    def sequence(self, other: Answer) -> tuple[Sequence[str], Sequence[str]]:
        """The two answers as comparable sequences: tokens where both have them, else characters."""
        if self.tokens is not None and other.tokens is not None:
            return self.tokens, other.tokens
        return self.text, other.text

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Answer:
        return cls(text=str(data.get("text", "")), tokens=data.get("tokens"), logprobs=data.get("logprobs"))


@dataclass(frozen=True)
class Answers:
    """One launch's answers to the prompt set, and how fast it gave them."""

    settings: Settings
    answers: list[Answer]
    seconds: float
    output_tokens: int

    @property
    def tok_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"settings": asdict(self.settings), "answers": [asdict(a) for a in self.answers],
                "seconds": self.seconds, "output_tokens": self.output_tokens}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Answers:
        return cls(settings=Settings(**data["settings"]), answers=[Answer.from_json(a) for a in data["answers"]],
                   seconds=float(data["seconds"]), output_tokens=int(data["output_tokens"]))


@dataclass(frozen=True)
class Score:
    """A candidate's answers against the reference's."""

    token_agreement: float  # share of prompts answered exactly alike
    first_divergence: float  # mean position of the first difference (the answer's length when alike)
    earliest_divergence: int | None  # the earliest position where any answer differs (None: all alike)
    logprob_delta: float | None  # mean |difference| over shared positions (None: no log-probabilities)
    speed_ratio: float | None  # the candidate's answering speed over the reference's (same prompts, same way)
    example: str | None = None  # one differing answer, for the reason line
    unit: str = "token"  # "character" when the engine returned no tokens

    def metrics(self) -> dict[str, float]:
        """The numbers a trial records (and MLflow charts), under their quality_ names."""
        out = {"quality_token_agreement": self.token_agreement, "quality_first_divergence": self.first_divergence}
        if self.logprob_delta is not None:
            out["quality_logprob_delta"] = self.logprob_delta
        if self.speed_ratio is not None:
            out["quality_speed_ratio"] = self.speed_ratio
        return out


def prompts(count: int) -> list[str]:
    """The prompt set: `count` prompts of PROMPT_WORDS words, the same in every study of this version."""
    return build_prompts(count, PROMPT_WORDS, seed=derived_seed(0, f"quality-{PROMPT_SET}"))


def compare(reference: Answers, candidate: Answers) -> Score:
    """How far the candidate's answers are from the reference's (prompt by prompt, in order)."""
    agree, positions, deltas, differing = 0, [], [], []
    example = None
    unit = "token"
    for i, (ref, cand) in enumerate(zip(reference.answers, candidate.answers, strict=True)):
        a, b = ref.sequence(cand)
        if isinstance(a, str):
            unit = "character"
        d = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        same = len(a) == len(b) and d == len(a)
        agree += same
        positions.append(len(a) if same else d)
        if not same:
            differing.append(d)
        if ref.logprobs and cand.logprobs and ref.tokens is not None and cand.tokens is not None:
            deltas += [abs(x - y) for x, y in zip(ref.logprobs[:d], cand.logprobs[:d], strict=False)
                       if x is not None and y is not None]
        if not same and example is None:
            example = (f"prompt {i + 1} from {unit} {d}: defaults {_tail(ref.text, a, d)!r}, "
                       f"this config {_tail(cand.text, b, d)!r}")
    n = len(positions)
    speed = candidate.tok_per_s / reference.tok_per_s if reference.tok_per_s > 0 else None
    return Score(token_agreement=agree / n if n else 1.0, first_divergence=sum(positions) / n if n else 0.0,
                 earliest_divergence=min(differing, default=None),
                 logprob_delta=sum(deltas) / len(deltas) if deltas else None, speed_ratio=speed, example=example,
                 unit=unit)


def _tail(text: str, seq: Sequence[str], at: int) -> str:
    """The answer from the divergence on (a few tokens of it), to show what changed."""
    if isinstance(seq, str):
        return text[at:at + 40]
    return "".join(seq[at:at + 6])


def judge(score: Score, bar: QualityConfig) -> str | None:
    """Why the candidate fails the bar, in one line; None when it passes."""
    missed = []
    if score.token_agreement < bar.min_token_agreement:
        missed.append(f"token agreement {score.token_agreement:.2f} (bar {bar.min_token_agreement:.2f})")
    if bar.max_logprob_delta is not None and score.logprob_delta is not None \
            and score.logprob_delta > bar.max_logprob_delta:
        missed.append(f"log-prob delta {score.logprob_delta:.3f} (bar {bar.max_logprob_delta:.3f})")
    if not missed:
        return None
    where = f"first divergence at {score.unit} {score.first_divergence:.1f} on average"
    example = f"; e.g. {score.example}" if score.example else ""
    return f"answers differ from the defaults': {', '.join(missed)}; {where}{example}"


def describe(score: Score) -> str:
    """The score in a few words (progress, report)."""
    parts = [f"agreement {score.token_agreement:.2f}"]
    if score.logprob_delta is not None:
        parts.append(f"log-prob delta {score.logprob_delta:.3f}")
    return ", ".join(parts)


# --- I/O: the engine answers -----------------------------------------------------------------------------

def payload(settings: Settings, model: str, prompt: str) -> dict[str, Any]:
    """One greedy, non-streamed request asking for the chosen tokens' log-probabilities."""
    body: dict[str, Any] = {"model": model, "max_tokens": settings.max_tokens, "temperature": 0.0, "seed": SEED,
                            "stream": False}
    if settings.endpoint == "chat":
        body |= {"messages": [{"role": "user", "content": prompt}], "logprobs": True, "top_logprobs": 1}
    else:
        body |= {"prompt": prompt, "logprobs": 1}
    return body


def parse_answer(response: Mapping[str, Any]) -> Answer:
    """An OpenAI-compatible (non-streamed) response as an Answer. Log-probabilities come in two shapes:
    the completions API's `{tokens, token_logprobs}` (vLLM, SGLang) and the chat API's `{content: [{token,
    logprob}]}` (chat everywhere; llama-server for completions too)."""
    choice = (response.get("choices") or [{}])[0]
    text = choice.get("text")
    if text is None:
        text = (choice.get("message") or {}).get("content") or ""
    lp = choice.get("logprobs") or {}
    if isinstance(lp.get("content"), list):
        entries = lp["content"]
        return Answer(text=text, tokens=[str(e.get("token", "")) for e in entries],
                      logprobs=[_number(e.get("logprob")) for e in entries])
    if isinstance(lp.get("tokens"), list):
        return Answer(text=text, tokens=[str(t) for t in lp["tokens"]],
                      logprobs=[_number(v) for v in lp.get("token_logprobs") or [None] * len(lp["tokens"])])
    return Answer(text=text)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


class AnswerError(Exception):
    """The server did not answer a quality prompt (the message says how)."""


async def collect(base_url: str, model: str, settings: Settings, timeout_s: float) -> Answers:
    """Ask the server the prompt set (`settings.concurrency` at a time) and keep its answers in order."""
    texts = prompts(settings.prompts)
    url = base_url.rstrip("/") + ENDPOINT_PATHS[settings.endpoint]
    gate = asyncio.Semaphore(settings.concurrency)
    async with make_client(max_connections=settings.concurrency, timeout_s=timeout_s) as client:

        async def ask(prompt: str) -> tuple[Answer, int]:
            async with gate:
                response = await client.post(url, json=payload(settings, model, prompt))
            if response.status_code != 200:
                raise AnswerError(f"HTTP {response.status_code}: {response.text[:300]}")
            data = response.json()
            answer = parse_answer(data)
            used = (data.get("usage") or {}).get("completion_tokens")
            return answer, int(used) if used is not None else len(answer.tokens or answer.text.split())

        t = time.perf_counter()
        try:
            done = await asyncio.gather(*(ask(p) for p in texts))
        except httpx.TimeoutException:
            raise AnswerError(f"timeout after {timeout_s:g} s") from None
        except (httpx.HTTPError, OSError, ValueError) as e:  # no answer, or not JSON
            raise AnswerError(f"{type(e).__name__}: {e}") from None
        seconds = time.perf_counter() - t
    return Answers(settings=settings, answers=[a for a, _ in done], seconds=seconds,
                   output_tokens=sum(n for _, n in done))


@dataclass(frozen=True)
class Gate:
    """What a launch's check needs: how to ask, the bar, and the reference (None: this launch answers
    for the reference, and is not judged)."""

    settings: Settings
    bar: QualityConfig
    reference: Answers | None = None
