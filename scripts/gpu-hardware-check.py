"""The tuner's GPU-side code on this machine's real GPUs, with no Docker, engine or model: what each piece
finds, next to the raw outputs it read. Run by scripts/gpu-hardware-check.sh (which saves the plain
nvidia-smi outputs first); on its own:

    PYTHONPATH=. python3 scripts/gpu-hardware-check.py OUTDIR [--tag 1x-h200] [--load-s 10]

Checks, each reported PASS, FAIL (with its error) or SKIP, none stopping the next:

- host: `node.host` reads the GPUs through NVML and through nvidia-smi, which must agree, and the
  fingerprint and its tags;
- topology: `nvidia-smi topo -m` parsed by `node.gpu_topology`, and the device pool (`node.pool`) packing
  and leasing GPUs by it; the kernel stage's GPU name;
- preflight: `node.gpu_preflight.check` with `run_on_host`, the probes a process launch runs (nvidia-smi
  and the CUDA probe in `python3`), each probe's output saved;
- telemetry: `bench.gpu_telemetry.GpuTelemetrySampler` sampling `nvidia-smi dmon` over three levels
  (idle, a bf16 matrix-product load from a separate `python3` with torch, after), its per-level metrics
  and the diagnosis of the loaded level; the same dmon lines are saved raw and parsed again, and the
  NVLink counters are read before and after the load.

Files written to OUTDIR (named like tests/data/gpu's, `<what>-<tag>.txt`): fingerprint, the preflight
probes' outputs, dmon during the levels, NVLink counters, and `checks.json` with every check's result.
Exit 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The load, in a process of its own (as an engine would be): bf16 matrix products on every visible GPU.
# Prints READY after its warm-up, waits for a line on stdin, runs for argv[1] seconds, prints the rate.
LOAD = r"""
import sys, time
import torch
seconds = float(sys.argv[1])
n = torch.cuda.device_count()
if n == 0:
    print("NO_CUDA", flush=True)
    sys.exit(3)
size = 8192
mats = []
for d in range(n):
    a = torch.randn(size, size, device=d, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=d, dtype=torch.bfloat16)
    a @ b
    mats.append((a, b))
for d in range(n):
    torch.cuda.synchronize(d)
print("READY", n, torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), flush=True)
sys.stdin.readline()
done = 0
start = time.perf_counter()
while time.perf_counter() - start < seconds:
    for a, b in mats:
        for _ in range(20):
            a @ b
    for d in range(n):
        torch.cuda.synchronize(d)
    done += 20
elapsed = time.perf_counter() - start
tflops = 2 * size**3 * done / elapsed / 1e12
print("DONE", n, done, round(elapsed, 2), round(tflops, 1), flush=True)
"""


class Report:
    def __init__(self, out: Path, tag: str):
        self.out = out
        self.tag = tag
        self.results: list[dict[str, Any]] = []

    def save(self, what: str, text: str, ext: str = "txt") -> Path:
        """OUTDIR/<what>-<tag>.<ext>, or with the tag where `what` puts "{tag}"."""
        path = self.out / f"{what if '{tag}' in what else what + '-{tag}'}.{ext}".format(tag=self.tag)
        path.write_text(text)
        return path

    def run(self, name: str, fn: Callable[[], str | None]) -> Any:
        print(f"\n== {name}", flush=True)
        start = time.monotonic()
        status, detail = "PASS", ""
        try:
            detail = fn() or ""
        except Skip as e:
            status, detail = "SKIP", str(e)
        except Exception as e:  # every check reports and the next one runs
            status, detail = "FAIL", f"{type(e).__name__}: {e}"
            traceback.print_exc(file=sys.stdout)
        seconds = time.monotonic() - start
        print(f"{status} {name} ({seconds:.1f} s){': ' + detail if detail else ''}", flush=True)
        self.results.append({"check": name, "status": status, "detail": detail, "seconds": round(seconds, 1)})


class Skip(Exception):
    """The check cannot run here (no GPU, no torch): neither passed nor failed."""


def show(label: str, value: Any) -> None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    text = value if isinstance(value, str) else json.dumps(value, indent=1, default=str, sort_keys=True)
    if "\n" in text:
        print(f"  {label}:")
        for line in text.splitlines():
            print(f"    {line}")
    else:
        print(f"  {label}: {text}")


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(what)


def default_tag() -> str:
    try:
        names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=30).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return "no-gpu"
    names = [n.strip() for n in names if n.strip()]
    if not names:
        return "no-gpu"
    slug = re.sub(r"[^a-z0-9]+", "-", names[0].lower().removeprefix("nvidia ")).strip("-")
    return f"{len(names)}x-{slug}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for the outputs read and checks.json")
    parser.add_argument("--tag", help="machine tag in the file names (default: <count>x-<first GPU's name>)")
    parser.add_argument("--load-s", type=float, default=10.0, help="seconds of matrix products (default 10)")
    parser.add_argument("--torch-python", default="python3",
                        help="the python with torch for the CUDA probe and the load (default python3)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report = Report(args.out, args.tag or default_tag())
    state: dict[str, Any] = {}
    print(f"gpu-hardware-check: python {platform.python_version()} ({sys.executable}), outputs in {args.out}, "
          f"tag {report.tag}", flush=True)

    report.run("imports", lambda: check_imports(state))
    report.run("host: GPUs through NVML", lambda: check_nvml(state))
    report.run("host: GPUs through nvidia-smi", lambda: check_smi(state))
    report.run("host: fingerprint (NVML and nvidia-smi agree) and tags", lambda: check_fingerprint(report, state))
    report.run("topology: nvidia-smi topo -m parsed", lambda: check_topology(report, state))
    report.run("pool: packing and leasing GPUs by the topology", lambda: check_pool(state))
    report.run("kernel stage: GPU name for the kernel cache key", lambda: check_kernel_gpu_name(state))
    report.run("preflight: probes on the host and their verdict",
               lambda: check_preflight(report, state, args.torch_python))
    report.run("telemetry: dmon sampler over idle, matmul load, after",
               lambda: check_telemetry(report, state, args.torch_python, args.load_s))
    return finish(report)


def finish(report: Report) -> int:
    counts = {s: sum(r["status"] == s for r in report.results) for s in ("PASS", "FAIL", "SKIP")}
    (report.out / "checks.json").write_text(json.dumps({"tag": report.tag, "checks": report.results}, indent=1))
    print("\n== python checks")
    for r in report.results:
        print(f"  {r['status']:4} {r['check']}{': ' + r['detail'] if r['status'] != 'PASS' else ''}")
    print(f"python checks: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped", flush=True)
    return 1 if counts["FAIL"] else 0


MODULES = {"host": "autotuner.node.host", "gpu_topology": "autotuner.node.gpu_topology",
           "gpu_telemetry": "autotuner.bench.gpu_telemetry", "gpu_preflight": "autotuner.node.gpu_preflight",
           "pool": "autotuner.node.pool"}


def check_imports(state: dict[str, Any]) -> str:
    """Each module on its own: one that does not import fails only the checks that use it."""
    import importlib

    modules, failed = {}, {}
    for key, name in MODULES.items():
        try:
            modules[key] = importlib.import_module(name)
        except Exception as e:
            failed[name] = f"{type(e).__name__}: {e}"
            traceback.print_exc(file=sys.stdout)
    state["modules"], state["import_errors"] = modules, failed
    versions = {}
    for name in ("pydantic", "yaml", "httpx", "tenacity", "pynvml"):
        try:
            module = __import__(name)
            versions[name] = getattr(module, "__version__", getattr(module, "VERSION", "?"))
        except ImportError as e:
            versions[name] = f"missing ({e})"
    show("packages", versions)
    show("nvidia-smi", shutil.which("nvidia-smi") or "not on PATH")
    expect(not failed, f"not imported: {failed}")
    return ", ".join(MODULES.values())


def module(state: dict[str, Any], key: str) -> Any:
    if key not in state["modules"]:
        raise AssertionError(f"{MODULES[key]} did not import: {state['import_errors'].get(MODULES[key])}")
    return state["modules"][key]


def check_nvml(state: dict[str, Any]) -> str:
    host = module(state, "host")
    try:
        import pynvml  # noqa: F401
    except ImportError as e:
        raise Skip(f"nvidia-ml-py is not installed ({e})") from None
    nvml = host._gpus_from_nvml()
    state["nvml"] = nvml
    expect(nvml is not None, "NVML did not load or failed (host._gpus_from_nvml returned None)")
    show("NVML", nvml)
    expect(bool(nvml["gpus"]), "NVML sees no GPU")
    return f"{len(nvml['gpus'])} GPU(s), driver {nvml['driver_version']}, CUDA {nvml['cuda_version']}"


def check_smi(state: dict[str, Any]) -> str:
    host = module(state, "host")
    if not shutil.which("nvidia-smi"):
        raise Skip("no nvidia-smi on PATH")
    smi = host._gpus_from_smi()
    state["smi"] = smi
    expect(smi is not None, "nvidia-smi --query-gpu failed (host._gpus_from_smi returned None)")
    show("nvidia-smi", smi)
    expect(bool(smi["gpus"]), "nvidia-smi lists no GPU")
    expect(smi["cuda_version"] is not None, "no 'CUDA Version:' in plain nvidia-smi's header")
    return f"{len(smi['gpus'])} GPU(s), driver {smi['driver_version']}, CUDA {smi['cuda_version']}"


def check_fingerprint(report: Report, state: dict[str, Any]) -> str:
    host = module(state, "host")
    fp = host.fingerprint()
    state["fingerprint"] = fp
    saved = {"fingerprint": fp, "nvml": state.get("nvml"), "nvidia_smi": state.get("smi")}
    report.save("fingerprint", json.dumps(saved, indent=1, default=str), "json")
    show("fingerprint", {k: v for k, v in fp.items() if k != "gpu_topology"})
    show("tags", host.tags(fp))
    json.dumps(fp)
    expect(fp["gpu_count"] >= 1, "the fingerprint has no GPU")
    nvml, smi = state.get("nvml"), state.get("smi")
    if nvml and smi:
        expect([g["name"] for g in nvml["gpus"]] == [g["name"] for g in smi["gpus"]],
               f"GPU names differ: NVML {nvml['gpus']} vs nvidia-smi {smi['gpus']}")
        for a, b in zip(nvml["gpus"], smi["gpus"], strict=False):
            expect(a["memory_gib"] is not None and b["memory_gib"] is not None
                   and abs(a["memory_gib"] - b["memory_gib"]) <= 0.2,
                   f"memory differs: NVML {a} vs nvidia-smi {b}")
        expect(nvml["driver_version"] == smi["driver_version"],
               f"driver differs: NVML {nvml['driver_version']} vs nvidia-smi {smi['driver_version']}")
        expect(nvml["cuda_version"] == smi["cuda_version"],
               f"CUDA version differs: NVML {nvml['cuda_version']} vs nvidia-smi {smi['cuda_version']}")
    expect(bool(fp["gpu_topology"]), "no topology text in the fingerprint")
    return f"{fp['gpu_count']} x {fp['gpu_names']}, driver {fp['driver_version']}, CUDA {fp['cuda_version']}"


def gpu_count(state: dict[str, Any]) -> int:
    fp = state.get("fingerprint") or {}
    return int(fp.get("gpu_count") or len((state.get("smi") or state.get("nvml") or {}).get("gpus", [])))


def check_topology(report: Report, state: dict[str, Any]) -> str:
    host, topo_mod = module(state, "host"), module(state, "gpu_topology")
    text = host.gpu_topology()
    expect(text is not None, "host.gpu_topology() returned None (nvidia-smi topo -m failed or no GPU)")
    show("nvidia-smi topo -m (as host.gpu_topology read it)", text)
    topo = topo_mod.parse_topo_matrix(text)
    state["topo_text"], state["topology"] = text, topo
    expect(topo is not None, "parse_topo_matrix found no GPU matrix")
    show("parsed", {"gpus": topo.gpus, "links": {"-".join(map(str, sorted(k))): v for k, v in topo.links.items()},
                    "numa": topo.numa})
    described = topo_mod.describe(topo)
    show("describe", described)
    try:
        from autotuner.report import _packing_text

        show("report's GPU packing row", _packing_text(text))
    except Exception as e:  # the report package needs optuna
        show("report's GPU packing row", f"not shown: autotuner.report does not import here ({e})")
    n = gpu_count(state)
    expect(set(topo.gpus) == set(range(n)), f"the matrix names GPUs {topo.gpus}, the host sees {n}")
    expect(len(topo.links) == n * (n - 1) // 2, f"{len(topo.links)} links parsed for {n} GPUs")
    unknown = {k: v for k, v in topo.links.items() if topo_mod.link_rank(v)[0] == topo_mod.UNKNOWN_RANK}
    expect(not unknown, f"link kinds not in the legend: {unknown}")
    return f"{described!r}; NUMA per GPU {topo.numa}"


def check_pool(state: dict[str, Any]) -> str:
    pool_mod = module(state, "pool")
    n = gpu_count(state)
    expect(n >= 1, "no GPU to pool")
    pool = pool_mod.with_topology(pool_mod.Pool.of_gpus(n), state.get("topo_text"))
    show("pool", {"kind": pool.kind, "units": pool.units, "has topology": pool.topology is not None})
    expect(pool.topology is not None, "with_topology did not attach the parsed matrix")
    packs = {need: pool_mod.pack(pool.units, set(), need, pool.topology) for need in range(1, n + 1)}
    show("pack(need) on an idle node", packs)
    expect(all(p is not None and len(p) == need for need, p in packs.items()), f"bad packs {packs}")
    with tempfile.TemporaryDirectory() as d:
        leases = pool_mod.Leases(pool, Path(d))
        got = leases.acquire(1, "gpu-hardware-check")
        held = leases.held()
        leases.release(got)
        show("lease", {"acquired": got, "held": held, "after release": leases.held()})
        expect(leases.held() == [], "the lease was not released")
    return f"{n} GPU(s); one GPU leased: {got}"


def check_kernel_gpu_name(state: dict[str, Any]) -> str:
    try:
        from autotuner.stages.kernel_stage import gpu_name
    except ImportError as e:
        raise Skip(f"autotuner.stages.kernel_stage does not import here ({e})") from None
    name = gpu_name(0)
    fp = state.get("fingerprint") or {}
    expected = (fp.get("gpus") or [{}])[0].get("name")
    show("gpu_name(0)", name)
    expect(name is not None and name == expected, f"gpu_name(0) is {name!r}, the fingerprint says {expected!r}")
    return repr(name)


def check_preflight(report: Report, state: dict[str, Any], torch_python: str) -> str:
    gp = module(state, "gpu_preflight")
    n = gpu_count(state)
    expect(n >= 1, "no GPU to check")
    gpus = list(range(n))
    results = []

    def run(probe):
        start = time.monotonic()
        result = gp.run_on_host(probe, gpus, os.environ, timeout_s=150)
        seconds = time.monotonic() - start
        results.append(result)
        report.save(f"preflight-{probe.name}", result.output)
        print(f"  probe {probe.name} ({probe.what}): exit {result.returncode} in {seconds:.1f} s")
        for line in result.output.splitlines()[:12]:
            print(f"    | {line}")
        return result

    verdict = gp.check(run, gpus_needed=n, python=torch_python)
    show("facts", verdict.facts)
    show("problems", verdict.problems)
    if verdict.problems:
        print(gp.failure_text(verdict, "host"))
    by_name = {r.probe.name: r for r in results}
    if "p2p" in by_name:
        show("parse_p2p_matrix", {f"{a}-{b}": s for (a, b), s in gp.parse_p2p_matrix(by_name["p2p"].output).items()})
    cuda = gp.parse_cuda_probe(by_name["cuda"].output) if "cuda" in by_name else None
    if cuda is not None:
        show("parse_cuda_probe", {"devices": cuda.devices, "initialised": cuda.initialised, "no_torch": cuda.no_torch,
                                  "peers": {f"{a}-{b}": v for (a, b), v in cuda.peers.items()},
                                  "bandwidth_gbps": {f"{a}-{b}": v for (a, b), v in cuda.bandwidth_gbps.items()}})
    more = gp.judge(results, gpus_needed=n + 1)
    show(f"the same probes judged for {n + 1} GPUs", more.problems)
    expect(any(f"needs {n + 1}" in p for p in more.problems), "judge did not say the node has too few GPUs")
    for r in results:
        expect(gp.known_failure(r.output) is None, f"probe {r.probe.name} matched a known failure")
    expect(not verdict.problems, "the preflight found problems: " + " | ".join(verdict.problems))
    expect(len(results) == len(gp.probes(torch_python)), f"only {len(results)} probe(s) ran")
    if cuda is None or cuda.no_torch:
        raise Skip(f"nvidia-smi probes passed; CUDA not checked: {torch_python} has no torch")
    expect(cuda.devices == n and len(cuda.initialised) == n, f"CUDA started on {cuda.initialised} of {n}")
    return "; ".join(verdict.facts)


def check_telemetry(report: Report, state: dict[str, Any], torch_python: str, load_s: float) -> str:
    tm = module(state, "gpu_telemetry")
    if not shutil.which("nvidia-smi"):
        raise Skip("no nvidia-smi on PATH")
    n = gpu_count(state)
    expect(n >= 1, "no GPU to sample")
    gpus = list(range(n))
    load = None
    load_note = ""
    # The load process starts (and warms up) before sampling, so its CUDA start falls in no level.
    try:
        load = subprocess.Popen([torch_python, "-c", LOAD, str(load_s)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert load.stdout is not None
        seen: list[str] = []
        ready = wait_line(load, ("READY", "NO_CUDA"), 150, seen)
        print(f"  load process: {ready.strip() or '(ended)'}")
        if not ready.startswith("READY"):
            rest = [*seen, *stop_process(load).strip().splitlines()]
            load_note = f"no load ({ready.strip() or (rest[-1] if rest else 'no output')})"[:300]
            load = None
    except OSError as e:
        load_note, load = f"no load ({e})", None

    raw_dmon = report.out / f"dmon-pucvmt-{report.tag}-levels.txt"
    nvlink_before = run_text(tm.NVLINK_COUNTERS_ARGV)
    sampler = tm.GpuTelemetrySampler(gpus)
    levels: list[tuple[str, float]] = []
    with raw_dmon.open("w") as raw:
        # The sampler's argv with a count, so that dmon ends by itself and flushes whatever it buffered.
        count = int(load_s) + 10
        dmon = subprocess.Popen([*tm.DMON_ARGV, "-c", str(count), "-i", ",".join(map(str, gpus))], stdout=raw,
                                stderr=subprocess.STDOUT, text=True)
        t0 = time.monotonic()
        sampler.start()
        try:
            show("limits (parse_limits of --query-gpu)", {g: dataclasses.asdict(v) for g, v in sampler.limits.items()})
            show("NVLink speed per GPU (parse_nvlink_status)", sampler.nvlink_gbps)
            sampler.mark()
            levels.append(("idle", time.monotonic() - t0))
            time.sleep(4)
            sampler.mark()
            levels.append(("matmul" if load else "idle-2", time.monotonic() - t0))
            if load is not None:
                assert load.stdin is not None
                load.stdin.write("go\n")
                load.stdin.flush()
                seen = []
                done = wait_line(load, ("DONE",), load_s + 60, seen)
                print(f"  load process: {done.strip() or '(ended)'}")
                tail = "\n".join([*seen, stop_process(load).strip()]).strip()
                if not done.startswith("DONE"):
                    load_note = f"load failed: {done.strip()} {tail[-300:]}"
                else:
                    _, devices, products, seconds, tflops = done.split()
                    load_note = f"{products} bf16 8192^3 products per GPU in {seconds} s, {tflops} TFLOP/s per GPU"
            else:
                time.sleep(load_s)
            sampler.mark()
            levels.append(("after", time.monotonic() - t0))
            time.sleep(4)
            metrics = [sampler.level_metrics(i) for i in range(len(levels))]
        finally:
            sampler.stop()
            if load is not None and load.poll() is None:
                load.kill()
            try:
                dmon.wait(timeout=max(5.0, count + 5 - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                dmon.kill()
                dmon.wait()
    nvlink_after = run_text(tm.NVLINK_COUNTERS_ARGV)
    report.save("nvlink-gt-d-{tag}-before-matmul", nvlink_before)
    report.save("nvlink-gt-d-{tag}-after-matmul", nvlink_after)
    show("NVLink counters before/after (parse_nvlink_counters)",
         {"before": tm.parse_nvlink_counters(nvlink_before), "after": tm.parse_nvlink_counters(nvlink_after)})

    arrivals = [round(s.t - t0, 1) for s in sampler.samples]
    show("levels (name, start s)", levels)
    show("sample arrival times (s after start)", arrivals)
    for (name, _), m in zip(levels, metrics, strict=True):
        show(f"level {name}: level_metrics", m)
    raw_samples = tm.parse_dmon(raw_dmon.read_text())
    header = next((line for line in raw_dmon.read_text().splitlines() if line.startswith("# gpu")), "(no header)")
    show("raw dmon (same argv, saved)", f"{len(raw_samples)} samples; header {header!r}")
    show("load", load_note)
    loaded = metrics[1] if len(metrics) > 1 else {}
    try:
        from autotuner.report.diagnosis import gpu_limit
    except Exception:  # the report package needs optuna: its diagnosis module alone
        gpu_limit = load_diagnosis().gpu_limit
    diagnosis = gpu_limit(loaded)
    show("diagnosis.gpu_limit of the load level", diagnosis)
    report.save("telemetry", json.dumps({
        "levels": levels, "sample_arrivals_s": arrivals, "level_metrics": metrics, "load": load_note,
        "limits": {g: dataclasses.asdict(v) for g, v in sampler.limits.items()}, "nvlink_gbps": sampler.nvlink_gbps,
        "gpu_limit": dataclasses.asdict(diagnosis) if diagnosis is not None else None,
        "raw_dmon_samples": len(raw_samples)}, indent=1), "json")

    expect(bool(sampler.samples), "the sampler read no dmon line")
    expect(all(m.get("gpu_samples", 0) >= 2 for m in metrics), f"a level has under 2 samples: "
           f"{[m.get('gpu_samples') for m in metrics]}")
    expect(bool(raw_samples), "the raw dmon output parsed to no sample")
    expect(set(sampler.limits) == set(gpus), f"limits for {sorted(sampler.limits)}, GPUs {gpus}")
    expect(all(v.power_limit_w and v.max_sm_clock_mhz for v in sampler.limits.values()),
           f"power limit or max SM clock unread: {sampler.limits}")
    for key in ("gpu_sm_util_mean", "gpu_power_w_mean", "gpu_power_frac_mean", "gpu_sm_clock_frac_mean",
                "gpu_fb_used_mib_max"):
        expect(all(key in m for m in metrics), f"{key} missing from a level: {[sorted(m) for m in metrics]}")
    if load is None:
        raise Skip(f"sampler read {len(sampler.samples)} samples; {load_note}")
    idle, busy = metrics[0], metrics[1]
    expect(busy["gpu_sm_util_mean"] >= idle["gpu_sm_util_mean"] + 30,
           f"SM utilisation under load {busy['gpu_sm_util_mean']:.0f}% vs idle {idle['gpu_sm_util_mean']:.0f}%")
    expect(busy["gpu_power_w_mean"] > idle["gpu_power_w_mean"] * 1.3,
           f"power under load {busy['gpu_power_w_mean']:.0f} W vs idle {idle['gpu_power_w_mean']:.0f} W")
    expect(0 < busy["gpu_power_frac_mean"] <= 1.2, f"power fraction {busy['gpu_power_frac_mean']:.2f}")
    expect(0 < busy["gpu_sm_clock_frac_mean"] <= 1.05, f"SM clock fraction {busy['gpu_sm_clock_frac_mean']:.2f}")
    return (f"{load_note}; loaded level: SM {busy['gpu_sm_util_mean']:.0f}%, {busy['gpu_power_w_mean']:.0f} W "
            f"({busy['gpu_power_frac_mean']:.0%} of limit), clock {busy['gpu_sm_clock_frac_mean']:.0%} of max; "
            f"idle: SM {idle['gpu_sm_util_mean']:.0f}%, {idle['gpu_power_w_mean']:.0f} W")


def wait_line(process: subprocess.Popen[str], starts: tuple[str, ...], timeout_s: float,
              seen: list[str] | None = None) -> str:
    """The first line of `process` that starts with one of `starts` (each line is echoed, and kept in
    `seen`); '' when it ends first; after `timeout_s` it is killed and the answer says so."""
    import threading

    found: list[str] = []
    seen = [] if seen is None else seen

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            print(f"    | {line.rstrip()}")
            seen.append(line.rstrip())
            if line.startswith(starts):
                found.append(line)
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    if reader.is_alive():
        process.kill()
        return f"timed out after {timeout_s:.0f} s"
    return found[0] if found else ""


def stop_process(process: subprocess.Popen[str]) -> str:
    try:
        rest, _ = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        rest, _ = process.communicate()
    return rest or ""


def run_text(argv) -> str:
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"({e})"
    return out.stdout + (out.stderr if out.returncode else "")


def load_diagnosis():
    """report/diagnosis.py alone (stdlib only) where the report package's own imports (optuna) are missing."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("diagnosis", ROOT / "autotuner" / "report" / "diagnosis.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["diagnosis"] = module
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    sys.exit(main())
