"""Acceptance checks at the end of a campaign: rows per op against the plan, heads across tp for every model,
sane numbers (finite, positive, p10 <= median <= p90), and no key that failed for a reason other than the
shape itself (out of memory, no kernel for it)."""

import math
from typing import Any

from servelab.collect.campaign_dir import key_from_row, key_id
from servelab.perfdb.ops import OpName
from servelab.specs import AttentionKind

# the attention ops a model of each attention kind asks for, in the order problems are reported
ATTENTION_OPS: dict[AttentionKind, tuple[OpName, ...]] = {
    AttentionKind.gqa: (OpName.attention_prefill, OpName.attention_decode),
    AttentionKind.mla: (OpName.mla_prefill, OpName.mla_decode),
    AttentionKind.dsa: (),  # DSA's attention has no collector: the roofline prices it (GLM-5)
    AttentionKind.gdn: (),  # Gated DeltaNet has no collector: the roofline prices it (Qwen3.5)
    AttentionKind.dsv4: (
        OpName.dsv4_csa_context_module,
        OpName.dsv4_csa_generation_module,
        OpName.dsv4_hca_context_module,
        OpName.dsv4_hca_generation_module,
    ),
}
HEADS_OPS = tuple(op for ops in ATTENTION_OPS.values() for op in ops)
# error classes that are a key's answer (the GPU cannot run that shape); any other class is a failed
# measurement (a crash, a timeout, a worker that could not start) and the campaign is not accepted
SHAPE_ERRORS = ("oom", "unsupported")


def check(planned: list, rows: list[dict], errors: list[dict], models: list, coverage: bool = True) -> dict:
    """A report: {"ok": bool, "ops": {op: {...}}, "heads": [...problems], "numbers": [...problems]}.

    Per op: planned keys, rows, errors (keys with any error), failed (errors not in SHAPE_ERRORS), missing."""
    planned_ids: dict[str, set] = {}
    for k in planned:
        planned_ids.setdefault(k.op, set()).add(key_id(k))
    measured: dict[str, set] = {}
    for r in rows:
        measured.setdefault(r["op"], set()).add(key_id(key_from_row(r)))
    failed: dict[str, set] = {}
    broken: dict[str, set] = {}
    for e in errors:
        kid = key_id(key_from_row(e["key"]))
        failed.setdefault(e["key"]["op"], set()).add(kid)
        if e.get("error_class") not in SHAPE_ERRORS:
            broken.setdefault(e["key"]["op"], set()).add(kid)
    ops = {}
    for op in sorted(set(planned_ids) | set(measured)):
        want = planned_ids.get(op, set())
        got = measured.get(op, set())
        ops[op] = {
            "planned": len(want),
            "rows": len(got & want) if want else len(got),
            "errors": len(failed.get(op, set()) & want),
            "failed": len(broken.get(op, set()) & want),
            "missing": len(want - got - failed.get(op, set())),
        }
    numbers = [_number_problem(r) for r in rows]
    numbers = [p for p in numbers if p]
    heads = heads_across_tp(rows, models if coverage else [])
    ok = not numbers and not heads and all(v["missing"] == 0 and v["failed"] == 0 for v in ops.values())
    return {"ok": ok, "ops": ops, "heads": heads, "numbers": numbers[:50], "numbers_total": len(numbers)}


def _number_problem(row: dict) -> str | None:
    vals: list[Any] = [row.get("latency_us"), row.get("p10_us"), row.get("p90_us")]
    if any(v is None or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 for v in vals):
        return f"{row['op']} {_short(row)}: latency not a positive finite number ({vals})"
    med, p10, p90 = (float(v) for v in vals)  # checked above: numbers
    if not p10 <= med <= p90:
        return f"{row['op']} {_short(row)}: p10 {p10} <= median {med} <= p90 {p90} does not hold"
    return None


def heads_across_tp(rows: list[dict], models: list) -> list[str]:
    """Per model: rows exist for the heads each tp leaves on a rank, and no row has heads that no tp of a
    known native head count gives (native_heads x tp must be constant across a table)."""
    problems = []
    by_op: dict[str, list] = {}
    for r in rows:
        if r["op"] in HEADS_OPS:
            by_op.setdefault(r["op"], []).append(r)
    for op, rs in by_op.items():
        for r in rs:
            native = r.get("native_heads")
            if native is not None and (native % r["heads"] or (native // r["heads"]) not in (1, 2, 4, 8, 16)):
                problems.append(f"{op}: heads {r['heads']} is not native {native} / tp for tp in 1..16")
    for model in models:
        op_names = ATTENTION_OPS[model.attention.kind]
        for tp in (1, 2, 4, 8):
            if model.attention.num_heads % tp:
                continue
            heads = model.attention.num_heads // tp
            for op in op_names:
                if op not in by_op:
                    continue  # op not collected in this campaign
                hit = any(
                    r["heads"] == heads
                    and r.get("native_heads", model.attention.num_heads) == model.attention.num_heads
                    if "native_heads" in r
                    else r["heads"] == heads
                    for r in by_op[op]
                )
                if not hit:
                    problems.append(f"{model.name}: no {op} row with {heads} heads (tp {tp})")
    return problems


def _short(row: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in row.items() if isinstance(v, int) and k not in ("reps", "inner"))[
        :120
    ]
