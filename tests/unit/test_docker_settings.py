"""The Docker launcher's pure parts, without a daemon: the experiment's docker section, how a host launch
is seen from inside the container, and the `docker run` line that reproduces a trial."""

from __future__ import annotations

import shlex
from pathlib import Path, PurePosixPath

import pytest

from autotuner.config import ConfigError, DockerConfig, VolumeConfig, load_experiment
from autotuner.engines._base import LaunchContext, LaunchSpec
from autotuner.engines.llamacpp import LlamaCppEngine
from autotuner.launchers import make_launcher
from autotuner.launchers.docker import DockerLauncher
from autotuner.launchers.docker_command import docker_run_line

SPACE = "engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 4}\n"


def write_experiment(tmp_path: Path, extra: str) -> Path:
    (tmp_path / "s.yaml").write_text(SPACE)
    (tmp_path / "m.gguf").write_bytes(b"")
    path = tmp_path / "exp.yaml"
    path.write_text("name: x\nengine: llamacpp\nmodel: {path: m.gguf}\nsearch_space: s.yaml\n" + extra)
    return path


@pytest.mark.parametrize("gpus", ["all", 2, ["0", "3"], [0, 1], ["GPU-8f2e"], None])
def test_gpus_all_a_count_or_device_ids(tmp_path, gpus):
    docker = {"image": "img"} if gpus is None else {"image": "img", "gpus": gpus}
    exp = load_experiment(write_experiment(tmp_path, f"launcher: docker\ndocker: {docker}\n"))
    assert exp.config.docker.gpus == gpus


@pytest.mark.parametrize("docker, expected", [
    ("{image: img, gpus: 0}", "field 'docker.gpus"),
    ("{image: img, shm_size: lots}", "field 'docker.shm_size': String should match pattern"),
    ("{image: img, imag: x}", "field 'docker.imag': unknown field"),
    ("{pull: true}", "field 'docker.image': Field required"),
    ("{image: img, volumes: [{host: c, container: relative}]}", "field 'docker.volumes.0.container'"),
])
def test_docker_section_mistakes_are_one_line(tmp_path, docker, expected):
    with pytest.raises(ConfigError) as err:
        load_experiment(write_experiment(tmp_path, f"launcher: docker\ndocker: {docker}\n"))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_docker_launcher_without_a_docker_section_is_a_config_error(tmp_path):
    exp = load_experiment(write_experiment(tmp_path, "launcher: docker\n"))
    with pytest.raises(ConfigError, match=r"exp.yaml: field 'docker': missing: launcher 'docker' needs"):
        make_launcher(exp)


def test_context_mounts_the_model_and_listens_on_the_container_port(tmp_path):
    model = tmp_path / "models" / "m.gguf"
    model.parent.mkdir()
    model.write_bytes(b"")
    launcher = DockerLauncher(DockerConfig(image="img", binary="/opt/bin/llama-server"), model_path=model)
    host = LaunchContext(model_path=model, served_model_name="m", port=41234, binary="/host/llama-server")
    ctx = launcher.context(host)
    assert (ctx.model_path, ctx.host, ctx.port, ctx.binary) == (Path("/models/m.gguf"), "0.0.0.0", 8000,
                                                                "/opt/bin/llama-server")
    assert launcher.mounts == [(model.parent, PurePosixPath("/models"), True)]
    argv = LlamaCppEngine().build({}, ctx).argv
    assert argv[:7] == ["/opt/bin/llama-server", "--model", "/models/m.gguf", "--host", "0.0.0.0", "--port", "8000"]


def test_context_on_the_host_network_keeps_the_tuners_port_on_loopback(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"")
    launcher = DockerLauncher(DockerConfig(image="img", network_host=True), model_path=model)
    ctx = launcher.context(LaunchContext(model_path=model, served_model_name="m", port=41234, binary="/host/x"))
    assert (ctx.model_path, ctx.host, ctx.port, ctx.binary) == (Path("/models/m.gguf"), "127.0.0.1", 41234, None)


def test_a_model_folder_is_mounted_whole_and_volumes_translate_too(tmp_path):
    model = tmp_path / "hf-model"
    model.mkdir()
    (tmp_path / "cache").mkdir()
    settings = DockerConfig(image="img", volumes=[VolumeConfig(host=Path("cache"), container="/root/.cache")])
    launcher = DockerLauncher(settings, model_path=model, base_dir=tmp_path)
    assert launcher.mounts == [(model, PurePosixPath("/models/hf-model"), True),
                               (tmp_path / "cache", PurePosixPath("/root/.cache"), True)]
    assert launcher.container_path(model) == Path("/models/hf-model")
    assert launcher.container_path(tmp_path / "cache" / "kernels.json") == Path("/root/.cache/kernels.json")
    assert launcher.container_path(Path("/opt/in-image")) == Path("/opt/in-image")  # the image's own path


def test_docker_run_line_reproduces_every_option_and_names_secrets_only():
    settings = DockerConfig(image="autotuner/llama-server:1", gpus=["0", "1"], ipc_host=True, shm_size="8g",
                            memory="16g", pass_env=["HF_TOKEN"], stop_timeout_s=7)
    spec = LaunchSpec(argv=["llama-server", "--alias", "my model"], port=8000, served_model_name="my model",
                      log_env={"GGML_NO_BACKTRACE": "1"}, secret_env={"HF_TOKEN": "hf_secret"})
    mounts = [(Path("/data/models"), PurePosixPath("/models"), True), (Path("/data/k"), PurePosixPath("/k"), False)]
    line = docker_run_line(settings, mounts, spec, gpus=settings.gpus, host_port=49153)
    assert shlex.split(line) == [
        "docker", "run", "--rm", "--init", "-p", "127.0.0.1:49153:8000", "--ipc", "host", "--shm-size", "8g",
        "--memory", "16g", "--memory-swap", "16g", "--gpus", '"device=0,1"',
        "-v", "/data/models:/models:ro", "-v", "/data/k:/k",
        "-e", "GGML_NO_BACKTRACE=1", "-e", "HF_TOKEN", "--stop-timeout", "7", "--entrypoint", "llama-server",
        "autotuner/llama-server:1", "--alias", "my model"]
    assert "hf_secret" not in line


@pytest.mark.parametrize("gpus, flag", [("all", "all"), (2, "2")])
def test_docker_run_line_gpus_all_or_count(gpus, flag):
    spec = LaunchSpec(argv=["srv"], port=8000, served_model_name="m")
    settings = DockerConfig(image="i", gpus=gpus, network_host=True)
    line = docker_run_line(settings, [], spec, gpus=settings.gpus, host_port=None)
    assert f"--network host --gpus {flag} " in line and "-p" not in shlex.split(line)
