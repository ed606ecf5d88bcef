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
from typing import Any

from pydantic import BaseModel, ConfigDict

from servelab.errors import ServelabError, closest
from servelab.recipes.filters import Filters
from servelab.recipes.ladder import ladder, parse_seq_len, seq_len_name

EVAL_ISL, EVAL_OSL = 8192, 1024
MIN_EVAL_CONC = 16
# InferenceX sizes max-model-len as isl + osl + this margin.
MODEL_LEN_MARGIN = 256
# An agentic (trace replay) job runs for this long.
AGENTIC_DURATION_S = 3600
# Agentic DRAM KV offload: the runner's CPU DRAM is capped at 3 TB (decimal), written in MiB.
MAX_AGENTIC_CPU_DRAM_MIB = 2_861_022
BYTES_PER_MIB = 1024 * 1024
BYTES_PER_GB = 1_000_000_000
# A multinode agentic job holds one server allocation per concurrency.
AGENTIC_CONCS_PER_ALLOCATION = 1
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
    kv_offload_backend: dict | None = None
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
    labels = list(store.runner_labels.runners)
    for value in f.runner_type:
        if not any(fnmatch.fnmatchcase(label, value) for label in labels):
            raise ServelabError(
                f"runner type {value!r} is not a label in {store.runner_labels.source}"
                + closest(value, labels),
                field="runner_type",
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


def worker_row(worker) -> dict:
    """A prefill/decode pool as InferenceX writes it in a row: as given, with pp, dcp-size and pcp-size."""
    return {**worker.dump(), "pp": worker.pp, "dcp-size": worker.dcp_size, "pcp-size": worker.pcp_size}


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


def _fixed_rows(recipe, seq, arm, runners: list[str], f: Filters, step: int) -> list[dict]:
    isl, osl = seq.isl, seq.osl
    base = {"isl": isl, "osl": osl}
    tail = {
        "max-model-len": isl + osl + MODEL_LEN_MARGIN,
        "exp-name": f"{recipe.model_prefix}_{seq_len_name(isl, osl)}",
        "disagg": recipe.disagg,
        "run-eval": False,
    }
    if recipe.multinode:
        concs = _finish(_multinode_concs(arm, f, step), f)
        if not concs:
            return []
        return [
            {
                **_common(recipe, runner),
                **base,
                "spec-decoding": arm.spec_decoding,
                "prefill": worker_row(arm.prefill),
                "decode": worker_row(arm.decode),
                "conc": concs,
                **tail,
                **_components(recipe, arm),
            }
            for runner in runners
        ]
    if f.max_tp is not None and arm.tp > f.max_tp:
        return []
    ep = arm.ep
    if f.max_ep is not None and ep is not None and ep > f.max_ep:
        ep = f.max_ep  # InferenceX clamps ep to the cap instead of dropping the arm
    layout = {"tp": arm.tp, "pp": arm.pp, "dcp-size": arm.dcp_size, "pcp-size": arm.pcp_size}
    return [
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
        }
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


def _worker_tag(worker, role: str) -> str:
    tag = f"{role}{worker.num_worker}x{worker.tp}"
    if worker.ep != 1:
        tag += f"ep{worker.ep}"
    return tag + ("dpa" if worker.dp_attn else "")


def _agentic_rows(store, recipe, block, arm, runners: list[str], f: Filters, step: int) -> list[dict]:
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
        topology = f"{recipe.model_prefix}_{_worker_tag(arm.prefill, 'p')}_{_worker_tag(arm.decode, 'd')}"
        batches = [
            concs[i : i + AGENTIC_CONCS_PER_ALLOCATION]
            for i in range(0, len(concs), AGENTIC_CONCS_PER_ALLOCATION)
        ]
        return [
            {
                **_common(recipe, runner),
                "spec-decoding": arm.spec_decoding,
                "prefill": worker_row(arm.prefill),
                "decode": worker_row(arm.decode),
                "conc": batch,
                **shared,
                "exp-name": f"{topology}_conc{'x'.join(map(str, batch))}{suffix}",
                "disagg": recipe.disagg,
                "scenario-type": "agentic-coding",
                **extra,
            }
            for runner in runners
            for batch in batches
        ]
    spec = "" if arm.spec_decoding == "none" else f"_spec-{arm.spec_decoding}"
    return [
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
                rows = _fixed_rows(recipe, block, arm, runners, f, step)
            else:
                rows = _agentic_rows(store, recipe, block, arm, runners, f, step)
            points += [Point(key, scenario, block, arm, row) for row in rows]
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


def _eval_concs(row: dict) -> list[int]:
    return sorted(c for c in _concs(row) if c >= MIN_EVAL_CONC)


def mark_evals(rows: list[dict], include_agentic: bool = False) -> None:
    """InferenceX's eval policy, marking `run-eval` (and `eval-conc`) on the rows in place:

    - single-node 8k1k rows with conc >= 16: in each (model, runner, framework, precision, isl, osl,
      spec-decoding, dp-attn) group, every row at the highest and at the median concurrency;
    - multinode 8k1k rows: per topology, the row holding the highest concurrency >= 16, which becomes its
      `eval-conc`;
    - agentic rows only with `include_agentic` (evals-only, all-evals): single-node, the highest-concurrency
      row per (model, runner, framework, precision); multinode, per topology as above (SWE-bench upstream).
    """
    marked: set[int] = set()
    eval_conc: dict[int, int] = {}
    single: dict[tuple, list[int]] = {}
    multi: dict[tuple, list[tuple[int, int]]] = {}
    for i, r in enumerate(rows):
        if (r.get("isl"), r.get("osl")) != (EVAL_ISL, EVAL_OSL) or not _eval_concs(r):
            continue
        if "tp" in r:
            group = (r["model"], r["runner"], r["framework"], r["precision"], r["isl"], r["osl"])
            single.setdefault((*group, r["spec-decoding"], r["dp-attn"]), []).append(i)
        elif "prefill" in r:
            multi.setdefault(topology_key(r), []).append((i, _eval_concs(r)[-1]))
    for members in single.values():
        concs = sorted({rows[i]["conc"] for i in members})
        targets = {concs[-1], concs[len(concs) // 2]}
        marked.update(i for i in members if rows[i]["conc"] in targets)
    if include_agentic:
        agentic: dict[tuple, list[tuple[int, int]]] = {}
        for i, r in enumerate(rows):
            if r.get("scenario-type") != "agentic-coding":
                continue
            if "prefill" in r:
                if _eval_concs(r):
                    multi.setdefault(topology_key(r), []).append((i, _eval_concs(r)[-1]))
                continue
            by = (r["model"], r["runner"], r["framework"], r["precision"])
            agentic.setdefault(by, []).append((i, max(_concs(r))))
        for entries in agentic.values():
            marked.add(max(entries, key=lambda e: e[1])[0])
    for entries in multi.values():
        best, conc = max(entries, key=lambda e: e[1])
        marked.add(best)
        eval_conc[best] = conc
    for i, r in enumerate(rows):
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


def apply_evals(points: list[Point], f: Filters) -> list[Point]:
    """Eval marks as InferenceX's generator sets them after expansion: the policy (unless --no-evals),
    widened by --all-evals; --evals-only and --all-evals keep only the marked rows, flagged `eval-only`."""
    if not f.no_evals:
        mark_evals([p.row for p in points], include_agentic=f.evals_only or f.all_evals)
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
    return apply_evals(trim_conc(points) if f.lowest_conc else points, f)
