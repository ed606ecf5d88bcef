"""AIConfigurator's own disaggregated estimate of silicon_sample.csv disagg rows (run by the python of an
environment with aiconfigurator 0.12, not servelab's): reads [rows, cache path] as JSON on stdin, answers each
row not yet in the cache and rewrites the cache after every row (a long run can be stopped and resumed).

A row is asked with its backend version as written, then with AIConfigurator's default version (its
queryable slots refuse most older raw versions); each failure is kept by type and message."""

import json
import logging
import math
import sys
import time
from pathlib import Path

from aiconfigurator.cli.api import cli_estimate

logging.disable(logging.CRITICAL)
KEYS = ("request_rate", "concurrency", "tokens/s/gpu", "num_total_gpus", "seq/s")


def num(r, k, d=None):
    v = (r.get(k) or "").strip()
    return d if not v or v.lower() == "nan" else int(float(v))


def ask(r, version):
    kw = dict(mode="disagg", backend_name=r["backend"], isl=int(r["isl"]), osl=int(r["osl"]))
    for side in ("prefill", "decode"):
        for k in ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "batch_size"):
            kw[f"{side}_{k}"] = num(r, f"{side}_{k}")
        kw[f"{side}_num_workers"] = num(r, f"{side}_num_workers")
    kw["gemm_quant_mode"] = r.get("gemm_quant_mode") or None
    kw["moe_quant_mode"] = r.get("moe_quant_mode") or None
    res = cli_estimate(r["model_path"], r["system"], backend_version=version, **kw)
    ttft, tpot = float(res.ttft), float(res.tpot)
    if not (math.isfinite(ttft) and math.isfinite(tpot) and ttft > 0 and tpot > 0):
        raise ValueError(f"non-positive estimate {ttft} / {tpot}")
    return {"ttft_ms": ttft, "tpot_ms": tpot, **{k: res.raw.get(k) for k in KEYS}}


def main():
    rows, cache = json.load(sys.stdin)
    cache = Path(cache)
    done = json.loads(cache.read_text()) if cache.is_file() else {}
    for r in rows:
        if r["id"] in done:
            continue
        version = (r.get("backend_version") or "").strip() or None
        errors = []
        for ver, how in ((version, "as written"), (None, "default version")):
            try:
                t = time.time()
                done[r["id"]] = {**ask(r, ver), "how": how, "s": round(time.time() - t, 2)}
                break
            except BaseException as e:  # noqa: BLE001 - every failure is counted by its type
                errors.append(f"{how}: {type(e).__name__}: {str(e)[:200]}")
        else:
            done[r["id"]] = {"error": errors}
        cache.write_text(json.dumps(done))
        print(json.dumps({"done": len(done)}), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
