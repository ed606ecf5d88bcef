"""Output formats for a list of jobs: JSON matrix, GitHub Actions matrix, Buildkite pipeline, shell script."""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter

from servelab.errors import ServelabError
from servelab.recipes.job import AGENTIC_CODING, AGENTIC_TRACE_ENV
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
        # an agentic job is run from its job file (sh, buildkite, slurm): a recipe key, arm and concurrency
        # do not name it
        if j.unrunnable is None and j.scenario != AGENTIC_CODING:
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
        raise ServelabError(f"{job.label()}: no benchmark client, so no result folder: {job.unrunnable}")
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
    lines = ["#!/usr/bin/env bash", *job_comments(job), "set -euo pipefail"]
    return "\n".join(lines + job_lines(job, launcher)) + "\n"


def job_comments(job) -> list[str]:
    """The comment lines that say which job a script (or a part of one) runs."""
    return [
        f"# servelab job: {job.label()}",
        f"# fingerprint: {job.fingerprint}",
        f"# image: {job.point.image}" + (f"@{job.image_digest}" if job.image_digest else ""),
    ]


def job_lines(job, launcher: str = DEFAULT_LAUNCHER, prefix: list[str] | None = None) -> list[str]:
    """The commands of a job script: check its secrets are set, write the job file, run `servelab run --job`
    on it (after `prefix`, e.g. srun's argv, each element quoted)."""
    if job.unrunnable is not None:
        raise ServelabError(f"{job.label()}: no script can be written: {job.unrunnable}")
    if launcher not in LAUNCHERS:
        raise ServelabError(f"launcher {launcher!r}: expected direct or docker")
    return trace_lines(job) + job_file_lines(job) + [shlex.join([*(prefix or []), *run_argv(job, launcher)])]


def trace_lines(job) -> list[str]:
    """An agentic job replays the trace file SERVELAB_AGENTIC_TRACE names (`servelab run` reads it there);
    without one the script stops in one line, exit 2, before any server starts."""
    if job.point.eval_only or not any(b.dataset_name == "trace" for b in job.benches):
        return []  # an eval-only job runs no benchmark
    var = AGENTIC_TRACE_ENV
    why = f"{var}: set it to the trace file this agentic-coding job replays (InferenceX's trace format)"
    return [f'[ -f "${{{var}:-}}" ] || {{ echo {shlex.quote(why)} >&2; exit 2; }}']


def job_file_lines(job) -> list[str]:
    """Check the job's secrets are set in the environment, then write the job file (a here-document)."""
    lines = [f': "${{{name}:?{name} must be set in the runner environment}}"' for name in job.secret_env]
    content = json.dumps(job.to_json(), indent=2)
    end = _heredoc_end(content)
    return lines + [f"cat > {JOB_FILE} <<'{end}'", content, end]


def script_name(job) -> str:
    concs = "-".join(map(str, job.concs()))
    evals = "-evals" if job.point.eval_only else ""  # beside the throughput job of the same point
    return f"{job.key}_{job.point.exp_name}_{job.topology()}-conc{concs}{evals}.sh"


def script_names(jobs) -> list[str]:
    """One file name per job. Jobs whose names repeat take what tells them apart, in turn: the runner node
    they were pinned to (`--runner-node-filter`), their spec-decoding (a multinode row's MTP and plain arms
    share its layout and name), and last the start of their fingerprint; only the same job twice is
    refused."""
    names = [script_name(j) for j in jobs]
    for tell in (
        lambda j: _file_safe(j.point.runner),
        lambda j: _file_safe(str(j.point.spec_decoding)),
        lambda j: j.fingerprint.removeprefix("sha256:")[:8],
    ):
        seen = Counter(names)
        names = [
            n.removesuffix(".sh") + f"_{tell(j)}.sh" if seen[n] > 1 else n
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
