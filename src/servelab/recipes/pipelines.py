"""Output formats for a list of jobs: JSON matrix, GitHub Actions matrix, Buildkite pipeline, shell script."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from servelab.errors import ServelabError
from servelab.recipes.ladder import seq_len_name
from servelab.recipes.yamlio import dump_yaml

# GitHub Actions refuses a matrix with more than 256 jobs; larger families are split.
GITHUB_MAX_JOBS = 256
# perf-eval polls /health every 5 s for about an hour before giving up.
HEALTH_POLL_S = 5
HEALTH_TIMEOUT_S = 3600
HEREDOC = "SERVELAB_EOF"
# How a job's script starts the engine: on the host (direct, the default) or in the recipe's image.
LAUNCHERS = ("direct", "docker")
DEFAULT_LAUNCHER = "direct"


def to_json(jobs) -> str:
    return json.dumps([j.to_json() for j in jobs], indent=2) + "\n"


def github_family(job) -> str:
    """The workflow job a row runs in, as InferenceX's run-sweep.yml splits its matrix (see its
    process_changelog.py): single-node-1k1k, single-node-8k1k, multi-node-<seq-len>, agentic,
    multi-node-agentic, and for eval-only rows evals, agentic-evals, multi-node-evals,
    multi-node-agentic-evals."""
    r = job.row
    multi = "multi-node-" if "prefill" in r else ""
    if r.get("scenario-type") == "agentic-coding":
        return f"{multi}agentic" + ("-evals" if r.get("eval-only") else "")
    if r.get("eval-only"):
        return f"{multi}evals"
    return f"{multi or 'single-node-'}{seq_len_name(r['isl'], r['osl'])}"


def to_github(jobs) -> str:
    """{matrix name: {"include": rows}}: one matrix per InferenceX workflow job family, and a family of more
    than 256 rows (GitHub's limit per matrix) split into NAME-1, NAME-2, ... in order."""
    families: dict[str, list[dict]] = {}
    for j in jobs:
        families.setdefault(github_family(j), []).append({**j.matrix_entry(), "queue": j.queue})
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


def _result_dir(job) -> str:
    client = job.benches[0].client
    return client[client.index("--result-dir") + 1]


def _server_cmd(job, launcher: str) -> list[str]:
    launch = job.launch
    if launcher == "direct":
        return launch.argv
    image = job.row["image"] + (f"@{job.image_digest}" if job.image_digest else "")
    argv = [
        "docker",
        "run",
        "--rm",
        "--name",
        _container(job),
        "--gpus",
        "all",
        "--ipc",
        "host",
        "--network",
        "host",
        "-v",
        "$PWD:/job",
        "-w",
        "/job",
    ]
    for k, v in launch.env.items():
        argv += ["-e", f"{k}={v}"]
    for name in job.secret_env:
        argv += ["-e", name]  # the value comes from the runner's environment, never from the script
    return argv + ["--entrypoint", launch.argv[0], image, *launch.argv[1:]]


def _heredoc_end(content: str) -> str:
    """A here-document delimiter that no line of `content` equals (a line equal to it would end the file
    early and run the rest as commands)."""
    lines = set(content.split("\n"))
    end, n = HEREDOC, 0
    while end in lines:
        n += 1
        end = f"{HEREDOC}_{n}"
    return end


def _container(job) -> str:
    return "servelab-" + job.fingerprint.removeprefix("sha256:")[:12]


def script(job, launcher: str = DEFAULT_LAUNCHER) -> str:
    """A bash script for one job: launch the server, wait for /health, run the benchmark (and evals), tear
    down."""
    if job.launch is None:
        raise ServelabError(f"{job.label()}: no script can be written: {job.not_renderable}")
    if launcher not in LAUNCHERS:
        raise ServelabError(f"launcher {launcher!r}: expected direct or docker")
    q = shlex.quote
    launch = job.launch
    lines = [
        "#!/usr/bin/env bash",
        f"# servelab job: {job.label()}",
        f"# fingerprint: {job.fingerprint}",
        f"# image: {job.row['image']}" + (f"@{job.image_digest}" if job.image_digest else ""),
        "set -euo pipefail",
    ]
    for name in job.secret_env:
        lines.append(f': "${{{name}:?{name} must be set in the runner environment}}"')
    if launcher == "direct":
        lines += [f"export {k}={q(v)}" for k, v in launch.env.items()]
    for rel, content in launch.files.items():
        end = _heredoc_end(content)
        lines += [f"cat > {q(rel)} <<'{end}'", content.rstrip("\n"), end]
    server = _server_cmd(job, launcher)
    # "$PWD:/job" must expand at run time; everything else is quoted literally.
    server_line = " ".join('"$PWD:/job"' if a == "$PWD:/job" else q(a) for a in server)
    stop = f"docker rm -f {_container(job)} >/dev/null 2>&1 || true" if launcher == "docker" else ":"
    lines += [
        f"mkdir -p {q(_result_dir(job))}",
        f"{server_line} > server.log 2>&1 &",
        "server_pid=$!",
        "cleanup() {",
        f"  {stop}",
        '  kill "$server_pid" 2>/dev/null || true',
        '  wait "$server_pid" 2>/dev/null || true',
        "}",
        "trap cleanup EXIT",
        f"deadline=$((SECONDS + {HEALTH_TIMEOUT_S}))",
        f"until curl -sf {q(f'http://localhost:{launch.port}{launch.health_path}')} >/dev/null; do",
        '  if ! kill -0 "$server_pid" 2>/dev/null; then',
        '    echo "server exited before becoming healthy; last lines of server.log:" >&2',
        "    tail -n 50 server.log >&2",
        "    exit 1",
        "  fi",
        '  if (( SECONDS > deadline )); then echo "server not healthy after '
        + str(HEALTH_TIMEOUT_S)
        + ' s" >&2; exit 1; fi',
        f"  sleep {HEALTH_POLL_S}",
        "done",
    ]
    lines += [shlex.join(bench.client) for bench in job.benches]
    lines += [shlex.join(argv) for argv in job.evals]
    return "\n".join(lines) + "\n"


def script_name(job) -> str:
    concs = "-".join(map(str, job.concs()))
    evals = "-evals" if job.row.get("eval-only") else ""  # beside the throughput job of the same point
    return f"{job.key}_{job.row['exp-name']}_{job.topology()}-conc{concs}{evals}.sh"


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
        scripts = {Path(out) / script_name(j): script(j, launcher) for j in jobs}
        for path, text in scripts.items():
            _write(path, text, executable=True)
        return "".join(f"{p}\n" for p in scripts)
    if fmt == "json":
        text = to_json(jobs)
    elif fmt == "github":
        text = to_github(jobs)
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
