"""The GPU check before a study's first trial, in the engine's own image (or on the host for process
launches): CUDA initialises on every GPU, which pairs can reach each other (P2P) and how fast, and the
NUMA node of each GPU. A known host fault is named with its fix, and the study does not start: one
night lost to a driver setting costs more than a few seconds of checking.

The probes (`probes`) are plain argv lists; what they print is read by pure functions (`judge` and the
parsers); the one function here that runs anything is `run_on_host`, and the Docker launcher runs the
same argv in a container of the image (`DockerLauncher.run_once`). Never a shell.

Known failures, with where each message and fix were reported (recorded messages: tests/data/gpu):

- HMM on the open kernel module: `cuInit` fails with error 3 (CUDA_ERROR_NOT_INITIALIZED,
  "initialization error") though nvidia-smi sees the GPUs; fixed by `options nvidia_uvm
  uvm_disable_hmm=1` (NVIDIA/open-gpu-kernel-modules#797, #901, #947; ollama/ollama#11593).
- error 802 "system not yet initialized": the NVSwitch fabric manager is not running
  (pytorch/pytorch#35710, gpustack/gpustack#4154).
- error 804 "forward compatibility was attempted on non supported HW", error 803 "unsupported display
  driver / cuda driver combination", error 35 "CUDA driver version is insufficient", "The NVIDIA driver
  on your system is too old", and nvidia-container-cli's "unsatisfied condition: cuda>=": the image's
  CUDA is newer than the host driver (vllm-project/vllm#4940, #5635).
- nvidia-container-cli "driver/library version mismatch": the driver was upgraded and the old kernel
  module is still loaded (NVIDIA/nvidia-container-toolkit#394).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autotuner.launchers._base import gpu_env
from autotuner.node.gpu_topology import Topology, describe, parse_topo_matrix, plain

PROBE_TIMEOUT_S = 180.0
BANDWIDTH_MIB = 64  # per copy, five copies per pair: about a second for 8 GPUs on PCIe

# Run by the image's python: CUDA on every device, P2P access and copy bandwidth between each pair.
# Prints one fact per line (CUDA_DEVICES n, CUDA_OK i name, PEER i j 0|1, BW i j GB/s); exit 3: no device.
CUDA_PROBE = f"""
import sys, time
try:
    import torch
except Exception as e:
    print("NO_TORCH", e)
    sys.exit(0)
n = torch.cuda.device_count()
print("CUDA_DEVICES", n, flush=True)
if n == 0:
    sys.exit(3)
for i in range(n):
    torch.zeros(1, device=i)
    print("CUDA_OK", i, torch.cuda.get_device_name(i), flush=True)
for i in range(n):
    for j in range(i + 1, n):
        ok = torch.cuda.can_device_access_peer(i, j)
        print("PEER", i, j, int(ok), flush=True)
        a = torch.empty({BANDWIDTH_MIB} << 20, dtype=torch.uint8, device=i)
        b = torch.empty_like(a, device=j)
        b.copy_(a)
        torch.cuda.synchronize(i); torch.cuda.synchronize(j)
        t = time.perf_counter()
        for _ in range(5):
            b.copy_(a)
        torch.cuda.synchronize(i); torch.cuda.synchronize(j)
        print("BW", i, j, round(5 * a.numel() / (time.perf_counter() - t) / 1e9, 1), flush=True)
""".strip()


@dataclass(frozen=True)
class Probe:
    name: str
    argv: tuple[str, ...]
    what: str  # what it checks, for the dry run and the failure text


def probes(python: str = "python3") -> list[Probe]:
    """The checks, in order; `python` is the interpreter that has the engine's torch."""
    return [
        Probe("gpus", ("nvidia-smi", "--query-gpu=index,name,driver_version,memory.total",
                       "--format=csv,noheader"), "the driver sees the GPUs"),
        Probe("topology", ("nvidia-smi", "topo", "-m"), "links between GPUs and each GPU's NUMA node"),
        Probe("p2p", ("nvidia-smi", "topo", "-p2p", "r"), "which pairs may read each other's memory (P2P)"),
        Probe("cuda", (python, "-c", CUDA_PROBE), "CUDA starts on every GPU; P2P access and copy bandwidth"),
    ]


@dataclass(frozen=True)
class ProbeResult:
    probe: Probe
    returncode: int
    output: str  # stdout and stderr together


@dataclass(frozen=True)
class KnownFailure:
    name: str
    pattern: re.Pattern[str]
    cause: str
    fix: str


KNOWN_FAILURES: tuple[KnownFailure, ...] = (
    KnownFailure(
        "cuda-hmm",
        re.compile(r"CUDA_ERROR_NOT_INITIALIZED|init failure: 3\b|Error 3: initialization error|"
                   r"CUDA error 3\b|cudaErrorInitializationError"),
        "CUDA could not initialise (error 3) although the driver sees the GPUs: on recent kernels with "
        "NVIDIA's open kernel module, the UVM driver's HMM support breaks cuInit",
        "disable HMM: echo 'options nvidia_uvm uvm_disable_hmm=1' | sudo tee /etc/modprobe.d/uvm.conf, "
        "then reload nvidia_uvm (sudo modprobe -r nvidia_uvm && sudo modprobe nvidia_uvm) or reboot"),
    KnownFailure(
        "fabric-manager",
        re.compile(r"Error 802|system not yet initialized|cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY"),
        "CUDA reports the system not yet initialised (error 802): on NVSwitch machines (HGX/DGX A100, "
        "H100, H200, B200) the fabric manager is not running",
        "install nvidia-fabricmanager of the driver's exact version and start it: "
        "sudo systemctl enable --now nvidia-fabricmanager"),
    KnownFailure(
        "driver-too-old",
        re.compile(r"Error 804|forward compatibility was attempted|Error 803|unsupported display driver / cuda "
                   r"driver combination|driver version is insufficient|NVIDIA driver on your system is too old|"
                   r"unsatisfied condition: cuda>="),
        "the image's CUDA is newer than the host's driver supports",
        "upgrade the host's NVIDIA driver to one that supports the image's CUDA (nvidia-smi shows the highest "
        "CUDA version it supports), or use an image built for an older CUDA"),
    KnownFailure(
        "driver-mismatch",
        re.compile(r"driver/library version mismatch", re.IGNORECASE),
        "the NVIDIA driver's user-space library and the loaded kernel module differ (a driver upgrade "
        "without a reboot)",
        "reboot, or unload and reload the nvidia kernel modules"),
    KnownFailure(
        "no-gpu-runtime",
        re.compile(r"could not select device driver .* with capabilities: \[\[gpu\]\]|nvidia-container-cli: "
                   r"initialization error"),
        "Docker cannot give the container GPUs",
        "install the NVIDIA Container Toolkit and configure Docker for it: "
        "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker"),
)


def known_failure(text: str) -> KnownFailure | None:
    """The first known failure whose message is in `text` (a probe's output), or None."""
    return next((f for f in KNOWN_FAILURES if f.pattern.search(text)), None)


@dataclass(frozen=True)
class CudaProbe:
    """What the CUDA probe printed."""

    devices: int | None = None
    initialised: dict[int, str] = field(default_factory=dict)  # device -> name
    peers: dict[tuple[int, int], bool] = field(default_factory=dict)
    bandwidth_gbps: dict[tuple[int, int], float] = field(default_factory=dict)
    no_torch: bool = False


def parse_cuda_probe(output: str) -> CudaProbe:
    devices, ok, peers, bw, no_torch = None, {}, {}, {}, False
    for line in output.splitlines():
        parts = line.split()
        try:
            if parts[:1] == ["NO_TORCH"]:
                no_torch = True
            elif parts[:1] == ["CUDA_DEVICES"]:
                devices = int(parts[1])
            elif parts[:1] == ["CUDA_OK"]:
                ok[int(parts[1])] = " ".join(parts[2:])
            elif parts[:1] == ["PEER"]:
                peers[(int(parts[1]), int(parts[2]))] = parts[3] == "1"
            elif parts[:1] == ["BW"]:
                bw[(int(parts[1]), int(parts[2]))] = float(parts[3])
        except (IndexError, ValueError):
            continue
    return CudaProbe(devices, ok, peers, bw, no_torch)


def parse_p2p_matrix(text: str) -> dict[tuple[int, int], str]:
    """`nvidia-smi topo -p2p r` (or rw, w, n, a): status per ordered pair of GPUs (OK, CNS, GNS, TNS, NS,
    DR, U)."""
    lines = [line for line in plain(text).splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if re.match(r"^\s*GPU0\b", line)), None)
    if header is None:
        return {}
    columns = [int(c[3:]) for c in lines[header].split() if re.fullmatch(r"GPU\d+", c)]
    status: dict[tuple[int, int], str] = {}
    for line in lines[header + 1:]:
        cells = line.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            break
        row = int(cells[0][3:])
        for col, value in zip(columns, cells[1:], strict=False):
            if col != row:
                status[(row, col)] = value
    return status


@dataclass
class Verdict:
    """What the preflight found: `problems` stop the study; `facts` are what it saw."""

    problems: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    topology: Topology | None = None


def judge(results: Sequence[ProbeResult], gpus_needed: int) -> Verdict:
    """The verdict on the probes' results (pure)."""
    verdict = Verdict()
    by_name = {r.probe.name: r for r in results}
    for result in results:
        if failure := known_failure(result.output):
            message = _line_with(result.output, failure)
            verdict.problems.append(f"{failure.cause}.\n  fix: {failure.fix}\n  seen: {message}")
            return verdict  # one named fault is the whole story: later probes fail the same way
    gpus = by_name.get("gpus")
    if gpus is not None:
        seen = [line for line in gpus.output.splitlines() if re.match(r"^\s*\d+\s*,", line)]
        if gpus.returncode != 0 or not seen:
            verdict.problems.append(f"nvidia-smi sees no GPU{_where(gpus)}: {_last_line(gpus.output)}")
        elif len(seen) < gpus_needed:
            verdict.problems.append(f"{len(seen)} GPU(s) visible, the experiment needs {gpus_needed}")
        else:
            verdict.facts.append(f"{len(seen)} GPU(s): " + "; ".join(s.strip() for s in seen))
    topo = by_name.get("topology")
    if topo is not None and topo.returncode == 0:
        verdict.topology = parse_topo_matrix(topo.output)
        if verdict.topology is not None:
            verdict.facts.append(f"topology: {describe(verdict.topology)}")
    p2p = by_name.get("p2p")
    if p2p is not None and p2p.returncode == 0:
        pairs = parse_p2p_matrix(p2p.output).items()
        blocked = sorted(f"{a}-{b} {s}" for (a, b), s in pairs if s != "OK" and a < b)
        verdict.facts.append("P2P reads: " + (f"not between {', '.join(blocked)}" if blocked
                                              else "OK between every pair"))
    cuda = by_name.get("cuda")
    if cuda is not None:
        _judge_cuda(cuda, gpus_needed, verdict)
    return verdict


def _judge_cuda(result: ProbeResult, gpus_needed: int, verdict: Verdict) -> None:
    probe = parse_cuda_probe(result.output)
    if probe.no_torch or (result.returncode in (126, 127) and probe.devices is None):
        verdict.facts.append("CUDA start not checked: the image has no python with torch (nvidia-smi checks only)")
        return
    if probe.devices == 0 or (probe.devices is not None and len(probe.initialised) < probe.devices):
        failed = "no device" if probe.devices == 0 else f"device {len(probe.initialised)}"
        verdict.problems.append(f"CUDA could not start on {failed}{_where(result)}: {_last_line(result.output)}")
        return
    if result.returncode != 0:
        verdict.problems.append(f"the CUDA check failed (exit {result.returncode}){_where(result)}: "
                                f"{_last_line(result.output)}")
        return
    if probe.devices is not None and probe.devices < gpus_needed:
        verdict.problems.append(f"CUDA sees {probe.devices} GPU(s), the experiment needs {gpus_needed}")
        return
    verdict.facts.append(f"CUDA started on {len(probe.initialised)} GPU(s)")
    if probe.bandwidth_gbps:
        pairs = ", ".join(f"{a}-{b} {gbps:g} GB/s{'' if probe.peers.get((a, b)) else ' (no P2P)'}"
                          for (a, b), gbps in sorted(probe.bandwidth_gbps.items()))
        verdict.facts.append(f"copy bandwidth: {pairs}")


def _where(result: ProbeResult) -> str:
    return f" ({shlex.join(result.probe.argv[:3])}...)" if result.probe.name == "cuda" else ""


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def _line_with(output: str, failure: KnownFailure) -> str:
    return next((line.strip()[:300] for line in output.splitlines() if failure.pattern.search(line)), "")


def failure_text(verdict: Verdict, where: str) -> str:
    """The one screen a user sees when the preflight stops the study."""
    lines = [f"GPU preflight ({where}) failed; no trial was started:"]
    lines += [f"- {p}" for p in verdict.problems]
    if verdict.facts:
        lines += ["seen:"] + [f"  {f}" for f in verdict.facts]
    return "\n".join(lines)


def plan_lines(where: str, render: Callable[[Probe], str]) -> list[str]:
    """The dry run's account of the preflight: what runs where, one command a line."""
    return [f"# GPU preflight before the first trial ({where}):"] + [
        f"#   {p.what}:\n{render(p)}" for p in probes()]


def run_on_host(probe: Probe, gpus: Sequence[int], environ: Mapping[str, str],
                timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """Run one probe on this machine, confined to `gpus` (process launches)."""
    env = {**environ, **gpu_env(gpus)}
    try:
        out = subprocess.run(list(probe.argv), capture_output=True, text=True, timeout=timeout_s, env=env)
    except FileNotFoundError as e:
        return ProbeResult(probe, 127, str(e))
    except subprocess.TimeoutExpired:
        return ProbeResult(probe, 124, f"timed out after {timeout_s:.0f} s")
    return ProbeResult(probe, out.returncode, out.stdout + out.stderr)


def check(run: Callable[[Probe], ProbeResult], gpus_needed: int, python: str = "python3") -> Verdict:
    """Run every probe through `run` (on the host, or in the image) and judge them; stops at the first
    known failure, since every later probe would fail the same way."""
    results: list[ProbeResult] = []
    for probe in probes(python):
        results.append(run(probe))
        if known_failure(results[-1].output):
            break
    return judge(results, gpus_needed)


def host_python(binary: str | None) -> str:
    """The python beside the engine's binary (its virtual environment's, which has its torch), else python3."""
    if binary:
        beside = Path(binary).parent / "python"
        if beside.exists():
            return str(beside)
    return "python3"
