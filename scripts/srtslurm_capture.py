"""What srt-slurm runs for InferenceX's multinode jobs (a development tool; run it from a servelab checkout).

    python scripts/srtslurm_capture.py resolve   # launchers under stubs -> srt-slurm revision, recipe
    python scripts/srtslurm_capture.py capture   # srtctl's own orchestrator, per revision -> processes
    python scripts/srtslurm_capture.py index     # servelab's package data (data/srtslurm) and pinned recipes

InferenceX starts a multinode job with `runners/launch_<node kind>.sh`, which clones NVIDIA/srt-slurm at a
revision it picks per framework / model / scenario, copies InferenceX's
benchmarks/multi_node/srt-slurm-recipes into it, edits the recipe (job name, synthetic acceptance) and
runs `srtctl apply -f $CONFIG_FILE`. `resolve` runs each launcher under bash with stubs
(scripts/srtslurm_stubs: git extracts the revision from the local srt-slurm mirror, srtctl records what it
was given and stops the launcher, cluster tools do nothing) for every multinode job of the pinned sweep, and
records the revision and the recipe srtctl would have read.

`capture` runs srtctl at each revision in its own venv (SRTCTL_VENV: srtctl's dependencies, never
servelab's; the revision's src/ on PYTHONPATH) and asks srtctl's own orchestrator (scripts/srtslurm_probe.py:
config loader, endpoint allocation, workers, frontend) what each recipe starts on a fake allocation of nodes;
the result is the reference tests/recipes/test_srtslurm.py compares servelab's
rendering (servelab.recipes.srtslurm) with.
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from servelab.errors import ServelabError
from servelab.recipes.matrix import arm_settings
from servelab.recipes.srtslurm import select_variant, with_synthetic_acceptance
from servelab.recipes.srtslurm_jobs import launcher_edit

ROOT = Path(__file__).resolve().parent.parent
STUBS = Path(__file__).resolve().parent / "srtslurm_stubs"
IX_MIRROR = Path("/work/.mirror/SemiAnalysisAI+InferenceX/repo")
IX_COMMIT = "843c6254ff69b567f772f6a5fd97675af3d04431"
SRT_MIRROR = Path("/work/.mirror/NVIDIA+srt-slurm/repo")
DATA = ROOT / "tests" / "data" / "srtslurm"
NOOP = [
    "srun",
    "salloc",
    "squeue",
    "scontrol",
    "scancel",
    "sinfo",
    "enroot",
    "docker",
    "uv",
    "make",
]
NOOP += [
    "curl",
    "wget",
    "sleep",
    "nvidia-smi",
    "unsquashfs",
    "flock",
    "hf",
    "huggingface-cli",
    "sacct",
    "pip",
]

# What the clusters' file systems hold that a launcher reads before srtctl (the stand-ins are empty files):
# uv's env script on the shared uv install (h100-dgxc-slurm sources it; uv itself is the stub) and the DCGM
# exporter's squash file the dcgm-power lanes `test -r`. Each mount point is a tmpfs of the launcher's own.
CLUSTER_MOUNTS = ["/mnt", "/data/home"]
DCGM_SQSH = "nvcr.io_nvidia_k8s_dcgm-exporter_4.6.0-4.8.3-distroless.sqsh"
CLUSTER_FILES = [
    "/mnt/nfs/sa-shared/.uv/bin/env",
    f"/mnt/lustre01/users-public/sa-shared/{DCGM_SQSH}",
    f"/data/home/sa-shared/gharunners/squash/{DCGM_SQSH}",
]


def multinode_jobs() -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", "sweep", "--dir", "tests/data/inferencex/configs"]
        + ["--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    return [j for j in json.loads(out.stdout) if config_file(j)]


def config_file(job: dict) -> str | None:
    return arm_settings(job).get("CONFIG_FILE")


def resolve_key(job: dict) -> str:
    """What a launcher's choice depends on: runner, framework, model, precision, scenario, spec and
    CONFIG_FILE."""
    agentic = job.get("scenario-type") == "agentic-coding"
    parts = [job["runner"], job["framework"], job["model-prefix"], job["precision"]]
    parts += ["agentic" if agentic else "fixed", job["spec-decoding"], config_file(job) or ""]
    return "|".join(parts)


def first_node(label: str) -> str:
    runners = yaml.safe_load((ROOT / "tests/data/inferencex/configs/runners.yaml").read_text())
    labels = runners["labels"]
    # a label InferenceX's runners.yaml lacks (servelab's own runners.yaml adds them): the node kind is
    # the label's name
    return labels[label][0] if label in labels else f"{label.removeprefix('cluster:')}_0"


def launcher_env(job: dict, node: str, workspace: Path, record: Path) -> dict[str, str]:
    p, d = job.get("prefill") or {}, job.get("decode") or {}
    agentic = job.get("scenario-type") == "agentic-coding"
    env = {
        "PATH": f"{record.parent / 'bin'}:/usr/bin:/bin",
        "HOME": str(workspace),
        "GITHUB_WORKSPACE": str(workspace),
        "RUNNER_NAME": node,
        "EXP_NAME": job["exp-name"],
        "IMAGE": job["image"],
        "MODEL_PREFIX": job["model-prefix"],
        "MODEL": job["model"],
        "FRAMEWORK": job["framework"],
        "PRECISION": job["precision"],
        "ISL": str(job.get("isl") or ""),
        "OSL": str(job.get("osl") or ""),
        "MAX_MODEL_LEN": str(job.get("max-model-len") or ""),
        "CONC_LIST": " ".join(str(c) for c in job["conc"]),
        "CONC": str(job["conc"][0]),
        "SPEC_DECODING": job["spec-decoding"],
        "DISAGG": str(job.get("disagg", False)).lower(),
        "RUN_EVAL": "false",
        "EVAL_ONLY": "false",
        "SCENARIO_TYPE": job.get("scenario-type") or "fixed-seq-len",
        "IS_AGENTIC": "1" if agentic else "0",
        "DURATION": str(job.get("duration") or ""),
        "KV_OFFLOADING": job.get("kv-offloading") or "",
        "TOTAL_CPU_DRAM_GB": str(job.get("total-cpu-dram-gb") or ""),
        "PREFILL_NUM_WORKERS": str(p.get("num-worker", "")),
        "PREFILL_TP": str(p.get("tp", "")),
        "PREFILL_EP": str(p.get("ep", "")),
        "PREFILL_DP_ATTN": str(p.get("dp-attn", "")).lower(),
        "DECODE_NUM_WORKERS": str(d.get("num-worker", "")),
        "DECODE_TP": str(d.get("tp", "")),
        "DECODE_EP": str(d.get("ep", "")),
        "DECODE_DP_ATTN": str(d.get("dp-attn", "")).lower(),
        "SRT_MIRROR": str(SRT_MIRROR),
        "SRT_RECORD": str(record),
        "SRT_CACHE": str(record.parent / "revs"),
        "IS_MULTINODE": "true",
        "RUNNER_TYPE": job["runner"],
        "RESULT_FILENAME": f"{job['exp-name']}_{job['precision']}_{job['framework']}",
        "GITHUB_RUN_ID": "1",
        "GITHUB_RUN_ATTEMPT": "1",
        "RANDOM_RANGE_RATIO": "0.8",  # benchmark-multinode-tmpl.yml's job environment
        **arm_settings(job),
    }
    return env


def run_launcher(job: dict, workspace: Path, tmp: Path) -> dict:
    node = first_node(job["runner"])
    launcher = workspace / "runners" / f"launch_{node.split('_')[0]}.sh"
    if not launcher.is_file():
        return {"error": f"no launcher {launcher.name}"}
    record = tmp / "record"
    for f in (record, Path(f"{record}.yaml"), Path(f"{record}.cluster"), Path(f"{record}.sbatch")):
        f.unlink(missing_ok=True)
    env = launcher_env(job, node, workspace, record)
    cwd = tmp / "cwd"
    subprocess.run(["rm", "-rf", str(cwd)], check=True)
    cwd.mkdir()
    # as on the runner, InferenceX's benchmarks/ beside the job (the llm-d launcher runs a wrapper from it)
    (cwd / "benchmarks").symlink_to(workspace / "benchmarks")
    # the cluster's file systems are a private tmpfs holding only CLUSTER_FILES (mount namespace: the
    # launchers' mkdir -p /mnt/... and lock files never reach this machine's); $$ of the wrapper is the
    # launcher's pid once it execs: the srtctl stub stops it there
    stand_ins = " ".join(f'"{f}"' for f in CLUSTER_FILES)
    cmd = (
        " && ".join(f"mount -t tmpfs servelab-stub {m}" for m in CLUSTER_MOUNTS)
        + f' && for f in {stand_ins}; do mkdir -p "${{f%/*}}" && : > "$f"; done && '
        "export LAUNCHER_PID=$$; command_not_found_handle() { return 0; }; "
        f'export -f command_not_found_handle; exec bash "{launcher}"'
    )
    try:
        run = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "bash", "-c", cmd],
            cwd=cwd,
            env=env,
            capture_output=True,
            timeout=60,
            text=True,
        )
    except subprocess.TimeoutExpired:
        return {"error": "launcher ran out of time"}
    if not record.is_file():
        revs = sorted(cwd.rglob(".srt_rev")) + sorted(workspace.glob("*/.srt_rev"))
        rev = revs[0].read_text().strip() if revs else None
        for r in revs:  # the launcher's clone is removed for the next job
            subprocess.run(["rm", "-rf", str(r.parent)], check=True)
        why = "the launcher did not reach srtctl apply"
        if (sbatch := Path(f"{record}.sbatch")).is_file():  # a SLURM job of its own (llm-d's)
            script = (sbatch.read_text().split() or ["?"])[-1].rsplit("/", 1)[-1]
            why = f"the launcher submits a SLURM job of its own (sbatch {script}), not srtctl apply"
        if rev and not rev[0].isalnum() or (rev or "").startswith(("repo:", "unknown:")):
            why = f"srt-slurm {rev} is not in the local mirror"
        return {"error": why, "rev": rev, "tail": run.stderr[-1500:]}
    fields = dict(line.split("=", 1) for line in record.read_text().splitlines())
    out: dict = {"launcher": launcher.name, "node": node, "rev": fields["rev"], "config": fields["config"]}
    recipe, cluster = Path(f"{record}.yaml"), Path(f"{record}.cluster")
    if cluster.is_file():
        out["srtslurm_yaml"] = cluster.read_text()
    if recipe.is_file():
        out["recipe"] = recipe.read_text()
    else:
        out["error"] = "the recipe srtctl was given is not in the srt-slurm checkout"
    return out


def resolve(args) -> None:
    jobs = multinode_jobs()
    keys = sorted({resolve_key(j): j for j in jobs}.items())
    # --only: those resolved again, the others kept as they were
    out: dict = json.load(gzip.open(DATA / "resolved.json.gz")) if args.only else {}
    keys = [(k, j) for k, j in keys if not args.only or args.only in k]
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        workspace = tmp / "ix"
        workspace.mkdir()
        archive = subprocess.run(
            ["git", "--git-dir", str(IX_MIRROR), "archive", IX_COMMIT, "runners", "benchmarks/multi_node"]
            + ["benchmarks/benchmark_lib.sh"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(workspace)], input=archive, check=True)
        # what uv's installer leaves, which some launchers source
        (workspace / ".local" / "bin").mkdir(parents=True)
        (workspace / ".local" / "bin" / "env").write_text("")
        bin_ = tmp / "bin"
        bin_.mkdir()
        for name in ("git", "srtctl", "sbatch"):
            (bin_ / name).symlink_to(STUBS / name)
        for name in NOOP:
            (bin_ / name).symlink_to(STUBS / "_noop")
        for i, (key, job) in enumerate(keys):
            # the launcher edits files in $GITHUB_WORKSPACE only under the clone; a fresh clone each run
            out[key] = run_launcher(job, workspace, tmp)
            if args.verbose:
                print(i, key, out[key].get("rev"), out[key].get("error"), file=sys.stderr)
    DATA.mkdir(parents=True, exist_ok=True)
    with gzip.open(DATA / "resolved.json.gz", "wt") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    revs: dict[str, int] = {}
    for r in out.values():
        what = str(r.get("rev") or r.get("error"))
        revs[what] = revs.get(what, 0) + 1
    print(json.dumps(revs, indent=1))


SRTCTL_VENV = Path(os.environ.get("SRTCTL_VENV", "/work/main/.venv-srtctl"))


def capture(args) -> None:
    """srtctl's own orchestrator, per revision, on every resolved recipe (scripts/srtslurm_probe.py)."""
    resolved = json.load(gzip.open(DATA / "resolved.json.gz"))
    by_rev: dict[str, list[dict]] = {}
    for key, r in sorted(resolved.items()):
        if args.only and args.only not in key and args.only not in r.get("recipe", ""):
            continue
        if "recipe" in r and ":" not in r["rev"]:  # a fork's revision is not in the mirror
            by_rev.setdefault(r["rev"], []).append({"id": key, **r})
    # --only: those recaptured, the others kept as they were
    out: dict = json.load(gzip.open(DATA / "captures.json.gz")) if args.only else {}
    with tempfile.TemporaryDirectory() as t:
        for rev, reqs in sorted(by_rev.items()):
            tree = Path(t) / rev
            tree.mkdir()
            archive = subprocess.run(
                ["git", "--git-dir", str(SRT_MIRROR), "archive", rev], capture_output=True, check=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
            (Path(t) / "req.json").write_text(json.dumps(reqs))
            subprocess.run(
                [str(SRTCTL_VENV / "bin" / "python"), str(Path(__file__).parent / "srtslurm_probe.py")]
                + [str(Path(t) / "req.json"), str(Path(t) / "out.json")],
                cwd=tree,
                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree / "src"), "HOME": t},
                check=True,
            )
            got = json.loads((Path(t) / "out.json").read_text())
            for key, result in got.items():
                if args.verbose and "trace" in result:
                    print(key, result["trace"], file=sys.stderr)
                result.pop("trace", None)
                out[key] = {"rev": rev, **result}
            print(rev, len(reqs), sum("error" in r for r in got.values()), file=sys.stderr)
    with gzip.open(DATA / "captures.json.gz", "wt") as f:
        json.dump(out, f, indent=1, sort_keys=True)


PACKAGE = ROOT / "src" / "servelab" / "recipes" / "data" / "srtslurm"
IX_RECIPES = "benchmarks/multi_node/srt-slurm-recipes"
IX_PINNED = ROOT / "tests" / "data" / "inferencex" / IX_RECIPES


def _normal(text: str) -> object:
    """A recipe without what the launchers rewrite or add (the job name, the health check's attempts)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(data, dict):
        data.pop("name", None)
        data.pop("health_check", None)
    return data


def _git_show(git_dir: Path, rev: str, path: str) -> str | None:
    r = subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{rev}:{path}"], capture_output=True, text=True
    )
    return r.stdout if r.returncode == 0 else None


def _synthetic(text: str, length: float | None, launcher: str | None) -> object:
    """`text` as the launcher edits it (its sed, synthetic acceptance: servelab's rewrites), normalised."""
    data = _normal(launcher_edit(text, launcher))
    if length is None or not isinstance(data, dict):
        return data
    try:
        with_synthetic_acceptance(data, length, "recipe")
    except (ServelabError, ValueError):
        return None
    return data


def index(args) -> None:
    """servelab's package data: per launcher choice, the srt-slurm revision, where the recipe is (InferenceX's
    checkout or pinned here) and the model path; the InferenceX recipes pinned under tests/data/inferencex."""
    resolved = json.load(gzip.open(DATA / "resolved.json.gz"))
    # a recipe srtctl itself refuses at its revision (capture's error) is not rendered: nothing to equal
    captures = (
        json.load(gzip.open(DATA / "captures.json.gz")) if (DATA / "captures.json.gz").is_file() else {}
    )
    ix_files = subprocess.run(
        ["git", "--git-dir", str(IX_MIRROR), "ls-tree", "-r", "--name-only", IX_COMMIT, IX_RECIPES],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    ix_text: dict[str, str] = {}
    out: dict[str, dict] = {}
    lengths: dict[str, float | None] = {}
    for job in multinode_jobs():
        env = arm_settings(job)
        on = env.get("SYNTHETIC_ACCEPTANCE", "").lower() == "true" and env.get("SYNTHETIC_ACCEPTANCE_LENGTH")
        lengths[resolve_key(job)] = float(env["SYNTHETIC_ACCEPTANCE_LENGTH"]) if on else None
    for key, r in sorted(resolved.items()):
        entry: dict = {"config": r.get("config"), "launcher": r.get("launcher")}
        rev = r.get("rev") or ""
        if "recipe" not in r or ":" in rev or not rev:
            entry["unavailable"] = (
                "InferenceX's launcher stops before srtctl apply under servelab's stubs, so which "
                "revision and recipe it runs is not recorded"
            )
            wanted = key.rsplit("|", 1)[-1]
            if "sbatch" in r.get("error", ""):
                entry["unavailable"] = f"not srt-slurm: {r['error']}"
            elif rev and ":" not in rev and _git_show(SRT_MIRROR, rev, wanted) is None:
                name = wanted.rsplit("/", 1)[-1]
                if not any(f.rsplit("/", 1)[-1] == name for f in ix_files):
                    entry["unavailable"] = (
                        f"the recipe CONFIG_FILE names ({wanted}) is in neither InferenceX's checkout "
                        "nor srt-slurm: the launcher stops there (sed: no such file)"
                    )
            if ":" in rev:
                entry["unavailable"] = f"srt-slurm {rev.split(':', 1)[1]} is a fork servelab has no copy of"
            out[key] = entry
            continue
        entry["revision"] = rev
        cluster = yaml.safe_load(r.get("srtslurm_yaml") or "") or {}
        recipe_data = yaml.safe_load(r["recipe"]) or {}
        path, _, selector = r["config"].rpartition(":")
        if path:  # an override file's variant (srtctl's path:selector)
            entry["selector"] = selector
            recipe_data = select_variant(recipe_data, selector, r["config"])
        alias = recipe_data.get("model", {}).get("path")
        entry["model-path"] = (cluster.get("model_paths") or {}).get(alias, alias)
        config = r["config"].split(":", 1)[0]
        want = _normal(r["recipe"])
        name = config.rsplit("/", 1)[-1]
        source = None
        for f in ix_files:
            if f.rsplit("/", 1)[-1] != name:
                continue
            if f not in ix_text:
                ix_text[f] = _git_show(IX_MIRROR, IX_COMMIT, f) or ""
            if _synthetic(ix_text[f], lengths.get(key), r.get("launcher")) == want:
                source = f
                break
        if source is not None:
            entry["inferencex"] = source.removeprefix(IX_RECIPES + "/")
            dest = IX_PINNED / entry["inferencex"]
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(ix_text[source])
        elif (text := _git_show(SRT_MIRROR, rev, config)) is not None and _synthetic(
            text, lengths.get(key), r.get("launcher")
        ) == want:
            entry["srt-slurm"] = config
            dest = PACKAGE / "recipes" / rev[:12] / config
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
        else:
            what = "synthetic acceptance"
            if lengths.get(key) is None:  # name what the launcher's own edit adds (sed on the recipe)
                base = _git_show(SRT_MIRROR, rev, config) or next(
                    (ix_text.get(f, "") for f in ix_files if f.rsplit("/", 1)[-1] == name), ""
                )
                added = sorted(
                    {
                        line[2:].strip()
                        for line in difflib.ndiff(base.splitlines(), r["recipe"].splitlines())
                        if line.startswith("+ ") and not line[2:].startswith("name:")
                    }
                )
                what = "it adds " + ", ".join(f"`{a}`" for a in added) if added else "not described"
            entry["unavailable"] = f"the launcher edits the recipe before srtctl reads it ({what})"
        if "error" in captures.get(key, {}):
            why = re.sub(r" in /\S+", "", captures[key]["error"]).splitlines()[0]
            entry["unavailable"] = f"srtctl at {rev[:12]} refuses the recipe ({why})"
        out[key] = entry
    PACKAGE.mkdir(parents=True, exist_ok=True)
    (PACKAGE / "index.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    kinds: dict[str, int] = {}
    for e in out.values():
        k = (
            "inferencex"
            if "inferencex" in e
            else "srt-slurm"
            if "srt-slurm" in e
            else e.get("unavailable", "")[:60]
        )
        kinds[k] = kinds.get(k, 0) + 1
    print(json.dumps(kinds, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("resolve")
    r.add_argument("-v", "--verbose", action="store_true")
    r.add_argument("--only", help="resolve again the choices whose key contains this, keep the rest")
    r.set_defaults(func=resolve)
    c = sub.add_parser("capture")
    c.add_argument("-v", "--verbose", action="store_true")
    c.add_argument("--only", help="recapture the choices whose key or recipe contains this, keep the rest")
    c.set_defaults(func=capture)
    i = sub.add_parser("index")
    i.set_defaults(func=index)
    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
