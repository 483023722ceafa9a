"""Run an engine in a Docker container, through the Docker SDK (never the docker CLI, never a shell).

What a container changes, and where this module handles it:
- Paths and ports differ inside. `context()` turns the tuner's host LaunchContext into the container's:
  the model under its read-only mount (`/models`), listening on 0.0.0.0 at the container port (8000),
  the image's own binary. Engine adapters build the spec from that and never learn about Docker.
- The port is published on 127.0.0.1 only, at a free host port the daemon picks (no race with other
  programs), or the server shares the host's network (`network_host`) on the tuner's free port.
- Every container carries the labels `autotuner.study` and `autotuner.trial`. `reap` removes the
  containers of one study that a killed tuner left (by label, and only that study's); `stop` stops a
  container with its timeout and removes it, whatever the trial's outcome, and is safe twice.
- The container's output is streamed into the trial's log file by a daemon thread while it runs; the
  last lines of a failure are read from the daemon, which has them all.
- Readiness polls the health URL and the container's state every 0.1 s with tenacity: an exit while
  starting fails at once with the exit code, the OOM-killed flag and the last log lines.
- Images are never pulled implicitly: `prepare()` checks that the image is on the daemon before any
  trial (the SDK's implicit pull fails with an opaque 500 where no registry is reachable). Pulling is
  opt-in (`docker.pull: true`) and reports progress.
- The spec's argv[0] is the container's entrypoint, whatever the image's own is (vLLM's image has
  `vllm serve`): what a container runs is the spec, as `docker_command` renders it.

The paths, environment and GPUs come from `docker_command` (pure), which also renders each started
container's `docker run` equivalent, `Handle.artifacts["docker-run.txt"]`; the image, image digest and id
are `Handle.tags`, so a trial can be reproduced by hand.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import DeviceRequest
from docker.types import Mount as DockerMount

from autotuner.config import DockerConfig
from autotuner.engines._base import Engine, LaunchContext, LaunchSpec
from autotuner.launchers import container_guard
from autotuner.launchers._base import (
    EngineExited,
    Handle,
    LaunchError,
    NotReady,
    owner_alive,
    tail,
    this_owner,
    wait_healthy,
)
from autotuner.launchers.docker_command import (
    Gpus,
    Mount,
    container_context,
    container_gpus,
    container_path,
    docker_run_line,
    environment,
    mounts,
)

OWNER_LABEL = "autotuner.owner"  # host:pid:start of the tuner that started the container
CACHE_MOUNT = "/autotuner-cache"  # where a container sees the study's engine cache

_FAILURE_TAIL_LINES = 120
_POLL_S = 0.1
_LOG_JOIN_S = 5.0


class DockerSetupError(Exception):
    """The daemon, the image or a mount is not usable. Raised before any trial starts; says what to do."""


def _explain(e: Exception) -> str:
    text = getattr(e, "explanation", None) or str(e)
    return text.decode() if isinstance(text, bytes) else str(text)


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect() -> docker.DockerClient:
    """A client of the daemon at $DOCKER_HOST, or DockerSetupError saying how to start one."""
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except DockerException as e:
        raise DockerSetupError(f"no Docker daemon reachable at {docker_host()} ({_explain(e).strip()}); "
                               "start one with: eval \"$(scripts/start-dockerd.sh)\"") from None
    return client


class DockerLauncher:
    """Starts LaunchSpecs as containers of `settings.image`; the model at `model_path` is mounted read-only.

    `base_dir` resolves relative host paths of `settings.volumes` (the experiment file's folder). The
    daemon is reached on first use (`context` needs none).
    """

    def __init__(self, settings: DockerConfig, *, model_path: Path | None = None, base_dir: Path = Path("."),
                 owner: str | None = None):
        self.settings = settings
        self.owner = owner or this_owner()
        self.model_path = model_path
        self._client: docker.DockerClient | None = None
        self._stream_client: docker.DockerClient | None = None
        self._image: Any = None
        self.mounts: list[Mount] = mounts(settings, model_path, base_dir)  # the model's first

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = connect()
        return self._client

    # --- before any trial -------------------------------------------------------------------------------

    def prepare(self, progress: Callable[[str], None] | None = None) -> None:
        """Check the mounts and the image; pull the image when it is missing and pulling is allowed."""
        for source, target, _ in self.mounts:
            if not source.exists():
                raise DockerSetupError(f"field 'docker.volumes': {source} (for {target}) does not exist")
        name = self.settings.image
        try:
            self._image = self.client.images.get(name)
            return
        except ImageNotFound:
            pass
        except APIError as e:
            raise DockerSetupError(f"field 'docker.image': cannot inspect '{name}': {_explain(e)}") from None
        if not self.settings.pull:
            raise DockerSetupError(
                f"field 'docker.image': '{name}' is not on the Docker daemon at {docker_host()}; build it "
                "(scripts/build-engine-image.sh builds autotuner/llama-server locally) or set "
                "'pull: true' in the experiment's docker section to pull it")
        self._image = self._pull(name, progress or (lambda line: None))

    def _pull(self, name: str, progress: Callable[[str], None]) -> Any:
        repo, tag = docker.utils.parse_repository_tag(name)
        layers: dict[str, tuple[int, int]] = {}
        last = 0.0
        progress(f"pulling {name}")
        try:
            for event in self.client.api.pull(repo, tag or "latest", stream=True, decode=True):
                if "error" in event:
                    raise DockerSetupError(f"field 'docker.image': pulling '{name}' failed: {event['error']}")
                status, layer = event.get("status", ""), event.get("id")
                detail = event.get("progressDetail") or {}
                if layer and detail.get("total"):
                    layers[layer] = (detail.get("current", 0), detail["total"])
                if status in ("Downloading", "Extracting"):
                    if time.monotonic() - last >= 1.0:
                        last = time.monotonic()
                        done, total = (sum(v[i] for v in layers.values()) / 1e6 for i in (0, 1))
                        progress(f"pulling {name}: {status.lower()} {done:.0f}/{total:.0f} MB, {len(layers)} layer(s)")
                elif layer:
                    progress(f"pulling {name}: {layer}: {status}")
                elif status:
                    progress(f"pulling {name}: {status}")
            return self.client.images.get(name)
        except (APIError, ImageNotFound) as e:
            raise DockerSetupError(f"field 'docker.image': pulling '{name}' failed: {_explain(e)}") from None

    def engine_version(self, engine: Engine, labels: dict[str, str]) -> str:
        """The engine's version as the image reports it (one short-lived container), or 'unknown'."""
        ctx = self.context(LaunchContext(model_path=self.model_path or Path("/dev/null"),
                                         served_model_name="version", port=0))
        argv = engine.version_argv(engine.build({}, ctx).argv[0])
        try:
            out = self.client.containers.run(self.settings.image, argv[1:], entrypoint=argv[:1], remove=True,
                                             stdout=True, stderr=True, init=True, network_mode="none",
                                             labels={**labels, "autotuner.role": "version"})
        except DockerException:
            return "unknown"
        return engine.parse_version(out.decode("utf-8", "replace"))

    def run_once(self, argv: list[str], gpus: Gpus, labels: dict[str, str],
                 timeout_s: float = 180.0) -> tuple[int, str]:
        """Run `argv` in a short-lived container of the image with `gpus` (no network, no model): the exit
        code and its output. A container the daemon cannot create (the NVIDIA runtime's own errors) is
        exit code 125 with the daemon's message; a run past `timeout_s` is 124."""
        if self._image is None:
            self.prepare()
        try:
            container = self.client.containers.run(
                self.settings.image, argv[1:], entrypoint=argv[:1], detach=True, init=True, network_mode="none",
                device_requests=_device_requests(gpus), ipc_mode="host" if self.settings.ipc_host else None,
                shm_size=self.settings.shm_size, labels={**labels, OWNER_LABEL: self.owner})
        except DockerException as e:
            return 125, _explain(e)
        guard = container_guard.guard(container.id)
        try:
            try:
                code = int(container.wait(timeout=timeout_s).get("StatusCode", 1))
            except Exception:  # requests' ReadTimeout: the probe hangs
                return 124, f"timed out after {timeout_s:.0f} s"
            return code, container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        finally:
            self._remove(container, guard)

    # --- the launcher contract ------------------------------------------------------------------------

    def context(self, host: LaunchContext) -> LaunchContext:
        """The launch as the server in the container sees it: mounted model, container port, image binary."""
        return container_context(self.settings, self.mounts, host)

    def container_path(self, path: Path) -> Path:
        return container_path(self.mounts, path)

    def start(self, spec: LaunchSpec, log_path: Path, labels: dict[str, str]) -> Handle:
        if self._image is None:
            self.prepare()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        api = self.client.api
        env = {**spec.cache_environment(CACHE_MOUNT), **self._environment(spec)}
        mounted = list(self.mounts)
        if spec.cache_dir:  # the study's engine cache, read and written by every trial's container
            Path(spec.cache_dir).mkdir(parents=True, exist_ok=True)
            mounted.append((Path(spec.cache_dir), PurePosixPath(CACHE_MOUNT), False))
        port = f"{spec.port}/tcp"
        host_config = api.create_host_config(
            port_bindings=None if self.settings.network_host else {port: ("127.0.0.1",)},
            network_mode="host" if self.settings.network_host else None,
            ipc_mode="host" if self.settings.ipc_host else None,
            shm_size=self.settings.shm_size,
            mem_limit=self.settings.memory,
            memswap_limit=self.settings.memory,
            mounts=[
                DockerMount(str(target), str(source), type="bind", read_only=ro) for source, target, ro in mounted
            ],
            device_requests=_device_requests(container_gpus(spec, self.settings)),
            cpuset_cpus=",".join(map(str, spec.cpu_ids)) or None,
            init=True,
        )
        try:
            created = api.create_container(
                self.settings.image,
                entrypoint=spec.argv[:1],
                command=spec.argv[1:],
                environment=env,
                working_dir=spec.workdir,
                labels={**labels, OWNER_LABEL: self.owner},
                ports=None if self.settings.network_host else [port],
                host_config=host_config,
                stop_timeout=self.settings.stop_timeout_s,
                detach=True,
            )
        except APIError as e:
            raise LaunchError(f"docker could not create the container: {_explain(e)}") from None
        guard = container_guard.guard(created["Id"])  # removes it should this process die without stopping it
        container = self.client.containers.get(created["Id"])
        try:
            handle = self._started(container, spec, env, log_path, labels)
        except APIError as e:
            self._remove(container, guard)
            raise LaunchError(f"docker could not start the container: {_explain(e)}") from None
        except BaseException:  # Ctrl-C included: a container nobody holds a handle to must not stay
            self._remove(container, guard)
            raise
        handle.info["guard"] = guard
        return handle

    def _started(self, container: Any, spec: LaunchSpec, env: dict[str, str], log_path: Path,
                 labels: dict[str, str]) -> Handle:
        container.start()
        container.reload()
        port = f"{spec.port}/tcp"
        host_port = self._host_port(container, port) if not self.settings.network_host else spec.port
        thread = threading.Thread(target=_stream_logs, args=(self._streamer().api, container.id, log_path),
                                  name=f"logs-{container.short_id}", daemon=True)
        thread.start()
        image_id = container.attrs.get("Image") or self._image.id
        # A pulled image's registry digest (of the configured repository when it has several), else its id.
        repo = docker.utils.parse_repository_tag(self.settings.image)[0]
        digests = sorted(self._image.attrs.get("RepoDigests") or [], key=lambda d: d.split("@")[0] != repo)
        handle = Handle(spec=spec, base_url=f"http://127.0.0.1:{host_port}", log_path=log_path,
                        pid=container.attrs.get("State", {}).get("Pid") or None, container_id=container.id,
                        info={"container": container, "log_thread": thread, "host_port": host_port})
        handle.tags = {"autotuner.docker.image": self.settings.image,
                       "autotuner.docker.image_digest": digests[0] if digests else image_id,
                       "autotuner.docker.image_id": image_id,
                       "autotuner.docker.container_id": container.id}
        label_text = " ".join(f"{k}={v}" for k, v in sorted(labels.items()))
        handle.artifacts = {"docker-run.txt": (
            f"# Container {container.short_id} ({label_text}), image {self.settings.image} = {image_id}.\n"
            "# The same server by hand (without the autotuner labels, so that no study's reaper removes it):\n"
            + docker_run_line(self.settings, self.mounts, spec, gpus=container_gpus(spec, self.settings),
                              host_port=host_port) + "\n")}
        return handle

    def is_running(self, handle: Handle) -> bool:
        state = _state(handle.info["container"])
        return state is not None and state.get("Status") == "running"

    def wait_ready(self, handle: Handle, timeout_s: float) -> None:
        container = handle.info["container"]

        def check() -> None:
            state = _state(container)
            if state is None or state.get("Status") in ("exited", "dead"):
                raise self._exited(handle, state)
            if handle.info["host_port"] is None:  # running, yet no published port: never reachable
                raise NotReady

        wait_healthy(handle.base_url + handle.spec.health_path, timeout_s, check=check, poll_s=_POLL_S,
                     log_tail=lambda: self.logs(handle, _FAILURE_TAIL_LINES))

    def logs(self, handle: Handle, lines: int = 40) -> str:
        """The last lines: from the daemon while the container exists, else from the trial's log file."""
        if not handle.info.get("removed"):
            try:
                data = handle.info["container"].logs(tail=lines)
                return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
            except (NotFound, APIError):
                pass
        return tail(handle.log_path, lines)

    def stop(self, handle: Handle) -> None:
        """Stop (SIGTERM to the container's init, SIGKILL after the stop timeout), then remove. Safe twice."""
        if not handle.info.get("removed"):
            container_guard.dismiss(handle.info.get("guard"))  # this stop is graceful: the guard's would not be
            container = handle.info["container"]
            try:
                container.stop(timeout=self.settings.stop_timeout_s)
            except NotFound:
                pass
            except APIError:
                pass  # already stopping or removed by someone else: remove below settles it
            self._remove(container)
            handle.info["removed"] = True
        thread = handle.info.get("log_thread")
        if thread is not None:
            thread.join(_LOG_JOIN_S)  # the stream ends with the container: the log file is complete

    def reap(self, labels: dict[str, str]) -> list[str]:
        """Remove every container (running or not) that carries all of `labels`; return their short ids."""
        if not labels:
            raise ValueError("reap needs labels: without them it would match every container")
        found = self.client.containers.list(all=True, ignore_removed=True,
                                            filters={"label": [f"{k}={v}" for k, v in labels.items()]})
        # A container whose tuner still runs belongs to another worker of the study: not a leftover.
        leftovers = [c for c in found if not owner_alive(c.labels.get(OWNER_LABEL))]
        for container in leftovers:
            self._remove(container)
        return [c.short_id for c in leftovers]

    # --- helpers --------------------------------------------------------------------------------------

    def _streamer(self) -> docker.DockerClient:
        # Its own connection pool: a followed log stream holds a connection for the container's lifetime.
        if self._stream_client is None:
            self._stream_client = docker.from_env(version=self.client.api.api_version)
        return self._stream_client

    def _environment(self, spec: LaunchSpec) -> dict[str, str]:
        """`environment()` with the values of the variables it passes by name (secrets, pass_env)."""
        values = {**spec.secret_env, **{k: os.environ[k] for k in self.settings.pass_env if k in os.environ}}
        return {k: v if v is not None else values[k]
                for k, v in environment(spec, self.settings).items() if v is not None or k in values}

    def _host_port(self, container: Any, port: str) -> int | None:
        for binding in (container.attrs.get("NetworkSettings", {}).get("Ports") or {}).get(port) or []:
            if binding.get("HostIp") in ("127.0.0.1", "") and binding.get("HostPort"):
                return int(binding["HostPort"])
        return None  # exited before the port was bound: wait_ready reports the exit

    def _exited(self, handle: Handle, state: dict[str, Any] | None) -> EngineExited:
        if state is None:
            return EngineExited("container disappeared while starting (removed from outside?)", None,
                                tail(handle.log_path, _FAILURE_TAIL_LINES))
        code, oom = state.get("ExitCode"), bool(state.get("OOMKilled"))
        message = f"container exited with code {code} while starting"
        if oom:
            message += " (killed by the kernel's OOM killer)"
        if state.get("Error"):
            message += f": {state['Error']}"
        return EngineExited(message, code, self.logs(handle, _FAILURE_TAIL_LINES), oom_killed=oom)

    def _remove(self, container: Any, guard: Any = None) -> None:
        container_guard.dismiss(guard)
        try:
            container.remove(force=True)
        except NotFound:
            pass
        except APIError as e:
            if e.status_code != 409:  # 409: a removal is already in progress
                raise


def _device_requests(gpus: Gpus) -> list[DeviceRequest] | None:
    if gpus is None or gpus == []:
        return None
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if isinstance(gpus, int):
        return [DeviceRequest(count=gpus, capabilities=[["gpu"]])]
    return [DeviceRequest(device_ids=[str(g) for g in gpus], capabilities=[["gpu"]])]


def _state(container: Any) -> dict[str, Any] | None:
    """The container's State (Status, ExitCode, OOMKilled, Error), fresh from the daemon; None once removed."""
    try:
        container.reload()
    except NotFound:
        return None
    return container.attrs.get("State") or {}


def _stream_logs(api: docker.APIClient, container_id: str, path: Path) -> None:
    """Follow the container's stdout and stderr into `path` until the container is gone."""
    try:
        with path.open("ab") as f:
            for chunk in api.logs(container_id, stream=True, follow=True, stdout=True, stderr=True):
                f.write(chunk)
                f.flush()
    except Exception:  # the daemon went away (requests' errors), the file became unwritable: keep what came
        pass
