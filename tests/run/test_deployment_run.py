"""`servelab run --job` on a job with a deployment (no launch): two mock OpenAI servers as workers behind a
round-robin proxy as the router (tests/run/rr_proxy.py). The plan view shows every process; the run starts
them in order, benchmarks the router's port, records the processes (secrets redacted) and tears everything
down; a worker that dies (before the gate or mid-benchmark) fails the run in one line naming it; SIGINT
and SIGTERM mid-benchmark leave nothing running."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from portpick import free_port

from servelab.errors import ServelabError
from servelab.recipes.engines import Deployment, NodeProcess, Role
from servelab.recipes.filters import Filters
from servelab.recipes.job import Job
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand
from servelab.results.store import Store
from servelab.run.deployment import on_this_machine, start_order
from servelab.run.execute import server_log_name
from servelab.runner.server import group_members

pytestmark = pytest.mark.timeout(300)  # hang guard only
SRC = Path(__file__).resolve().parents[2] / "src"
DATA_DIR = Path(__file__).resolve().parents[2] / "src" / "servelab" / "recipes" / "data"
PROXY = Path(__file__).with_name("rr_proxy.py")
SECRET = "hf_abcdefghijklmnopqrstuvwxyz012345"


def free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        if (port := free_port(19400, 19700)) not in ports:
            ports.append(port)
    return ports


def deployment(
    tmp_path: Path,
    die: bool = False,
    more: tuple[str, ...] = (),
    delay_ms: int = 1,
    host: str = "127.0.0.1",
) -> Deployment:
    """Two mock workers (each logging its completion requests) and the proxy in front; listed router first,
    so the start order is the runner's, not the list's. `host`: the workers' address in the router's argv,
    env and file (a srt-slurm deployment names it `{{node:0}}`)."""
    w0, w1, front = free_ports(3)

    def worker(port: int, n: int) -> NodeProcess:
        argv = [
            sys.executable,
            "-m",
            "servelab.bench.mock_server",
            "--port",
            str(port),
            "--model",
            "mock-model",
        ]
        argv += ["--token-delay-ms", str(delay_ms), "--log-requests", str(tmp_path / f"requests-{n}.jsonl")]
        argv += list(more) if n == 1 else []
        if die and n == 1:
            argv = [sys.executable, "-c", "import sys; print('worker: out of memory'); sys.exit(7)"]
        return NodeProcess(role=Role.WORKER, argv=argv, port=port, env={"HF_TOKEN": SECRET})

    router = NodeProcess(
        role=Role.ROUTER,
        argv=[sys.executable, str(PROXY), str(front), f"http://{host}:{w0}", f"http://{host}:{w1}"],
        env={"WORKERS_AT": f"{host}:{w0},{host}:{w1}"},
        port=front,
    )
    files = {
        "conf/router.json": f'{{"policy": "round_robin", "host": "{host}"}}'
    }  # as a launch's files: into the run folder
    return Deployment(nodes=1, processes=[router, worker(w0, 0), worker(w1, 1)], endpoint=0, files=files)


def job_file(tmp_path: Path, dep: Deployment, prompts: int = 8) -> Path:
    """A sweep job of a shipped recipe, its launch replaced by the deployment and its point made small."""
    [job] = [
        j
        for j in expand(open_store(DATA_DIR), ["dsv4-fp4-b200-vllm"], Filters(seq_lens=["8k1k"]))
        if not j.evals
    ][:1]
    bench = job.benches[0].model_copy(
        update={"random_input_len": 16, "random_output_len": 4, "num_prompts": prompts, "num_warmups": 0}
    )
    row = job.row | {"model": "mock-model"}
    job = job.model_copy(update={"launch": None, "deployment": dep, "benches": [bench], "row": row})
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job.to_json()))
    Job.from_json(json.loads(path.read_text()), str(path))  # the file reads back
    return path


def servelab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )


def test_the_start_order_is_side_servers_router_whatever_the_list():
    procs = [
        NodeProcess(role=Role.ROUTER, argv=["router"], port=1),
        NodeProcess(role=Role.DECODE, argv=["d"], port=2),
        NodeProcess(role=Role.PREFILL, argv=["p0"], port=3),
        NodeProcess(role=Role.SIDE, argv=["etcd"], port=None, health_path=None),
        NodeProcess(role=Role.PREFILL, argv=["p1"], port=4),
    ]
    ordered, endpoint = start_order(Deployment(nodes=1, processes=procs, endpoint=0))
    assert [(p.name, p.argv[0]) for p in ordered] == [
        ("side 0", "etcd"),
        ("prefill 0", "p0"),
        ("prefill 1", "p1"),
        ("decode 0", "d"),
        ("router 0", "router"),
    ]
    assert ordered[endpoint].argv == ["router"]


@pytest.mark.slow  # 2.4 s of CPU a case: a whole servelab run with its server processes
def test_the_plan_view_shows_every_process(tmp_path):
    path = job_file(tmp_path, deployment(tmp_path))
    r = servelab("run", "--job", str(path), "--dry-run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    server = json.loads(r.stdout)["server"]
    procs = server["deployment"]
    assert [(p["role"], p["index"]) for p in procs] == [("worker", 0), ("worker", 1), ("router", 0)]
    assert procs[0]["env"] == {"HF_TOKEN": "<redacted>"} and procs[2]["log"] == "deployment/router-0.log"
    assert server["argv"] == procs[2]["argv"] and server["port"] == procs[2]["port"]  # the endpoint
    text = servelab("run", "--job", str(path), "--dry-run", cwd=tmp_path).stdout
    assert "endpoint: " in text and "worker 1 (node 0, port" in text and SECRET not in text


@pytest.mark.slow  # 2.7 s of CPU a case: a whole servelab run with its server processes
def test_a_deployment_is_benchmarked_through_its_router_and_torn_down(tmp_path):
    path = job_file(tmp_path, deployment(tmp_path))
    r = servelab("run", "--job", str(path), "--store", "r.db", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout)
    run_dir = tmp_path / result["run_dir"]  # the store was given relative to the cwd
    # both workers answered: the router spread the benchmark's 8 requests (and bench's first probe) over them
    counts = [len((tmp_path / f"requests-{n}.jsonl").read_text().splitlines()) for n in (0, 1)]
    assert min(counts) >= 4 and sum(counts) in (8, 9), counts
    [bench] = [s for s in result["stages"] if s["stage"] == "bench"]
    data = json.loads((run_dir / bench["artifact"]).read_text())
    assert data["completed"] == 8 and data["failed"] == 0 and data["output_throughput"] > 0
    assert sorted(p.name for p in (run_dir / "deployment").iterdir()) == [
        "router-0.log",
        "worker-0.log",
        "worker-1.log",
    ]
    assert json.loads((run_dir / "conf" / "router.json").read_text()) == {
        "policy": "round_robin",
        "host": "127.0.0.1",
    }
    record = json.loads((run_dir / "deployment.json").read_text())["processes"]
    assert [p["role"] for p in record] == ["worker", "worker", "router"]
    assert SECRET not in (run_dir / "deployment.json").read_text()
    with Store.open(str(tmp_path / "r.db")) as store:
        [run] = store.list_runs()
        # the store's one server argv is the first worker's (what results read an engine from)
        assert run.provenance.server_argv[2] == "servelab.bench.mock_server"
        assert run.provenance.env == {"HF_TOKEN": "<redacted>"}
        server = next(s for s in store.stages(run.id) if s.stage == "server")
        assert (server.status, server.artifact) == ("pass", "deployment")
    assert "server: stopping (process groups " in r.stderr
    pgids = [int(g) for g in r.stderr.split("process groups ")[1].split(")")[0].split(", ")]
    assert len(pgids) == 3 and not any(group_members(g) for g in pgids)


@pytest.mark.slow  # 3.6 s of CPU a case: a whole servelab run with its server processes
def test_node_0_is_this_machine_when_every_process_runs_on_it(tmp_path):
    """A deployment rendered for a cluster names node 0's address `{{node:0}}`; run here, it is 127.0.0.1
    in argv, env and files, and the router reaches its workers there."""
    dep = deployment(tmp_path, host="{{node:0}}")
    assert "{{node:0}}" in dep.processes[0].argv[-1] and "{{node:0}}" in dep.files["conf/router.json"]
    path = job_file(tmp_path, dep)
    plan = json.loads(servelab("run", "--job", str(path), "--dry-run", "--json", cwd=tmp_path).stdout)
    router = plan["server"]["deployment"][2]
    assert router["argv"][-2:] == [
        f"http://127.0.0.1:{p}" for p in (dep.processes[1].port, dep.processes[2].port)
    ]
    assert router["env"] == {
        "WORKERS_AT": f"127.0.0.1:{dep.processes[1].port},127.0.0.1:{dep.processes[2].port}"
    }
    r = servelab("run", "--job", str(path), "--store", "r.db", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = tmp_path / json.loads(r.stdout)["run_dir"]
    assert json.loads((run_dir / "conf" / "router.json").read_text())["host"] == "127.0.0.1"
    counts = [len((tmp_path / f"requests-{n}.jsonl").read_text().splitlines()) for n in (0, 1)]
    assert min(counts) >= 4, counts
    assert "{{node" not in (run_dir / "deployment.json").read_text()


def test_a_placeholder_for_another_node_is_refused_in_one_line():
    dep = Deployment(
        nodes=1, processes=[NodeProcess(role=Role.ROUTER, argv=["r", "{{node:1}}"], port=1)], endpoint=0
    )
    with pytest.raises(ServelabError, match=r"^\{\{node:1\}\}: the deployment has 1 node\(s\) here$"):
        on_this_machine(dep)


@pytest.mark.slow  # 2.1 s of CPU a case: a whole servelab run with its server processes
def test_a_worker_dying_before_the_gate_fails_the_run_naming_it(tmp_path):
    path = job_file(tmp_path, deployment(tmp_path, die=True))
    r = servelab("run", "--job", str(path), "--store", "r.db", "--json", cwd=tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    [error] = json.loads(r.stdout)["errors"]
    assert error.startswith(f"worker 1 ({sys.executable}) exited with 7 before the deployment was healthy")
    assert "worker: out of memory" in error
    assert not (tmp_path / "requests-0.jsonl").exists() or not (tmp_path / "requests-0.jsonl").read_text()


@pytest.mark.slow  # 2.5 s of CPU a case: a whole servelab run with its server processes
def test_a_worker_dying_mid_benchmark_ends_the_run_as_error_naming_it(tmp_path):
    path = job_file(tmp_path, deployment(tmp_path, more=("--die-after-requests", "2")))
    r = servelab("run", "--job", str(path), "--store", "r.db", "--json", cwd=tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    [error] = json.loads(r.stdout)["errors"]
    assert error.startswith(f"worker 1 ({sys.executable}) exited with ") and " during bench " in error
    pgids = [int(g) for g in r.stderr.split("process groups ")[1].split(")")[0].split(", ")]
    assert not any(group_members(g) for g in pgids)


# SIGINT's whole run (2-9 s) in the slow tier: SIGTERM's case keeps the same teardown path quick
@pytest.mark.slow  # 2.6 s of CPU a case: a whole servelab run with its server processes
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGINT, marks=pytest.mark.slow), signal.SIGTERM])
def test_a_signal_mid_benchmark_tears_every_process_down(tmp_path, sig):
    path = job_file(tmp_path, deployment(tmp_path, delay_ms=50), prompts=400)
    proc = subprocess.Popen(
        [sys.executable, "-m", "servelab.cli.main", "run", "--job", str(path), "--store", "r.db", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    logged = [tmp_path / f"requests-{n}.jsonl" for n in (0, 1)]
    while not all(p.exists() and p.read_text() for p in logged):  # both workers are answering
        assert proc.poll() is None, "servelab run ended before the benchmark ran"
        time.sleep(0.1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    assert json.loads(out)["errors"] == [f"interrupted by {sig.name}"]
    pgids = [int(g) for g in err.split("process groups ")[1].split(")")[0].split(", ")]
    assert len(pgids) == 3 and not any(group_members(g) for g in pgids)


@pytest.mark.slow  # 1.5 s of CPU a case: a whole servelab run with its server processes
def test_a_process_on_another_node_is_refused_before_anything_starts(tmp_path):
    dep = deployment(tmp_path)
    far = dep.processes[1].model_copy(update={"node": 1})
    dep = Deployment(nodes=2, processes=[dep.processes[0], far, dep.processes[2]], endpoint=0)
    r = servelab("run", "--job", str(job_file(tmp_path, dep)), "--store", "r.db", cwd=tmp_path)
    assert r.returncode == 2 and "worker 0 runs on node 1" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "r.db").exists() or not Store.open(str(tmp_path / "r.db")).list_runs()


def test_a_resumed_deployment_logs_to_a_folder_of_its_own(tmp_path):
    assert server_log_name(tmp_path, deployment=True) == "deployment"
    (tmp_path / "deployment").mkdir()
    assert server_log_name(tmp_path, deployment=True) == "deployment.2"
    assert server_log_name(tmp_path) == "server.log"
