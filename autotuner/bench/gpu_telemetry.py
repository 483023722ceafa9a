"""What the GPUs did during a load level, from NVIDIA's management library through `nvidia-smi`, next to
the engine's `/metrics`: utilisation, memory, power against its limit, power-cap time, SM clock against
its maximum, and PCIe throughput per GPU.

Three parts, kept apart as in `server_metrics`:

- `parse_dmon(text)` reads `nvidia-smi dmon -s pucvmt` (one line per GPU per second; columns named by
  its `# gpu pwr ... rxpci txpci` header, so versions with more or fewer columns read alike; `-` is
  "not supported") and `parse_limits(text)` the one `--query-gpu` call for what does not change during
  a level (power limit, maximum SM clock, PCIe link). Both pure.
- `summarize(samples, limits)` turns one level's samples into `gpu_*` metrics (pure), read by
  `report.diagnosis.binding_limit` for its `power` and `communication` classes.
- `GpuTelemetrySampler` runs `nvidia-smi dmon` for the trial's GPUs while it measures and splits the
  lines by level (`mark`), like the /metrics sampler. No GPU, no `nvidia-smi`: no samples, never an error.

NVLink throughput is not sampled yet: dmon does not print it, and `nvidia-smi nvlink` counters need a
reader of their own.
"""

from __future__ import annotations

import contextlib
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


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def summarize(samples: Sequence[GpuSample], limits: Mapping[int, GpuLimits]) -> dict[str, float]:
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

    def mark(self) -> None:
        with self._lock:
            self.marks.append(len(self.samples))

    def level_metrics(self, index: int) -> dict[str, float]:
        with self._lock:
            start = self.marks[index] if index < len(self.marks) else len(self.samples)
            end = self.marks[index + 1] if index + 1 < len(self.marks) else len(self.samples)
            return summarize(self.samples[start:end], self.limits)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
        if self._thread is not None:
            self._thread.join(timeout=5)
