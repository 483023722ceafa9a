"""The GPU preflight: recorded failure messages of real machines are named with their fix (sources in
tests/data/gpu/README.md), and the probes' outputs are judged without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotuner.node import gpu_preflight as gp

DATA = Path(__file__).parent.parent / "data" / "gpu"
H100_TOPO = (DATA / "topo-m-8x-h100-sxm-nv18.txt").read_text()


@pytest.mark.parametrize("name, failure, fix", [
    ("hmm-open-module-cuinit-ffmpeg.txt", "cuda-hmm", "uvm_disable_hmm=1"),
    ("hmm-rtx-pro-6000-ollama.txt", "cuda-hmm", "uvm_disable_hmm=1"),
    ("fabric-manager-802-torch.txt", "fabric-manager", "nvidia-fabricmanager"),
    ("forward-compat-804-torch.txt", "driver-too-old", "upgrade the host's NVIDIA driver"),
    ("driver-combination-803-torch.txt", "driver-too-old", "upgrade the host's NVIDIA driver"),
    ("driver-insufficient-35-llamacpp.txt", "driver-too-old", "upgrade the host's NVIDIA driver"),
    ("driver-too-old-torch-vllm.txt", "driver-too-old", "upgrade the host's NVIDIA driver"),
    ("container-cli-requirement-cuda.txt", "driver-too-old", "upgrade the host's NVIDIA driver"),
    ("container-cli-nvml-mismatch.txt", "driver-mismatch", "reboot"),
])
def test_every_recorded_failure_is_named_with_its_fix(name, failure, fix):
    found = gp.known_failure((DATA / "cuda-init" / name).read_text())
    assert found is not None and found.name == failure
    assert fix in found.fix


def test_a_healthy_output_is_no_known_failure():
    assert gp.known_failure(H100_TOPO) is None
    assert gp.known_failure("CUDA_DEVICES 8\nCUDA_OK 0 NVIDIA H100 80GB HBM3\n") is None


def test_the_recorded_p2p_matrices_parse_per_ordered_pair():
    assert gp.parse_p2p_matrix((DATA / "topo-p2p-2x3090-ok.txt").read_text()) == {(0, 1): "OK", (1, 0): "OK"}
    assert gp.parse_p2p_matrix((DATA / "topo-p2p-2x5090-gns.txt").read_text()) == {(0, 1): "GNS", (1, 0): "GNS"}
    assert gp.parse_p2p_matrix("") == {}


# What the CUDA probe prints on a healthy 2-GPU machine: written for this test (the probe is ours).
SYNTHETIC_CUDA_OK = "CUDA_DEVICES 2\nCUDA_OK 0 NVIDIA GeForce RTX 5090\nCUDA_OK 1 NVIDIA GeForce RTX 5090\n" \
                    "PEER 0 1 0\nBW 0 1 21.3\n"


def test_the_cuda_probe_output_parses():
    probe = gp.parse_cuda_probe(SYNTHETIC_CUDA_OK)
    assert probe.devices == 2 and probe.initialised == {0: "NVIDIA GeForce RTX 5090", 1: "NVIDIA GeForce RTX 5090"}
    assert probe.peers == {(0, 1): False} and probe.bandwidth_gbps == {(0, 1): 21.3}
    assert gp.parse_cuda_probe("NO_TORCH No module named 'torch'\n").no_torch


def fake_machine(outputs: dict[str, tuple[int, str]], calls: list[str]):
    def run(probe: gp.Probe) -> gp.ProbeResult:
        calls.append(probe.name)
        return gp.ProbeResult(probe, *outputs[probe.name])
    return run


SMI_TWO = "0, NVIDIA GeForce RTX 5090, 575.57.08, 32607 MiB\n1, NVIDIA GeForce RTX 5090, 575.57.08, 32607 MiB\n"


def test_a_healthy_machine_passes_and_says_what_it_saw():
    calls: list[str] = []
    verdict = gp.check(fake_machine({
        "gpus": (0, SMI_TWO),
        "topology": (0, (DATA / "topo-m-4x-consumer-phb.txt").read_text()),
        "p2p": (0, (DATA / "topo-p2p-2x5090-gns.txt").read_text()),
        "cuda": (0, SYNTHETIC_CUDA_OK)}, calls), gpus_needed=2)
    assert verdict.problems == []
    assert calls == ["gpus", "topology", "p2p", "cuda"]
    facts = "\n".join(verdict.facts)
    assert "2 GPU(s)" in facts and "PHB between all 4 GPUs" in facts
    assert "P2P reads: not between 0-1 GNS" in facts
    assert "copy bandwidth: 0-1 21.3 GB/s (no P2P)" in facts
    assert verdict.topology is not None


def test_the_hmm_fault_stops_the_study_with_its_fix_and_no_more_probes_run():
    calls: list[str] = []
    recorded = (DATA / "cuda-init" / "hmm-rtx-pro-6000-ollama.txt").read_text()
    verdict = gp.check(fake_machine({"gpus": (0, SMI_TWO), "topology": (0, H100_TOPO), "p2p": (0, ""),
                                     "cuda": (1, recorded)}, calls), gpus_needed=1)
    assert calls[-1] == "cuda"
    assert len(verdict.problems) == 1
    text = gp.failure_text(verdict, "in image vllm/vllm-openai:v0.32.0")
    assert text.startswith("GPU preflight (in image vllm/vllm-openai:v0.32.0) failed; no trial was started:")
    assert "options nvidia_uvm uvm_disable_hmm=1" in text and "init failure: 3" in text
    assert len(text.splitlines()) < 25  # one screen


def test_a_container_the_nvidia_runtime_refuses_stops_at_the_first_probe():
    calls: list[str] = []
    refused = (DATA / "cuda-init" / "container-cli-requirement-cuda.txt").read_text()
    verdict = gp.check(fake_machine(dict.fromkeys(("gpus", "topology", "p2p", "cuda"), (125, refused)), calls), 1)
    assert calls == ["gpus"]
    assert "newer than the host's driver" in verdict.problems[0]


def test_too_few_gpus_or_a_cuda_failure_without_a_known_message_still_stop_it():
    few = gp.check(fake_machine({"gpus": (0, SMI_TWO), "topology": (0, ""), "p2p": (0, ""),
                                 "cuda": (0, SYNTHETIC_CUDA_OK)}, []), gpus_needed=4)
    assert few.problems[0] == "2 GPU(s) visible, the experiment needs 4"
    broken = gp.check(fake_machine({"gpus": (0, SMI_TWO), "topology": (0, ""), "p2p": (0, ""),
                                    "cuda": (1, "CUDA_DEVICES 2\nCUDA_OK 0 x\nRuntimeError: CUDA error: ECC\n")},
                                   []), gpus_needed=2)
    assert broken.problems and "CUDA could not start on device 1" in broken.problems[0]
    assert "RuntimeError: CUDA error: ECC" in broken.problems[0]


def test_an_image_without_torch_is_checked_by_nvidia_smi_alone():
    verdict = gp.check(fake_machine({"gpus": (0, SMI_TWO), "topology": (0, ""), "p2p": (0, ""),
                                     "cuda": (127, "exec: \"python3\": executable file not found in $PATH")}, []), 1)
    assert verdict.problems == []
    assert any("CUDA start not checked" in f for f in verdict.facts)


def test_run_on_host_confines_the_probe_to_the_pools_gpus():
    probe = gp.Probe("env", ("sh", "-c", "echo $CUDA_VISIBLE_DEVICES"), "test")
    assert gp.run_on_host(probe, [2, 3], {"PATH": "/usr/bin:/bin"}).output.strip() == "2,3"
    missing = gp.run_on_host(gp.Probe("x", ("no-such-binary-here",), "test"), [], {})
    assert missing.returncode == 127


def gpu_experiment(launcher: str = "docker"):
    from autotuner.config import load_experiment

    exp = load_experiment(Path(__file__).parents[2] / "experiments" / "vllm-gpu-check.yaml")
    if launcher == "process":
        exp = exp.model_copy(update={"config": exp.config.model_copy(update={"launcher": "process"})})
    return exp


class FakeImage:
    """A launcher whose image answers the probes with what a machine with the HMM fault printed."""

    def __init__(self):
        self.argvs: list[list[str]] = []

    def run_once(self, argv, gpus, labels):
        self.argvs.append(argv)
        if argv[0] == "python3":
            return 1, (DATA / "cuda-init" / "hmm-rtx-pro-6000-ollama.txt").read_text()
        return 0, SMI_TWO if "--query-gpu" in argv[1] else ""


def test_the_cli_stops_a_docker_study_with_the_fix_before_any_trial():
    from autotuner.compose import gpu_preflight
    from autotuner.config import ConfigError

    image = FakeImage()
    with pytest.raises(ConfigError) as stopped:
        gpu_preflight(gpu_experiment(), image, None, None, print)
    assert "GPU preflight (in image vllm/vllm-openai:v0.32.0) failed" in str(stopped.value)
    assert "uvm_disable_hmm=1" in str(stopped.value)
    assert [a[0] for a in image.argvs] == ["nvidia-smi", "nvidia-smi", "nvidia-smi", "python3"]


def test_a_process_study_on_a_machine_without_nvidia_smi_stops_with_one_clear_screen(monkeypatch):
    from autotuner.compose import gpu_preflight
    from autotuner.config import ConfigError

    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ConfigError) as stopped:
        gpu_preflight(gpu_experiment("process"), None, None, None, print)
    assert "GPU preflight (on this host) failed" in str(stopped.value)
    assert "nvidia-smi sees no GPU" in str(stopped.value)


def test_one_h200_as_recorded_passes_and_says_so():
    # The four probes' outputs on a one-GPU H200 (driver 580.159.04, CUDA 13.0, torch 2.11), as the
    # preflight ran them there; the topology and P2P headers carry terminal escapes.
    p2p = (DATA / "topo-p2p-r-1x-h200.txt").read_text()
    assert gp.parse_p2p_matrix(p2p) == {}  # one GPU: no pair
    verdict = gp.check(fake_machine({
        "gpus": (0, "0, NVIDIA H200, 580.159.04, 143771 MiB\n"),
        "topology": (0, (DATA / "topo-m-1x-h200.txt").read_text()),
        "p2p": (0, p2p),
        "cuda": (0, (DATA / "preflight-cuda-1x-h200.txt").read_text())}, []), gpus_needed=1)
    assert verdict.problems == []
    assert verdict.topology is not None and verdict.topology.gpus == (0,)
    assert "CUDA started on 1 GPU(s)" in "\n".join(verdict.facts)
    assert gp.check(fake_machine({"gpus": (0, "0, NVIDIA H200, 580.159.04, 143771 MiB\n"),
                                  "topology": (0, ""), "p2p": (0, p2p),
                                  "cuda": (0, "CUDA_DEVICES 1\nCUDA_OK 0 NVIDIA H200\n")}, []), gpus_needed=2).problems
