"""Regenerate src/servelab/calibrate/data/inferencex_runs.json: the benchmark runs InferenceX's
perf-changelog.yaml triggered, for tying calibration rows to the run that measured them.

    python scripts/inferencex_runs.py --git-dir PATH/TO/InferenceX/.git [--since DATE] [--until DATE]

InferenceX runs a sweep when a commit on main adds entries to perf-changelog.yaml (its
utils/process_changelog.py: the added lines are read as YAML, each entry's `config-keys` resolved against the
master configs, `*` matching anything; a deleted line with text stops it; a commit whose message says
`[skip-sweep]` runs nothing). The measured time of a row is that commit's time plus a few seconds. For every
such commit on the first-parent history this script records the commit, its time and, per single-node config
key of the hardware the calibration rows use, the framework, runner, model, precision, image and whether the
key's search space decodes speculatively (`mtp`, `none`, or `mixed`), and the search space itself (sequence
lengths, concurrency range, speculative decoding per entry). Multinode keys are disaggregated runs, which the
calibration does not fit. InferenceX is Apache-2.0; only these facts are recorded.
"""

import argparse
import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parents[1] / "src/servelab/calibrate/data/inferencex_runs.json"
CHANGELOG = "perf-changelog.yaml"
# where InferenceX kept its master configs (utils/constants.py MASTER_CONFIGS), older layout first
MASTER_CONFIGS = (
    (".github/configs/amd-master.yaml", ".github/configs/nvidia-master.yaml"),
    ("configs/amd-master.yaml", "configs/nvidia-master.yaml"),
)
# runner types of the hardware silicon_sample.csv has rows for (Grace-Blackwell before the plain names)
RUNNERS = ("gb300", "gb200", "b300", "b200", "h200", "h100")


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, *args], capture_output=True, text=True, check=True
    ).stdout


def changelog_commits(git_dir: str, since: str, until: str) -> list[tuple[str, str, str, str]]:
    """(commit, first parent, UTC commit time, subject) of each first-parent commit touching the changelog."""
    out = git(
        git_dir,
        "log",
        "--first-parent",
        "--reverse",
        "--format=%H %P%x09%ct%x09%s",
        f"--since={since}",
        f"--until={until}",
        "HEAD",
        "--",
        CHANGELOG,
    )
    commits = []
    for line in out.splitlines():
        hashes, stamp, subject = line.split("\t", 2)
        commit, *parents = hashes.split()
        when = datetime.fromtimestamp(int(stamp), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        commits.append((commit, parents[0] if parents else "", when, subject))
    return commits


def added_entries(git_dir: str, parent: str, commit: str) -> list[dict] | None:
    """The changelog entries a commit added, or None where InferenceX would run nothing (a deleted line with
    text, which its process_changelog.py refuses, or no entry)."""
    if not parent:
        return None
    diff = git(git_dir, "diff", parent, commit, "--", CHANGELOG)
    added = []
    for line in diff.splitlines():
        if line.startswith("-") and not line.startswith("---") and line[1:].strip():
            return None
        if line.startswith("+") and not line.startswith("+++"):
            added.append(line[1:])
    try:
        entries = yaml.safe_load("\n".join(added))
    except yaml.YAMLError:
        return None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else None


def master_configs(git_dir: str, commit: str) -> dict | None:
    """Every config key of the master configs at a commit, or None where one does not parse (InferenceX's
    sweep failed there too)."""
    for paths in reversed(MASTER_CONFIGS):
        configs: dict = {}
        for path in paths:
            shown = subprocess.run(
                ["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True
            )
            if shown.returncode != 0:
                continue
            try:
                configs.update(yaml.safe_load(shown.stdout) or {})
            except yaml.YAMLError:
                return None
        if configs:
            return configs
    raise SystemExit(f"{commit}: no master configs at {MASTER_CONFIGS}")


def resolve(patterns: list[str], configs: dict) -> list[str]:
    """Config keys named by the patterns, `*` matching anything (as process_changelog.py resolves them)."""
    keys = set()
    for pattern in patterns:
        regex = re.compile(re.escape(str(pattern)).replace(r"\*", ".*"))
        keys.update(k for k in configs if regex.fullmatch(k))
    return sorted(keys)


def spec_decoding(config: dict) -> str:
    """`mtp`, `none` or `mixed`: the speculative decoding of a key's search space."""
    found = set()
    for seq in config.get("seq-len-configs") or []:
        for point in seq.get("search-space") or []:
            found.add(str(point.get("spec-decoding") or "none").lower())
    return found.pop() if len(found) == 1 else ("mixed" if found else "none")


def search_space(config: dict) -> list[list]:
    """[isl, osl, lowest concurrency, highest concurrency, spec decoding] per search-space entry (a
    `conc-list` written as one entry per value)."""
    points = []
    for seq in config.get("seq-len-configs") or []:
        for point in seq.get("search-space") or []:
            spec = str(point.get("spec-decoding") or "none").lower()
            concs = point.get("conc-list") or []
            ranges = [(c, c) for c in concs] or [(point.get("conc-start"), point.get("conc-end"))]
            points += [[seq.get("isl"), seq.get("osl"), lo, hi, spec] for lo, hi in ranges]
    return points


def key_facts(config: dict) -> dict:
    return {
        "framework": config.get("framework"),
        "runner": config.get("runner"),
        "model": config.get("model"),
        "model_prefix": config.get("model-prefix"),
        "precision": config.get("precision"),
        "spec_decoding": spec_decoding(config),
        "image": config.get("image"),
        "search_space": search_space(config),
    }


def wanted(config: dict, runners: tuple[str, ...]) -> bool:
    runner = str(config.get("runner") or "").lower()
    return not config.get("multinode") and any(re.match(rf"{r}(?![0-9])", runner) for r in runners)


def runs(git_dir: str, since: str, until: str, runners: tuple[str, ...]) -> list[dict]:
    table = []
    for commit, parent, when, subject in changelog_commits(git_dir, since, until):
        if "[skip-sweep]" in subject:
            continue
        entries = added_entries(git_dir, parent, commit)
        if not entries:
            continue
        configs = master_configs(git_dir, commit)
        if configs is None:
            continue
        patterns = [k for e in entries for k in (e.get("config-keys") or [])]
        keys = {k: key_facts(configs[k]) for k in resolve(patterns, configs) if wanted(configs[k], runners)}
        if keys:
            table.append({"commit": commit[:12], "time": when, "subject": subject, "keys": keys})
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--git-dir", required=True, help="InferenceX's .git (or a bare mirror)")
    p.add_argument("--since", default="2025-10-01", help="first commit date kept (the rows' earliest month)")
    p.add_argument("--until", default="2026-04-28", help="last commit date kept (the rows' latest dump)")
    p.add_argument("--runners", default=",".join(RUNNERS), help="runner types kept, comma-separated")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    head = git(args.git_dir, "rev-parse", "HEAD").strip()
    table = runs(args.git_dir, args.since, args.until, tuple(args.runners.split(",")))
    doc = {
        "_provenance": {
            "source": "SemiAnalysisAI/InferenceX perf-changelog.yaml and master configs (Apache-2.0)",
            "commit": head,
            "since": args.since,
            "until": args.until,
            "runners": args.runners,
        },
        "runs": table,
    }
    text = json.dumps(doc, indent=1)
    # one search-space entry per line
    text = re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
    args.out.write_text(text + "\n")
    print(f"{len(table)} runs, {sum(len(r['keys']) for r in table)} keys -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
