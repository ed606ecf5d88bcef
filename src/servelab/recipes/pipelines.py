"""Output formats for a list of jobs: JSON matrix, GitHub Actions matrix, Buildkite pipeline, shell script."""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from pathlib import Path

from servelab.errors import ServelabError
from servelab.recipes.ladder import seq_len_name
from servelab.recipes.matrix import MatrixRow
from servelab.recipes.yamlio import dump_yaml

# GitHub Actions refuses a matrix with more than 256 jobs; larger families are split.
GITHUB_MAX_JOBS = 256
HEREDOC = "SERVELAB_EOF"
JOB_FILE = "servelab-job.json"  # written by a job's script, read by `servelab run --job`
# How `servelab run` starts the engine: on the host (direct, the default) or in the recipe's image (--docker).
LAUNCHERS = ("direct", "docker")
DEFAULT_LAUNCHER = "direct"


def to_json(jobs) -> str:
    return json.dumps([j.to_json() for j in jobs], indent=2) + "\n"


def github_family(job) -> str:
    """The workflow job a row runs in, as InferenceX's run-sweep.yml splits its matrix (see its
    process_changelog.py): single-node-1k1k, single-node-8k1k, multi-node-<seq-len>, agentic,
    multi-node-agentic, and for eval-only rows evals, agentic-evals, multi-node-evals,
    multi-node-agentic-evals."""
    r = job.point
    multi = "multi-node-" if r.multinode else ""
    if r.scenario_type == "agentic-coding":
        return f"{multi}agentic" + ("-evals" if r.eval_only else "")
    if r.eval_only:
        return f"{multi}evals"
    return f"{multi or 'single-node-'}{seq_len_name(r.isl, r.osl)}"


def to_github(jobs, launcher: str = DEFAULT_LAUNCHER) -> str:
    """{matrix name: {"include": rows}}: one matrix per InferenceX workflow job family, and a family of more
    than 256 rows (GitHub's limit per matrix) split into NAME-1, NAME-2, ... in order. A row servelab can
    launch carries `run`: its `servelab run KEY --arm ... --conc N` command (run in a checkout that holds the
    recipes)."""
    families: dict[str, list[dict]] = {}
    for j in jobs:
        row = {**j.matrix_entry(), "queue": j.queue}
        if j.launch is not None:
            row["run"] = shlex.join(recipe_run_argv(j, launcher))
        families.setdefault(github_family(j), []).append(row)
    out = {}
    for name, rows in families.items():
        parts = [rows[i : i + GITHUB_MAX_JOBS] for i in range(0, len(rows), GITHUB_MAX_JOBS)]
        for n, part in enumerate(parts, 1):
            out[name if len(parts) == 1 else f"{name}-{n}"] = {"include": part}
    return json.dumps(out, separators=(",", ":")) + "\n"


def to_buildkite(jobs, launcher: str = DEFAULT_LAUNCHER) -> str:
    steps = []
    seen: dict[str, int] = {}
    for j in jobs:
        # Step keys must be unique; rows that run the same thing (one per runner node, or twins in a master
        # file) share a fingerprint, so repeats are numbered.
        key = "job-" + j.fingerprint.removeprefix("sha256:")[:16]
        seen[key] = seen.get(key, 0) + 1
        steps.append(
            {
                "label": j.label(),
                "key": key if seen[key] == 1 else f"{key}-{seen[key]}",
                # `buildkite-agent pipeline upload` substitutes $VAR and ${VAR} in the whole file; $$ is its
                # escape for a literal $, so the script reaches bash as written.
                "command": script(j, launcher).replace("$", "$$"),
                "agents": j.agents,
                "env": {"SERVELAB_FINGERPRINT": j.fingerprint},
                "artifact_paths": [f"{_result_dir(j)}/**/*"],
            }
        )
    return dump_yaml({"steps": steps})


def arm_name(row: MatrixRow) -> str:
    """How `servelab run --arm` names a recipe arm: tpN-epN[-dpa][-ppN]."""
    return (
        f"tp{row.tp}-ep{row.ep}"
        + ("-dpa" if row.dp_attn else "")
        + (f"-pp{row.pp}" if row.pp is not None and row.pp > 1 else "")
    )


def recipe_run_argv(job, launcher: str = DEFAULT_LAUNCHER) -> list[str]:
    """`servelab run` of a job by its recipe key, arm, seq-len and concurrency."""
    r = job.point
    argv = ["servelab", "run", job.key, "--arm", arm_name(r), "--seq-len", r.seq_len]
    argv += ["--conc", str(r.conc), "--store", f"{_result_dir(job)}/results.db"]
    return argv + (["--docker"] if launcher == "docker" else [])


def _result_dir(job) -> str:
    if job.result_dir is None:
        raise ServelabError(f"{job.label()}: no benchmark client, so no result folder: {job.not_renderable}")
    return job.result_dir


def _heredoc_end(content: str) -> str:
    """A here-document delimiter that no line of `content` equals (a line equal to it would end the file
    early and run the rest as commands)."""
    lines = set(content.split("\n"))
    end, n = HEREDOC, 0
    while end in lines:
        n += 1
        end = f"{HEREDOC}_{n}"
    return end


def run_argv(job, launcher: str = DEFAULT_LAUNCHER) -> list[str]:
    """`servelab run` for the job file the script writes: server, bench, evals, assertions, teardown, and the
    results store in the job's result folder (its CI artifacts)."""
    argv = ["servelab", "run", "--job", JOB_FILE, "--store", f"{_result_dir(job)}/results.db"]
    return argv + (["--docker"] if launcher == "docker" else [])


def script(job, launcher: str = DEFAULT_LAUNCHER) -> str:
    """A bash script for one job: write the job (as `servelab sweep --format json` has it) and run it with
    `servelab run --job`, which starts the server, waits for it, benchmarks, evaluates, judges the recipe's
    assertions and tears down on every exit path."""
    if job.launch is None:
        raise ServelabError(f"{job.label()}: no script can be written: {job.not_renderable}")
    if launcher not in LAUNCHERS:
        raise ServelabError(f"launcher {launcher!r}: expected direct or docker")
    lines = [
        "#!/usr/bin/env bash",
        f"# servelab job: {job.label()}",
        f"# fingerprint: {job.fingerprint}",
        f"# image: {job.point.image}" + (f"@{job.image_digest}" if job.image_digest else ""),
        "set -euo pipefail",
    ]
    for name in job.secret_env:
        lines.append(f': "${{{name}:?{name} must be set in the runner environment}}"')
    content = json.dumps(job.to_json(), indent=2)
    end = _heredoc_end(content)
    lines += [f"cat > {JOB_FILE} <<'{end}'", content, end, shlex.join(run_argv(job, launcher))]
    return "\n".join(lines) + "\n"


def script_name(job) -> str:
    concs = "-".join(map(str, job.concs()))
    evals = "-evals" if job.point.eval_only else ""  # beside the throughput job of the same point
    return f"{job.key}_{job.point.exp_name}_{job.topology()}-conc{concs}{evals}.sh"


def script_names(jobs) -> list[str]:
    """One file name per job; jobs that differ only by the runner node they were pinned to
    (`--runner-node-filter`) take the node's name too, so no script overwrites another."""
    names = [script_name(j) for j in jobs]
    seen = Counter(names)
    names = [
        n.removesuffix(".sh") + f"_{_file_safe(j.point.runner)}.sh" if seen[n] > 1 else n
        for n, j in zip(names, jobs, strict=True)
    ]
    twice = sorted(n for n, count in Counter(names).items() if count > 1)
    if twice:
        raise ServelabError(
            f"sh scripts: two jobs would write {twice[0]} (the same point twice in the sweep)"
        )
    return names


def _file_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", text)


FORMATS = ("json", "github", "buildkite", "sh")


def emit(jobs, fmt: str, out=None, launcher: str = DEFAULT_LAUNCHER) -> str:
    """Jobs in `fmt`; for `sh` with several jobs, write one script per job under `out` and list them."""
    if fmt not in FORMATS:
        raise ServelabError(f"output format {fmt!r}: expected {', '.join(FORMATS)}")
    if launcher not in LAUNCHERS:
        raise ServelabError(f"launcher {launcher!r}: expected {' or '.join(LAUNCHERS)}")
    if fmt == "sh":
        if out is None:
            if len(jobs) != 1:
                raise ServelabError(
                    f"sh scripts: {len(jobs)} jobs need an output directory (one script per job)"
                )
            return script(jobs[0], launcher)
        if Path(out).exists() and not Path(out).is_dir():
            raise ServelabError(f"{out}: not a directory (sh output is one script per job in a directory)")
        scripts = {
            Path(out) / name: script(j, launcher) for name, j in zip(script_names(jobs), jobs, strict=True)
        }
        for path, text in scripts.items():
            _write(path, text, executable=True)
        return "".join(f"{p}\n" for p in scripts)
    if fmt == "json":
        text = to_json(jobs)
    elif fmt == "github":
        text = to_github(jobs, launcher)
    else:
        text = to_buildkite(jobs, launcher)
    if out is None:
        return text
    _write(Path(out), text)
    return f"wrote {len(jobs)} jobs to {out}\n"


def _write(path: Path, text: str, executable: bool = False) -> None:
    """Write one output file (creating its directory); one line naming the path when that fails."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if executable:
            path.chmod(0o755)
    except OSError as e:
        raise ServelabError(f"{path}: cannot write ({e.strerror or e})") from None
