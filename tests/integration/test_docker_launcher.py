"""What only the Docker launcher does, on a real dockerd: a missing image or a failed pull is a clear error
before anything starts; a trial's container is identified (image, digest, id) and its `docker run`
line starts the same server by hand; GPUs, host networking, IPC, shm, volumes and environment reach the
container; a start the kernel OOM-kills fails at once as `oom`; the engine's version is read from the
image. The contract shared with every launcher is in test_launcher_conformance.py."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from autotuner.config import DockerConfig, VolumeConfig
from autotuner.engines._base import LaunchContext
from autotuner.engines.llamacpp import LlamaCppEngine
from autotuner.launchers._base import EngineExited, LaunchError, free_port
from autotuner.launchers.docker import DockerLauncher, DockerSetupError
from tests.support import container_guards, everything_required

pytestmark = [pytest.mark.docker, pytest.mark.engine]

LABELS = {"autotuner.study": f"docker-launcher-{os.getpid()}"}
ENGINE = LlamaCppEngine()


def ours(client) -> list:
    return client.containers.list(all=True, filters={"label": f"autotuner.study={LABELS['autotuner.study']}"})


def spec_for(launcher: DockerLauncher, model: Path):
    return ENGINE.build({"threads": 1}, launcher.context(LaunchContext(model_path=model, served_model_name="tiny",
                                                                       port=free_port())))


def test_missing_image_is_a_clear_error_before_anything_starts(docker_client, tiny_model):
    before = len(docker_client.containers.list(all=True))
    launcher = DockerLauncher(DockerConfig(image="autotuner/no-such-image:0"), model_path=tiny_model)
    with pytest.raises(DockerSetupError) as err:
        launcher.prepare()
    message = str(err.value)
    assert "'autotuner/no-such-image:0' is not on the Docker daemon" in message
    assert "scripts/build-engine-image.sh" in message and "pull: true" in message
    assert len(docker_client.containers.list(all=True)) == before


def test_failed_pull_says_why(docker_client, tiny_model):
    lines: list[str] = []
    launcher = DockerLauncher(DockerConfig(image="127.0.0.1:9/nothing/here:0", pull=True), model_path=tiny_model)
    t = time.monotonic()
    with pytest.raises(DockerSetupError, match=r"pulling '127.0.0.1:9/nothing/here:0' failed: .*127\.0\.0\.1:9"):
        launcher.prepare(lines.append)
    assert time.monotonic() - t < 10
    assert lines[0] == "pulling 127.0.0.1:9/nothing/here:0"  # the user sees the pull start


@pytest.fixture
def local_registry(tmp_path):
    """A real registry on 127.0.0.1 (Debian's docker-registry; the daemon allows plain HTTP on loopback)."""
    binary = shutil.which("docker-registry")
    if binary is None:
        if everything_required() or os.environ.get("AUTOTUNER_REQUIRE_DOCKER"):
            pytest.fail("docker-registry is required here (.ci/run installs Debian's docker-registry)")
        pytest.skip("no docker-registry to pull from (apt-get install docker-registry)")
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(f"version: 0.1\nlog: {{level: error}}\nhttp: {{addr: 127.0.0.1:{port}}}\n"
                      f"storage: {{filesystem: {{rootdirectory: {tmp_path}/registry}}}}\n")
    with (tmp_path / "registry.log").open("wb") as log:
        proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "registry.log").read_text()
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def test_pull_is_opt_in_shows_progress_and_the_digest_is_recorded(docker_client, engine_image, tiny_model,
                                                                  local_registry, tmp_path):
    # An image only the registry has: the engine image plus a layer of random bytes, pushed, then removed here.
    name = f"{local_registry}/autotuner/llama-server:pull-test-{os.getpid()}"
    base = docker_client.containers.create(engine_image, labels=LABELS)
    try:
        import io
        import tarfile

        data, archive = os.urandom(4 << 20), io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            info = tarfile.TarInfo("random.bin")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        base.put_archive("/tmp", archive.getvalue())
        repo, tag = name.rsplit(":", 1)
        base.commit(repository=repo, tag=tag)
    finally:
        base.remove(force=True)
    for event in docker_client.images.push(repo, tag=tag, stream=True, decode=True):
        assert "error" not in event, event
    docker_client.images.remove(name)

    launcher = DockerLauncher(DockerConfig(image=name), model_path=tiny_model)
    with pytest.raises(DockerSetupError, match="is not on the Docker daemon"):  # never pulled implicitly
        launcher.prepare()
    lines: list[str] = []
    launcher = DockerLauncher(DockerConfig(image=name, pull=True), model_path=tiny_model)
    launcher.prepare(lines.append)
    try:
        assert lines[0] == f"pulling {name}"
        assert any(": downloading " in line and " MB, " in line for line in lines), lines
        assert any(line.endswith(": Pull complete") for line in lines), lines
        assert any("Digest: sha256:" in line for line in lines), lines
        handle = launcher.start(spec_for(launcher, tiny_model), tmp_path / "server.log", LABELS)
        try:
            launcher.wait_ready(handle, 30)
        finally:
            launcher.stop(handle)
        digest = handle.tags["autotuner.docker.image_digest"]
        assert digest.startswith(f"{repo}@sha256:")  # the registry's digest, for a pulled image
        assert digest in docker_client.images.get(name).attrs["RepoDigests"]
    finally:
        docker_client.images.remove(name, force=True)
    assert ours(docker_client) == []


def test_missing_volume_is_a_clear_error(docker_client, engine_image, tiny_model, tmp_path):
    settings = DockerConfig(image=engine_image, volumes=[VolumeConfig(host=tmp_path / "nope", container="/cache")])
    with pytest.raises(DockerSetupError, match=r"docker.volumes.*nope \(for /cache\) does not exist"):
        DockerLauncher(settings, model_path=tiny_model).prepare()


def test_trial_is_identified_and_its_docker_run_line_reproduces_it(docker_client, engine_image, tiny_model, tmp_path):
    launcher = DockerLauncher(DockerConfig(image=engine_image, shm_size="64m"), model_path=tiny_model)
    handle = launcher.start(spec_for(launcher, tiny_model), tmp_path / "server.log",
                            {**LABELS, "autotuner.trial": "7"})
    try:
        launcher.wait_ready(handle, 30)
        container = docker_client.containers.get(handle.container_id)
        assert container.labels["autotuner.study"] == LABELS["autotuner.study"]
        assert container.labels["autotuner.trial"] == "7"
        assert container.attrs["HostConfig"]["Init"] is True
        assert container.attrs["HostConfig"]["ShmSize"] == 64 * 1024 * 1024
        binding = container.attrs["NetworkSettings"]["Ports"]["8000/tcp"][0]
        assert binding["HostIp"] == "127.0.0.1" and handle.base_url == f"http://127.0.0.1:{binding['HostPort']}"
        model_mount = next(m for m in container.attrs["Mounts"] if m["Destination"] == "/models")
        assert model_mount["Source"] == str(tiny_model.parent) and model_mount["RW"] is False
    finally:
        launcher.stop(handle)
    image = docker_client.images.get(engine_image)
    assert handle.tags == {"autotuner.docker.image": engine_image, "autotuner.docker.image_digest": image.id,
                           "autotuner.docker.image_id": image.id, "autotuner.docker.container_id": handle.container_id}
    text = handle.artifacts["docker-run.txt"]
    assert handle.container_id[:12] in text and image.id in text
    line = text.strip().splitlines()[-1]
    assert line.startswith("docker run --rm --init -p 127.0.0.1:") and "autotuner.study" not in line

    cli = shutil.which("docker")
    if cli is None:
        if everything_required():
            pytest.fail("the docker CLI is required in the complete suite (Debian's docker.io installs it)")
        pytest.skip("no docker CLI to run the reproduction line with")
    argv = shlex.split(line)
    argv[0] = cli
    argv[2:2] = ["-d", "--label", f"autotuner.study={LABELS['autotuner.study']}"]  # detached; ours to remove
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    by_hand = docker_client.containers.get(out.stdout.strip())
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(handle.base_url + "/health", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, by_hand.logs().decode()[-2000:]
            time.sleep(0.1)
        models = httpx.get(handle.base_url + "/v1/models", timeout=5, trust_env=False).json()
        assert models["data"][0]["id"] == "tiny"  # the same server: same model under the same name
    finally:
        by_hand.remove(force=True)
    assert ours(docker_client) == []


def test_host_network_ipc_volumes_and_environment_reach_the_container(docker_client, engine_image, tiny_model,
                                                                      tmp_path, monkeypatch):
    (tmp_path / "kernels").mkdir()
    monkeypatch.setenv("AUTOTUNER_TEST_SECRET", "s3cret")
    settings = DockerConfig(image=engine_image, network_host=True, ipc_host=True, env={"GGML_SOMETHING": "1"},
                            pass_env=["AUTOTUNER_TEST_SECRET"],
                            volumes=[VolumeConfig(host=Path("kernels"), container="/kernels", read_only=False)])
    launcher = DockerLauncher(settings, model_path=tiny_model, base_dir=tmp_path)
    spec = spec_for(launcher, tiny_model)
    assert spec.argv[spec.argv.index("--host") + 1] == "127.0.0.1"  # on the host's network: loopback only
    handle = launcher.start(spec, tmp_path / "server.log", LABELS)
    try:
        launcher.wait_ready(handle, 30)
        assert handle.base_url == f"http://127.0.0.1:{spec.port}"
        attrs = docker_client.containers.get(handle.container_id).attrs
        assert attrs["HostConfig"]["NetworkMode"] == "host" and attrs["HostConfig"]["IpcMode"] == "host"
        assert "AUTOTUNER_TEST_SECRET=s3cret" in attrs["Config"]["Env"] and "GGML_SOMETHING=1" in attrs["Config"]["Env"]
        kernels = next(m for m in attrs["Mounts"] if m["Destination"] == "/kernels")
        assert kernels["Source"] == str(tmp_path / "kernels") and kernels["RW"] is True
    finally:
        launcher.stop(handle)
    line = handle.artifacts["docker-run.txt"]
    assert "--network host --ipc host" in line and f"-v {tmp_path / 'kernels'}:/kernels " in line
    assert "-e AUTOTUNER_TEST_SECRET " in line and "s3cret" not in line  # secrets by name only
    assert ours(docker_client) == []


def test_an_oom_killed_start_fails_fast_as_oom(docker_client, engine_image, tiny_model, tmp_path):
    launcher = DockerLauncher(DockerConfig(image=engine_image, memory="48m"), model_path=tiny_model)
    host = LaunchContext(model_path=tiny_model, served_model_name="tiny", port=free_port())
    spec = ENGINE.build({"threads": 1, "parallel": 4, "ctx_size": 131072}, launcher.context(host))  # a huge KV cache
    handle = launcher.start(spec, tmp_path / "server.log", LABELS)
    t = time.monotonic()
    try:
        with pytest.raises(EngineExited) as err:
            launcher.wait_ready(handle, 60)
        assert time.monotonic() - t < 15  # not the 60 s timeout (a few seconds on a loaded machine)
    finally:
        launcher.stop(handle)
    assert err.value.oom_killed and err.value.failure_class == "oom" and err.value.exit_code == 137
    assert "killed by the kernel's OOM killer" in str(err.value)
    assert "loading model" in err.value.log_tail  # the server's last words come along
    assert ours(docker_client) == []


def test_gpu_request_is_sent_and_a_daemon_without_gpus_fails_the_launch_cleanly(docker_client, engine_image,
                                                                               tiny_model, tmp_path):
    if "nvidia" in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("this daemon has the NVIDIA runtime: a GPU request would succeed")
    launcher = DockerLauncher(DockerConfig(image=engine_image, gpus=["0"]), model_path=tiny_model)
    t = time.monotonic()
    with pytest.raises(LaunchError, match=r"docker could not start the container: .*capabilities: \[\[gpu\]\]"):
        launcher.start(spec_for(launcher, tiny_model), tmp_path / "server.log", LABELS)
    assert time.monotonic() - t < 10
    assert ours(docker_client) == []  # the created container is removed, not left for the reaper


def test_engine_version_is_read_from_the_image(docker_client, engine_image, tiny_model, llama_server):
    launcher = DockerLauncher(DockerConfig(image=engine_image), model_path=tiny_model)
    host = subprocess.run([llama_server, "--version"], capture_output=True, text=True)
    expected = ENGINE.parse_version(host.stdout + host.stderr)
    assert launcher.engine_version(ENGINE, LABELS) == expected
    assert "+" in expected  # parsed, not "unknown"
    assert ours(docker_client) == []


def test_the_studys_engine_cache_is_mounted_writable_and_named_by_its_variables(docker_client, engine_image,
                                                                                tiny_model, tmp_path):
    launcher = DockerLauncher(DockerConfig(image=engine_image), model_path=tiny_model)
    spec = replace(spec_for(launcher, tiny_model), cache_dir=str(tmp_path / "cache"),
                   cache_env={"TRITON_CACHE_DIR": "triton"})
    handle = launcher.start(spec, tmp_path / "server.log", LABELS)
    try:
        launcher.wait_ready(handle, 30)
        attrs = docker_client.containers.get(handle.container_id).attrs
        assert "TRITON_CACHE_DIR=/autotuner-cache/triton" in attrs["Config"]["Env"]
        cache = next(m for m in attrs["Mounts"] if m["Destination"] == "/autotuner-cache")
        assert cache["Source"] == str(tmp_path / "cache") and cache["RW"] is True
    finally:
        launcher.stop(handle)
    assert "autotuner-cache" not in handle.artifacts["docker-run.txt"]  # a reproduction by hand starts cold
    assert ours(docker_client) == []


TUNER_THAT_STARTS_ONE = """\
import sys, time
from pathlib import Path
from autotuner.config import DockerConfig
from autotuner.engines._base import LaunchContext
from autotuner.engines.llamacpp import LlamaCppEngine
from autotuner.launchers._base import free_port
from autotuner.launchers.docker import DockerLauncher

image, model, log, study = sys.argv[1:]
launcher = DockerLauncher(DockerConfig(image=image), model_path=Path(model))
spec = LlamaCppEngine().build({"threads": 1}, launcher.context(LaunchContext(
    model_path=Path(model), served_model_name="tiny", port=free_port())))
handle = launcher.start(spec, Path(log), {"autotuner.study": study})
print(handle.container_id, flush=True)
time.sleep(600)
"""


def test_a_tuner_killed_outright_leaves_no_container_running(docker_client, engine_image, tiny_model, tmp_path):
    # SIGKILL runs no `finally`: the container (no child of the tuner) would run on, holding its GPUs, until
    # a later launch reaped it by label. Its guard dies with the tuner and removes it at once. (On a Ray
    # node: a task whose raylet died, whose worker process exits with it.) Killed at once, while the guard
    # is most likely still starting: the signal waits for its handler. (A guard that removed a container
    # its tuner still runs would fail every Docker study test.)
    script = tmp_path / "tuner.py"
    script.write_text(TUNER_THAT_STARTS_ONE)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    tuner = subprocess.Popen([sys.executable, str(script), engine_image, str(tiny_model), str(tmp_path / "server.log"),
                              LABELS["autotuner.study"]], stdout=subprocess.PIPE, text=True, env=env)
    try:
        container_id = tuner.stdout.readline().strip()
        assert container_id, "the tuner started no container"
        status = docker_client.containers.get(container_id).status
        assert status == "running", status
    finally:
        tuner.kill()
        tuner.wait()
    deadline = time.monotonic() + 30
    while ours(docker_client) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ours(docker_client), "the container outlived its killed tuner"


def test_a_stopped_container_leaves_no_guard_behind(docker_client, engine_image, tiny_model, tmp_path):
    launcher = DockerLauncher(DockerConfig(image=engine_image), model_path=tiny_model)
    handle = launcher.start(spec_for(launcher, tiny_model), tmp_path / "server.log", LABELS)
    try:
        assert container_guards(handle.container_id), "the container has no guard"
    finally:
        launcher.stop(handle)
    assert container_guards(handle.container_id) == set() and not ours(docker_client)
