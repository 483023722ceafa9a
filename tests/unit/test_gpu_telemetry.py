"""GPU telemetry (`nvidia-smi dmon` and one `--query-gpu`) and the diagnosis classes it drives.

No recorded dmon or query output with these columns was found (tests/data/gpu/README.md): those inputs
below are written for these tests, in the layout `man nvidia-smi` documents, and are marked synthetic.
The NVLink readers read recorded outputs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from autotuner.bench.gpu_telemetry import (
    GpuLimits,
    GpuTelemetrySampler,
    gpu_summary,
    nvlink_rates,
    parse_dmon,
    parse_limits,
    parse_nvlink_counters,
    parse_nvlink_status,
)
from autotuner.bench.limits import binding_limit, gpu_limit

# Synthetic: two GPUs, two seconds, columns of `dmon -s pucvmt` (some drivers print more; `-` = unsupported).
SYNTHETIC_DMON = """\
# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk  pviol  tviol     fb   bar1  rxpci  txpci
# Idx      W      C      C      %      %      %      %    MHz    MHz      %   bool     MB     MB   MB/s   MB/s
    0    598     71      -     97     60      0      0  12001   2100     40      0  90000     10    120    150
    1    600     73      -     98     61      0      0  12001   2070     55      0  90100     10    110    140
    0    597     72      -     96     59      0      0  12001   2085     35      0  90200     10    130    160
    1    599     74      -     97     60      0      0  12001   2055     50      0  90300     10    100    150
"""
# Synthetic: `--query-gpu=index,power.limit,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max`.
SYNTHETIC_LIMITS = "0, 600.00, 2617, 5, 16\n1, 600.00, 2617, 5, 16\n2, [N/A], [N/A], [N/A], [N/A]\n"


def test_dmon_lines_parse_by_their_header_names():
    samples = parse_dmon(SYNTHETIC_DMON)
    assert [s.gpu for s in samples] == [0, 1, 0, 1]
    assert samples[0].values["pwr"] == 598 and samples[1].values["rxpci"] == 110
    assert "mtemp" not in samples[0].values  # "-": not supported
    assert parse_dmon("0 1 2\n") == []  # no header: nothing to name the columns


def test_limits_parse_and_unsupported_fields_are_none():
    limits = parse_limits(SYNTHETIC_LIMITS)
    assert limits[0] == GpuLimits(600.0, 2617.0, pytest.approx(3.938 * 16))
    assert limits[2] == GpuLimits(None, None, None)


def test_a_level_summary_is_means_per_gpu_and_second():
    m = gpu_summary(parse_dmon(SYNTHETIC_DMON), parse_limits(SYNTHETIC_LIMITS))
    assert m["gpu_count"] == 2 and m["gpu_samples"] == 2
    assert m["gpu_power_w_mean"] == pytest.approx(598.5)
    assert m["gpu_power_frac_mean"] == pytest.approx(598.5 / 600)
    assert m["gpu_power_capped_pct_mean"] == pytest.approx(45)
    assert m["gpu_fb_used_mib_max"] == 90300
    assert 0.78 < m["gpu_sm_clock_frac_mean"] < 0.81
    assert gpu_summary([], {}) == {}


def server_level(**kw):
    return {"server_samples": 10, "server_requests_running_max": 64, "server_requests_running_mean": 60, **kw}


def gpus(**kw):
    return {"gpu_samples": 30, "gpu_count": 2, **kw}


def test_power_at_its_limit_with_the_driver_capping_it_is_power_bound():
    m = gpu_summary(parse_dmon(SYNTHETIC_DMON), parse_limits(SYNTHETIC_LIMITS))
    m["gpu_samples"] = 30
    limit = binding_limit(server_level(**m))
    assert limit.kind == "power" and "power-capped 45% of the time" in limit.why


def test_power_near_the_limit_with_full_clocks_is_not_power_bound():
    assert gpu_limit(gpus(gpu_power_frac_mean=0.97, gpu_power_capped_pct_mean=0, gpu_sm_clock_frac_mean=0.98)) is None
    limit = gpu_limit(gpus(gpu_power_frac_mean=0.97, gpu_sm_clock_frac_mean=0.7))
    assert limit is not None and limit.kind == "power" and "SM clock at 70%" in limit.why


def test_busy_pcie_and_idle_sms_on_several_gpus_is_communication_bound():
    limit = binding_limit(server_level(**gpus(gpu_pcie_frac_mean=0.72, gpu_sm_util_mean=35, gpu_power_frac_mean=0.5)))
    assert limit.kind == "communication" and "PCIe at 72%" in limit.why
    # One GPU: PCIe traffic is host traffic, not GPUs waiting on each other.
    assert gpu_limit(gpus(gpu_count=1, gpu_pcie_frac_mean=0.9, gpu_sm_util_mean=20)) is None
    # Busy SMs: the traffic is not what holds it back.
    assert gpu_limit(gpus(gpu_pcie_frac_mean=0.9, gpu_sm_util_mean=90)) is None


def test_without_telemetry_or_with_too_few_seconds_the_old_classes_stand():
    assert binding_limit(server_level()).kind == "compute"
    assert binding_limit(server_level(gpu_samples=2, gpu_count=2, gpu_pcie_frac_mean=0.9, gpu_sm_util_mean=10)).kind \
        == "compute"
    # The engine's own limits come first: a full KV cache is named even on a power-capped GPU.
    assert binding_limit(server_level(server_kv_cache_usage_max=0.99, **gpus(gpu_power_frac_mean=1.0,
                                                                            gpu_power_capped_pct_mean=80))).kind \
        == "kv-cache"


def test_the_sampler_is_a_no_op_without_nvidia_smi(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    sampler = GpuTelemetrySampler([0, 1])
    sampler.start()
    sampler.mark()
    assert sampler.level_metrics(0) == {}
    sampler.stop()


def test_a_cpu_experiments_sampler_starts_nothing(monkeypatch):
    started: list[object] = []
    monkeypatch.setattr("subprocess.Popen", lambda *a, **k: started.append(a))
    sampler = GpuTelemetrySampler([], enabled=False)
    sampler.start()
    sampler.mark()
    assert sampler.level_metrics(0) == {} and started == []
    sampler.stop()


# --- NVLink: `nvidia-smi nvlink --status` and `--getthroughput d`, recorded (tests/data/gpu/README.md) -----

GPU_DATA = Path(__file__).resolve().parents[1] / "data" / "gpu"


def recorded(name: str) -> str:
    return (GPU_DATA / name).read_text()


def test_nvlink_speeds_are_summed_over_each_gpus_active_links():
    assert parse_nvlink_status(recorded("nvlink-status-8x-h800.txt")) == {
        gpu: pytest.approx(8 * 26.562) for gpu in (0, 1, 7)}
    assert parse_nvlink_status(recorded("nvlink-status-v100-two-inactive.txt")) == {3: pytest.approx(4 * 25.781)}
    # A PCIe card (as newer and older drivers are reported to print it; not recorded): no NVLink.
    assert parse_nvlink_status("GPU 0: NVIDIA RTX PRO 6000 (UUID: GPU-x)\nDevice does not have or support Nvlink\n") == {}
    assert parse_nvlink_status("") == {}


def test_nvlink_counters_are_kib_summed_over_links_and_na_is_left_out():
    idle = parse_nvlink_counters(recorded("nvlink-gt-d-h800-gpu0-idle.txt"))
    assert idle == {0: (5863784 + 5864084 + 5864630 + 5863784 + 4 * 5861984,
                        5863677 + 5862999 + 5863940 + 5861984 + 5862774 + 5862696 + 5862999 + 5863146)}
    assert parse_nvlink_counters("GPU 0: Tesla V100 (UUID: x)\n\t Link 0: Data Tx: N/A\n\t Link 0: Data Rx: N/A\n") == {}


def test_nvlink_rates_between_two_readings_against_the_links_speed():
    before = parse_nvlink_counters(recorded("nvlink-gt-d-h800-gpu0-idle.txt"))
    after = parse_nvlink_counters(recorded("nvlink-gt-d-h800-gpu0-training.txt"))
    speed = parse_nvlink_status(recorded("nvlink-status-8x-h800.txt"))
    # The page does not say how far apart the readings were: an hour, for the arithmetic.
    m = nvlink_rates(before, after, 3600.0, speed)
    sent_gb = (after[0][0] - before[0][0]) * 1024 / 1e9
    assert m["gpu_nvlink_tx_gbps_mean"] == pytest.approx(sent_gb / 3600)
    assert m["gpu_nvlink_frac_mean"] == pytest.approx(max(m["gpu_nvlink_tx_gbps_mean"],
                                                          m["gpu_nvlink_rx_gbps_mean"]) / (8 * 26.562))
    assert nvlink_rates(after, before, 3600.0, speed) == {}  # counters went back: a driver reload, no rate
    assert "gpu_nvlink_frac_mean" not in nvlink_rates(before, after, 3600.0, {})  # speed unknown: no fraction


def test_busy_nvlink_and_idle_sms_is_communication_bound_and_the_busier_link_is_named():
    limit = gpu_limit(gpus(gpu_pcie_frac_mean=0.1, gpu_nvlink_frac_mean=0.66, gpu_sm_util_mean=40))
    assert limit is not None and limit.kind == "communication" and limit.why.startswith("NVLink at 66%")
    assert gpu_limit(gpus(gpu_pcie_frac_mean=0.1, gpu_nvlink_frac_mean=0.3, gpu_sm_util_mean=40)) is None


def test_the_sampler_reads_dmon_by_level_and_nvlink_at_each_levels_start_and_end(tmp_path, monkeypatch):
    """A stand-in `nvidia-smi` on PATH: the synthetic limits and dmon lines above (dmon's once the
    level has begun, so they fall in it), and the recorded H800 NVLink outputs: the first counter reading
    idle, every later one the training reading."""
    (tmp_path / "dmon.txt").write_text(SYNTHETIC_DMON)
    (tmp_path / "limits.txt").write_text(SYNTHETIC_LIMITS)
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"""#!/bin/sh
case "$*" in
  "nvlink --status") cat {GPU_DATA / 'nvlink-status-8x-h800.txt'} ;;
  "nvlink --getthroughput d")
    if [ -e {tmp_path}/read ]; then cat {GPU_DATA / 'nvlink-gt-d-h800-gpu0-training.txt'};
    else touch {tmp_path}/read; cat {GPU_DATA / 'nvlink-gt-d-h800-gpu0-idle.txt'}; fi ;;
  --query-gpu=*) cat {tmp_path}/limits.txt ;;
  dmon*) until [ -e {tmp_path}/marked ]; do sleep 0.05; done; cat {tmp_path}/dmon.txt; exec sleep 30 ;;
esac
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    sampler = GpuTelemetrySampler([0, 1])
    sampler.start()
    try:
        # The status names GPUs 0, 1 and 7: the trial's two are kept; the counters recorded are GPU 0's only.
        assert sampler.nvlink_gbps == {0: pytest.approx(8 * 26.562), 1: pytest.approx(8 * 26.562)}
        sampler.mark()
        (tmp_path / "marked").touch()  # dmon's lines come once the level has begun
        deadline = time.monotonic() + 10
        while len(sampler.samples) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        m = sampler.level_metrics(0)
        assert m["gpu_count"] == 2 and m["gpu_power_frac_mean"] == pytest.approx(598.5 / 600)
        assert m["gpu_nvlink_tx_gbps_mean"] > 0 and 0 < m["gpu_nvlink_frac_mean"]
        assert sampler.level_metrics(0) == m  # the end reading is taken once
        sampler.mark()
        sampler.forget_level()  # a level measured again: its mark and NVLink reading go
        assert (len(sampler.marks), len(sampler.nvlink_reads)) == (1, 1) and sampler.level_metrics(0) == m
    finally:
        sampler.stop()


def test_an_h200_under_bf16_matrix_products_reads_as_power_bound():
    # Recorded on a one-GPU H200 (driver 580.159.04): 4 s idle, 10 s of 8192^3 bf16 products (655 TFLOP/s),
    # then idle, sampled by `dmon -s pucvmt` once a second; its limits as `--query-gpu` gave them.
    samples = parse_dmon((GPU_DATA / "dmon-pucvmt-1x-h200-levels.txt").read_text())
    limits = parse_limits((GPU_DATA / "query-gpu-limits-1x-h200.csv").read_text())
    assert len(samples) == 20 and limits[0].power_limit_w == 700.0
    loaded = [s for s in samples if s.values["pwr"] > 600]
    idle = [s for s in samples if s.values["pwr"] < 200]
    assert len(loaded) >= 8 and len(idle) >= 8
    m = gpu_summary(loaded, limits)
    assert m["gpu_power_frac_mean"] > 0.95 and m["gpu_sm_util_mean"] > 90
    limit = gpu_limit(m)
    assert limit is not None and limit.kind == "power", m
    assert gpu_limit(gpu_summary(idle, limits)) is None
