"""Pin a corpus of InferenceX refs servelab was not built on, with InferenceX's own full sweep of each.

    PYTHONPATH=src python scripts/refresh_inferencex_refs.py pin --mirror GIT_DIR [--list]  # choose, pin
    PYTHONPATH=src python scripts/refresh_inferencex_refs.py pin --mirror GIT_DIR --generator-only [--check]
    PYTHONPATH=src python scripts/refresh_inferencex_refs.py table [--check]  # the table in the docs
    PYTHONPATH=src python scripts/refresh_inferencex_refs.py compare  # every comparison, as JSON
    (each with `--set heldout` before the command for held-out set 2, below)

GIT_DIR is a clone (bare is fine) of github.com/SemiAnalysisAI/InferenceX with its pull-request refs
(`refs/pull/N/head`). The corpus is chosen by a fixed rule, written before any result was looked at, so
that it is not picked to pass:

- main: the first-parent commits of `main` at distance 90, 180, ..., 1080 from the pinned commit servelab
  was built on (PINNED; 12 snapshots about two weeks apart, reaching back about six months);
- pull requests: `refs/pull/N/head` by descending N, keeping a head that is not the pinned commit or one of
  its ancestors and whose diff against its merge base with `main` touches `configs/`, until 13 are kept;
- a ref whose master files and runners.yaml are byte for byte those of the pinned commit or of a ref already
  kept is skipped (it would test nothing new): the next older main commit, or the next pull request, is
  taken instead.

Held-out set 2 (`--set heldout`, DEST tests/data/inferencex_refs_heldout/), its rule written and committed
before any of its refs was pinned or compared, after servelab had been fixed against the corpus above (which
is in-sample since) and 12 more snapshots (main at distance 45, 135, ..., 1035) had been tried once:

- main: the first-parent commits of `main` at distance 15, 105, 195, ..., 825 from PINNED (10 snapshots,
  none tried before); one that is skipped is replaced by the next older first-parent commit, never reaching
  the next chosen distance nor a distance tried before (a multiple of 45);
- pull requests: `refs/pull/N/head` with N below 2693 (the lowest pull request of the corpus) by descending
  N, keeping a head that is not the pinned commit or one of its ancestors and whose diff against its merge
  base with `main` touches `configs/`, until 15 are kept;
- the same skip as the corpus, with the corpus counted as kept: a ref whose master files and runners.yaml
  are byte for byte those of the pinned commit, of a ref of the corpus, or of a ref of this set already
  kept, is skipped.

The comparison of this set was run once before any fix and its figure recorded (docs/recipes.md, beside its
table); fixes made after it are general rules of upstream's generator, never a ref's special case, and the
figure after them is in-sample.

For each ref, only what servelab's sweep reads is pinned, gzip'd, under DEST/<short sha>/configs/: the
master files InferenceX's tools merge and its runners.yaml (that ref's `utils/constants.py` MASTER_CONFIGS,
in its order, and RUNNER_CONFIG; before mid-2026 they lived in `.github/configs/`); beside them
`sweep.json.gz`, what that ref's own `utils/matrix_logic/generate_sweep_configs.py full-sweep` printed (its
rows, or its exit status and stderr when it refused), `generator-facts.json`, the facts servelab reads from
that generator's source and its validator's beside it (recipes/ix_generator.py's `parse_generator` run on
them, written by `generator_to_json`, with the sources' sha256 and the commit; a checkout's generator is
read, never run, by servelab), and UPSTREAM.md (commit, date, licence). `pin --generator-only` writes just
the facts of the refs already in DEST/index.json; with `--check` it writes nothing and fails when parsing
the mirror's generators again gives facts other than those pinned (a parser change is noticed when
re-pinning). The generator runs in
a `git archive` of the ref with this Python (it needs pyyaml and pydantic, as upstream's requirements say).
DEST/index.json lists the refs in corpus order with how each was chosen. No upstream code is copied: only
its data files (configs, its sweep's output) and facts servelab derived from its generator.

`table` runs servelab's sweep (`servelab sweep --dir CONFIGS --format json`, through the library) on each
pinned ref and compares it with upstream's rows, row for row, field for field, in order ("jobs equal":
upstream rows servelab gives exactly, anywhere; "equal on upstream's fields": the same, ignoring fields a
newer generator added); it writes the conformance table into docs/recipes.md (`--check`: fails when the
table there is not current).
tests/recipes/test_inferencex_refs.py holds the same comparison as a test.
"""

import argparse
import gzip
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PINNED = "843c6254ff69b567f772f6a5fd97675af3d04431"
ROOT = Path(__file__).resolve().parents[1]
DEST = ROOT / "tests" / "data" / "inferencex_refs"
HELDOUT = ROOT / "tests" / "data" / "inferencex_refs_heldout"
DOCS = ROOT / "docs" / "recipes.md"
URL = "https://github.com/SemiAnalysisAI/InferenceX"
MAIN_STEP = 90


@dataclass(frozen=True)
class RefSet:
    """A set of refs chosen by its rule (the docstring): main distances, pull requests, where it is pinned."""

    dest: Path
    distances: tuple[int, ...]  # first-parent distances from PINNED
    pr_count: int
    pr_below: int | None = None  # only pull requests numbered below this
    tried: int | None = None  # distances that are multiples of this were tried before: never taken
    kept_before: Path | None = None  # a set whose refs count as kept (their configs are skipped)
    marker: str = "refs table"

    @property
    def begin(self) -> str:
        return f"<!-- {self.marker}: generated by scripts/refresh_inferencex_refs.py table -->"

    @property
    def end(self) -> str:
        return f"<!-- end of {self.marker} -->"


CORPUS = RefSet(DEST, tuple(range(90, 1081, 90)), 13)
SETS = {
    "corpus": CORPUS,
    "heldout": RefSet(
        HELDOUT,
        tuple(range(15, 826, 90)),
        15,
        pr_below=2693,
        tried=45,
        kept_before=DEST,
        marker="held-out refs table",
    ),
}
BEGIN, END = CORPUS.begin, CORPUS.end
GENERATOR = "utils/matrix_logic/generate_sweep_configs.py"
VALIDATOR = "utils/matrix_logic/validation.py"
FACTS = "generator-facts.json"
# Why a ref's sweep differs from upstream's, by short sha (of either set): written by hand after reading the
# difference.
# servelab follows the checkout's own generator (recipes/ix_generator.py reads what it prints from its
# utils/matrix_logic/generate_sweep_configs.py; here: the facts pinned in generator-facts.json), so a listed
# difference is one servelab does not follow yet, or a workaround written into that generator's code for
# one model and cluster, which servelab does not copy. (Every ref of the corpus gives upstream's sweep.)
KNOWN: dict[str, str] = {
    "7327e71f3": "that generator's mark_eval_entries skips DeepSeek-V4-Pro on gb300-cw with dynamo-sglang in"
    " its code (a TODO until an srt-slurm pin is bumped), a workaround servelab does not copy",
}


def git(gitdir: Path, *args: str) -> str:
    cmd = ["git", f"--git-dir={gitdir}", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def ok(gitdir: Path, *args: str) -> bool:
    return subprocess.run(["git", f"--git-dir={gitdir}", *args], capture_output=True).returncode == 0


def config_files(gitdir: Path, sha: str) -> tuple[list[str], str]:
    """That ref's MASTER_CONFIGS and RUNNER_CONFIG (utils/constants.py; configs/ lived in .github/configs/
    until mid-2026), read as data, never imported."""
    text = git(gitdir, "show", f"{sha}:utils/constants.py")
    start = text.index("MASTER_CONFIGS")
    body = text[text.index("[", start) : text.index("]", start) + 1]
    runners = text[text.index("RUNNER_CONFIG") :].split("\n", 1)[0].split("=", 1)[1].strip()
    return json.loads(body.replace("'", '"')), runners.strip("'\"")


def configs_id(gitdir: Path, sha: str) -> str:
    masters, runners = config_files(gitdir, sha)
    files = [*masters, runners]
    return git(gitdir, "rev-parse", *(f"{sha}:{name}" for name in files)).replace("\n", " ")


def select(gitdir: Path, spec: RefSet = CORPUS) -> list[dict]:
    chosen: list[dict] = []
    seen = {configs_id(gitdir, PINNED)}
    if spec.kept_before is not None:
        seen |= {
            configs_id(gitdir, e["commit"]) for e in json.loads((spec.kept_before / "index.json").read_text())
        }

    def keep(sha: str, how: str) -> bool:
        try:
            ident = configs_id(gitdir, sha)
        except (subprocess.CalledProcessError, ValueError):
            return False  # no master files or constants at that ref: not a checkout servelab can read
        if ident in seen:
            return False
        seen.add(ident)
        chosen.append({"commit": sha, "chosen-as": how})
        return True

    main = git(gitdir, "rev-list", "--first-parent", PINNED).split()
    for start in spec.distances:
        # the snapshot at that distance, or the next older one whose configs differ from those already kept
        for distance in range(start, min(start + MAIN_STEP, len(main))):
            if distance != start and spec.tried and distance % spec.tried == 0:
                continue  # tried before: not held out
            if keep(main[distance], f"main~{distance} (first parent)"):
                break
    heads = [
        line.split()
        for line in git(
            gitdir, "for-each-ref", "--format=%(objectname) %(refname)", "refs/pull/"
        ).splitlines()
        if line.endswith("/head")
    ]
    heads.sort(key=lambda h: -int(h[1].split("/")[2]))
    kept = 0
    for sha, ref in heads:
        if kept == spec.pr_count:
            break
        if spec.pr_below is not None and int(ref.split("/")[2]) >= spec.pr_below:
            continue
        if sha == PINNED or ok(gitdir, "merge-base", "--is-ancestor", sha, PINNED):
            continue
        base = git(gitdir, "merge-base", PINNED, sha).strip()
        if not git(gitdir, "diff", "--name-only", base, sha, "--", "configs/", ".github/configs/").strip():
            continue
        if keep(sha, f"{ref.removeprefix('refs/')} (PR head)"):
            kept += 1
    return chosen


def write_gz(path: Path, data: bytes) -> None:
    # mtime=0 keeps the bytes identical when the content is, so a refresh shows only real changes.
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(data)


def upstream_sweep(gitdir: Path, sha: str, masters: list[str], runners: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", f"--git-dir={gitdir}", "archive", sha, str(Path(runners).parent), "utils"],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        cmd = [sys.executable, "utils/matrix_logic/generate_sweep_configs.py", "full-sweep"]
        cmd += ["--config-files", *masters, "--runner-config", runners]
        run = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
    record: dict = {"args": [], "exit_code": run.returncode}
    if run.returncode == 0:
        record["rows"] = json.loads(run.stdout)
    else:
        record["stderr"] = run.stderr[-4000:]
    return record


def write_upstream_md(out: Path, sha: str, date: str, chosen_as: str) -> None:
    (out / "UPSTREAM.md").write_text(
        f"# Pinned upstream data\n\nsource: {URL}\ncommit: {sha}\ncommit date: {date}\n"
        f"chosen as: {chosen_as}\nlicence: Apache-2.0 (LICENSE in tests/data/inferencex/)\n\n"
        "configs/: the master files InferenceX merges (its utils/constants.py, in that order) and\n"
        "runners.yaml, gzip'd; sweep.json.gz: what its utils/matrix_logic/generate_sweep_configs.py\n"
        "full-sweep printed; generator-facts.json: the facts servelab reads from that generator's source\n"
        "(src/servelab/recipes/ix_generator.py), with the source's sha256; the source itself is not pinned.\n"
        "From scripts/refresh_inferencex_refs.py.\n"
    )


def pin(gitdir: Path, entry: dict, dest: Path) -> dict:
    sha = entry["commit"]
    short = sha[:9]
    out = dest / short
    shutil.rmtree(out, ignore_errors=True)
    (out / "configs").mkdir(parents=True)
    masters, runners = config_files(gitdir, sha)
    for name in [*masters, runners]:
        blob = subprocess.run(["git", f"--git-dir={gitdir}", "show", f"{sha}:{name}"], capture_output=True)
        write_gz(out / "configs" / f"{Path(name).name}.gz", blob.stdout)
    record = upstream_sweep(gitdir, sha, masters, runners)
    write_gz(out / "sweep.json.gz", (json.dumps(record, sort_keys=True) + "\n").encode())
    date = git(gitdir, "log", "-1", "--format=%cI", sha).strip()
    write_upstream_md(out, sha, date, entry["chosen-as"])
    (out / FACTS).write_text(generator_facts(gitdir, sha))
    rows = len(record.get("rows", []))
    return {
        **entry,
        "short": short,
        "date": date,
        "masters": masters,
        "exit_code": record["exit_code"],
        "rows": rows,
    }


def generator_facts(gitdir: Path, sha: str) -> str:
    """The text of generator-facts.json for that ref: what servelab's parser reads from its generator."""
    from servelab.recipes.ix_generator import generator_to_json, parse_generator  # noqa: PLC0415

    source = subprocess.run(
        ["git", f"--git-dir={gitdir}", "show", f"{sha}:{GENERATOR}"], capture_output=True, check=True
    ).stdout
    # its validator beside it, when that ref has one (the fields each kind of master entry may carry)
    checks = subprocess.run(["git", f"--git-dir={gitdir}", "show", f"{sha}:{VALIDATOR}"], capture_output=True)
    validator = checks.stdout if checks.returncode == 0 else None
    facts = parse_generator(
        source.decode("utf-8", errors="replace"),
        f"{URL}/blob/{sha}/{GENERATOR}",
        None if validator is None else validator.decode("utf-8", errors="replace"),
    )
    record = {
        "commit": sha,
        "source": GENERATOR,
        "source-sha256": hashlib.sha256(source).hexdigest(),
        "validator-sha256": None if validator is None else hashlib.sha256(validator).hexdigest(),
        "facts": generator_to_json(facts),
    }
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def pinned_generator(ref_dir: Path):
    """The SweepGenerator pinned for a ref (its generator-facts.json)."""
    from servelab.recipes.ix_generator import generator_from_json  # noqa: PLC0415

    path = ref_dir / FACTS
    return generator_from_json(json.loads(path.read_text())["facts"], str(path))


@contextmanager
def checkout(ref_dir: Path) -> Iterator[Path]:
    """A configs/ directory holding the pinned files of a ref, unzipped, as a checkout has them."""
    with tempfile.TemporaryDirectory() as tmp:
        configs = Path(tmp) / "configs"
        configs.mkdir()
        for f in sorted((ref_dir / "configs").glob("*.gz")):
            (configs / f.name.removesuffix(".gz")).write_bytes(gzip.decompress(f.read_bytes()))
        yield configs


def compare(ref_dir: Path, cache=None) -> dict:
    """servelab's sweep of a pinned ref against upstream's: counts and a verdict; `cache` (a JobCache) holds
    the jobs of the refs compared before, so a recipe unchanged between refs is rendered once."""
    from servelab.errors import ServelabError  # noqa: PLC0415  # `pin --list` runs without servelab
    from servelab.recipes.recipe_store import open_store  # noqa: PLC0415
    from servelab.recipes.sweep import SERVELAB_FIELDS, expand  # noqa: PLC0415

    upstream = json.loads(gzip.decompress((ref_dir / "sweep.json.gz").read_bytes()))
    with checkout(ref_dir) as configs:
        try:
            store = open_store(configs)
            # the ref's generator, from its pinned facts (a checkout's own would be parsed from its source)
            store.generator = pinned_generator(ref_dir)
            jobs = expand(store, cache=cache)
            # a job's JSON holds its row's fields and SERVELAB_FIELDS: the row, less those, is the rest
            rows = [{k: v for k, v in j.row.items() if k not in SERVELAB_FIELDS} for j in jobs]
            error, notes = None, list(store.notes or ())
        except ServelabError as e:
            rows, error, notes = None, str(e).replace(str(configs), "configs"), []
    out = {"upstream": len(upstream.get("rows", [])), "notes": notes}
    if upstream["exit_code"] != 0:
        return out | {
            "equal": 0,
            "verdict": "both refuse" if error else "upstream refuses, servelab reads it",
        }
    if rows is None:
        return out | {"equal": 0, "verdict": f"servelab refuses: {error}"}
    expected = upstream["rows"]
    # rows equal anywhere (a missing or extra row shifts every later one)
    equal = sum((Counter(map(_row_id, rows)) & Counter(map(_row_id, expected))).values())
    out["on-fields"] = _equal_on_upstreams_fields(rows, expected)
    if rows == expected:
        return out | {"equal": equal, "verdict": "equal"}
    if len(rows) == len(expected):
        fields: Counter[str] = Counter()
        for a, b in zip(rows, expected, strict=True):
            fields.update(k for k in a.keys() | b.keys() if a.get(k, _ABSENT) != b.get(k, _ABSENT))
        what = ", ".join(f"{k} {n}" for k, n in sorted(fields.items(), key=lambda x: (-x[1], x[0]))[:5])
        return out | {"equal": equal, "verdict": f"differs: rows in order, fields differing: {what}"}
    return out | {"equal": equal, "verdict": f"differs: {len(rows)} rows from servelab"}


_ABSENT = object()


def _shape(row):
    """The key structure of a row (nested mappings included)."""
    if isinstance(row, dict):
        return tuple(sorted((k, _shape(v)) for k, v in row.items()))
    return None


def _project(value, like):
    """`value` with only the keys `like` has, recursively: what an older generator would have printed."""
    if isinstance(value, dict) and isinstance(like, dict):
        return {k: _project(value.get(k), v) for k, v in like.items()}
    return value


# Fields most rows differ in: a servelab row is projected onto a shape of upstream's rows only where it equals
# one of them on these first (cheap, and a row that differs in one cannot equal it on every field). Projecting
# every row onto each of a ref's 20-odd shapes was a fifth of the comparison's CPU.
_PROBE = ("conc", "isl", "osl", "tp", "ep", "image", "model", "runner", "exp-name", "precision", "framework")


def _equal_on_upstreams_fields(rows: list[dict], expected: list[dict]) -> int:
    """Upstream rows that a servelab row equals on upstream's fields (an older generator printed fewer),
    anywhere in the sweep."""
    by_shape: dict = {}
    for row in expected:
        by_shape.setdefault(_shape(row), []).append(row)
    total = 0
    probed: dict[tuple[str, ...], list[str]] = {}  # the rows' values of these fields, by the fields
    for group in by_shape.values():
        like = group[0]
        # a projection keeps a field whose value is not a mapping in upstream's rows as the row has it
        probe = tuple(k for k in _PROBE if k in like and not isinstance(like[k], dict))
        if probe not in probed:
            probed[probe] = [_row_id([r.get(k) for k in probe]) for r in rows]
        probes = {_row_id([r[k] for k in probe]) for r in group}
        candidates = [r for r, p in zip(rows, probed[probe], strict=True) if p in probes]
        mine = Counter(_row_id(_project(r, like)) for r in candidates)
        total += sum((mine & Counter(map(_row_id, group))).values())
    return total


def _row_id(row: dict) -> str:
    return json.dumps(row, sort_keys=True)


def table(dest: Path, results: dict[str, dict] | None = None, spec: RefSet = CORPUS) -> str:
    """The markdown table; `results` (short sha -> compare()) when already computed."""
    index = json.loads((dest / "index.json").read_text())
    lines = [
        spec.begin,
        "| ref | chosen as | date | jobs upstream | jobs equal | equal on upstream's fields | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    same = 0
    for entry in index:
        result = (results or {}).get(entry["short"]) or compare(dest / entry["short"])
        reason = KNOWN.get(entry["short"])
        verdict = result["verdict"] + (f": {reason}" if reason else "")
        same += result["verdict"] in ("equal", "both refuse")
        cells = [
            entry["short"],
            entry["chosen-as"],
            entry["date"][:10],
            result["upstream"],
            result["equal"],
            result.get("on-fields", 0),
            verdict,
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += [
        "",
        f"{same} of {len(index)} refs give upstream's sweep exactly (or refuse as upstream does).",
        spec.end,
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    pin_cmd = sub.add_parser("pin", help="choose the corpus by its rule and pin each ref")
    pin_cmd.add_argument(
        "--mirror", type=Path, required=True, help="git dir of an InferenceX clone with PR refs"
    )
    pin_cmd.add_argument("--list", action="store_true", help="print the chosen refs and stop")
    pin_cmd.add_argument(
        "--generator-only",
        action="store_true",
        help="write only the generator facts of the refs in index.json",
    )
    pin_cmd.add_argument(
        "--check",
        action="store_true",
        help="with --generator-only: write nothing, fail when the mirror's generators parse to other facts",
    )
    sub.add_parser("compare", help="print as JSON each ref's comparison, the known differences and the table")
    table_cmd = sub.add_parser("table", help="write the conformance table into docs/recipes.md")
    table_cmd.add_argument(
        "--check", action="store_true", help="fail when the table in the docs is not current"
    )
    parser.add_argument(
        "--set", choices=sorted(SETS), default="corpus", help="which set of refs (default: the corpus)"
    )
    parser.add_argument("--dest", type=Path, help="where the set is pinned (default: the set's directory)")
    args = parser.parse_args()
    spec = SETS[args.set]
    args.dest = args.dest or spec.dest
    if args.command == "compare":  # what tests/recipes/test_inferencex_refs*.py check
        from servelab.recipes.sweep import JobCache  # noqa: PLC0415

        index = json.loads((args.dest / "index.json").read_text())
        cache = JobCache()  # the refs are snapshots of one repository: most recipes repeat between them
        results = {e["short"]: compare(args.dest / e["short"], cache) for e in index}
        answer = {
            "pinned": PINNED,
            "known": {s: KNOWN[s] for s in results if s in KNOWN},
            "results": results,
            "table": table(args.dest, results, spec),
        }
        print(json.dumps(answer))
        return
    if args.command == "table":
        text = DOCS.read_text()
        start, end = text.index(spec.begin), text.index(spec.end) + len(spec.end)
        new = text[:start] + table(args.dest, spec=spec) + text[end:]
        if args.check:
            if new != text:
                sys.exit(f"docs/recipes.md: the {spec.marker} is not current; run this script's table")
            return
        DOCS.write_text(new)
        return
    if args.generator_only:
        stale = []
        for entry in json.loads((args.dest / "index.json").read_text()):
            out = args.dest / entry["short"]
            facts = generator_facts(args.mirror, entry["commit"])
            if args.check:
                path = out / FACTS
                if not path.is_file() or path.read_text() != facts:
                    stale.append(entry["short"])
                continue
            (out / FACTS).write_text(facts)
            write_upstream_md(out, entry["commit"], entry["date"], entry["chosen-as"])
        if stale:
            sys.exit(f"generator facts not those the parser reads from the mirror now: {', '.join(stale)}")
        return
    if args.check:
        parser.error("--check goes with --generator-only")
    corpus = select(args.mirror, spec)
    if args.list:
        for entry in corpus:
            print(entry["commit"][:9], entry["chosen-as"])
        return
    args.dest.mkdir(parents=True, exist_ok=True)
    for old in args.dest.iterdir():
        if old.is_dir():
            shutil.rmtree(old)
    index = []
    for entry in corpus:
        pinned = pin(args.mirror, entry, args.dest)
        print(f"{pinned['short']} {pinned['date'][:10]} exit {pinned['exit_code']} rows {pinned['rows']}")
        index.append(pinned)
    (args.dest / "index.json").write_text(json.dumps(index, indent=1) + "\n")


if __name__ == "__main__":
    main()
