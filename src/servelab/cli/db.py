"""`servelab db`: query the perf tables, and merge, check and describe them."""

import sys
from pathlib import Path

import typer

from servelab.cli._common import Col, print_json, print_table
from servelab.collect.repeat import compare
from servelab.errors import ServelabError
from servelab.perfdb.admin import accuracy_report, status_report, validate_paths
from servelab.perfdb.merge import merge as run_merge
from servelab.perfdb.query import answer, answer_lines, make_db

app = typer.Typer(
    no_args_is_help=True, help="Perf tables: query, status, accuracy, merge, validate, compare-repeat."
)

SystemOpt = typer.Option("h200_sxm", "--system", "-s", help="System whose tables answer (servelab systems).")
TablesOpt = typer.Option(
    None, "--tables", help="A table directory <system>/<backend>/<version> to use instead of the default one."
)
JsonOpt = typer.Option(False, "--json", help="Print JSON (one object per line for --batch).")


def _opt(help_: str):
    return typer.Option(None, help=help_, show_default=False)


@app.command()
def query(
    op: str = typer.Argument(
        None,
        help="gemm, attention_prefill, attention_decode, mla_prefill, mla_decode, "
        "dsv4_{csa,hca}_{context,generation}_module, moe, allreduce, allgather, "
        "reducescatter, alltoall, p2p, elementwise. Leave out with --batch FILE.",
    ),
    system: str = SystemOpt,
    tables: Path = TablesOpt,
    roofline: bool = typer.Option(False, "--roofline", help="Ignore the tables; answer from the roofline."),
    as_json: bool = JsonOpt,
    batch: str = typer.Option(
        None,
        "--batch",
        help='With OP: the batch size. Without OP: a JSONL file, one {"op": ..., shape fields} per line.',
        show_default=False,
    ),
    m: int = _opt("GEMM rows (tokens)."),
    n: int = _opt("GEMM output features (rank-local)."),
    k: int = _opt("GEMM input features (rank-local)."),
    dtype: str = _opt("Weight dtype: bf16, fp8, fp8_block, fp4, mxfp4, nvfp4 (gemm, moe)."),
    seq: int = _opt("New tokens per sequence (prefill)."),
    kv_len: int = _opt("Cached tokens (decode)."),
    heads: int = _opt("Query heads per rank."),
    kv_heads: int = _opt("KV heads per rank."),
    head_dim: int = _opt("Head dimension."),
    window: int = _opt("Sliding window (0 = full)."),
    kv_dtype: str = _opt("KV cache dtype."),
    native_heads: int = _opt("The model's heads before TP (MLA, DSv4)."),
    tokens: int = _opt("Tokens in the EP group (moe)."),
    hidden: int = _opt("Hidden size (moe)."),
    inter: int = _opt("Expert intermediate size per rank (moe)."),
    experts: int = _opt("Routed experts."),
    topk: int = _opt("Experts per token."),
    ep: int = _opt("Expert-parallel ranks."),
    distribution: str = _opt("Routing: uniform or power_law."),
    bytes_: int = typer.Option(
        None, "--bytes", help="Per-rank buffer bytes (collectives, elementwise).", show_default=False
    ),
    gpus: int = _opt("Ranks in the collective."),
    flops: int = _opt("Elementwise flops."),
    kernels: int = _opt("Small kernels an elementwise op stands for."),
) -> None:
    """Latency of one op, with its source (measured / interpolated / extrapolated / roofline) and error
    band."""
    if op is None and batch is None:
        raise ServelabError("db query: give an OP with shape flags, or --batch FILE.jsonl")
    db = make_db(system, tables, roofline)
    if op is None:
        failed = 0
        for result in answer_lines(db, Path(batch)):
            failed += "error" in result
            if as_json:
                print_json("servelab.db.query", result, indent=None)
            else:
                typer.echo(_line(result))
        if failed:
            raise ServelabError(
                f"{failed} line(s) of {batch} could not be answered (see their error objects)"
            )
        return
    fields = {
        name: value
        for name, value in (
            ("m", m),
            ("n", n),
            ("k", k),
            ("dtype", dtype),
            ("seq", seq),
            ("kv_len", kv_len),
            ("heads", heads),
            ("kv_heads", kv_heads),
            ("head_dim", head_dim),
            ("window", window),
            ("kv_dtype", kv_dtype),
            ("native_heads", native_heads),
            ("tokens", tokens),
            ("hidden", hidden),
            ("inter", inter),
            ("experts", experts),
            ("topk", topk),
            ("ep", ep),
            ("distribution", distribution),
            ("bytes", bytes_),
            ("gpus", gpus),
            ("flops", flops),
            ("kernels", kernels),
        )
        if value is not None
    }
    if batch is not None:
        if not batch.strip().isdigit():
            raise ServelabError(
                f"--batch {batch!r}: with an OP, --batch is the batch size (an integer); "
                "to answer a JSONL file, leave out OP"
            )
        fields["batch"] = int(batch)
    result = answer(db, op, fields)
    if as_json:
        print_json("servelab.db.query", result, indent=None)
    else:
        typer.echo(_line(result))


def _line(r: dict) -> str:
    if "error" in r:
        return f"error: {r['error']}"
    shape = " ".join(
        f"{k}={v}"
        for k, v in r.items()
        if k not in ("op", "system", "latency_us", "latency_us_low", "latency_us_high", "source", "note")
    )
    return (
        f"{r['op']} {shape}: {r['latency_us']:.2f} us "
        f"[{r['latency_us_low']:.2f}, {r['latency_us_high']:.2f}] {r['source']} ({r['note']})"
    )


@app.command()
def status(
    system: str = typer.Option(
        None, "--system", "-s", help="Only this system (default: every system with tables)."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """The table directories servelab would use, with rows, provenance and stored leave-one-out accuracy."""
    report = status_report(system)
    if as_json:
        print_json("servelab.db.status", {"tables": report})
        return
    if not report:
        typer.echo("no perf tables found; every op answers from the roofline")
    for entry in report:
        mark = "  (in use)" if entry["in_use"] else ""
        typer.echo(f"{entry['label']}{mark}  {entry['dir']}")
        for name, t in entry["tables"].items():
            prov = t["provenance"][-1] if t["provenance"] else {}
            acc = (t.get("accuracy") or {}).get("interpolated") or {}
            figs = (
                f"loo median {100 * acc['median']:.1f} % p90 {100 * acc['p90']:.1f} % (n={acc['n']})"
                if acc.get("n")
                else "loo: -"
            )
            typer.echo(
                f"  {name:18} {t['rows']:7d} rows {t['groups']:5d} groups  {figs}  "
                f"{prov.get('gpu_name', '?')} torch {prov.get('torch', '?')} {prov.get('date', '?')}"
            )
        for name, why in entry["skipped"].items():
            typer.echo(f"  {name:18} SKIPPED: {why}")


@app.command()
def accuracy(
    system: str = typer.Option(
        None, "--system", "-s", help="Only this system (default: every system with tables)."
    ),
    tables: Path = TablesOpt,
    as_json: bool = JsonOpt,
    check: bool = typer.Option(
        False,
        "--check",
        help="Exit 1 when a GEMM or attention table misses the targets (median <= 5 %, p90 <= 15 %).",
    ),
) -> None:
    """Leave-one-out error per table, recomputed now: interpolated, extrapolated and borrowed points."""
    report = accuracy_report(system, tables)
    if as_json:
        print_json("servelab.db.accuracy", {"tables": report})
    else:
        if not report:
            typer.echo("no perf tables found")
        for entry in report:
            typer.echo(entry["label"])
            for name, t in entry["tables"].items():
                verdict = {True: "meets target", False: "MISSES target", None: ""}[t["passes"]]
                for kind, s in t["accuracy"].items():
                    if s.get("n"):
                        typer.echo(
                            f"  {name:18} {kind:12} n={s['n']:6d}  median {100 * s['median']:5.1f} %  "
                            f"p90 {100 * s['p90']:5.1f} %  "
                            f"band [{100 * s['lo']:+.1f} %, {100 * s['hi']:+.1f} %]"
                            + (f"  {verdict}" if kind == "interpolated" and verdict else "")
                        )
            for name, why in entry["skipped"].items():
                typer.echo(f"  {name:18} SKIPPED: {why}")
    if check and any(t["passes"] is False for e in report for t in e["tables"].values()):
        raise typer.Exit(1)


@app.command()
def merge(
    dirs: list[Path] = typer.Argument(
        ..., help="Collector campaign directories (rows/*.jsonl, provenance.json)."
    ),
    into: Path = typer.Option(..., "--into", help="Table directory: .../<system>/<backend>/<version>/"),
    drop_bad: bool = typer.Option(
        False, "--drop-bad", help="Skip rows that break an invariant (listed) instead of stopping."
    ),
    ops: str = typer.Option(
        "", "--ops", help="Merge only these ops' rows, comma separated (default: every op of the campaigns)."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Merge campaigns into Parquet tables (one per op family), newest measurement of a key winning."""
    only = {o.strip() for o in ops.split(",") if o.strip()} or None
    report = run_merge(
        dirs, into, drop_bad=drop_bad, command="servelab db " + " ".join(sys.argv[2:]), ops=only
    )
    if as_json:
        print_json("servelab.db.merge", report)
        return
    for c in report["campaigns"]:
        typer.echo(f"campaign {c['dir']}: {c['rows']} rows, {c['errors']} collector errors, date {c['date']}")
    for name, t in report["tables"].items():
        acc = t["accuracy"].get("interpolated", {})
        figs = (
            f"loo median {100 * acc['median']:.1f} % p90 {100 * acc['p90']:.1f} %"
            if acc.get("n")
            else "loo: -"
        )
        dup = (
            f", {t['replaced_by_newer']} keys measured again (newest kept)" if t["replaced_by_newer"] else ""
        )
        typer.echo(f"  {name:18} {t['rows']:7d} rows{dup}  {figs}")
    for msg in report["dropped"]:
        typer.echo(f"  dropped: {msg}")
    typer.echo(f"wrote {report['into']}")


@app.command()
def fit(
    into: Path = typer.Option(
        ..., "--into", help="The tables' data root (src/servelab/perfdb/data in a checkout)."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Fit each engine's torch-to-engine ratios and the transfer efficiencies between systems from the
    tables on the search path; write INTO/ratios/<engine>.json and INTO/transfer.json."""
    from servelab.perfdb.fitting import fit_all  # noqa: PLC0415  (reads every table: only this command)

    report = fit_all(into)
    if as_json:
        print_json("servelab.db.fit", report)
        return
    for kernels in report["ratios"].values():
        for kernel, families in kernels.items():
            for family, r in families.items():
                typer.echo(
                    f"{kernel:14} {family:18} ratio {r['ratio']:.3f} to torch on {r['rows']} rows, "
                    f"leave-one-out band {100 * r['lo']:+.1f} %/{100 * r['hi']:+.1f} %"
                )
    for t in report["transfer"]:
        typer.echo(
            f"{t['source']} -> {t['target']} {t['family']:18} efficiency {t['efficiency']:.3f} on "
            f"{t['rows']} keys, band {100 * t['lo']:+.1f} %/{100 * t['hi']:+.1f} %"
        )
    typer.echo(f"wrote {into}")


@app.command()
def validate(
    paths: list[Path] = typer.Argument(
        None,
        help="Table files, table directories or campaign directories; "
        "default: every table servelab can find.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: an object per file checked."),
) -> None:
    """Strictly check tables (and campaigns before a merge); exit 2 naming each file that fails."""
    results = validate_paths(paths or None)
    if as_json:
        checked = [{"path": str(p), "ok": problem is None, "problem": problem} for p, problem in results]
        print_json("servelab.db.validate", {"files": checked})
    else:
        for path, problem in results:
            status = "ok  " if problem is None else "FAIL"
            typer.echo(f"{status} {path}" + (f"\n     {problem}" if problem else ""))
        if not results:
            typer.echo("nothing to validate: no perf tables found")
    bad = sum(problem is not None for _, problem in results)
    if bad:
        raise ServelabError(f"{bad} of {len(results)} table file(s) or campaign(s) failed validation")


@app.command("compare-repeat")
def compare_repeat(
    first: Path = typer.Argument(..., help="The first campaign directory (rows/*.jsonl)."),
    second: Path = typer.Argument(
        ..., help="A campaign that measured a sample of its keys again (servelab collect --repeat-of)."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Repeatability: the spread of (second / first - 1) per op and overall, over the keys both measured."""
    for campaign in (first, second):
        if not any(campaign.glob("rows/*.jsonl")):
            raise ServelabError(f"{campaign}: not a collector campaign directory (no rows/*.jsonl)")
    spread = compare(first, second)
    if as_json:
        print_json("servelab.db.compare_repeat", spread)
        return
    columns = [Col("op", key=True), Col("keys", "right", key=True)]
    columns += [Col(h, "right") for h in ("median %", "p5 %", "p95 %", "|median| %", "within 5 %")]
    rows = [_spread_row(op, s) for op, s in spread["per_op"].items()] + [_spread_row("all", spread["all"])]
    print_table(columns, rows, title=f"second / first - 1, key by key, in % ({second} against {first})")


def _spread_row(op: str, s: dict) -> list[str]:
    if not s["n"]:
        return [op, "0", "-", "-", "-", "-", "-"]
    cells = [f"{s[k]:+.2f}" for k in ("median_pct", "p5_pct", "p95_pct")] + [f"{s['abs_median_pct']:.2f}"]
    return [op, str(s["n"]), *cells, f"{100 * s['within_5pct']:.1f} %"]
