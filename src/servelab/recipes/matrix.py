"""InferenceX's sweep matrix: config keys x filters -> the rows its generator prints, eval marks included.

Row for row what SemiAnalysisAI/InferenceX `utils/matrix_logic/generate_sweep_configs.py` prints
(`full-sweep` with every filter, and `test-config`): the same fields, values and order. A single-node arm
gives one row per concurrency; a multinode fixed-seq-len arm gives one row with its concurrency list; an
agentic-coding arm gives one row per concurrency (a multinode one with a one-element list). The eval
marking is upstream's: see `mark_evals` and `all_evals`. Rows are plain dicts with InferenceX's hyphenated
field names, printed as upstream prints them; `MatrixRow` is the typed view the rest of servelab reads them
through, and `sweep.py` turns them into jobs.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

from servelab.errors import ServelabError, closest
from servelab.recipes.filters import Filters
from servelab.recipes.inferencex import OlderAgenticArm, OlderAgenticConfig
from servelab.recipes.ix_generator import TODAY, SweepGenerator
from servelab.recipes.ladder import ladder, parse_seq_len, seq_len_name

# Today's generator's eval seq-len and lowest eval concurrency (a checkout's may say others: ix_generator.py).
EVAL_ISL, EVAL_OSL = TODAY.eval_seq_len
MIN_EVAL_CONC = TODAY.min_eval_conc
# InferenceX sizes max-model-len as isl + osl + this margin (today's; a checkout's generator may say another:
# ix_generator.py).
MODEL_LEN_MARGIN = TODAY.model_len_margin
# An agentic (trace replay) job runs for this long.
AGENTIC_DURATION_S = 3600
# Agentic DRAM KV offload: the runner's CPU DRAM is capped at 3 TB (decimal), written in MiB.
MAX_AGENTIC_CPU_DRAM_MIB = 2_861_022
BYTES_PER_MIB = 1024 * 1024
BYTES_PER_GB = 1_000_000_000
# Fields that say which rows run evals, at what concurrency; rows of one topology differ only in these.
POINT_FIELDS = frozenset({"conc", "run-eval", "eval-only", "eval-conc", "eval-all-concs", "exp-name"})
# Filters that exist for full sweeps only (InferenceX's test-config takes keys, --conc and --seq-lens).
FULL_SWEEP_ONLY = (
    "model_prefix",
    "precision",
    "framework",
    "runner_type",
    "node_type",
    "min_conc",
    "max_conc",
    "max_tp",
    "max_ep",
)


def _hyphen(name: str) -> str:
    return name.replace("_", "-")


class _RowModel(BaseModel):
    # InferenceX's hyphenated names stay here: servelab reads a row through these fields.
    model_config = ConfigDict(extra="ignore", alias_generator=_hyphen, populate_by_name=True, frozen=True)


def _backend(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


class PoolRow(_RowModel):
    """A prefill or decode pool of a multinode row."""

    num_worker: int
    tp: int
    ep: int
    dp_attn: bool


class MatrixRow(_RowModel):
    """The typed view of a matrix row (the row itself stays the dict InferenceX's generator prints)."""

    image: str
    model: str
    framework: str
    runner: str
    exp_name: str
    conc: int | list[int]
    isl: int | None = None
    osl: int | None = None
    tp: int | None = None
    ep: int | None = None
    pp: int | None = None
    dp_attn: bool = False
    spec_decoding: str = "none"
    max_model_len: int | None = None
    disagg: bool = False
    run_eval: bool = False
    eval_only: bool = False
    scenario_type: str = "fixed-seq-len"  # InferenceX writes it on agentic rows only
    # agentic rows: KV offload tier and backend ({name, version?}), DRAM budget, replay duration
    kv_offloading: str | None = None
    # a mapping ({name, version?}); InferenceX's schema before July 2026 printed the bare name
    kv_offload_backend: Annotated[dict | None, BeforeValidator(_backend)] = None
    total_cpu_dram_gb: int | None = None
    duration: int | None = None
    prefill: PoolRow | None = None
    decode: PoolRow | None = None

    @property
    def multinode(self) -> bool:
        return self.prefill is not None

    @property
    def concs(self) -> list[int]:
        return list(self.conc) if isinstance(self.conc, list) else [self.conc]

    @property
    def seq_len(self) -> str:
        """The seq-len name of a fixed-seq-len row (`8k1k`, or `ISL_OSL` for a pair InferenceX names not),
        as its exp-name ends in it."""
        if self.isl is None or self.osl is None:
            return self.exp_name.rsplit("_", 1)[-1]
        return seq_len_name(self.isl, self.osl)


@dataclass(frozen=True)
class Point:
    """One matrix row and where it comes from (the recipe key, its scenario block and arm)."""

    key: str
    scenario: str
    block: Any
    arm: Any
    row: dict


def select_keys(all_keys: list[str], patterns: list[str]) -> list[str]:
    """Keys matching the patterns (exact keys or globs), in pattern order then store order, each once, as
    InferenceX's test-config expands them. Every pattern must match a key, as upstream's expand_config_keys
    refuses a key or glob that matches nothing (a typo); filters that leave no row are an empty sweep
    instead."""
    if not patterns:
        return list(all_keys)
    chosen: dict[str, None] = {}
    for pat in patterns:
        hits = [k for k in all_keys if fnmatch.fnmatchcase(k, pat)]
        if not hits:
            raise ServelabError(f"config key {pat!r} matches nothing" + closest(pat, all_keys))
        chosen.update(dict.fromkeys(hits))
    return list(chosen)


def _check(store, f: Filters) -> None:
    if f.mode == "test-config":
        given = [name for name in FULL_SWEEP_ONLY if getattr(f, name)]
        if given:
            raise ServelabError(
                "a full-sweep filter; test-config takes keys, --conc, --seq-lens, --scenario-type, "
                "--runner-node-filter and the eval options",
                field=given[0],
            )
    _check_entry_fields(store)
    labels = list(store.runner_labels.runners)
    for value in f.runner_type:
        if not any(fnmatch.fnmatchcase(label, value) for label in labels):
            raise ServelabError(
                f"runner type {value!r} is not a label in {store.runner_labels.source}"
                + closest(value, labels),
                field="runner_type",
            )


def _check_entry_fields(store) -> None:
    """Refuse, as the checkout's own generator does, any entry with a top-level field its validator does
    not accept (ix_validator.py): it validates every entry before it prints a row, whatever the filters."""
    accepted = getattr(getattr(store, "generator", TODAY), "entry_fields", None)
    if accepted is None:
        return
    for key, written in getattr(store, "entry_keys", {}).items():
        kind = "multinode" if store.recipes[key].multinode else "single-node"
        allowed = accepted.get(kind)
        extra = [name for name in written if allowed is not None and name not in allowed]
        if extra:
            raise ServelabError(
                f"{store.files[key]}: {key}: field {extra[0]!r} is not one this checkout's validator "
                f"(utils/matrix_logic/validation.py) accepts in a {kind} entry; its generator refuses the "
                f"checkout (accepted: {', '.join(sorted(a for a in allowed if '_' not in a))})"
            )


def _keep_key(key: str, recipe, f: Filters) -> bool:
    if f.model_prefix and not any(key.startswith(p) for p in f.model_prefix):
        return False
    if f.precision and recipe.precision not in f.precision:
        return False
    if f.framework and recipe.framework not in f.framework:
        return False
    if f.runner_type and not any(fnmatch.fnmatchcase(recipe.runner, p) for p in f.runner_type):
        return False
    return f.node_type is None or f.node_type == ("multi-node" if recipe.multinode else "single-node")


def _runners(store, label: str, f: Filters) -> list[str]:
    """The runner values of a key's rows: its label, or with --runner-node-filter the label's nodes whose
    name holds the filter (test-config also keeps the label itself when it holds it)."""
    if not f.runner_node_filter:
        return [label]
    runner = store.runner_labels.runners.get(label)
    candidates = list(runner.nodes) if runner else []
    if f.mode == "test-config" and f.runner_node_filter in label:
        candidates = [label, *candidates]
    return [n for n in dict.fromkeys(candidates) if f.runner_node_filter in n]


def _values(arm, step: int) -> list[int]:
    """The arm's concurrencies as upstream lists them: conc-list as written, else the ladder."""
    if arm.conc_list is not None:
        return list(arm.conc_list)
    return ladder(arm.conc_start, arm.conc_end, step)


def _single_node_concs(arm, f: Filters, step: int) -> list[int]:
    """InferenceX's single-node rule: --min-conc restarts the ladder at the bound, --max-conc clamps it (an
    arm entirely above the cap runs at the cap); a conc-list is filtered, falling back to the cap."""
    if arm.conc_list is not None:
        values = list(arm.conc_list)
        if f.min_conc is not None:
            values = [c for c in values if c >= f.min_conc]
            if not values:
                return []
        if f.max_conc is not None:
            values = [c for c in values if c <= f.max_conc] or [f.max_conc]
        return values
    start, end = arm.conc_start, arm.conc_end
    if f.min_conc is not None:
        if end < f.min_conc:
            return []
        start = max(start, f.min_conc)
    if f.max_conc is not None:
        if start > f.max_conc:
            start = end = f.max_conc
        else:
            end = min(end, f.max_conc)
    return ladder(start, end, step)


def _multinode_concs(arm, f: Filters, step: int) -> list[int]:
    """Multinode fixed-seq-len: --min-conc filters, --max-conc filters and falls back to the cap."""
    values = _values(arm, step)
    if f.min_conc is not None:
        values = [c for c in values if c >= f.min_conc]
        if not values:
            return []
    if f.max_conc is not None:
        values = [c for c in values if c <= f.max_conc] or [f.max_conc]
    return values


def _agentic_concs(arm, f: Filters, step: int) -> list[int]:
    """Agentic arms: --min-conc and --max-conc only filter."""
    return [
        c
        for c in _values(arm, step)
        if (f.min_conc is None or c >= f.min_conc) and (f.max_conc is None or c <= f.max_conc)
    ]


def _finish(values: list[int], f: Filters) -> list[int]:
    if f.conc:  # test-config: only the requested values the arm has, in the arm's order
        values = [c for c in values if c in f.conc]
    return values


def worker_row(worker, gen: SweepGenerator = TODAY) -> dict:
    """A prefill/decode pool as InferenceX writes it in a row: as given, with pp, dcp-size and pcp-size
    where the generator prints them."""
    sizes = {"pp": worker.pp, "dcp-size": worker.dcp_size, "pcp-size": worker.pcp_size}
    return gen.trim("pool", {**worker.dump(), **sizes})


def _components(recipe, arm) -> dict:
    """router and kv-p2p-transfer from the arm, else the key (upstream declares them in one place)."""
    out: dict = {}
    for name in ("router", "kv_p2p_transfer"):
        value = getattr(arm, name) if getattr(arm, name) is not None else getattr(recipe, name)
        if value is not None:
            out[name.replace("_", "-")] = value if isinstance(value, str) else value.dump()
    return out


def _common(recipe, runner: str) -> dict:
    return {
        "image": recipe.image,
        "model": recipe.model,
        "model-prefix": recipe.model_prefix,
        "precision": recipe.precision,
        "framework": recipe.framework,
        "runner": runner,
    }


def _fixed_rows(
    recipe, seq, arm, runners: list[str], f: Filters, step: int, gen: SweepGenerator
) -> list[dict]:
    isl, osl = seq.isl, seq.osl
    base = {"isl": isl, "osl": osl}
    tail = {
        "max-model-len": isl + osl + gen.model_len_margin,
        "exp-name": f"{recipe.model_prefix}_{gen.seq_len_name(isl, osl)}",
        "disagg": recipe.disagg,
        "run-eval": False,
    }
    if recipe.multinode:
        concs = _finish(_multinode_concs(arm, f, step), f)
        if not concs:
            return []
        return [
            gen.trim(
                "fixed-multinode",
                {
                    **_common(recipe, runner),
                    **base,
                    "spec-decoding": arm.spec_decoding,
                    "prefill": worker_row(arm.prefill, gen),
                    "decode": worker_row(arm.decode, gen),
                    "conc": concs,
                    **tail,
                    **_components(recipe, arm),
                },
            )
            for runner in runners
        ]
    if f.max_tp is not None and arm.tp > f.max_tp:
        return []
    ep = arm.ep
    if f.max_ep is not None and ep is not None and ep > f.max_ep:
        ep = f.max_ep  # InferenceX clamps ep to the cap instead of dropping the arm
    layout = {"tp": arm.tp, "pp": arm.pp, "dcp-size": arm.dcp_size, "pcp-size": arm.pcp_size}
    return [
        gen.trim(
            "fixed",
            {
                **_common(recipe, runner),
                **base,
                **layout,
                "conc": conc,
                "ep": 1 if ep is None else ep,
                "dp-attn": bool(arm.dp_attn),
                "spec-decoding": arm.spec_decoding,
                **tail,
                **_components(recipe, arm),
            },
        )
        for conc in _finish(_single_node_concs(arm, f, step), f)
        for runner in runners
    ]


def _host(store, label: str) -> tuple[int, int]:
    """(available CPU DRAM in MiB, GPUs per node) of a runner label: runners.yaml `hardware:`, else the
    label's node kind."""
    runner = store.runner_labels.runners.get(label)
    if runner is not None and runner.hardware is not None:
        return runner.hardware.available_cpu_dram_mib, runner.hardware.gpus_per_node
    if runner is not None and runner.node is not None and runner.node.cpu_dram_gib:
        return runner.node.cpu_dram_gib * 1024, runner.node.gpus_per_node
    raise ServelabError(
        f"runner {label!r}: DRAM KV offload is sized from the runner's CPU DRAM and GPUs per node; "
        f"{store.runner_labels.source} gives neither (hardware: available-cpu-dram-mib, gpus-per-node)"
    )


def _replica_gpus_per_node(worker, gpus_per_node: int) -> int:
    gpus = worker.tp * worker.pp * worker.pcp_size
    if gpus > gpus_per_node:
        if gpus % gpus_per_node:
            raise ServelabError(
                f"worker tp*pp*pcp-size={gpus} spans nodes but is not a multiple of {gpus_per_node} GPUs"
            )
        return gpus_per_node
    if gpus_per_node % gpus:
        raise ServelabError(f"worker tp*pp*pcp-size={gpus} does not divide {gpus_per_node} GPUs per node")
    return gpus


def dram_offload_gb(store, block, arm, label: str) -> int:
    """InferenceX's DRAM KV-offload budget of one agentic server, in GB: the runner's CPU DRAM (capped at
    3 TB) x dram-utilization x the share of the node's GPUs the server (a multinode arm: a prefill replica)
    uses; 0 without DRAM offload."""
    if (arm.kv_offloading or "none") != "dram":
        return 0
    available_mib, gpus_per_node = _host(store, label)
    available_mib = min(available_mib, MAX_AGENTIC_CPU_DRAM_MIB)
    if arm.disagg:
        gpus = _replica_gpus_per_node(arm.prefill, gpus_per_node)
    else:
        gpus = arm.tp * arm.pp * arm.pcp_size
        if gpus > gpus_per_node:
            raise ServelabError(
                f"tp*pp*pcp-size={gpus} exceeds the {gpus_per_node} GPUs per node of runner {label!r}"
            )
    budget = (
        Decimal(available_mib) * BYTES_PER_MIB * Decimal(str(block.dram_utilization)) * gpus / gpus_per_node
    )
    return int(budget / BYTES_PER_GB)


def _offload_suffix(arm) -> str:
    offloading = arm.kv_offloading or "none"
    return "kvnone" if offloading == "none" else f"kv{offloading}-{arm.kv_offload_backend.name}"


def _worker_tag(worker, role: str, gen: SweepGenerator) -> str:
    tag = f"{role}{worker.num_worker}x{worker.tp}"
    if not gen.agentic_worker_tags:
        return tag
    if worker.ep != 1:
        tag += f"ep{worker.ep}"
    return tag + ("dpa" if worker.dp_attn else "")


def _agentic_rows(
    store, recipe, block, arm, runners: list[str], f: Filters, step: int, gen: SweepGenerator
) -> list[dict]:
    concs = _finish(_agentic_concs(arm, f, step), f)
    if not concs:
        return []
    offloading = arm.kv_offloading or "none"
    dram = dram_offload_gb(store, block, arm, recipe.runner)
    extra: dict = {}
    if arm.kv_offload_backend is not None:
        extra["kv-offload-backend"] = arm.kv_offload_backend.dump()
    extra |= _components(recipe, arm)
    shared = {"kv-offloading": offloading, "total-cpu-dram-gb": dram, "duration": AGENTIC_DURATION_S}
    if recipe.multinode:
        suffix = "" if offloading == "none" else f"_{_offload_suffix(arm)}"
        tags = f"{_worker_tag(arm.prefill, 'p', gen)}_{_worker_tag(arm.decode, 'd', gen)}"
        topology = f"{recipe.model_prefix}_{tags}"
        size = gen.agentic_concs_per_allocation
        batches = [concs[i : i + size] for i in range(0, len(concs), size)]
        return [
            gen.trim(
                "agentic-multinode",
                {
                    **_common(recipe, runner),
                    "spec-decoding": arm.spec_decoding,
                    "prefill": worker_row(arm.prefill, gen),
                    "decode": worker_row(arm.decode, gen),
                    "conc": batch,
                    **shared,
                    "exp-name": f"{topology}_conc{'x'.join(map(str, batch))}{suffix}",
                    "disagg": recipe.disagg,
                    "scenario-type": "agentic-coding",
                    **extra,
                },
            )
            for runner in runners
            for batch in batches
        ]
    spec = "" if arm.spec_decoding == "none" else f"_spec-{arm.spec_decoding}"
    return [
        gen.trim(
            "agentic",
            {
                **_common(recipe, runner),
                "tp": arm.tp,
                "pp": arm.pp,
                "dcp-size": arm.dcp_size,
                "pcp-size": arm.pcp_size,
                "ep": 1 if arm.ep is None else arm.ep,
                "dp-attn": bool(arm.dp_attn),
                "spec-decoding": arm.spec_decoding,
                "conc": conc,
                **shared,
                "exp-name": f"{recipe.model_prefix}_tp{arm.tp}_conc{conc}_{_offload_suffix(arm)}{spec}",
                "scenario-type": "agentic-coding",
                **extra,
            },
        )
        for conc in concs
        for runner in runners
    ]


def _older_agentic_rows(
    recipe, block: OlderAgenticConfig, arm: OlderAgenticArm, runners: list[str], f: Filters, step: int
) -> list[dict]:
    """An agentic-coding arm in InferenceX's form before June 2026, as that form's generator printed it: one
    row per concurrency (a multinode one too), the arm's offloading and the block's duration, the pools as
    written and named by worker count and tp."""
    concs = _finish(_agentic_concs(arm, f, step), f)
    p, d = arm.prefill, arm.decode
    if p is not None and d is not None:
        return [
            {
                **_common(recipe, runner),
                "spec-decoding": arm.spec_decoding,
                "prefill": p.dump(),
                "decode": d.dump(),
                "conc": conc,
                "duration": block.duration,
                "exp-name": f"{recipe.model_prefix}_p{p.num_worker}x{p.tp}_d{d.num_worker}x{d.tp}_conc{conc}",
                "disagg": recipe.disagg,
                "scenario-type": "agentic-coding",
            }
            for conc in concs
            for runner in runners
        ]
    return [
        {
            **_common(recipe, runner),
            "tp": arm.tp,
            "ep": 1 if arm.ep is None else arm.ep,
            "dp-attn": bool(arm.dp_attn),
            "conc": conc,
            "offloading": arm.offloading,
            "duration": block.duration,
            "exp-name": f"{recipe.model_prefix}_tp{arm.tp}_conc{conc}_offload{arm.offloading}",
            "scenario-type": "agentic-coding",
        }
        for conc in concs
        for runner in runners
    ]


def matrix_points(store, patterns: list[str] | None = None, filters: Filters | None = None) -> list[Point]:
    """The rows of a sweep before eval marking, in InferenceX's order: key by key, its fixed-seq-len blocks
    then its agentic-coding blocks, arm by arm, concurrency by concurrency, runner node by runner node."""
    f = filters or Filters()
    _check(store, f)
    test_config = f.mode == "test-config"
    step = f.step_size
    seq_lens = {parse_seq_len(name) for name in f.seq_lens}
    gen = getattr(store, "generator", TODAY)
    points: list[Point] = []
    for key in select_keys(list(store.recipes), patterns or []):
        recipe = store.recipes[key]
        if not test_config and not _keep_key(key, recipe, f):
            continue
        runners = _runners(store, recipe.runner, f)
        if not runners:
            continue
        for scenario, block, _, arm in recipe.arms():
            if f.scenario_type and scenario not in f.scenario_type:
                continue
            if scenario == "fixed-seq-len":
                if seq_lens and (block.isl, block.osl) not in seq_lens:
                    continue
                rows = _fixed_rows(recipe, block, arm, runners, f, step, gen)
            else:
                rows = _agentic_rows(store, recipe, block, arm, runners, f, step, gen)
            points += [Point(key, scenario, block, arm, row) for row in rows]
        if f.scenario_type and "agentic-coding" not in f.scenario_type:
            continue
        for older in recipe.scenarios.older_agentic or []:
            for arm in older.search_space:
                rows = _older_agentic_rows(recipe, older, arm, runners, f, step)
                points += [Point(key, "agentic-coding", older, arm, row) for row in rows]
    return points


def _freeze(value) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def topology_key(row: dict) -> tuple:
    """What identifies a row's engine and workload apart from its concurrency and eval marks."""
    return tuple(sorted((k, _freeze(v)) for k, v in row.items() if k not in POINT_FIELDS))


def _concs(row: dict) -> list[int]:
    return row["conc"] if isinstance(row["conc"], list) else [row["conc"]]


def _eval_concs(row: dict, min_conc: int = MIN_EVAL_CONC) -> list[int]:
    return sorted(c for c in _concs(row) if c >= min_conc)


def _single_node_marks(rows: list[dict], members: list[int], policy: str) -> set[int]:
    """The rows of one single-node group that run evals: those at the highest and at the median
    concurrency, or (generators before March 2026, "tp-extremes") those at the highest concurrency of the
    highest tp and of the lowest."""
    if policy == "tp-extremes":
        out: set[int] = set()
        for tp in {max(rows[i]["tp"] for i in members), min(rows[i]["tp"] for i in members)}:
            at_tp = [i for i in members if rows[i]["tp"] == tp]
            top = max(rows[i]["conc"] for i in at_tp)
            out.update(i for i in at_tp if rows[i]["conc"] == top)
        return out
    concs = sorted({rows[i]["conc"] for i in members})
    targets = {concs[-1], concs[len(concs) // 2]}
    return {i for i in members if rows[i]["conc"] in targets}


def _multinode_group(row: dict, policy: str) -> tuple:
    """What a multinode row's eval is chosen within: its topology, or (generators from April to June 2026,
    "group-median") its model, runner, framework, precision, spec-decoding and the pools' dp-attn."""
    if policy == "group-median":
        what = (row["model"], row["runner"], row["framework"], row["precision"], row["spec-decoding"])
        return (*what, row["prefill"].get("dp-attn"), row["decode"].get("dp-attn"))
    return topology_key(row)


def mark_evals(rows: list[dict], include_agentic: bool = False, gen: SweepGenerator = TODAY) -> None:
    """InferenceX's eval policy, marking `run-eval` (and `eval-conc`) on the rows in place:

    - single-node 8k1k rows with conc >= 16: in each (model, runner, framework, precision, isl, osl,
      spec-decoding, dp-attn) group, every row at the highest and at the median concurrency;
    - multinode 8k1k rows: per topology, the row holding the highest concurrency >= 16, which becomes its
      `eval-conc`;
    - agentic rows only with `include_agentic` (evals-only, all-evals): single-node, the highest-concurrency
      row per (model, runner, framework, precision); multinode, per topology as above (SWE-bench upstream).

    That is today's generator; `gen` is the checkout's (ix_generator.py), whose seq-len pair, lowest
    concurrency and picking rules are followed, and which may leave agentic rows without `run-eval`.
    """
    marked: set[int] = set()
    eval_conc: dict[int, int] = {}
    single: dict[tuple, list[int]] = {}
    multi: dict[tuple, list[tuple[int, list[int]]]] = {}
    for i, r in enumerate(rows):
        eligible = _eval_concs(r, gen.min_eval_conc)
        if (r.get("isl"), r.get("osl")) != gen.eval_seq_len or not eligible:
            continue
        if "tp" in r:
            group = (r["model"], r["runner"], r["framework"], r["precision"], r["isl"], r["osl"])
            single.setdefault((*group, r["spec-decoding"], r["dp-attn"]), []).append(i)
        elif "prefill" in r and gen.multinode_evals != "none":
            multi.setdefault(_multinode_group(r, gen.multinode_evals), []).append((i, eligible))
    for members in single.values():
        marked |= _single_node_marks(rows, members, gen.single_node_evals)
    if include_agentic:
        agentic: dict[tuple, list[tuple[int, int]]] = {}
        for i, r in enumerate(rows):
            if r.get("scenario-type") != "agentic-coding":
                continue
            if "prefill" in r:
                if _eval_concs(r):
                    multi.setdefault(topology_key(r), []).append((i, _eval_concs(r)))
                continue
            by = (r["model"], r["runner"], r["framework"], r["precision"])
            agentic.setdefault(by, []).append((i, max(_concs(r))))
        for agentic_entries in agentic.values():
            marked.add(max(agentic_entries, key=lambda e: e[1])[0])
    for entries in multi.values():
        best, eligible = max(entries, key=lambda e: e[1][-1])
        marked.add(best)
        # the highest eligible concurrency; the median of them under "group-median" (to avoid OOM in evals)
        eval_conc[best] = (
            eligible[len(eligible) // 2] if gen.multinode_evals == "group-median" else eligible[-1]
        )
    for i, r in enumerate(rows):
        if not gen.agentic_run_eval and r.get("scenario-type") == "agentic-coding":
            continue
        r["run-eval"] = i in marked
        if i in eval_conc:
            r["eval-conc"] = eval_conc[i]


def all_evals(rows: list[dict]) -> list[tuple[int, dict]]:
    """InferenceX's --all-evals: every 8k1k fixed-seq-len row and every agentic row runs evals. Multinode
    rows of one topology merge into one row with the union of their concurrencies (fixed-seq-len: evaluated at
    each, `eval-all-concs`; agentic: at the highest, `eval-conc`). Returns (index of the first source row,
    row)."""
    out: list[tuple[int, dict]] = []
    merged: dict[tuple, int] = {}
    for i, r in enumerate(rows):
        agentic = r.get("scenario-type") == "agentic-coding"
        if not agentic and (r.get("isl"), r.get("osl")) != (EVAL_ISL, EVAL_OSL):
            out.append((i, r))
            continue
        if "prefill" not in r:
            r["run-eval"] = True
            out.append((i, r))
            continue
        group = (agentic, topology_key(r))
        if group in merged:
            existing = out[merged[group]][1]
            existing["conc"] = sorted(set(existing["conc"]) | set(_concs(r)))
            if agentic:
                existing["eval-conc"] = max(existing["conc"])
            continue
        row = {**r, "conc": sorted(set(_concs(r))), "run-eval": True}
        if agentic:
            row["eval-conc"] = max(row["conc"])
        else:
            row["eval-all-concs"] = True
            row.pop("eval-conc", None)
        merged[group] = len(out)
        out.append((i, row))
    return out


def apply_evals(points: list[Point], f: Filters, gen: SweepGenerator = TODAY) -> list[Point]:
    """Eval marks as InferenceX's generator sets them after expansion: the policy (unless --no-evals),
    widened by --all-evals; --evals-only and --all-evals keep only the marked rows, flagged `eval-only`."""
    include_agentic = f.evals_only or f.all_evals
    # a generator whose evals are opt-in (ix_generator.py) marks them only for --evals-only / --all-evals
    if not f.no_evals and (gen.evals_by_default or include_agentic):
        mark_evals([p.row for p in points], include_agentic, gen)
        if f.all_evals:
            points = [replace(points[i], row=row) for i, row in all_evals([p.row for p in points])]
    if f.evals_only or f.all_evals:
        points = [p for p in points if p.row.get("run-eval")]
        for p in points:
            p.row["eval-only"] = True
    return points


def trim_conc(points: list[Point]) -> list[Point]:
    """InferenceX's --trim-conc (process_changelog.py): each configuration at its lowest concurrency. Of the
    rows that differ only in concurrency (and exp-name) the first at the lowest stays, where it was; a
    multinode row keeps the lowest of its list."""
    points = [
        replace(p, row={**p.row, "conc": [min(p.row["conc"])]}) if "prefill" in p.row else p for p in points
    ]
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(points):
        if "prefill" not in p.row:
            rest = tuple(sorted((k, _freeze(v)) for k, v in p.row.items() if k not in ("conc", "exp-name")))
            groups.setdefault(rest, []).append(i)
    keep = {min(members, key=lambda i: points[i].row["conc"]) for members in groups.values()}
    return [p for i, p in enumerate(points) if "prefill" in p.row or i in keep]


def matrix(store, patterns: list[str] | None = None, filters: Filters | None = None) -> list[Point]:
    """The sweep's rows with their eval marks: what InferenceX's generator prints, row for row
    (--lowest-conc trims them first, as InferenceX's changelog does with --trim-conc)."""
    f = filters or Filters()
    points = matrix_points(store, patterns, f)
    gen = getattr(store, "generator", TODAY)
    return apply_evals(trim_conc(points) if f.lowest_conc else points, f, gen)


def arm_settings(row: dict) -> dict[str, str]:
    """The additional-settings (KEY=VALUE) of a multinode row's prefill and decode arms, as InferenceX's
    workflow exports them (decode's over prefill's)."""
    out: dict[str, str] = {}
    for side in ("prefill", "decode"):
        for s in (row.get(side) or {}).get("additional-settings") or []:
            k, _, v = str(s).partition("=")
            out[k] = v
    return out
