"""The launcher contract, checked on real servers: start, ready, logs (streamed to the trial's log file
while the server runs), early exit, startup timeout, stop twice, reap. Every launcher passes the same
suite: `flavour` runs it over a local process (Python's http.server and scripts) and a Docker container
(the locally built llama-server image serving the 8 MB model). Add a launcher by adding a flavour."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from autotuner.engines._base import LaunchContext, LaunchSpec
from autotuner.engines.llamacpp import LlamaCppEngine
from autotuner.launchers._base import EngineExited, Handle, Launcher, PortTaken, StartupTimeout, free_port
from autotuner.launchers.process import ProcessLauncher

LABELS = {"autotuner.study": f"conformance-{os.getpid()}"}


@dataclass
class Flavour:
    """One launcher and the servers it runs in this suite."""

    make: Callable[[Path], Launcher]  # a new launcher over a state folder (as after a tuner restart)
    serving: Callable[[Launcher], LaunchSpec]  # becomes ready and stays up
    ready_line: str  # what `serving` logs once it serves
    exiting: Callable[[Launcher], LaunchSpec]  # exits while starting
    exit_code: int
    exit_line: str
    never_ready: Callable[[Launcher], LaunchSpec]  # runs, never answers its health path
    waiting_line: str
    gone: Callable[[Handle], bool]  # nothing of the server is left
    ident: Callable[[Handle], str]  # what `reap` returns for it
    cores: Callable[[Handle], str]  # the CPU cores the server may run on, as a list such as "0" or "0-3"


def python_spec(code: str, port: int, health: str = "/") -> LaunchSpec:
    return LaunchSpec(argv=[sys.executable, "-u", "-c", code], port=port, served_model_name="m", health_path=health)


def http_server(port: int) -> LaunchSpec:
    return LaunchSpec(argv=[sys.executable, "-u", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                      port=port, served_model_name="m", health_path="/")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"


def process_flavour() -> Flavour:
    return Flavour(
        make=lambda state, owner=None: ProcessLauncher(state, owner=owner),
        serving=lambda _: http_server(free_port()),
        ready_line="GET / HTTP/1.1",  # the readiness probe shows in the server's log
        exiting=lambda _: python_spec("import time, sys; print('loading'); time.sleep(0.3); "
                                      "print('fatal: no such model'); sys.exit(3)", free_port()),
        exit_code=3,
        exit_line="fatal: no such model",
        never_ready=lambda _: python_spec("import time; print('loading forever'); time.sleep(600)", free_port()),
        waiting_line="loading forever",
        gone=lambda h: not alive(h.pid),
        ident=lambda h: str(h.pid),
        cores=lambda h: _status(h.pid, "Cpus_allowed_list"),
    )


def _status(pid: int, field: str) -> str:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith(field + ":"))
    return line.split(":", 1)[1].strip()


def docker_flavour(request: pytest.FixtureRequest) -> Flavour:
    from docker.errors import NotFound

    from autotuner.config import DockerConfig
    from autotuner.launchers.docker import DockerLauncher

    client = request.getfixturevalue("docker_client")
    image = request.getfixturevalue("engine_image")
    model: Path = request.getfixturevalue("tiny_model")
    engine = LlamaCppEngine()

    def llama(launcher: DockerLauncher, model_path: Path = model) -> LaunchSpec:
        # As the tuner does it: the host's view of the launch, translated by the launcher, built by the engine.
        host = LaunchContext(model_path=model_path, served_model_name="tiny", port=free_port())
        return engine.build({"threads": 1}, launcher.context(host))

    def gone(handle: Handle) -> bool:
        try:
            client.containers.get(handle.container_id)
        except NotFound:
            return True
        return False

    return Flavour(
        make=lambda _state, owner=None: DockerLauncher(DockerConfig(image=image, stop_timeout_s=5), model_path=model,
                                                       owner=owner),
        serving=llama,
        ready_line="listening on http://0.0.0.0:8000",
        exiting=lambda launcher: llama(launcher, model.parent / "no-such-model.gguf"),
        exit_code=1,
        exit_line="failed to load model",
        never_ready=lambda launcher: replace(llama(launcher), health_path="/never-ready"),
        waiting_line="loading model",
        gone=gone,
        ident=lambda h: h.container_id[:12],
        cores=lambda h: client.containers.get(h.container_id).attrs["HostConfig"]["CpusetCpus"],
    )


@pytest.fixture(params=["process", pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.engine])])
def flavour(request) -> Flavour:
    return process_flavour() if request.param == "process" else docker_flavour(request)


@pytest.fixture
def launcher(flavour, tmp_path) -> Launcher:
    return flavour.make(tmp_path / "state")


def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_the_pools_lease_confines_the_server(flavour, launcher, tmp_path):
    core = min(os.sched_getaffinity(0))
    handle = launcher.start(replace(flavour.serving(launcher), cpu_ids=(core,)), tmp_path / "server.log", LABELS)
    try:
        launcher.wait_ready(handle, 60)
        assert flavour.cores(handle) == str(core)
    finally:
        launcher.stop(handle)


def test_a_process_sees_only_the_gpus_the_pool_leased(tmp_path):
    launcher = ProcessLauncher(tmp_path / "state")
    handle = launcher.start(replace(http_server(free_port()), gpu_ids=(2, 3)), tmp_path / "server.log", LABELS)
    try:
        environ = Path(f"/proc/{handle.pid}/environ").read_bytes().split(b"\0")
        assert b"CUDA_VISIBLE_DEVICES=2,3" in environ
        assert b"CUDA_DEVICE_ORDER=PCI_BUS_ID" in environ  # CUDA's numbering as nvidia-smi's, whose indices they are
        assert "CUDA_VISIBLE_DEVICES" not in handle.spec.command_line()  # a deployment has the node to itself
    finally:
        launcher.stop(handle)


def test_a_process_finds_the_studys_engine_cache_by_its_variables(tmp_path):
    launcher = ProcessLauncher(tmp_path / "state")
    spec = replace(http_server(free_port()), cache_dir=str(tmp_path / "cache"),
                   cache_env={"TRITON_CACHE_DIR": "triton", "VLLM_CACHE_ROOT": "vllm"})
    handle = launcher.start(spec, tmp_path / "server.log", LABELS)
    try:
        environ = Path(f"/proc/{handle.pid}/environ").read_bytes().split(b"\0")
        assert f"VLLM_CACHE_ROOT={tmp_path / 'cache' / 'vllm'}".encode() in environ
        assert (tmp_path / "cache").is_dir()
        assert "cache" not in handle.spec.command_line()  # the tuner's cache is no part of the deployment
    finally:
        launcher.stop(handle)


def test_start_ready_logs_stop_twice(flavour, launcher, tmp_path):
    log = tmp_path / "server.log"
    handle = launcher.start(flavour.serving(launcher), log, LABELS)
    try:
        launcher.wait_ready(handle, timeout_s=30)
        assert launcher.is_running(handle)
        assert handle.base_url.startswith("http://127.0.0.1:")
        assert flavour.ready_line in launcher.logs(handle)
        # The trial's log file fills while the server runs, not only once it is stopped.
        assert wait_for(lambda: flavour.ready_line in log.read_text(errors="replace"))
    finally:
        launcher.stop(handle)
    assert wait_for(lambda: flavour.gone(handle))
    assert not launcher.is_running(handle)
    launcher.stop(handle)  # safe twice
    assert flavour.ready_line in log.read_text(errors="replace")


def test_early_exit_fails_fast_with_code_and_log_tail(flavour, launcher, tmp_path):
    handle = launcher.start(flavour.exiting(launcher), tmp_path / "server.log", LABELS)
    t = time.monotonic()
    try:
        with pytest.raises(EngineExited) as err:
            launcher.wait_ready(handle, timeout_s=60)
        assert time.monotonic() - t < 15  # not the 60 s timeout (a few seconds on a loaded machine)
        assert err.value.exit_code == flavour.exit_code
        assert str(flavour.exit_code) in str(err.value)
        assert flavour.exit_line in err.value.log_tail
        assert err.value.failure_class == "exited-at-start" and not getattr(err.value, "oom_killed", False)
    finally:
        launcher.stop(handle)
    assert wait_for(lambda: flavour.gone(handle))


def test_startup_timeout_then_stop(flavour, launcher, tmp_path):
    handle = launcher.start(flavour.never_ready(launcher), tmp_path / "server.log", LABELS)
    t = time.monotonic()
    try:
        # Long enough for the server's first words to reach the log, even from a container on a busy machine.
        with pytest.raises(StartupTimeout, match="not ready after 3 s") as err:
            launcher.wait_ready(handle, timeout_s=3)
        assert 2.9 < time.monotonic() - t < 10
        assert flavour.waiting_line in err.value.log_tail
    finally:
        launcher.stop(handle)
    assert wait_for(lambda: flavour.gone(handle))


def test_reap_removes_only_this_studys_leftovers(flavour, tmp_path):
    import subprocess

    state = tmp_path / "state"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])  # a tuner that was killed
    gone.wait()
    dead_owner = f"{socket.gethostname()}:{gone.pid}:0"
    killed, theirs, alive_worker = flavour.make(state, dead_owner), flavour.make(state), flavour.make(state)
    a = killed.start(flavour.serving(killed), tmp_path / "a.log", LABELS)
    other = {"autotuner.study": LABELS["autotuner.study"] + "-other"}
    b = theirs.start(flavour.serving(theirs), tmp_path / "b.log", other)
    c = alive_worker.start(flavour.serving(alive_worker), tmp_path / "c.log", LABELS)
    try:
        # A new launcher finds the leftover of the killed tuner by its labels, and spares the engine of
        # a worker of the same study that still runs.
        assert flavour.make(state).reap(LABELS) == [flavour.ident(a)]
        assert not flavour.gone(c)
        if a.info.get("popen"):
            a.info["popen"].wait(5)
        assert wait_for(lambda: flavour.gone(a))
        assert not flavour.gone(b)
        assert flavour.make(state).reap(LABELS) == []
    finally:
        theirs.stop(b)
        killed.stop(a)
        alive_worker.stop(c)
    assert wait_for(lambda: flavour.gone(b))


# --- the local process only: its own ways of leaving nothing behind ---------------------------------------

def test_process_stop_reaches_children_of_the_server(tmp_path):
    launcher = ProcessLauncher(tmp_path / "state")
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
            "print('child', p.pid, flush=True); time.sleep(600)")
    handle = launcher.start(python_spec(code, free_port()), tmp_path / "server.log", LABELS)
    assert wait_for(lambda: "child" in launcher.logs(handle))
    child = int(launcher.logs(handle).split()[-1])
    launcher.stop(handle)
    assert wait_for(lambda: not alive(child))


def test_reap_removes_a_child_that_outlived_its_server_and_tuner(tmp_path):
    # vLLM forks engine processes that hold the GPUs; the server killed with its tuner leaves one behind.
    import subprocess

    gone = subprocess.Popen([sys.executable, "-c", "pass"])  # a tuner that was killed
    gone.wait()
    launcher = ProcessLauncher(tmp_path / "state", owner=f"{socket.gethostname()}:{gone.pid}:0")
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
            "print('child', p.pid, flush=True); time.sleep(600)")
    handle = launcher.start(python_spec(code, free_port()), tmp_path / "server.log", LABELS)
    assert wait_for(lambda: "child" in launcher.logs(handle))
    child = int(launcher.logs(handle).split()[-1])
    os.kill(handle.pid, 9)  # the server dies; its child, in its session, lives on
    handle.info["popen"].wait(5)
    assert alive(child)
    assert ProcessLauncher(tmp_path / "state").reap(LABELS) == [str(handle.pid)]
    assert wait_for(lambda: not alive(child))


@pytest.fixture
def foreign_server() -> Iterator[int]:
    """Another program's HTTP server on a port a launch is then given: its port."""
    import subprocess

    port = free_port()
    other = subprocess.Popen(http_server(port).argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, 30), "the other server is not up"
        yield port
    finally:
        other.kill()
        other.wait()


def test_a_health_check_another_program_answers_is_not_the_servers(tmp_path, foreign_server):
    # The server has not bound its port yet (a model still loading); another program already answers on it.
    loading = python_spec("import time; print('loading', flush=True); time.sleep(600)", foreign_server)
    launcher = ProcessLauncher(tmp_path / "state")
    handle = launcher.start(loading, tmp_path / "server.log", LABELS)
    try:
        with pytest.raises(PortTaken, match=f"another program listens on port {foreign_server}") as err:
            launcher.wait_ready(handle, timeout_s=30)
        assert err.value.failure_class == "port-taken"
    finally:
        launcher.stop(handle)


def test_a_server_whose_port_was_taken_fails_as_port_taken_with_its_own_words(tmp_path, foreign_server):
    launcher = ProcessLauncher(tmp_path / "state")
    # A health path the other program does not serve (404): the server's own failed bind ends the wait.
    spec = replace(http_server(foreign_server), health_path="/no-such-page")
    handle = launcher.start(spec, tmp_path / "server.log", LABELS)
    try:
        with pytest.raises(PortTaken, match="the server exited with code 1") as err:
            launcher.wait_ready(handle, timeout_s=30)
        assert "Address already in use" in err.value.log_tail
    finally:
        launcher.stop(handle)


def test_a_server_on_its_own_port_is_its_own(tmp_path):
    from autotuner.launchers.procfs import listening_inodes, session_listens

    launcher = ProcessLauncher(tmp_path / "state")
    spec = http_server(free_port())
    handle = launcher.start(spec, tmp_path / "server.log", LABELS)
    try:
        launcher.wait_ready(handle, timeout_s=30)
        assert session_listens(handle.pid, spec.port) is True
        # Another session of ours holds no such socket. (Not the tests' own: in a container its leader
        # can lie outside the pid namespace, and its id reads as 0, which /proc cannot tell.)
        other = launcher.start(python_spec("import time; time.sleep(600)", free_port()), tmp_path / "o.log", LABELS)
        try:
            assert session_listens(other.pid, spec.port) is False
        finally:
            launcher.stop(other)
        assert session_listens(0, spec.port) is None
        assert listening_inodes(free_port()) == set()
    finally:
        launcher.stop(handle)


def test_process_server_dies_with_a_killed_tuner(tmp_path):
    """SIGKILL of the tuner leaves no engine behind: the kernel kills it (PR_SET_PDEATHSIG).
    (A container goes with its guard: tests/integration/test_docker_launcher.py.)"""
    import subprocess

    script = (f"import sys, time; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r});"
              "from pathlib import Path;"
              "from autotuner.launchers.process import ProcessLauncher;"
              "from autotuner.engines._base import LaunchSpec;"
              f"h = ProcessLauncher(Path({str(tmp_path / 'st')!r})).start(LaunchSpec([sys.executable, '-c', 'import time; time.sleep(600)'], 1, 'm'), Path({str(tmp_path / 'x.log')!r}), {{}});"
              "print(h.pid, flush=True); time.sleep(600)")
    tuner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    server_pid = int(tuner.stdout.readline())
    assert alive(server_pid)
    tuner.kill()
    tuner.wait()
    for _ in range(50):
        if not alive(server_pid):
            break
        time.sleep(0.05)
    assert not alive(server_pid)
