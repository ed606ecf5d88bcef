"""Refresh the pinned copies of upstream files that the tests hold servelab against, and say what changed.

    python scripts/refresh_upstream_data.py --inferencex PATH --perf-eval PATH [--changelog-commits 25]

Each PATH is a git checkout of github.com/SemiAnalysisAI/InferenceX or github.com/vllm-project/perf-eval. Only
data is copied (config YAMLs, workload files and perf-eval's GPU profiles, the changelog) plus what
InferenceX's own tools print for them (`utils/matrix_logic/generate_sweep_configs.py full-sweep` with each
filter in SWEEP_CASES, and `utils/validate_perf_changelog.py` / `utils/process_changelog.py` on the last
changelog commits, plus its strict merge rules on the same commits and the master-file keys each commit's jobs
depend on). No upstream code is copied: the tools run in the checkout, with this Python (it needs pyyaml and
pydantic). The exceptions (Apache-2.0 like the rest) are the single-node launch scripts the master files
select (benchmarks/): they are pinned, run under bash with stub servers, and turned into servelab's launch
profiles and the conformance table by scripts/ix_launch.py (pin, capture, profiles, docs); and InferenceX's
result processing (IX_RESULT_TOOLS: utils/process_result.py and the power validation it imports), which
tests/bench/test_inferencex_results.py runs unchanged on servelab result files. The agentic sample trace is
what the checkout's trace converter writes for proxy rows of our own (scripts/agentic_sample.py).
"""

import argparse
import filecmp
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
IX_FILES = (
    "configs/nvidia-master.yaml",
    "configs/amd-master.yaml",
    "configs/runners.yaml",
    "perf-changelog.yaml",
)
# InferenceX's result processing, pinned as it is and run by the tests on servelab's result files: the script
# and the module it imports for single-node power validation.
IX_RESULT_TOOLS = ("utils/process_result.py", "utils/aggregate_power.py")
PE_GPU_PROFILES = "lib/gpu_profiles.yaml"
PE_NOTE = """
workloads/*.yaml and lib/gpu_profiles.yaml (the GPU profiles upstream's lib/parse_workload.py reads from
../lib beside the workload directory), copied unchanged by scripts/refresh_upstream_data.py.
"""
# The master files in the order InferenceX's own tools merge them (utils/constants.py MASTER_CONFIGS, which
# process_changelog.py uses): the order of the rows follows it.
MASTER = ["configs/amd-master.yaml", "configs/nvidia-master.yaml"]
# Changes InferenceX's own gate tests name by commit (utils/changelog_gate_tests): name -> (base, head).
GATE_CASES = {
    "pr-1717-conflict-resolution": (
        "add33814cce15d0b71e3c98eca4bb2f7ad8aba96",
        "60bf726a7f324a01e8850d228c8f0f7a6f203dbd",
    ),
}
# A change of our own appended to the pinned changelog; InferenceX's matrix for it is pinned as probe.json.gz.
PROBE_ENTRY = """
- config-keys:
    - dsr1-fp8-h200-sglang
    - dsv4-fp4-b200-vllm
    - dsv4-fp4-b200-sglang
  description:
    - "servelab parity probe: single-node fixed-seq-len keys"
  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/1
"""
# InferenceX's strict merge rules (the functions its merge helper calls), run in the checkout on a base and a
# head file, from the checkout's utils/ (where its modules import each other); prints "ok" or the rule's
# message. Without a PR number: a change on the main branch.
STRICT_RULES = """
import sys
from validate_perf_changelog import ChangelogValidationError, compare_entries, parse_changelog
from validate_perf_changelog import validate_raw_change
base, head = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
try:
    b, h = parse_changelog(base, "base"), parse_changelog(head, "head")
    added, corrected = compare_entries(b, h, None)
    validate_raw_change(base, head, len(added), corrected)
    print("ok")
except ChangelogValidationError as e:
    print(e)
"""
LAUNCH_NOTE = """
benchmarks/: the single-node fixed-seq-len launch scripts the master files select (and the chat template
they pass), copied unchanged; launch/launches.json.gz: what each ran per job under bash with stub servers.
Both from scripts/ix_launch.py (pin, capture), run by scripts/refresh_upstream_data.py.
utils/: utils/process_result.py and utils/aggregate_power.py (which it imports), copied unchanged by
scripts/refresh_upstream_data.py; tests/bench/test_inferencex_results.py runs them on servelab results.
"""
AGENTIC_NOTE = """
agentic/traces.jsonl: two small agentic sessions in InferenceX's trace format (the corpus it replays lives in
Hugging Face datasets, not in the repository): proxy rows of our own run through the checkout's
utils/agentic/datasets/proxy_to_weka.py, one trace a line, by scripts/agentic_sample.py.
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


def read_gz_json(path: Path):
    if not path.exists():
        return None
    with gzip.open(path) as f:
        return json.load(f)


def _row_id(row: dict) -> str:
    return json.dumps(row, sort_keys=True)


def sweep_change(name: str, before, after) -> str | None:
    """One line saying how a sweep case changed (row count, rows added/removed, order, exit status), or None
    when it did not."""
    if before == after:
        return None
    if before is None:
        return f"sweep/{name}: new ({len(after.get('rows', []))} rows, exit {after['exit_code']})"
    if before.get("exit_code") != after["exit_code"]:
        return f"sweep/{name}: exit {before.get('exit_code')} -> {after['exit_code']}"
    old, new = before.get("rows", []), after.get("rows", [])
    old_ids, new_ids = [_row_id(r) for r in old], [_row_id(r) for r in new]
    added = len(set(new_ids) - set(old_ids))
    removed = len(set(old_ids) - set(new_ids))
    what = f"{len(old)} -> {len(new)} rows, {added} new, {removed} gone"
    if not added and not removed and sorted(old_ids) == sorted(new_ids):
        what += ", same rows in another order"
    return f"sweep/{name}: {what}"


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
        line = sweep_change(name, read_gz_json(path), record)
        write_gz_json(path, record)
        if line:
            changed.append(line)
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
                entry: dict[str, Any] = {
                    "commit": sha,
                    "subject": git(repo, "log", "-1", "--format=%s", sha).strip(),
                }
                for side, ref in (("base", f"{sha}^"), ("head", sha)):
                    entry[side] = _blob(repo, ref, blobs)
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
                    matrix = json.loads(jobs.stdout)
                    write_gz_json(dest / f"jobs-{sha[:12]}.json.gz", matrix)
                    entry["jobs"] = f"jobs-{sha[:12]}.json.gz"
                    entry["configs"] = commit_configs(repo, sha, matrix, dest, ix_configs=DATA / "inferencex")
                entry["strict"] = strict_verdict(repo, work, blobs / entry["base"], blobs / entry["head"])
                index.append(entry)
        finally:
            git(repo, "worktree", "remove", "--force", str(work))
    (dest / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    return [f"changelog: {len(index)} commits, {sum(e['accepted'] for e in index)} accepted upstream"]


def _blob(repo: Path, ref: str, blobs: Path) -> str:
    """perf-changelog.yaml at `ref`, stored gzipped under its content hash; returns the file name."""
    text = git(repo, "show", f"{ref}:perf-changelog.yaml")
    path = blobs / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml.gz"
    if not path.exists():
        with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
            f.write(text.encode())
    return path.name


def gate_cases(repo: Path, dest: Path) -> list[str]:
    """InferenceX's gate verdict on each of GATE_CASES, run in the pinned checkout as its tests run it."""
    cases = {}
    for name, (base, head) in GATE_CASES.items():
        gate = subprocess.run(
            [sys.executable, "utils/validate_perf_changelog.py", "--base-ref", base, "--head-ref", head],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        cases[name] = {
            "base": _blob(repo, base, dest / "blobs"),
            "head": _blob(repo, head, dest / "blobs"),
            "accepted": gate.returncode == 0,
            "gate_message": (gate.stderr or gate.stdout).strip()[-2000:],
        }
    path = dest / "gate-cases.json"
    before = path.read_text() if path.exists() else ""
    path.write_text(json.dumps(cases, indent=1) + "\n")
    return ["changelog/gate-cases.json"] if path.read_text() != before else []


def changelog_probe(repo: Path, dest: Path) -> list[str]:
    """InferenceX's job matrix for a change of our own at the pinned commit: PROBE_ENTRY appended to its
    changelog (single-node fixed-seq-len keys, which the 25 real commits do not touch)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "probe"
        git(repo, "worktree", "add", "--detach", str(work), "HEAD")
        try:
            with (work / "perf-changelog.yaml").open("a") as f:
                f.write(PROBE_ENTRY)
            git(
                work, "-c", "user.name=probe", "-c", "user.email=probe@example.com", "commit", "-qam", "probe"
            )
            jobs = subprocess.run(
                [sys.executable, "utils/process_changelog.py", "--changelog-file", "perf-changelog.yaml"]
                + ["--base-ref", "HEAD^", "--head-ref", "HEAD"],
                cwd=work,
                capture_output=True,
                text=True,
                check=True,
            )
        finally:
            git(repo, "worktree", "remove", "--force", str(work))
    path = dest / "probe.json.gz"
    before = path.read_bytes() if path.exists() else b""
    write_gz_json(path, {"appended": PROBE_ENTRY, "matrix": json.loads(jobs.stdout)})
    return ["changelog/probe.json.gz"] if path.read_bytes() != before else []


def strict_verdict(repo: Path, work: Path, base_blob: Path, head_blob: Path) -> str:
    """InferenceX's strict merge rules on the (gzipped) base and head changelogs: "ok" or why not."""
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for blob in (base_blob, head_blob):
            files.append(Path(tmp) / blob.stem)
            with gzip.open(blob) as f:
                files[-1].write_bytes(f.read())
        run = subprocess.run(
            [sys.executable, "-c", STRICT_RULES, *map(str, files)],
            cwd=work / "utils",
            capture_output=True,
            text=True,
            check=True,
        )
    return run.stdout.strip()


def _masters(repo: Path, ref: str) -> dict[str, dict]:
    return {Path(m).name: yaml.safe_load(git(repo, "show", f"{ref}:{m}")) or {} for m in MASTER}


def commit_configs(repo: Path, sha: str, matrix: dict, dest: Path, ix_configs: Path) -> str:
    """The master-file keys a commit's jobs depend on, at its base and head: the keys its new entries name
    and every key the commit changed (whose equality the append-only rules check); the rest of the master
    files is left out. Each file is a list of [key, config] pairs, in file order. runners.yaml goes along
    where it differs from the pinned one."""
    base, head = _masters(repo, f"{sha}^"), _masters(repo, sha)
    all_keys = [k for f in head.values() for k in f]
    keys: set[str] = set()
    for entry in matrix["changelog_metadata"]["entries"]:
        for pat in entry["config-keys"]:
            keys.update(k for k in all_keys if re.fullmatch(re.escape(pat).replace(r"\*", ".*"), k))
    for name in head.keys() | base.keys():
        old, new = base.get(name, {}), head.get(name, {})
        keys.update(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    data: dict[str, Any] = {}
    for side, ref, files in (("base", f"{sha}^", base), ("head", sha, head)):
        data[side] = {name: [[k, v] for k, v in f.items() if k in keys] for name, f in files.items()}
        runners = git(repo, "show", f"{ref}:configs/runners.yaml")
        if runners != (ix_configs / "configs" / "runners.yaml").read_text():
            data[side + "-runners"] = runners
    name = f"configs-{sha[:12]}.json.gz"
    write_gz_json(dest / name, data)
    return name


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


def agentic_sample(repo: Path) -> list[str]:
    """Write the sample trace with the checkout's own converter (scripts/agentic_sample.py)."""
    tool = [
        sys.executable,
        str(Path(__file__).with_name("agentic_sample.py")),
        "pin",
        "--inferencex",
        str(repo),
    ]
    run = subprocess.run(tool, check=True, capture_output=True, text=True)
    return [line for line in run.stdout.splitlines() if line != "no changes"]


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
    changes = [f"inferencex/{n}" for n in copy_files(ix, IX_FILES + IX_RESULT_TOOLS + ("LICENSE",), ix_dest)]
    (ix_dest / "UPSTREAM.md").write_text(
        provenance(
            ix, "https://github.com/SemiAnalysisAI/InferenceX", "Apache-2.0 (LICENSE beside this file)"
        )
        + LAUNCH_NOTE
        + AGENTIC_NOTE
    )
    changes += sweep_outputs(ix, ix_dest / "sweep")
    changes += launch_profiles(ix)
    changes += agentic_sample(ix)
    changes += changelog_history(ix, ix_dest / "changelog", args.changelog_commits)
    changes += changelog_probe(ix, ix_dest / "changelog")
    changes += gate_cases(ix, ix_dest / "changelog")

    workloads = sorted(p.relative_to(pe).as_posix() for p in (pe / "workloads").glob("*.yaml"))
    stale = {p.name for p in (pe_dest / "workloads").glob("*.yaml")} - {Path(w).name for w in workloads}
    for name in stale:
        (pe_dest / "workloads" / name).unlink()
    # lib/gpu_profiles.yaml: the env, HF cache and image repo upstream's runner adds per GPU, kept where a
    # checkout has it, since servelab looks for it beside the workload directory as upstream's parser does
    changes += [f"perf-eval/{n}" for n in copy_files(pe, [*workloads, PE_GPU_PROFILES], pe_dest)]
    changes += [f"perf-eval/workloads/{n} (removed upstream)" for n in sorted(stale)]
    has_licence = any((pe / n).exists() for n in ("LICENSE", "LICENSE.md", "LICENSE.txt"))
    licence = (
        "see LICENSE in the repository"
        if has_licence
        else "the repository has no licence file at this commit"
    )
    (pe_dest / "UPSTREAM.md").write_text(
        provenance(pe, "https://github.com/vllm-project/perf-eval", licence) + PE_NOTE
    )

    print("\n".join(changes) if changes else "no changes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
