"""The server of a run: started on this host, started in a container (`--docker`), or one already running
(`--base-url`). Whichever it is, leaving the context tears it down (nothing to tear down when attached).

The container runs as perf-eval's lib/server.sh starts it: all GPUs (or, for AMD's GPU profiles, the kfd and
dri devices), host IPC and network, a large /dev/shm, the Hugging Face cache mounted, the env passed with -e
(secrets by name only, their values taken from the caller's environment), the image pinned by digest where the
plan has one, and a name of its own, so that teardown can `docker rm -f` it whatever became of the client.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from servelab.bench.payload import api_key_from_env, auth_headers, split_credentials
from servelab.bench.runner import Terminated, fetch_model_id
from servelab.errors import ServelabError
from servelab.recipes.workload import ROCM_GPUS
from servelab.redact import redact_text
from servelab.run.deployment import with_environment
from servelab.run.plan import ServerPlan
from servelab.run.stage import Target
from servelab.runner.deployment import LocalDeployment
from servelab.runner.server import ServerProcess, ServerStartError

CONTAINER_CACHE = "/root/.cache/huggingface"
SHM_SIZE = "16g"
DOCKER_STOP_TIMEOUT_S = 60
ENGINE_READY_TIMEOUT_S = 3600  # what perf-eval's lib/server.sh gives every container


def hf_cache_dir() -> Path:
    """The host's Hugging Face cache: $HF_HOME, else ~/.cache/huggingface."""
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")


def docker_argv(
    plan: ServerPlan, container: str, hf_cache: Path | None, run_dir: Path, gpu: str | None = None
) -> list[str]:
    """`docker run` for the plan's server; the plan's argv[0] becomes the entrypoint, and the run folder
    (where the plan's files are written) its working directory. `hf_cache` is the host's Hugging Face cache
    (--hf-cache; None: the plan's HF_HOME where it sets one, else the caller's, hf_cache_dir())."""
    if not plan.image:
        raise ServelabError("--docker needs an image (the workload's vllm.image or --image)", field="image")
    argv = ["docker", "run", "--rm", "--name", container]
    if gpu in ROCM_GPUS:
        argv += ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video"]
    else:
        argv += ["--gpus", "all"]
    argv += ["--ipc", "host", "--network", "host", "--shm-size", SHM_SIZE]
    # lib/server.sh's own, set before the env so that the workload's may override it
    argv += ["-e", f"VLLM_ENGINE_READY_TIMEOUT_S={ENGINE_READY_TIMEOUT_S}"]
    if plan.env.get("HF_HOME"):
        # HF_HOME from the plan (a perf-eval GPU profile's hf_home): mounted at the same path, as
        # lib/server.sh mounts it, from the host cache given (else that path on the host too)
        cache = plan.env["HF_HOME"]
        argv += ["-v", f"{hf_cache or cache}:{cache}"]
    else:
        argv += ["-v", f"{hf_cache or hf_cache_dir()}:{CONTAINER_CACHE}", "-e", f"HF_HOME={CONTAINER_CACHE}"]
    for k, v in plan.env.items():
        argv += ["-e", f"{k}={v}"]
    for name in plan.secret_env:
        argv += ["-e", name]  # docker takes the value from this process's environment
    if plan.files:
        argv += ["-v", f"{run_dir}:/run-files", "-w", "/run-files"]
    return argv + ["--entrypoint", plan.argv[0], plan.image, *plan.argv[1:]]


def container_name(run_id: str) -> str:
    return f"servelab-run-{run_id}"


class DockerServer(ServerProcess):
    """A ServerProcess whose process is `docker run`; stopping it also removes the container, which the
    client's death alone does not."""

    def __init__(self, container: str, *args, **kwargs) -> None:
        # servelab killed: the watchdog stops the client's group, then removes the container by name
        kwargs["orphan_cleanup"] = ["docker", "rm", "-f", container]
        super().__init__(*args, **kwargs)
        self.container = container

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            try:
                subprocess.run(
                    ["docker", "rm", "-f", self.container],
                    capture_output=True,
                    timeout=DOCKER_STOP_TIMEOUT_S,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError):
                pass  # no docker binary or it hung: nothing more this process can do


@contextmanager
def serve(
    plan: ServerPlan,
    run_dir: Path,
    *,
    base_url: str | None = None,
    model: str | None = None,
    docker: bool = False,
    gpu: str | None = None,
    hf_cache: Path | None = None,
    timeout_s: float = 3600.0,
    tokenizer: str | None = None,
    on_start=None,
    stop_timeout_s: float = 30.0,
    log_name: str = "server.log",
    say: Callable[[str], None] | None = None,
) -> Iterator[tuple[Target, ServerProcess | LocalDeployment | None]]:
    """The target to test and the process serving it (None when attached). Starting raises
    runner.server.ServerStartError with the log's last lines; the server is gone on every way out, whatever
    signals arrive while it is being stopped. The API key every stage sends is the caller's OPENAI_API_KEY,
    as `servelab bench` sends it. The server's output goes to `log_name` in the run folder; a deployment's
    (plan.processes) to one log per process in the folder `log_name`, the benchmark sent to its endpoint."""
    api_key = api_key_from_env()
    if base_url:
        url, basic_auth = split_credentials(base_url.rstrip("/"))
        userinfo = urlsplit(base_url).netloc.rpartition("@")[0] or None
        try:
            name = model or fetch_model_id(url, auth_headers(api_key, basic_auth, {}))
        except ServelabError as e:
            reason = redact_text(str(e))
            raise ServerStartError(
                f"{url}: not answering as an OpenAI-compatible server ({reason})"
            ) from None
        yield Target(url, name, api_key=api_key, tokenizer=tokenizer, userinfo=userinfo), None
        return
    for rel, content in plan.files.items():
        path = run_dir / rel
        if not path.resolve().is_relative_to(run_dir.resolve()):  # the plan's files were checked; again here
            raise ServelabError(f"launch.files: {rel!r} would be written outside the run folder", field="job")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    env = dict(os.environ) | plan.env
    log = run_dir / log_name
    server: ServerProcess | LocalDeployment
    if plan.processes:  # execute() refused --docker and other nodes for it
        server = LocalDeployment(
            with_environment(plan.processes),
            log,
            cwd=run_dir,
            start_timeout_s=timeout_s,
            stop_timeout_s=stop_timeout_s,
            say=(lambda text: say(f"deployment: {text}")) if say else None,
        )
    elif docker:
        container = container_name(run_dir.name)
        argv = docker_argv(plan, container, hf_cache, run_dir, gpu)
        server = DockerServer(
            container,
            argv,
            plan.url,
            log,
            env=env,
            health_path=plan.health_path,
            start_timeout_s=timeout_s,
            stop_timeout_s=stop_timeout_s,
        )
    else:
        server = ServerProcess(
            plan.argv,
            plan.url,
            log,
            env=env,
            health_path=plan.health_path,
            start_timeout_s=timeout_s,
            stop_timeout_s=stop_timeout_s,
            cwd=run_dir,
        )
    if on_start:
        on_start(server)
    server.start()  # on failure it has stopped the server before it raises
    try:
        yield Target(plan.url, model or plan.model, api_key=api_key, tokenizer=tokenizer), server
    except BaseException:  # interrupted: a signal arriving during the teardown adds nothing to say
        _stop(server, say, reraise=False)
        raise
    _stop(server, say, reraise=True)


def _stop(server: ServerProcess | LocalDeployment, say: Callable[[str], None] | None, reraise: bool) -> None:
    with signals_deferred(reraise):  # a second Ctrl-C must not cut the teardown short
        if say:
            groups = server.pids if isinstance(server, LocalDeployment) else [server.pid]
            plural = "s" if len(groups) > 1 else ""
            say(f"server: stopping (process group{plural} {', '.join(map(str, groups))})")
        server.stop()


DEFERRED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def signals_deferred(reraise: bool = True) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP noted, not raised, while the body runs; the first noted is raised after it
    (as Ctrl-C or Terminated) when `reraise`. A handler, not a signal mask: a mask holds only in the thread
    that sets it, and a signal delivered to another thread would still interrupt this one."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can be set only from the main thread; ServerProcess.stop still ends with SIGKILL
        return
    noted: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: noted.append(signum)) for s in DEFERRED}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if noted and reraise:
        if noted[0] == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(noted[0])
