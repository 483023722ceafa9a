"""The status report as Markdown (reads as plain text too): report.md and the MLflow parent run's note."""

from __future__ import annotations

from typing import Any

from autotuner.engines._base import Engine
from autotuner.node.gpu_topology import describe as describe_topology
from autotuner.node.gpu_topology import parse_topo_matrix
from autotuner.report.summary import (
    LATENCY_COLUMNS,
    StudySummary,
    _fmt,
    _spread_text,
    config_text,
    front_lines,
    quality_text,
    verdict_line,
)


def _front_markdown(s: StudySummary, engine: Engine | None) -> list[str]:
    header, rows = front_lines(s, engine)
    out = [f"## Pareto front ({len(s.front)})", "",
           f"Each trial's metrics are read at one load level: the best level by {s.metric} that meets the SLO.",
           "", "| " + " | ".join(header) + " |", "|---:|" + "---:|" * len(s.metrics) + "---|"]
    out += ["| " + " | ".join(row[:-1]) + f" | `{row[-1]}` |" for row in rows]
    commands = [(r.number, r.command) for r in s.front if r.command]
    if commands:
        out += ["", "```sh"] + [f"# trial #{n}\n{c}" for n, c in commands] + ["```"]
    return out + [""]


def _packing_text(topo_text: str | None) -> str:
    """How the pool chose each trial's GPUs: by the links `nvidia-smi topo -m` showed (the same text the
    pool parsed), else by aligned ids."""
    topology = parse_topo_matrix(topo_text or "")
    if topology is None:
        return "by aligned GPU ids (no `nvidia-smi topo -m` matrix seen)"
    return f"by topology: {describe_topology(topology)}"


def _env_rows(s: StudySummary) -> list[tuple[str, str]]:
    e, st = s.environment, s.settings
    rows = []
    host = e.get("host") or {}
    if host:
        cpu = host.get("cpu_model") or "?"
        rows.append(("CPU", f"{cpu}, {host.get('cpus_usable')} of {host.get('cpu_cores')} cores usable"))
        if host.get("memory_gib"):
            rows.append(("Memory", f"{host['memory_gib']} GiB"))
        if host.get("gpu_count"):
            rows.append(("GPUs", f"{host['gpu_count']} × {host.get('gpu_names')}"))
            rows.append(("Driver / CUDA", f"{host.get('driver_version')} / {host.get('cuda_version')}"))
            rows.append(("GPU packing", _packing_text(host.get("gpu_topology"))))
        else:
            rows.append(("GPUs", "none seen (nvidia-smi / NVML absent or no device)"))
        rows.append(("Host", f"{host.get('hostname')} ({host.get('os')})"))
    if s.confirmation_node:  # trials ran on a Ray cluster's nodes (each trial's run names its own)
        rows.append(("Confirmation", f"every launch on Ray node {s.confirmation_node}"))
    if e.get("engine"):
        rows.append(("Engine", f"{e['engine']} {e.get('engine_version', '')} via the {e.get('launcher', '?')} launcher"
                     + (f", image {e['image']}" if e.get("image") else "")))
    for key, label in (("model", "Model"), ("workload", "Workload"), ("load", "Load levels"),
                       ("objective", "Objective"), ("sampler", "Sampler / pruner")):
        if st.get(key):
            rows.append((label, str(st[key])))
    return rows


def to_markdown(s: StudySummary, engine: Engine | None = None, command: str | None = None) -> str:
    """The status report as Markdown (reads as plain text too)."""
    out: list[str] = [f"# Tuning report: study `{s.study_name}`", ""]
    out += ["## Verdict", "", f"- {verdict_line(s)}"]
    if s.best is not None:
        out.append(f"- Binding limit: **{s.study_limit}**" + (f" ({s.study_limit_why})." if s.study_limit_why else "."))
        if s.best.plateau:
            out.append(f"- Plateau: {s.best.plateau}.")
        if s.convergence:
            out.append(f"- Search: {s.convergence}.")
    out.append("")
    env = _env_rows(s)
    if env:
        out += ["## Environment", "", "| | |", "|---|---|"] + [f"| {k} | {_md(v)} |" for k, v in env] + [""]
        topo = (s.environment.get("host") or {}).get("gpu_topology")
        if topo:
            out += ["GPU topology (`nvidia-smi topo -m`):", "", "```", topo, "```", ""]
    if shape := s.settings.get("workload_shape"):
        out += ["## The workload every trial was measured on", "", "```", *shape, "```", ""]
    out += ["## What was tried", ""]
    counts = ", ".join(f"{n} {k.lower()}" for k, n in sorted(s.counts.items())) or "none"
    out.append(f"{s.n_trials} trial(s): {counts}.")
    if s.spent:
        out += ["", "| proposed by | launches | complete | failed | pruned |", "|---|---:|---:|---:|---:|"]
        out += [f"| {who} | {n['launches']} | {n['complete']} | {n['fail']} | {n['pruned']} |"
                for who, n in sorted(s.spent.items(), key=lambda kv: -kv[1]["launches"])]
    if s.failure_classes:
        out += ["", "| failure class | trials | example |", "|---|---:|---|"]
        for cls, n in sorted(s.failure_classes.items(), key=lambda kv: -kv[1]):
            out.append(f"| {cls} | {n} | {_md(s.failure_examples.get(cls, ''))[:200]} |")
    out.append("")
    if s.front:
        out += _front_markdown(s, engine)
    if s.top:
        m = s.metric
        out += [f"## Top {len(s.top)} ({s.direction} {m})", "",
                f"| trial | {m} | spread | " + " | ".join(LATENCY_COLUMNS) + " | limit | quality | config |",
                "|---:|---:|---|" + "---:|" * len(LATENCY_COLUMNS) + "---|---|---|"]
        rows = list(s.top)
        if s.baseline is not None and s.baseline not in rows:
            rows.append(s.baseline)
        for r in rows:
            lat = " | ".join(_fmt(r.metrics.get(c)) for c in LATENCY_COLUMNS)
            out.append(f"| #{r.number} | {r.median:,.1f} | {_spread_text(r)} | {lat} | {r.limit} | "
                       f"{quality_text(r)} | `{config_text(r, engine)}` |")
        out += [
            "",
            "spread: ± is how much the rate moved within the measurement (coefficient of variation "
            "over time windows); n=k: the confirmation round's k launches (interleaved with the baseline) and their "
            "range; flaky: a confirmation launch failed. Rows with n=k are ranked by median, the rest by their "
            "single measurement. quality: the share of the quality prompts answered token for token as the engine "
            "defaults answered them, and the mean log-probability difference where they agree (Δlp).",
            "",
        ]
        out += ["## Limits and plateaus", ""]
        for r in s.top:
            out.append(f"- #{r.number}: {r.limit}: {r.limit_why}" + (f"; {r.plateau}" if r.plateau else ""))
        for t in s.trends:
            out.append(f"- study: {t}")
        if s.convergence:
            out.append(f"- study: {s.convergence}")
        out.append("")
    if s.wrong:
        out += ["## Failed the quality gate (answers unlike the defaults': cannot win)", ""]
        for w in s.wrong:
            speed = f"answered {w.speed_ratio:.2f}x as fast as the defaults, but " if w.speed_ratio else ""
            out.append(f"- #{w.number} `{config_text(w, engine)}`: {speed}{_md(w.reason)[:400]}")
        out.append("")
    if s.importances:
        out += ["## Parameter importances", ""]
        out += [f"- {p}: {v:.2f}" for p, v in sorted(s.importances.items(), key=lambda kv: -kv[1])] + [""]
    if s.next_steps:
        out += ["## Next steps", ""] + [f"{i}. {step}" for i, step in enumerate(s.next_steps, 1)] + [""]
    if command:
        out += ["## Run the winner", "", "```sh", command, "```", ""]
    if s.plots or s.best_files:
        out += ["## Files", ""] + [f"- {p}" for p in s.best_files + s.plots] + [""]
    return "\n".join(out)


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
