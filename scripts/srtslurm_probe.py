"""Run inside a venv with srtctl's dependencies and one srt-slurm revision's src/ on PYTHONPATH (never
servelab's venv): asks srtctl's own orchestrator what it starts for each recipe on a fake allocation of nodes.

    python srtslurm_probe.py REQUESTS.json OUT.json

REQUESTS: [{"id", "recipe" (text), "srtslurm_yaml" (text or null), "config"}]. The working directory is the
srt-slurm checkout of that revision. A config `recipe.yaml:selector` (an override file: `base` plus
`override_*` / `zip_override_*` sections) is resolved to its one variant by srtctl's own
resolve_override_yaml (the text its submit_override writes for the job, key order kept) before it is
loaded, as `srtctl apply -f recipe.yaml:selector` does. For each recipe: srtctl's load_config, its
RuntimeContext on nodes node00..nodeNN (IP 10.0.0.N), then the orchestrator's start_head_infrastructure,
start_all_workers and start_frontend with `start_srun_process` replaced by a recorder: each call's command,
node list, environment, node and task counts and MPI options is the capture.
Part of scripts/srtslurm_capture.py (capture); it imports nothing of servelab.
"""

from __future__ import annotations

import importlib
import json
import logging
import pkgutil
import sys
import tempfile
import traceback
from pathlib import Path

import srtctl  # this script runs in srtctl's venv, with one revision's src/ on PYTHONPATH
import yaml
from srtctl.cli.do_sweep import SweepOrchestrator
from srtctl.core.config import load_config
from srtctl.core.runtime import RuntimeContext

NODES = [f"node{i:02d}" for i in range(64)]


def ip(node: str, *args, **kwargs) -> str:
    return f"10.0.0.{NODES.index(node)}" if node in NODES else "10.0.0.254"


class FakePopen:
    pid = 1
    returncode = None

    def poll(self):
        return None

    def wait(self, timeout=None):
        return 0


def patch_everything(calls: list[dict], count: list[int]) -> None:
    def record(*args, **kwargs):
        command = kwargs.get("command", args[0] if args else None)
        nodelist = kwargs.get("nodelist") or []
        calls.append(
            {
                "command": [str(c) for c in command] if isinstance(command, list) else str(command),
                "nodelist": list(nodelist),
                "env": {k: str(v) for k, v in (kwargs.get("env_to_set") or {}).items()},
                "ntasks": kwargs.get("ntasks"),
                "nodes": kwargs.get("nodes"),
                # an MPI launch's options (TensorRT-LLM's endpoints): only where srtctl passes them
                **{k: kwargs[k] for k in ("mpi", "oversubscribe", "cpu_bind") if kwargs.get(k)},
            }
        )
        return FakePopen()

    for name, mod in list(sys.modules.items()):
        if not name.startswith("srtctl") or mod is None:
            continue
        if hasattr(mod, "start_srun_process"):
            mod.start_srun_process = record
        if hasattr(mod, "get_hostname_ip"):
            mod.get_hostname_ip = ip
        if hasattr(mod, "get_slurm_nodelist"):
            mod.get_slurm_nodelist = lambda: NODES[: count[0]]
        if hasattr(mod, "wait_for_port"):
            mod.wait_for_port = lambda *a, **k: True
        if hasattr(mod, "get_slurm_job_id"):
            mod.get_slurm_job_id = lambda: "1"


def import_all() -> None:
    for m in pkgutil.walk_packages(srtctl.__path__, "srtctl."):
        if any(s in m.name for s in ("mcp", "analysis", "interactive", "monitor")):
            continue
        try:
            importlib.import_module(m.name)
        except Exception:  # a module a probe does not need (optional dependency)
            pass


def probe(req: dict, tmp: Path) -> dict:
    # the cluster file the launcher wrote, its model and container paths made real under tmp (srtctl checks
    # they exist); every string of the capture gets the paths back
    cluster = yaml.safe_load(req.get("srtslurm_yaml") or "") or {}
    real = tmp / "real"
    for section in ("model_paths", "containers"):
        for alias, path in list((cluster.get(section) or {}).items()):
            local = real / str(path).lstrip("/")
            if section == "model_paths":
                local.mkdir(parents=True, exist_ok=True)
            else:
                local.parent.mkdir(parents=True, exist_ok=True)
                local.touch()
            cluster[section][alias] = str(local)
    Path("srtslurm.yaml").write_text(yaml.safe_dump(cluster))
    recipe = tmp / "recipe.yaml"
    recipe.write_text(req["recipe"])
    path, _, selector = (req.get("config") or "").rpartition(":")
    if path:  # srtctl apply's path:selector form: the variant's text as submit_override writes it
        # modules of the revisions that have override files (imported here: older ones lack them)
        resolve_override_yaml = importlib.import_module("srtctl.core.config").resolve_override_yaml
        dump_yaml_with_comments = importlib.import_module("srtctl.core.yaml_utils").dump_yaml_with_comments
        variants = resolve_override_yaml(recipe, selector=selector)
        if len(variants) != 1:
            raise ValueError(f"{selector} selects {len(variants)} variants")
        if "sweep" in variants[0][1]:
            raise ValueError(f"{selector} is a sweep (submit_sweep), not probed")
        recipe.write_text(dump_yaml_with_comments(variants[0][1]))
    config = load_config(recipe)
    total = getattr(config, "total_nodes", None) or config.resources.total_nodes
    calls: list[dict] = []
    count = [int(total)]
    patch_everything(calls, count)
    # the job's allocation: the worker nodes, plus the ones a recipe dedicates to etcd/NATS or the benchmark
    for extra in range(3):
        count[0] = int(total) + extra
        try:  # a dedicated infra node is refused by the runtime itself on too small an allocation
            runtime = RuntimeContext.from_config(config, "1")
            orch = SweepOrchestrator(config, runtime)
            orch.backend_processes  # noqa: B018 - allocates the endpoints
            break
        except (ValueError, IndexError):
            if extra == 2:
                raise
    out: dict = {"nodes": count[0], "stages": {}}
    # start_mooncake_master (revisions with a Mooncake KV store): the master on the infra node and the store
    # config it writes into the log directory
    stages = ["start_head_infrastructure", "start_mooncake_master", "start_all_workers", "start_frontend"]
    log_dir = Path(runtime.log_dir)
    for old in log_dir.glob("*.json"):  # a previous recipe's, in the revision's one job directory
        old.unlink()
    for stage in stages:
        before = len(calls)
        fn = getattr(orch, stage, None)
        if fn is None:
            continue
        try:
            fn(_Registry()) if stage != "start_all_workers" else fn()
        except TypeError:
            fn()
        out["stages"][stage] = calls[before:]
    out["files"] = {f.name: f.read_text() for f in sorted(log_dir.glob("*.json")) if f.is_file()}
    out["infra"] = runtime.nodes.infra
    out["head"] = runtime.nodes.head
    return json.loads(json.dumps(out).replace(str(real), ""))


class _Registry:
    def add_process(self, *a, **k):
        pass

    def add_processes(self, *a, **k):
        pass

    def __getattr__(self, name):
        return lambda *a, **k: None


def main() -> None:
    logging.disable(logging.CRITICAL)
    reqs = json.loads(Path(sys.argv[1]).read_text())
    import_all()
    results = {}
    with tempfile.TemporaryDirectory() as t:
        for req in reqs:
            try:
                results[req["id"]] = probe(req, Path(t))
            except Exception as e:  # recorded: the test skips a recipe srtctl itself refuses
                results[req["id"]] = {
                    "error": f"{type(e).__name__}: {e}",
                    "trace": traceback.format_exc()[-2000:],
                }
    Path(sys.argv[2]).write_text(json.dumps(results, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
