"""The `llm` advisor: a language model behind any OpenAI-compatible endpoint reads the study so far and
proposes configurations, as JSON constrained by a schema built from the search space.

The model's word is never trusted: its answer is parsed here (malformed output is an `AdviceError`, a
note in the progress and nothing else), every proposal is checked against the space as it was written
(a value off the space is refused, never bent to fit), and the driver then checks it as any proposal
(the engine's rules, measured already, running). The API key is read from the variable the experiment
names, sent only in the request's header, and never logged.

`api: chat` (the default) sends `/chat/completions` with `response_format: json_schema` (OpenAI, vLLM,
SGLang). `api: completions` sends `/completions` with the same `response_format` and llama-server's own
`json_schema` field: llama-server builds of late 2026 fail chat requests that carry a schema on ChatML
templates ("Failed to initialize samplers"), while their completions endpoint enforces it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from autotuner.advisors import AdviceError, Proposal, StudySoFar
from autotuner.config import BoolParam, CategoricalParam, FloatParam, IntParam, LlmAdvisorConfig
from autotuner.config.space import SearchSpace

REASON_CHARS = 160  # one line in the progress and the report
RECENT_TRIALS = 40  # the trials the prompt lists, newest last: enough evidence, a bounded prompt
MAX_FAILURES = 3

SYSTEM = """\
You are a performance engineer tuning the {engine} inference server for the highest {metric} \
({direction}) on the machine and workload described below. Each configuration costs a server launch and \
minutes of measurement. Read the evidence (what bound each trial: queueing, KV cache, compute; its \
failures and their log lines) and propose up to {n} configurations that were not measured yet, most \
promising first, each with a one-line reason that cites the evidence. Use only the params and values of \
the search space. Answer with JSON only."""


class LlmAdvisor:
    name = "llm"

    def __init__(self, settings: LlmAdvisorConfig, engine: str, describe: Callable[[Mapping[str, Any]], str],
                 status: Callable[[], Mapping[str, Any]] | None = None,
                 environ: Mapping[str, str] = os.environ):
        self.settings, self.engine, self.describe = settings, engine, describe
        self.status = status or dict
        key_env = settings.api_key_env
        self._headers = {"Authorization": f"Bearer {environ[key_env]}"} if key_env and environ.get(key_env) else {}
        self._failures = 0  # failed answers in a row

    def propose(self, study: StudySoFar) -> list[Proposal]:
        """Its proposals for this slot; an AdviceError when it gave none (after MAX_FAILURES in a row it
        steps aside for the rest of the run: a dead or slow endpoint must not cost every trial its timeout)."""
        if self._failures >= MAX_FAILURES:
            return []
        try:
            proposals = self._ask(study)
        except AdviceError as e:
            self._failures += 1
            if self._failures >= MAX_FAILURES:
                raise AdviceError(f"{e}; {MAX_FAILURES} failed answers in a row: not asked again in this run") from None
            raise
        self._failures = 0
        return proposals

    def _ask(self, study: StudySoFar) -> list[Proposal]:
        s = self.settings
        body = request_body(s, SYSTEM.format(engine=self.engine, metric=study.metric, direction=study.direction,
                                             n=s.proposals),
                            json.dumps(evidence(study, self.status(), self.describe), default=str),
                            schema(study.space, s.proposals))
        path = "/chat/completions" if s.api == "chat" else "/completions"
        try:
            reply = httpx.post(s.base_url.rstrip("/") + path, json=body, headers=self._headers,
                               timeout=s.timeout_s)
        except httpx.TimeoutException:
            raise AdviceError(f"no answer within {s.timeout_s:g} s") from None
        except httpx.HTTPError as e:
            raise AdviceError(f"{type(e).__name__}: {e}") from None
        if reply.status_code != 200:
            raise AdviceError(f"HTTP {reply.status_code}: {self._without_key(reply.text[:200])}")
        try:
            answer = reply.json()
        except ValueError:  # a proxy's or a login page's HTML: no OpenAI-style endpoint
            kind = reply.headers.get("content-type", "no content type")
            raise AdviceError(f"HTTP 200 but not JSON ({kind})") from None
        if not isinstance(answer, dict):
            raise AdviceError("HTTP 200 but not an OpenAI-style answer")
        if (answer.get("choices") or [{}])[0].get("finish_reason") == "length":
            raise AdviceError(f"the answer was cut at max_tokens ({s.max_tokens}): raise llm.max_tokens")
        return parse(answer_text(answer, s.api), study.space)


    def _without_key(self, text: str) -> str:
        """An error body as the progress may show it: some gateways echo the key they refused."""
        key = self._headers.get("Authorization", "").removeprefix("Bearer ")
        return text.replace(key, "***") if key else text


def schema(space: SearchSpace, n: int) -> dict[str, Any]:
    """The JSON schema of an answer: up to `n` proposals, each a whole config (every param but those with a
    condition, which may be left out) with the values the space allows, and a short reason."""
    params = {name: _param_schema(spec) for name, spec in space.config.params.items()}
    required = [name for name, spec in space.config.params.items() if not spec.condition]
    return {
        "type": "object",
        "properties": {"proposals": {
            "type": "array", "minItems": 1, "maxItems": n,
            "items": {
                "type": "object",
                "properties": {
                    "params": {"type": "object", "properties": params, "additionalProperties": False,
                               "required": required},
                    "reason": {"type": "string", "maxLength": REASON_CHARS},
                },
                "required": ["params", "reason"], "additionalProperties": False,
            },
        }},
        "required": ["proposals"], "additionalProperties": False,
    }


def _param_schema(spec: Any) -> dict[str, Any]:
    if isinstance(spec, BoolParam):
        return {"type": "boolean"}
    if isinstance(spec, CategoricalParam):
        return {"enum": list(spec.choices)}
    if isinstance(spec, IntParam):
        out: dict[str, Any] = {"type": "integer", "minimum": spec.low, "maximum": spec.high}
        return out | ({"multipleOf": spec.step} if spec.step > 1 and spec.low % spec.step == 0 else {})
    assert isinstance(spec, FloatParam)
    return {"type": "number", "minimum": spec.low, "maximum": spec.high}


def evidence(study: StudySoFar, status: Mapping[str, Any], describe: Callable[[Mapping[str, Any]], str]) -> dict:
    """What the model reads: the space (with each param's flag), the machine, the load, the engine's
    defaults, the trials so far (config, outcome, what bound it) and the status report's conclusions."""
    space = {}
    for name, spec in study.space.config.params.items():
        entry = spec.model_dump(exclude_none=True, exclude_defaults=True)
        entry["flag"] = describe({name: _example(spec)}).split(" ")[0]
        space[name] = entry
    trials = []
    for t in study.trials[-RECENT_TRIALS:]:
        row: dict[str, Any] = {"trial": t.number, "params": "engine defaults" if t.baseline else t.params,
                               "state": t.state}
        if t.value is not None:
            row[study.metric] = round(t.value, 3)
            limit = study.limit(t)
            row["bound_by"] = f"{limit.kind}: {limit.why}"
        if t.failure_class:
            row["failure"] = f"{t.failure_class}: {(t.failure_reason or '')[:200]}"
        trials.append(row)
    report = {k: status[k] for k in ("verdict", "study_limit", "study_limit_why", "trends", "next_steps",
                                     "failure_examples") if status.get(k)}
    return {"search_space": space, "constraints": study.space.config.constraints,
            "machine": {"cpus": study.cpus, "gpus": study.gpus},
            "load": {study.load_key: study.max_load}, "engine_defaults": dict(study.defaults),
            "trials": trials, "trials_left_in_this_run": study.trials_left, "report": report}


def _example(spec: Any) -> Any:
    if isinstance(spec, BoolParam):
        return True
    if isinstance(spec, CategoricalParam):
        return spec.choices[0]
    return spec.high


def request_body(s: LlmAdvisorConfig, system: str, user: str, answer_schema: dict[str, Any]) -> dict[str, Any]:
    common = {"model": s.model, "temperature": s.temperature, "max_tokens": s.max_tokens,
              "response_format": {"type": "json_schema",
                                  "json_schema": {"name": "proposals", "schema": answer_schema, "strict": True}}}
    if s.api == "chat":
        return common | {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    return common | {"prompt": f"{system}\n\nThe study so far:\n{user}\n\nAnswer:\n", "json_schema": answer_schema}


def answer_text(reply: Mapping[str, Any], api: str) -> str:
    try:
        choice = reply["choices"][0]
        text = choice["message"]["content"] if api == "chat" else choice["text"]
    except (KeyError, IndexError, TypeError):
        raise AdviceError(f"not an OpenAI-style answer: {json.dumps(reply)[:200]}") from None
    if not isinstance(text, str):
        raise AdviceError("the answer holds no text")
    return text


def parse(text: str, space: SearchSpace) -> list[Proposal]:
    """The proposals in the model's answer. A proposal off the space comes back `refused` (the driver
    says so once and launches nothing); an answer that is not the schema's JSON raises AdviceError."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise AdviceError(f"not JSON ({e.msg} at character {e.pos}): {text[:120]!r}") from None
    items = data.get("proposals") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise AdviceError(f"no proposals in the answer: {text[:120]!r}")
    proposals = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("params"), dict):
            raise AdviceError(f"a proposal without params: {json.dumps(item)[:120]}")
        params, reason = item["params"], _one_line(item.get("reason"))
        why = space.contains(params) or ("no params" if not params else None)
        proposals.append(Proposal(params, reason, refused=why))
    return proposals


def _one_line(reason: Any) -> str:
    text = " ".join(str(reason or "").split())
    text = "".join(c for c in text if c.isprintable())
    return text[:REASON_CHARS] or "(no reason given)"
