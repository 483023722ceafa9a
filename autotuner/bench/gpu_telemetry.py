"""What the GPUs did during a load level, from NVIDIA's management library through `nvidia-smi`, next to
the engine's `/metrics`: utilisation, memory, power against its limit, power-cap time, SM clock against
its maximum, and PCIe and NVLink throughput per GPU.

Three parts, kept apart as in `server_metrics`:

- `parse_dmon(text)` reads `nvidia-smi dmon -s pucvmt` (one line per GPU per second; columns named by
  its `# gpu pwr ... rxpci txpci` header, so versions with more or fewer columns read alike; `-` is
  "not supported") and `parse_limits(text)` the one `--query-gpu` call for what does not change during
  a level (power limit, maximum SM clock, PCIe link). Both pure.
- NVLink, which dmon does not print: `parse_nvlink_status` reads each link's speed once (`nvidia-smi
  nvlink --status`), `parse_nvlink_counters` the links' cumulative data counters (`nvidia-smi nvlink
  --getthroughput d`, KiB since the driver loaded), read at each level's start and end;
  `nvlink_rates` turns two readings into GB/s per GPU against its links' speed (pure).
- `gpu_summary(samples, limits)` turns one level's samples into `gpu_*` metrics (pure), read by
  `bench.limits.binding_limit` for its `power` and `communication` classes.
- `GpuTelemetrySampler` runs `nvidia-smi dmon` for the trial's GPUs while it measures and splits the
  lines by level (`mark`), like the /metrics sampler. No GPU, no `nvidia-smi`: no samples, never an error;
  no NVLink (a PCIe box): no counters read.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DMON_ARGV = ("nvidia-smi", "dmon", "-s", "pucvmt", "-d", "1")
LIMIT_FIELDS = ("index", "power.limit", "clocks.max.sm", "pcie.link.gen.max", "pcie.link.width.max")
# One direction of one PCIe lane, GB/s, by generation (after line encoding).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
NVLINK_STATUS_ARGV = ("nvidia-smi", "nvlink", "--status")  # every GPU: its -i takes one id only
NVLINK_COUNTERS_ARGV = ("nvidia-smi", "nvlink", "--getthroughput", "d")
NVIDIA_SMI_TIMEOUT_S = 10.0

_GPU_HEADER = re.compile(r"^GPU (\d+):")
_LINK_SPEED = re.compile(r"^\s*Link \d+: ([\d.]+) GB/s")  # "<inactive>" links do not match
_LINK_DATA = re.compile(r"^\s*Link \d+: Data (Tx|Rx): (\d+) KiB")  # "N/A" (unsupported) does not match


@dataclass(frozen=True)
class GpuSample:
    t: float
    gpu: int
    values: dict[str, float]  # dmon column -> value (pwr W, sm %, mem %, pclk MHz, pviol %, fb MB, rxpci MB/s, ...)


@dataclass(frozen=True)
class GpuLimits:
    power_limit_w: float | None
    max_sm_clock_mhz: float | None
    pcie_gbps: float | None  # one direction, the link's maximum


def parse_dmon(text: str, t: float = 0.0) -> list[GpuSample]:
    """Samples from `nvidia-smi dmon` output; lines before the first `# gpu` header are skipped."""
    columns: list[str] | None = None
    out: list[GpuSample] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            names = stripped.lstrip("#").split()
            if "gpu" in names:
                columns = names
            continue
        if columns is None or not stripped:
            continue
        cells = stripped.split()
        if len(cells) != len(columns):
            continue
        row = dict(zip(columns, cells, strict=True))
        try:
            gpu = int(row.pop("gpu"))
        except ValueError:
            continue
        values = {}
        for name, cell in row.items():
            with contextlib.suppress(ValueError):
                values[name] = float(cell)
        out.append(GpuSample(t, gpu, values))
    return out


def parse_limits(text: str) -> dict[int, GpuLimits]:
    """`nvidia-smi --query-gpu=<LIMIT_FIELDS> --format=csv,noheader,nounits`, per GPU index."""
    out: dict[int, GpuLimits] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(LIMIT_FIELDS) or not cells[0].isdigit():
            continue
        power, clock, gen, width = (_number(c) for c in cells[1:])
        lane = PCIE_LANE_GBPS.get(int(gen)) if gen is not None else None
        out[int(cells[0])] = GpuLimits(power, clock, lane * width if lane is not None and width else None)
    return out


def parse_nvlink_status(text: str) -> dict[int, float]:
    """GB/s in one direction over each GPU's active links, from `nvidia-smi nvlink --status` (one
    `Link 0: 26.562 GB/s` line per link); a GPU without active links (a PCIe card says "Device does not
    have or support Nvlink", or nothing) is left out."""
    return {gpu: sum(float(m.group(1)) for line in lines if (m := _LINK_SPEED.match(line)))
            for gpu, lines in _by_gpu(text).items()
            if any(_LINK_SPEED.match(line) for line in lines)}


def parse_nvlink_counters(text: str) -> dict[int, tuple[int, int]]:
    """(KiB sent, KiB received) over each GPU's links since the driver loaded, from `nvidia-smi nvlink
    --getthroughput d` (`Link 0: Data Tx: 5863784 KiB`); a GPU whose counters read N/A is left out."""
    out: dict[int, tuple[int, int]] = {}
    for gpu, lines in _by_gpu(text).items():
        totals = {"Tx": 0, "Rx": 0}
        found = False
        for line in lines:
            if m := _LINK_DATA.match(line):
                totals[m.group(1)] += int(m.group(2))
                found = True
        if found:
            out[gpu] = (totals["Tx"], totals["Rx"])
    return out


def _by_gpu(text: str) -> dict[int, list[str]]:
    """The lines under each `GPU n: <name> (UUID: ...)` header of an `nvidia-smi nvlink` output."""
    out: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if m := _GPU_HEADER.match(line):
            current = out.setdefault(int(m.group(1)), [])
        elif current is not None:
            current.append(line)
    return out


def nvlink_rates(before: Mapping[int, tuple[int, int]], after: Mapping[int, tuple[int, int]], seconds: float,
                 capacity: Mapping[int, float]) -> dict[str, float]:
    """NVLink throughput between two counter readings `seconds` apart: GB/s sent and received per GPU
    (means over GPUs) and the busier direction over the GPU's link speed. A GPU whose counters went
    back (the driver reloaded) is left out; {} when none is left."""
    rates = {gpu: tuple((a - b) * 1024 / 1e9 / seconds for a, b in zip(after[gpu], before[gpu], strict=True))
             for gpu in sorted(before.keys() & after.keys())
             if seconds > 0 and all(a >= b for a, b in zip(after[gpu], before[gpu], strict=True))}
    if not rates:
        return {}
    out = {"gpu_nvlink_tx_gbps_mean": sum(tx for tx, _ in rates.values()) / len(rates),
           "gpu_nvlink_rx_gbps_mean": sum(rx for _, rx in rates.values()) / len(rates)}
    fracs = [max(r) / capacity[gpu] for gpu, r in rates.items() if capacity.get(gpu)]
    if fracs:
        out["gpu_nvlink_frac_mean"] = sum(fracs) / len(fracs)
    return out


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def gpu_summary(samples: Sequence[GpuSample], limits: Mapping[int, GpuLimits]) -> dict[str, float]:
    """One level's samples as `gpu_*` metrics: means over every GPU and second (power and PCIe per GPU),
    the peak of memory used. Empty without samples."""
    if not samples:
        return {}
    gpus = sorted({s.gpu for s in samples})
    out: dict[str, float] = {"gpu_count": float(len(gpus)),
                             "gpu_samples": float(max(sum(1 for s in samples if s.gpu == g) for g in gpus))}
    for key, name in (("sm", "gpu_sm_util_mean"), ("mem", "gpu_mem_util_mean"), ("pwr", "gpu_power_w_mean"),
                      ("pviol", "gpu_power_capped_pct_mean"), ("pclk", "gpu_sm_clock_mhz_mean"),
                      ("rxpci", "gpu_pcie_rx_mbps_mean"), ("txpci", "gpu_pcie_tx_mbps_mean")):
        values = [s.values[key] for s in samples if key in s.values]
        if values:
            out[name] = sum(values) / len(values)
    if fb := [s.values["fb"] for s in samples if "fb" in s.values]:
        out["gpu_fb_used_mib_max"] = max(fb)
    ratios = {
        "gpu_power_frac_mean": [(s.values["pwr"], limits[s.gpu].power_limit_w) for s in samples
                                if "pwr" in s.values and s.gpu in limits],
        "gpu_sm_clock_frac_mean": [(s.values["pclk"], limits[s.gpu].max_sm_clock_mhz) for s in samples
                                   if "pclk" in s.values and s.gpu in limits],
        "gpu_pcie_frac_mean": [(max(s.values.get("rxpci", 0.0), s.values.get("txpci", 0.0)) / 1000,
                                limits[s.gpu].pcie_gbps) for s in samples
                               if ("rxpci" in s.values or "txpci" in s.values) and s.gpu in limits],
    }
    for name, pairs in ratios.items():
        usable = [v / limit for v, limit in pairs if limit]
        if usable:
            out[name] = sum(usable) / len(usable)
    return out


class GpuTelemetrySampler:
    """`nvidia-smi dmon` for `gpus` (empty: every GPU) on a thread of its own while a trial measures;
    `mark()` starts a level, `level_metrics(i)` summarizes level i. A no-op when not `enabled` (a CPU
    experiment) or where there is no `nvidia-smi`."""

    def __init__(self, gpus: Sequence[int], enabled: bool = True):
        self.gpus = list(gpus)
        self.enabled = enabled
        self.samples: list[GpuSample] = []
        self.marks: list[int] = []
        self.limits: dict[int, GpuLimits] = {}
        self.nvlink_gbps: dict[int, float] = {}  # the trial's GPUs with NVLink: their links' speed
        self.nvlink_reads: list[tuple[float, dict[int, tuple[int, int]]]] = []  # at each level's start
        self._nvlink_ends: dict[int, tuple[float, dict[int, tuple[int, int]]]] = {}  # each level's end, read once
        self._process: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _select(self) -> list[str]:
        return ["-i", ",".join(map(str, self.gpus))] if self.gpus else []

    def start(self) -> None:
        if not self.enabled or not shutil.which("nvidia-smi"):
            return
        try:
            query = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(LIMIT_FIELDS)}",
                                    "--format=csv,noheader,nounits", *self._select()],
                                   capture_output=True, text=True, timeout=10)
            self.limits = parse_limits(query.stdout)
            status = parse_nvlink_status(self._nvidia_smi(NVLINK_STATUS_ARGV))
            self.nvlink_gbps = {gpu: gbps for gpu, gbps in status.items() if not self.gpus or gpu in self.gpus}
            self._process = subprocess.Popen([*DMON_ARGV, *self._select()], stdout=subprocess.PIPE,
                                             stderr=subprocess.DEVNULL, text=True)
        except (OSError, subprocess.SubprocessError):
            return
        self._thread = threading.Thread(target=self._read, name="gpu-telemetry", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        header = ""
        for line in self._process.stdout:
            if line.lstrip().startswith("#"):
                header = line if "gpu" in line.split() else header
                continue
            with self._lock:
                self.samples.extend(parse_dmon(header + line, time.monotonic()))

    def _nvidia_smi(self, argv: Sequence[str]) -> str:
        try:
            return subprocess.run(list(argv), capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    def _read_nvlink(self) -> tuple[float, dict[int, tuple[int, int]]]:
        counters = parse_nvlink_counters(self._nvidia_smi(NVLINK_COUNTERS_ARGV))
        return time.monotonic(), {gpu: c for gpu, c in counters.items() if gpu in self.nvlink_gbps}

    def mark(self) -> None:
        with self._lock:
            self.marks.append(len(self.samples))
        if self.nvlink_gbps:
            self.nvlink_reads.append(self._read_nvlink())

    def forget_level(self) -> None:
        """Drop the level under way and its samples (it is measured again, from a new `mark()`)."""
        with self._lock:
            del self.samples[self.marks.pop():]
        if self.nvlink_gbps:
            self.nvlink_reads.pop()

    def level_metrics(self, index: int) -> dict[str, float]:
        with self._lock:
            start = self.marks[index] if index < len(self.marks) else len(self.samples)
            end = self.marks[index + 1] if index + 1 < len(self.marks) else len(self.samples)
            metrics = gpu_summary(self.samples[start:end], self.limits)
        if index < len(self.nvlink_reads):
            if index not in self._nvlink_ends:  # the level just ended: its end reading, once
                self._nvlink_ends[index] = self._read_nvlink()
            (t0, before), (t1, after) = self.nvlink_reads[index], self._nvlink_ends[index]
            metrics.update(nvlink_rates(before, after, t1 - t0, self.nvlink_gbps))
        return metrics

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
        if self._thread is not None:
            self._thread.join(timeout=5)
