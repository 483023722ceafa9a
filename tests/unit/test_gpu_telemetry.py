"""GPU telemetry (`nvidia-smi dmon` and one `--query-gpu`) and the diagnosis classes it drives.

No recorded dmon or query output with these columns was found (tests/data/gpu/README.md): the inputs
below are written for these tests, in the layout `man nvidia-smi` documents, and are marked synthetic.
"""

from __future__ import annotations

import pytest

from autotuner.bench.gpu_telemetry import GpuLimits, GpuTelemetrySampler, parse_dmon, parse_limits, summarize
from autotuner.report.diagnosis import binding_limit, gpu_limit

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
    m = summarize(parse_dmon(SYNTHETIC_DMON), parse_limits(SYNTHETIC_LIMITS))
    assert m["gpu_count"] == 2 and m["gpu_samples"] == 2
    assert m["gpu_power_w_mean"] == pytest.approx(598.5)
    assert m["gpu_power_frac_mean"] == pytest.approx(598.5 / 600)
    assert m["gpu_power_capped_pct_mean"] == pytest.approx(45)
    assert m["gpu_fb_used_mib_max"] == 90300
    assert 0.78 < m["gpu_sm_clock_frac_mean"] < 0.81
    assert summarize([], {}) == {}


def server_level(**kw):
    return {"server_samples": 10, "server_requests_running_max": 64, "server_requests_running_mean": 60, **kw}


def gpus(**kw):
    return {"gpu_samples": 30, "gpu_count": 2, **kw}


def test_power_at_its_limit_with_the_driver_capping_it_is_power_bound():
    m = summarize(parse_dmon(SYNTHETIC_DMON), parse_limits(SYNTHETIC_LIMITS))
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
