"""What the user's InferenceX checkout's own sweep generator prints, read from its source.

servelab prints InferenceX's rows as today's `utils/matrix_logic/generate_sweep_configs.py` does (matrix.py).
A checkout of an older InferenceX carries an older generator, which printed some rows differently. servelab
follows the checkout it is given: it reads these facts from that file (parses it, never runs it, never keys
on a commit or a date):

- the fields each kind of row carries (ix_generator_fields.py; `pp`, `dcp-size` and `pcp-size` arrived in
  mid-2026, in pools too; agentic rows' `spec-decoding` and `total-cpu-dram-gb` later);
- the margin max-model-len adds to isl + osl (200 until April 2026, then 256) and the seq-len pairs it names
  (`1k8k` until March 2026);
- how multinode agentic rows are named and how many concurrencies one holds (without ep and dpa, up to 4
  concurrencies a row, until August 2026);
- its eval marking (`mark_eval_entries`): whether a full sweep marks evals unless told not to (only on
  request, `--run-evals`, until March 2026), the seq-len pair evals run at, the lowest concurrency one runs
  at, how single-node rows are picked (the highest and the median concurrency; until March 2026 the highest
  concurrency of the highest and of the lowest tp), how multinode rows are (per topology at the highest
  concurrency; from April to June 2026 one per model, runner, framework, precision, spec-decoding and the
  pools' dp-attn, at the median; none before), and whether agentic rows carry `run-eval` (not until July
  2026);
- the top-level fields its validator (`validation.py` beside it; ix_validator.py) lets each kind of master
  entry carry: a field it forbids makes that generator refuse the checkout, and servelab too.

A fact the file does not show keeps today's value; a store that is no checkout (no generator beside it) is
today's. The facts are also written and read as JSON (`generator_to_json`, `generator_from_json`): the refs
corpus pins each ref's facts, not its generator's source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from servelab.errors import ServelabError
from servelab.recipes.ix_generator_fields import printed_fields
from servelab.recipes.ix_validator import VALIDATOR, entry_fields
from servelab.recipes.ladder import SEQ_LEN_NAMES

# Where the generator sits in a checkout, from its top.
GENERATOR = Path("utils") / "matrix_logic" / "generate_sweep_configs.py"
# Row fields InferenceX added to its rows' literals over time: a checkout's generator that does not print one
# in a kind of row (ix_generator_fields.py) has servelab leave it out there. Other fields follow servelab's
# rules (some are set outside the literals, conditionally, which reading the literal cannot tell).
LATE_FIELDS = frozenset({"pp", "dcp-size", "pcp-size", "spec-decoding", "total-cpu-dram-gb", "kv-offloading"})
_MARGIN = re.compile(r"\bisl\s*\+\s*osl\s*\+\s*(\d+)")
_SEQ_NAMES = re.compile(r"seq_len_stoi\s*=\s*\{(.*?)\}", re.DOTALL)
_SEQ_PAIR = re.compile(r"""["'](\w+)["']\s*:\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)""")
_EVAL_SEQ = re.compile(r"""target_isl\s*,\s*target_osl\s*=\s*seq_len_stoi\[\s*["'](\w+)["']\s*\]""")
_MIN_EVAL_CONC = re.compile(r"^MIN_EVAL_CONC\s*=\s*(\d+)", re.MULTILINE)
_MARKING = re.compile(r"^def mark_eval_entries\(.*?(?=^def |\Z)", re.DOTALL | re.MULTILINE)
_PER_ALLOCATION = re.compile(r"^MAX_MULTINODE_AGENTIC_CONCURRENCIES_PER_ALLOCATION\s*=\s*(\d+)", re.MULTILINE)
_DPA_TAG = re.compile(r"""\+=\s*["']dpa["']""")
_MULTINODE_AGENTIC_NAME = re.compile(r"_conc\{'x'\.join\(")
# Evals marked only on request (`if args.run_evals or args.evals_only:` before the marking).
_OPT_IN = re.compile(r"^\s*if args\.run_evals\b", re.MULTILINE)
# The eval marking loop that passes over agentic rows before it sets run-eval.
_SKIPS_AGENTIC = re.compile(
    r"""==\s*["']agentic-coding["']\s*:\s*\n\s*continue\s*\n\s*entry\[Fields\.RUN_EVAL\.value\]"""
)


@dataclass(frozen=True)
class SweepGenerator:
    """The facts of one InferenceX generator that change the rows servelab prints (defaults: today's)."""

    # row kind -> fields printed (ix_generator_fields.py); None: today's, every field
    row_fields: dict[str, frozenset[str]] | None = None
    model_len_margin: int = 256
    seq_len_names: dict[tuple[int, int], str] = field(default_factory=lambda: dict(SEQ_LEN_NAMES))
    agentic_run_eval: bool = True
    evals_by_default: bool = True  # False: rows are marked only when asked (--run-evals until March 2026)
    agentic_concs_per_allocation: int = 1  # concurrencies a multinode agentic row holds at most
    agentic_worker_tags: bool = True  # multinode agentic exp-names carry each pool's ep and dpa
    eval_seq_len: tuple[int, int] = (8192, 1024)
    min_eval_conc: int = 16  # 1: every concurrency may run an eval
    single_node_evals: Literal["high-median", "tp-extremes"] = "high-median"
    multinode_evals: Literal["topology", "group-median", "none"] = "topology"
    # kind of master entry -> the top-level fields its validator accepts; None (or a kind left out): any
    entry_fields: dict[str, frozenset[str]] | None = None
    source: str | None = None  # the file read, None for today's

    def seq_len_name(self, isl: int, osl: int) -> str:
        """The pair's name in exp-names: the generator's own name for it, else ISL_OSL."""
        return self.seq_len_names.get((isl, osl), f"{isl}_{osl}")

    def prints(self, kind: str, name: str) -> bool:
        """Whether the generator prints field `name` in a row of `kind` (ix_generator_fields.py); a kind of
        row it has no literal for is printed as today, a pool without a literal as written."""
        if self.row_fields is None or name not in LATE_FIELDS:
            return True
        if kind not in self.row_fields:
            return kind != "pool"
        return name in self.row_fields[kind]

    def trim(self, kind: str, row: dict) -> dict:
        """`row` without the fields this generator does not print in a row of `kind`."""
        return {k: v for k, v in row.items() if self.prints(kind, k)}


TODAY = SweepGenerator()


def _multinode_evals(marking: str) -> Literal["topology", "group-median", "none"]:
    if "PREFILL" not in marking:
        return "none"  # the marking looks at single-node rows only
    if "_multinode_parallelism_key" not in marking and "eval_concs[len(eval_concs) // 2]" in marking:
        return "group-median"
    return "topology"


def _eval_marking(text: str, seq_names: dict[tuple[int, int], str]) -> dict:
    """The eval facts of a generator's source (its mark_eval_entries); none when it has no such function."""
    found = _MARKING.search(text)
    if found is None:
        return {}
    marking = found.group(0)
    eval_seq = _EVAL_SEQ.search(marking)
    pairs = {name: pair for pair, name in seq_names.items()}
    min_conc = _MIN_EVAL_CONC.search(text)
    tp_extremes = re.search(r"\bmax_tp\s*=\s*max\(", marking) is not None
    return {
        "agentic_run_eval": _SKIPS_AGENTIC.search(marking) is None,
        "evals_by_default": _OPT_IN.search(text) is None,
        "eval_seq_len": pairs.get(eval_seq.group(1), TODAY.eval_seq_len) if eval_seq else TODAY.eval_seq_len,
        "min_eval_conc": int(min_conc.group(1)) if min_conc else 1,
        "single_node_evals": "tp-extremes" if tp_extremes else "high-median",
        "multinode_evals": _multinode_evals(marking),
    }


def parse_generator(text: str, source: str, validator: str | None = None) -> SweepGenerator:
    """The facts of a generator's source text (and of its validator's, when given); what they do not show
    stays today's."""
    margins = {int(m) for m in _MARGIN.findall(text)}
    names = _SEQ_NAMES.search(text)
    pairs = _SEQ_PAIR.findall(names.group(1)) if names else []
    seq_names = {(int(i), int(o)): name for name, i, o in pairs} or TODAY.seq_len_names
    per_allocation = _PER_ALLOCATION.search(text)
    # whether the multinode agentic exp-name (the one that joins a row's concurrencies) tags ep and dpa
    tags = _DPA_TAG.search(text) is not None or _MULTINODE_AGENTIC_NAME.search(text) is None
    return SweepGenerator(
        agentic_concs_per_allocation=int(per_allocation.group(1)) if per_allocation else 1,
        agentic_worker_tags=tags,
        row_fields=printed_fields(text),
        model_len_margin=margins.pop() if len(margins) == 1 else TODAY.model_len_margin,
        seq_len_names=seq_names,
        source=source,
        entry_fields=entry_fields(validator) if validator is not None else None,
        **_eval_marking(text, seq_names),
    )


def find_generator(configs: Path | None) -> SweepGenerator:
    """The generator of the checkout a configs/ directory belongs to (configs/ at its top, or .github/configs/
    before mid-2026); today's when there is none."""
    if configs is None:
        return TODAY
    for top in (configs.parent, configs.parent.parent):
        path = top / GENERATOR
        if path.is_file():
            checks = top / VALIDATOR
            validator = checks.read_text(encoding="utf-8", errors="replace") if checks.is_file() else None
            return parse_generator(path.read_text(encoding="utf-8", errors="replace"), str(path), validator)
    return TODAY


def generator_to_json(gen: SweepGenerator) -> dict[str, Any]:
    """The facts as JSON data: every field of SweepGenerator, sets as sorted lists, the seq-len names keyed
    by "isl,osl"."""
    row_fields = None if gen.row_fields is None else {k: sorted(v) for k, v in sorted(gen.row_fields.items())}
    names = {f"{isl},{osl}": name for (isl, osl), name in sorted(gen.seq_len_names.items())}
    entries = (
        None if gen.entry_fields is None else {k: sorted(v) for k, v in sorted(gen.entry_fields.items())}
    )
    out = {f.name: getattr(gen, f.name) for f in fields(SweepGenerator)}
    return out | {
        "row_fields": row_fields,
        "entry_fields": entries,
        "seq_len_names": names,
        "eval_seq_len": list(gen.eval_seq_len),
    }


_FACTS = TypeAdapter(SweepGenerator)


def generator_from_json(data: Any, where: str) -> SweepGenerator:
    """The facts `generator_to_json` wrote; `where` names the file in the one-line error on anything else."""
    names = {f.name for f in fields(SweepGenerator)}
    if not isinstance(data, dict) or set(data) != names:
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ServelabError(f"{where}: expected an object with exactly the fields {sorted(names)}, got {got}")
    seq_names = data["seq_len_names"]
    if isinstance(seq_names, dict):  # "isl,osl" -> (isl, osl); a malformed key is left for pydantic to name
        seq_names = {tuple(k.split(",")) if isinstance(k, str) else k: v for k, v in seq_names.items()}
    try:
        return _FACTS.validate_python(data | {"seq_len_names": seq_names}, strict=False)
    except ValidationError as e:
        raise ServelabError.from_validation(e, where) from None
