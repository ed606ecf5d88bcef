"""`servelab run`: a perf-eval workload, a sweep job or a recipe arm, end to end (server, bench, evals,
assertions, results store). The library is servelab.run; this module reads options and prints."""

import json
import shlex
import sys
from pathlib import Path

import typer

from servelab.cli._common import Col, JsonOpt, StoreDirOpt, print_json, print_table, printable
from servelab.readable import number

_SERVER = "Server"
MAX_REPETITIONS = 1000  # a typo's bound: every repetition is a whole benchmark run (as recipes.workload's)
_STAGES = "Stages and assertions"


def _split(values: str | None) -> list[str] | None:
    return None if values is None else [v.strip() for v in values.split(",") if v.strip()]


def run(
    source: str | None = typer.Argument(
        None, help="A perf-eval workload file, or a recipe key (with --arm, --conc)."
    ),
    job: Path | None = typer.Option(
        None, "--job", help="A job of `servelab sweep --format json` (a file of one job, or --job-index)."
    ),
    job_index: int | None = typer.Option(
        None, "--job-index", min=0, help="Which job of a --job list (0-based)."
    ),
    arm: str | None = typer.Option(None, "--arm", help="Recipe arm: tpN-epN[-dpa][-ppN]."),
    conc: int | None = typer.Option(None, "--conc", min=1, help="Recipe concurrency."),
    seq_len: str | None = typer.Option(None, "--seq-len", help="Recipe seq-len name, e.g. 1k1k."),
    directory: Path = StoreDirOpt,
    stages: str | None = typer.Option(
        None,
        "--stages",
        help="Comma list of bench, gsm8k, bfcl (default: what the source has).",
        rich_help_panel=_STAGES,
    ),
    repetitions: int | None = typer.Option(
        None,
        "--repetitions",
        min=1,
        max=MAX_REPETITIONS,
        help="Runs of every bench point (default: the config's).",
        rich_help_panel=_STAGES,
    ),
    assertion: list[str] | None = typer.Option(
        None,
        "--assert",
        help="e.g. 'bench.p99_ttft_ms <= 3000' (repeatable; docs/run.md has the grammar).",
        rich_help_panel=_STAGES,
    ),
    baseline: str | None = typer.Option(
        None, "--baseline", help="Run id that `regress` assertions compare with.", rich_help_panel=_STAGES
    ),
    gsm8k_path: Path | None = typer.Option(
        None, "--gsm8k-path", help="A local GSM8K file instead of the hub's.", rich_help_panel=_STAGES
    ),
    bfcl_python: Path | None = typer.Option(
        None,
        "--bfcl-python",
        help="The BFCL environment's python (default: $SERVELAB_BFCL_PYTHON, ./.venv-bfcl, ...).",
        rich_help_panel=_STAGES,
    ),
    base_url: str | None = typer.Option(
        None,
        "--base-url",
        help="Attach to this running server instead of starting one.",
        rich_help_panel=_SERVER,
    ),
    model: str | None = typer.Option(None, "--model", help="Served model name.", rich_help_panel=_SERVER),
    tokenizer: str | None = typer.Option(
        None,
        "--tokenizer",
        help="Tokenizer for exact lengths (local path or cached hub id).",
        rich_help_panel=_SERVER,
    ),
    port: int = typer.Option(
        8000, "--port", min=1, max=65535, help="Workload server port.", rich_help_panel=_SERVER
    ),
    docker: bool = typer.Option(
        False, "--docker", help="Start the server in its image.", rich_help_panel=_SERVER
    ),
    image: str | None = typer.Option(
        None, "--image", help="Image for --docker (workloads).", rich_help_panel=_SERVER
    ),
    hf_cache: Path | None = typer.Option(
        None,
        "--hf-cache",
        help="Host HF cache mounted by --docker (default $HF_HOME).",
        rich_help_panel=_SERVER,
    ),
    server_timeout: float = typer.Option(
        3600.0, "--server-timeout", min=1, help="Seconds to wait for /health.", rich_help_panel=_SERVER
    ),
    server_stop_timeout: float = typer.Option(
        30.0,
        "--server-stop-timeout",
        min=0,
        max=3600,
        help="Seconds from SIGTERM to SIGKILL when the server is stopped.",
        rich_help_panel=_SERVER,
    ),
    store_path: str | None = typer.Option(
        None,
        "--store",
        help="Results store: an SQLite file (default: the user data dir) or a postgresql:// URL.",
    ),
    resume: str | None = typer.Option(
        None, "--resume", help="Run id: rerun only its stage rows that did not pass."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and exit."),
    as_json: bool = JsonOpt,
) -> int:
    """Run a workload end to end: start the server, benchmark and evaluate it, judge assertions, store it."""
    # the plan pulls in the recipe schema and the load generator (start-up time of every other command)
    from servelab.run import build  # noqa: PLC0415
    from servelab.run.launch_check import check_server, check_summary  # noqa: PLC0415  # as build

    plan, gpu = build.plan_from(
        source,
        job=job,
        job_index=job_index,
        arm=arm,
        conc=conc,
        seq_len=seq_len,
        directory=directory,
        stages=_split(stages),
        repetitions=repetitions,
        assertions=list(assertion or []),
        port=port,
        image=image,
    )
    # refused before any server starts (an attached server was started by someone else)
    check = None if base_url else check_summary(check_server(plan.server))
    if dry_run:
        if as_json:
            print_json("servelab.run.plan", plan.dump() | {"launch_check": check})
        else:
            _print_plan(plan.dump() | {"launch_check": check})
        return 0
    from servelab.results.store import Store  # noqa: PLC0415  # start-up time
    from servelab.run.execute import RunOptions, execute  # noqa: PLC0415  # start-up time

    opts = RunOptions(
        base_url=base_url,
        model=model,
        tokenizer=tokenizer,
        docker=docker,
        gpu=gpu,
        hf_cache=hf_cache,
        server_timeout_s=server_timeout,
        server_stop_timeout_s=server_stop_timeout,
        gsm8k_path=gsm8k_path,
        bfcl_python=bfcl_python,
        resume=resume,
        baseline=baseline,
    )
    with Store.open(store_path) as store:
        result = execute(plan, store, opts)
    if as_json:
        print_json("servelab.run", result.dump())
    else:
        _print_result(result)
    return result.exit_code


def _print_plan(d: dict) -> None:
    """The plan as lines of text; names from the workload shown with their control characters escaped."""
    s = d["server"]
    _line(f"run {d['name']} (from {d['source']})")
    if d["fingerprint"]:
        _line(f"fingerprint: {d['fingerprint']}")
    _line(("endpoint: " if s.get("deployment") else "server: ") + shlex.join(s["argv"]))
    for k, v in s["env"].items():
        _line(f"  env {k}={v}")
    for name in s["secret_env"]:
        _line(f"  env {name} (from the caller's environment)")
    _line(f"  image {s['image']}, port {s['port']}, model {s['model']}")
    for p in s.get("deployment", []):
        where = f"node {p['node']}, " + (f"port {p['port']}" if p["port"] is not None else "no port")
        _line(f"  {p['role']} {p['index']} ({where}, log {p['log']}): {shlex.join(p['argv'])}")
        for k, v in p["env"].items():
            _line(f"    env {k}={v}")
    check = d.get("launch_check")
    if check:
        _line(f"  flags accepted by {check['release']}" if check["release"] else "  flags not checked")
        for line in ([check["note"]] if check["note"] else []) + check["warnings"]:
            _line(f"    {line}")
    _line(f"stages: {', '.join(d['stages']) or 'none'}")
    for p in d["bench"]:
        f = p["fields"]
        extra = {k: v for k, v in f.items() if k not in _SHOWN}
        if f.get("dataset_name") == "trace":
            what = f"trace {f['dataset_path']}"
        else:
            what = f"in {f['random_input_len']} out {f['random_output_len']} prompts {f['num_prompts']}"
        _line(
            f"  bench {p['config']}: {what} conc {f['max_concurrency']} warm-ups {f.get('num_warmups', 0)} "
            f"x{p['repetitions']}" + (f" {json.dumps(extra)}" if extra else "")
        )
    for t in d["gsm8k"]:
        _line(f"  gsm8k {t['task']}: {t['num_fewshot']}-shot {json.dumps(t['model_args'])}")
    if d["bfcl"]:
        _line(f"  bfcl: {json.dumps(d['bfcl'])}")
    _line("assertions:" + ("" if d["assertions"] else " none"))
    for a in d["assertions"]:
        _line(f"  {a}")


def _line(text: str) -> None:
    print(printable(text))


_SHOWN = {
    "dataset_name", "dataset_path", "random_input_len", "random_output_len", "num_prompts", "max_concurrency",
    "num_warmups", "ignore_eos",
}  # fmt: skip
# what the summary shows of each stage (--json and `servelab results show` have every metric)
_KEY_METRICS = {
    "bench": ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "output_throughput"),
    "gsm8k": ("exact_match", "exact_match_flexible", "num_questions"),
    "bfcl": ("overall.accuracy", "overall.inference_errors"),
}


def _print_result(result) -> None:
    rows = []
    by_key: dict[tuple[str, str], list] = {}
    for r in result.rows:
        by_key.setdefault((r.stage, r.config), []).append(r)
    for (stage, config), members in by_key.items():
        metrics = result.metrics.get(stage, {}).get(config, {})
        keys = _KEY_METRICS.get(stage)
        names = [m for m in keys if m in metrics] if keys else sorted(metrics)[:4]
        shown = ", ".join(f"{m} {number(metrics[m]['median'])}" for m in names)
        ci = _ci(names[0], metrics[names[0]]) if names else ""
        status = ", ".join(sorted({m.status for m in members}))
        detail = "; ".join(sorted({m.detail for m in members if m.detail}))
        rows.append(
            [
                f"{stage} {config}".strip(),
                str(len(members)),
                status,
                shown,
                ci,
                detail,
            ]
        )
    print_table(
        [
            Col("stage", key=True),
            Col("runs", "right"),
            Col("status"),
            Col("medians"),
            Col("CI", drop=2),
            Col("detail", drop=1),
        ],
        rows,
        title=f"run {result.run_id}",
    )
    if result.judged:
        print_table(
            [Col("assertion", key=True), Col("outcome", key=True), Col("observed")],
            [[j.assertion.text, j.outcome, j.detail] for j in result.judged],
            title="assertions",
        )
    for e in result.errors:
        print(f"error: {printable(e)}", file=sys.stderr)
    print(f"{result.outcome}: run {result.run_id} ({printable(result.run_dir)})")


def _ci(name: str, m: dict) -> str:
    """The first metric's confidence interval, as the table shows it (none for a stage run once)."""
    if m["n"] == 1:
        return ""
    if m.get("ci_level") is None:
        return f"{name}: {m['ci']}"
    return f"{name}: [{number(m['ci_low'])}, {number(m['ci_high'])}] at {m['ci_level']:.1%}"
