"""Refresh the pinned copies of upstream files that the tests hold servelab against, and say what changed.

    python scripts/refresh_upstream_data.py --inferencex PATH --perf-eval PATH [--changelog-commits 25]

Each PATH is a git checkout of github.com/SemiAnalysisAI/InferenceX or github.com/vllm-project/perf-eval.
Only data is copied (config YAMLs, workload files, the changelog) plus what InferenceX's own tools print for
them (`utils/matrix_logic/generate_sweep_configs.py full-sweep` with each filter in SWEEP_CASES, and
`utils/validate_perf_changelog.py` / `utils/process_changelog.py` on the last changelog commits). No upstream
code is copied: the tools run in the checkout, with this Python (it needs pyyaml and pydantic). The exception
is the single-node launch scripts the master files select (benchmarks/, Apache-2.0 like the rest): they are
pinned, run under bash with stub servers, and turned into servelab's launch profiles and the conformance
table by scripts/ix_launch.py (pin, capture, profiles, docs).
"""

import argparse
import filecmp
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
IX_FILES = (
    "configs/nvidia-master.yaml",
    "configs/amd-master.yaml",
    "configs/runners.yaml",
    "perf-changelog.yaml",
)
MASTER = ["configs/nvidia-master.yaml", "configs/amd-master.yaml"]
LAUNCH_NOTE = """
benchmarks/: the single-node fixed-seq-len launch scripts the master files select (and the chat template
they pass), copied unchanged; launch/launches.json.gz: what each ran per job under bash with stub servers.
Both from scripts/ix_launch.py (pin, capture), run by scripts/refresh_upstream_data.py.
"""
# name -> extra arguments of `generate_sweep_configs.py full-sweep`; every filter InferenceX offers, once.
SWEEP_CASES = {
    "full": [],
    "max-conc-64": ["--max-conc", "64"],
    "min-conc-16": ["--min-conc", "16"],
    "min-max-conc-8-128": ["--min-conc", "8", "--max-conc", "128"],
    "max-tp-4": ["--max-tp", "4"],
    "max-ep-4": ["--max-ep", "4"],
    "model-prefix-dsr1-gptoss": ["--model-prefix", "dsr1", "gptoss"],
    "precision-fp8": ["--precision", "fp8"],
    "framework-sglang-vllm": ["--framework", "sglang", "vllm"],
    "runner-type-h200": ["--runner-type", "h200"],
    "seq-lens-8k1k": ["--seq-lens", "8k1k"],
    "step-size-4": ["--step-size", "4"],
    "single-node": ["--single-node"],
    "multi-node": ["--multi-node"],
    "no-evals": ["--no-evals"],
    "evals-only": ["--evals-only"],
    "all-evals": ["--all-evals"],
    "scenario-agentic": ["--scenario-type", "agentic-coding"],
    "runner-node-filter-amd": ["--runner-node-filter", "amd"],
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def write_gz_json(path: Path, data) -> None:
    # mtime=0 keeps the bytes identical when the content is, so a refresh shows only real changes.
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write((json.dumps(data, indent=1, sort_keys=True) + "\n").encode())


def provenance(repo: Path, url: str, licence: str) -> str:
    sha, date = git(repo, "log", "-1", "--format=%H %cI").split()
    return (
        f"# Pinned upstream data\n\nsource: {url}\ncommit: {sha}\ncommit date: {date}\nlicence: {licence}\n"
    )


def copy_files(repo: Path, names, dest: Path) -> list[str]:
    changed = []
    for name in names:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or not filecmp.cmp(repo / name, target, shallow=False):
            changed.append(name)
        shutil.copyfile(repo / name, target)
    return changed


def sweep_outputs(repo: Path, dest: Path) -> list[str]:
    dest.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, extra in SWEEP_CASES.items():
        cmd = [sys.executable, "utils/matrix_logic/generate_sweep_configs.py", "full-sweep"]
        cmd += ["--config-files", *MASTER, *extra]
        run = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
        record = {"args": extra, "exit_code": run.returncode}
        record |= {"rows": json.loads(run.stdout)} if run.returncode == 0 else {"stderr": run.stderr[-2000:]}
        path = dest / f"{name}.json.gz"
        before = path.read_bytes() if path.exists() else b""
        write_gz_json(path, record)
        if path.read_bytes() != before:
            changed.append(f"sweep/{name} ({len(record.get('rows', []))} rows, exit {run.returncode})")
    return changed


def changelog_history(repo: Path, dest: Path, count: int) -> list[str]:
    """For each of the last `count` commits that touched the changelog: both versions, and InferenceX's
    verdict and job matrix as computed in a checkout of that commit (its configs, its tools)."""
    blobs = dest / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    commits = git(repo, "log", f"-{count}", "--format=%H", "--", "perf-changelog.yaml").split()
    index = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "checkout"
        git(repo, "worktree", "add", "--detach", str(work), commits[0])
        try:
            for sha in commits:
                git(work, "checkout", "-q", "--detach", sha)
                entry = {"commit": sha, "subject": git(repo, "log", "-1", "--format=%s", sha).strip()}
                for side, ref in (("base", f"{sha}^"), ("head", sha)):
                    text = git(repo, "show", f"{ref}:perf-changelog.yaml")
                    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
                    path = blobs / f"{digest}.yaml.gz"
                    if not path.exists():
                        with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
                            f.write(text.encode())
                    entry[side] = path.name
                refs = ["--base-ref", f"{sha}^", "--head-ref", sha]
                gate = subprocess.run(
                    [sys.executable, "utils/validate_perf_changelog.py", *refs],
                    cwd=work,
                    capture_output=True,
                    text=True,
                )
                jobs = subprocess.run(
                    [
                        sys.executable,
                        "utils/process_changelog.py",
                        "--changelog-file",
                        "perf-changelog.yaml",
                        *refs,
                    ],
                    cwd=work,
                    capture_output=True,
                    text=True,
                )
                entry["accepted"] = gate.returncode == 0
                entry["gate_message"] = (gate.stderr or gate.stdout).strip()[-2000:]
                if jobs.returncode == 0:
                    write_gz_json(dest / f"jobs-{sha[:12]}.json.gz", json.loads(jobs.stdout))
                    entry["jobs"] = f"jobs-{sha[:12]}.json.gz"
                index.append(entry)
        finally:
            git(repo, "worktree", "remove", "--force", str(work))
    (dest / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    return [f"changelog: {len(index)} commits, {sum(e['accepted'] for e in index)} accepted upstream"]


def launch_profiles(repo: Path) -> list[str]:
    """Pin the launch scripts, capture what they run and regenerate the profiles and the docs table."""
    tool = [sys.executable, str(Path(__file__).with_name("ix_launch.py"))]
    # This checkout's servelab, whatever the Python has installed.
    env = {**os.environ, "PYTHONPATH": str(DATA.parents[1] / "src")}
    out = []
    for step in (["pin", "--inferencex", str(repo)], ["capture"], ["profiles"], ["docs"]):
        run = subprocess.run(tool + step, check=True, capture_output=True, text=True, env=env)
        out += [f"launch {step[0]}: {line}" for line in run.stdout.splitlines() if line != "no changes"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--inferencex", type=Path, required=True, help="checkout of SemiAnalysisAI/InferenceX"
    )
    parser.add_argument("--perf-eval", type=Path, required=True, help="checkout of vllm-project/perf-eval")
    parser.add_argument("--changelog-commits", type=int, default=25)
    args = parser.parse_args()

    ix, pe = args.inferencex.resolve(), args.perf_eval.resolve()
    ix_dest, pe_dest = DATA / "inferencex", DATA / "perf-eval"
    changes = [f"inferencex/{n}" for n in copy_files(ix, IX_FILES + ("LICENSE",), ix_dest)]
    (ix_dest / "UPSTREAM.md").write_text(
        provenance(
            ix, "https://github.com/SemiAnalysisAI/InferenceX", "Apache-2.0 (LICENSE beside this file)"
        )
        + LAUNCH_NOTE
    )
    changes += sweep_outputs(ix, ix_dest / "sweep")
    changes += launch_profiles(ix)
    changes += changelog_history(ix, ix_dest / "changelog", args.changelog_commits)

    workloads = sorted(p.relative_to(pe).as_posix() for p in (pe / "workloads").glob("*.yaml"))
    stale = {p.name for p in (pe_dest / "workloads").glob("*.yaml")} - {Path(w).name for w in workloads}
    for name in stale:
        (pe_dest / "workloads" / name).unlink()
    changes += [f"perf-eval/{n}" for n in copy_files(pe, workloads, pe_dest)]
    changes += [f"perf-eval/workloads/{n} (removed upstream)" for n in sorted(stale)]
    has_licence = any((pe / n).exists() for n in ("LICENSE", "LICENSE.md", "LICENSE.txt"))
    licence = (
        "see LICENSE in the repository"
        if has_licence
        else "the repository has no licence file at this commit"
    )
    (pe_dest / "UPSTREAM.md").write_text(provenance(pe, "https://github.com/vllm-project/perf-eval", licence))

    print("\n".join(changes) if changes else "no changes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
