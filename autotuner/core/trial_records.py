"""What one trial leaves behind besides its metrics: the per-request records, the engine's /metrics
samples, the exact launch, and the image it ran from.

The tuner fills a `TrialRecords` while a trial runs (even one that fails half-way: what was measured
until then is kept) and turns it into MLflow artifacts and step metrics when the trial ends:

- `requests.jsonl`: one line per request, `{"level": i, ...RequestRecord}` (perf_counter_ns times),
  also written to the trial's folder;
- `server_metrics.jsonl`: one line per /metrics sample, `{"t_s": ..., "level": i, <canonical name>: ...}`;
- `argv.json`: argv, environment and image of the launch, exactly as passed;
- `experiment.yaml`: the experiment as resolved for this study;
- step metrics `server/<name>` (step = milliseconds since the measurement began, timestamp = wall
  time), and for counters the rate between samples, `server/<name without _total>_per_s`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autotuner.bench.client import RequestRecord
from autotuner.bench.server_metrics import Sample, Series, ServerMetricsSampler, kinds
from autotuner.engines._base import LaunchSpec
from autotuner.node import host


@dataclass
class TrialRecords:
    records: list[tuple[int, RequestRecord]] = field(default_factory=list)
    samples: list[tuple[int, Sample]] = field(default_factory=list)
    level_metrics: list[dict[str, float]] = field(default_factory=list)
    spec: LaunchSpec | None = None
    _wall_t0_ms: int = 0

    def add_level(self, level: int, records: list[RequestRecord]) -> None:
        self.records += [(level, r) for r in records]

    def add_samples(self, sampler: ServerMetricsSampler) -> None:
        """Take the sampler's samples, tagged with their level."""
        self._wall_t0_ms = sampler.wall_start_ms
        for level in range(len(sampler.marks)):
            self.samples += [(level, s) for s in sampler.level_samples(level)]

    def image_tags(self) -> dict[str, str]:
        if self.spec is None or not self.spec.image:
            return {}
        tags = {"autotuner.image": self.spec.image}
        digest = host.image_digest(self.spec.image)
        if digest:
            tags["autotuner.image_digest"] = digest
        return tags

    def artifacts(self, trial_dir: Path, tuning_args: list[str], command: str,
                  experiment_text: str) -> dict[str, str | Path]:
        out: dict[str, str | Path] = {"experiment.yaml": experiment_text}
        if self.spec is not None:
            out["argv.json"] = json.dumps({"argv": self.spec.argv, "env": self.spec.env, "image": self.spec.image,
                                           "tuning_args": tuning_args, "command": command}, indent=2)
        if self.records:
            trial_dir.mkdir(parents=True, exist_ok=True)
            path = trial_dir / "requests.jsonl"
            with path.open("w") as f:
                for level, r in self.records:
                    f.write(json.dumps({"level": level, **asdict(r)}) + "\n")
            out["requests.jsonl"] = path
        if self.samples:
            out["server_metrics.jsonl"] = "".join(
                json.dumps({"t_s": round(s.t_s, 3), "level": level, **s.values}) + "\n" for level, s in self.samples)
        return out

    def series(self, engine: Series) -> list[tuple[str, float, int, int]]:
        """The samples as MLflow metric points (key, value, step ms, timestamp ms); `engine`: its /metrics series."""
        points: list[tuple[str, float, int, int]] = []
        kind = kinds(engine)
        previous: Sample | None = None
        for _level, s in self.samples:
            step = int(s.t_s * 1000)
            ts = self._wall_t0_ms + step
            for name, value in s.values.items():
                points.append((f"server/{name}", value, step, ts))
                if kind.get(name) == "counter" and previous is not None and name in previous.values:
                    dt = s.t_s - previous.t_s
                    if dt > 0:
                        rate = max(value - previous.values[name], 0.0) / dt
                        points.append((f"server/{name.removesuffix('_total')}_per_s", rate, step, ts))
            previous = s
        return points
