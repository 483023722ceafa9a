"""A trial's traffic: the warm-up's and each load level's requests, in the served model's tokens.

`Traffic` holds the experiment's workload source (workloads/source.py) and, once a server of the
model is up, what only the server knows: the words that are one token each on its tokenizer (so a
prompt of N words is N tokens), and a dataset's lengths in its tokens. Those are asked of the first
server and kept in the study (`load`/`save`, handed in by the driver): every later launch, a resumed
run and every worker build the same requests from them, even when a later server could not answer.
Without a tokenize endpoint, prompts are the built-in words (about one token each), and say so.
"""

from __future__ import annotations

import hashlib
import logging
import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import optuna

from autotuner.bench.tokenize import TokenizeEndpoint, count_tokens, one_token_words, special_tokens
from autotuner.config.workload import WorkloadConfig
from autotuner.core import record
from autotuner.util import locks
from autotuner.workloads.plan import BUILTIN, LevelPlan, Vocabulary, render
from autotuner.workloads.sessions import SessionPlan, render_sessions
from autotuner.workloads.source import (
    WARMUP,
    DatasetSource,
    SessionSource,
    Source,
    level_stream,
    level_warmup_stream,
)

STATE_VERSION = 1  # of what the study keeps: a change of how prompts are made must not mix with the old


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _texts(data: DatasetSource) -> list[str]:
    """Every text of a dataset whose length matters: prompts, reference answers, each round of both."""
    return [t for e in data.dataset.entries for t in (e.prompt, e.answer, *(x for r in e.rounds for x in r))
            if t is not None]


class Traffic:
    def __init__(self, workload: WorkloadConfig, source: Source, count: int, tokenize: TokenizeEndpoint | None):
        self.workload, self.source, self.count = workload, source, count
        self.tokenize = tokenize if workload.tokenize else None
        self.vocab: Vocabulary | None = None
        self.notes: list[str] = []
        self.counted = False  # a dataset's texts were counted in the served model's tokens
        self.load: Callable[[], Any] = lambda: None  # what an earlier launch of the study found (the driver's)
        self.save: Callable[[dict[str, Any]], None] = lambda state: None

    @property
    def unit(self) -> str:
        """What a level counts: requests, or multi-turn sessions."""
        return "sessions" if isinstance(self.source, SessionSource) else "requests"

    def _dataset(self) -> DatasetSource | None:
        data = self.source.dataset if isinstance(self.source, SessionSource) else self.source
        return data if isinstance(data, DatasetSource) else None

    def state(self) -> dict[str, Any]:
        """What prepare found, to keep in the study: the vocabulary and a dataset's counts (by text hash)."""
        vocab, data = self.vocab or BUILTIN, self._dataset()
        counts = {_digest(t): n for t, n in data.token_counts.items()} if data is not None else {}
        return {"version": STATE_VERSION, "words": list(vocab.words), "exact": vocab.exact, "specials": vocab.specials,
                "source": vocab.source, "counts": counts}

    def restore(self, state: dict[str, Any]) -> None:
        self.vocab = Vocabulary(tuple(state["words"]), exact=bool(state["exact"]), specials=int(state["specials"]),
                                source=str(state["source"]))
        data = self._dataset()
        if data is not None and state.get("counts"):
            by_digest = state["counts"]
            for text in _texts(data):
                if (n := by_digest.get(_digest(text))) is not None:
                    data.token_counts[text] = n
            self.counted = True

    async def prepare(self, base_url: str, model: str, levels: int) -> list[str]:
        """What the plans need: kept in the study by an earlier launch, else asked of this server (once)
        and kept; the notes say what was found, for the progress."""
        stored = self.load()
        if isinstance(stored, dict) and stored.get("version") == STATE_VERSION:
            if self.vocab is None or self.state() != stored:
                self.restore(stored)
            return []
        if self.vocab is not None:
            return []
        notes = await self._probe(base_url, model, levels)
        self.save(self.state())
        return notes

    async def _probe(self, base_url: str, model: str, levels: int) -> list[str]:
        self.vocab = BUILTIN
        notes = []
        if self.tokenize is None:
            notes.append("prompts from the built-in words: lengths are close to the tokens asked for, not exact "
                         + ("(workload.tokenize is off)" if not self.workload.tokenize
                            else "(the engine has no tokenize endpoint)"))
        else:
            words = await one_token_words(base_url, self.tokenize, model, BUILTIN.words)
            if words is None:
                notes.append(f"the server's tokenize endpoint ({self.tokenize.path}) did not give one-token words: "
                             "prompt lengths are close, not exact")
            else:
                specials = await special_tokens(base_url, self.tokenize, model)
                self.vocab = Vocabulary(words, exact=True, specials=specials,
                                        source=f"{len(words)} words of one token each on the served model")
                notes.append(f"prompts exact in the served model's tokens: {len(words)} words of one token each"
                             + (f", and the {specials} token(s) it adds to a prompt" if specials else "")
                             + " (kept in the study: every launch sends the same requests)")
        data = self._dataset()
        if data is not None and self.tokenize is not None:
            counts = await count_tokens(base_url, self.tokenize, model, _texts(data))
            if counts is None:
                notes.append("the dataset's lengths could not be counted in the model's tokens: outputs without a "
                             "length in the file are workload.output_len")
            else:
                data.token_counts.update(counts)
                self.counted = True
        for step in range(levels):
            if isinstance(self.source, DatasetSource) and self.source.wraps(level_stream(step), self.count):
                notes.append(f"the dataset has {len(self.source.dataset.entries)} prompts: level {step + 1} sends some "
                             "again (a server's prefix cache may serve them)")
                break
        self.notes = notes
        return notes

    def _render(self, name: str, n: int, model: str) -> LevelPlan:
        w = self.workload
        vocab = self.vocab or BUILTIN
        plan = render(self.source.specs(name, n), endpoint=w.endpoint, model=model, vocab=vocab,
                      sampling=w.sampling_params, salt=f"{w.seed}/{name}")
        # a dataset's prompts are its own text: exact only where the server counted them
        exact = plan.exact and (not isinstance(self.source, DatasetSource) or plan.requested_input_tokens is not None)
        return replace(plan, exact=exact)

    def _sessions(self, name: str, n: int) -> SessionPlan:
        assert isinstance(self.source, SessionSource)
        w = self.workload
        return render_sessions(self.source.sessions(name, n), vocab=self.vocab or BUILTIN, sampling=w.sampling_params,
                               think_s=self.source.think_s, salt=f"{w.seed}/{name}")

    def warmup(self, model: str) -> LevelPlan | SessionPlan | None:
        n = self.workload.warmup_requests
        if not n:
            return None
        if isinstance(self.source, SessionSource):
            return self._sessions(WARMUP, n)
        return self._render(WARMUP, n, model)

    def level(self, step: int, model: str, again: bool = False) -> LevelPlan | SessionPlan:
        if isinstance(self.source, SessionSource):
            return self._sessions(level_stream(step, again), self.count)
        return self._render(level_stream(step, again), self.count, model)

    def level_warmup(self, step: int, n: int, model: str) -> LevelPlan | None:
        """Unmeasured requests before level `step` (prompts of their own); None for sessions."""
        if isinstance(self.source, SessionSource) or n < 1:
            return None
        return self._render(level_warmup_stream(step), n, model)

    def mean_output_len(self) -> float:
        """The mean output length of a level's requests (what a request's timeout follows)."""
        return statistics.fmean(s.output_tokens for s in self.source.specs(level_stream(0), min(self.count, 4096)))


def keep_state(study: optuna.Study, storage: str, state: dict[str, Any]) -> None:
    """Keep how a study's prompts are made, once: workers starting together may both have found it (the
    same words from the same model); a storage that is busy now is asked again at the next launch."""
    try:
        with locks.exclusive(storage):
            if record.TRAFFIC not in study.user_attrs:
                study.set_user_attr(record.TRAFFIC, state)
    except Exception as e:  # never a trial's failure: the next launch keeps it instead
        logging.getLogger(__name__).warning("could not keep the workload's vocabulary in the study yet: %s", e)


def shape_line(facts: dict[str, Any]) -> str:
    """The requests every trial sends, in one line (config/feasibility's facts; the report has the histogram)."""
    line = f"prompts of {facts['input_len']} tokens and answers of {facts['output_len']} on average"
    if facts.get("longest_request"):
        line += f", the longest request {facts['longest_request']} tokens"
    if facts.get("prefix_reuse"):
        line += f", {facts['prefix_reuse']:.0%} of prompt tokens a prefix sent before"
    return line
