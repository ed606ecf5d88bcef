"""Qwen3.5-397B-A17B's Gated DeltaNet at TP8 (2 key heads and 8 value heads of 128 a rank): servelab's
roofline price of its `gdn_decode` and `gdn_prefill` ops against AIConfigurator's measured SGLang 0.5.14
kernels at the same shapes (float32 state, as its collector runs them), on H200, B200 and B300. Evidence for
issue 30; no servelab code reads these tables, and none is shipped.

    PYTHONPATH=src python accuracy/qwen35_gdn_vs_aic.py --aic-git-dir AIC/.git

The table (`linear_attention/sglang/0.5.14/gdn_perf`, model Qwen/Qwen3.5-397B-A17B) is read from
AIConfigurator's git history at a pinned commit (`git show`), never copied. AIConfigurator's collector
(collector/sglang/collect_gdn.py) times each kernel alone: decode as causal_conv1d_update plus
fused_recurrent_gated_delta_rule_packed_decode, prefill as causal_conv1d_fn plus chunk_gated_delta_rule;
servelab's one op stands for the pair, so the pair's sum is compared.
"""

import argparse
import io
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from servelab.perfdb.keys import GdnDecode, GdnPrefill
from servelab.perfdb.roofline import Roofline
from servelab.specs import load_system

AIC_COMMIT = "095f58a51"  # ai-dynamo/aiconfigurator, 2026-12 snapshot
TABLE = (
    "aic-core/src/aiconfigurator_core/systems/data/{system}/linear_attention/sglang/0.5.14/gdn_perf.parquet"
)
MODEL = "Qwen/Qwen3.5-397B-A17B"
K_HEADS, V_HEADS, DIM, CONV = 2, 8, 128, 4  # one TP8 rank
DECODE_KERNELS = ("causal_conv1d_update", "fused_recurrent_gated_delta_rule_packed_decode")
PREFILL_KERNELS = ("causal_conv1d_fn", "chunk_gated_delta_rule")
BATCHES = (1, 8, 32, 128, 512)
PROMPTS = (1024, 4096, 8192, 32768)


def measured_us(git_dir: Path, system: str) -> dict[tuple[str, int, int], float]:
    """(kernel, batch, seq_len) -> microseconds, at one TP8 rank's heads; empty where there is no table."""
    path = TABLE.format(system=system)
    done = subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{AIC_COMMIT}:{path}"], capture_output=True
    )
    if done.returncode:
        return {}
    out = {}
    for r in pq.read_table(io.BytesIO(done.stdout)).to_pylist():
        if r["model_name"] == MODEL and (r["num_k_heads"], r["num_v_heads"]) == (K_HEADS, V_HEADS):
            out[r["kernel_source"], r["batch_size"], r["seq_len"]] = r["latency"] * 1e3
    return out


def pair(table: dict, kernels: tuple[str, str], batch: int, seq: int) -> float | None:
    got = [table.get((k, batch, seq)) for k in kernels]
    return None if None in got else sum(got)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic-git-dir", type=Path, required=True, help="an AIConfigurator clone's .git")
    args = ap.parse_args(argv)
    shape = (K_HEADS, V_HEADS, DIM, DIM, CONV, "fp32")
    for system in ("h200_sxm", "b200_sxm", "b300_sxm"):
        table = measured_us(args.aic_git_dir, system)
        if not table:
            print(f"error: no {TABLE.format(system=system)} at {AIC_COMMIT}", file=sys.stderr)
            return 2
        roofline = Roofline(load_system(system))
        print(f"{system}: decode, us (measured conv + recurrent / roofline gdn_decode)")
        for b in BATCHES:
            m = pair(table, DECODE_KERNELS, b, 1)
            r = roofline.latency(GdnDecode(b, *shape)).us
            print(f"  batch {b:>4}: {m:9.1f} / {r:9.1f}  ({r / m:.2f}x)" if m else f"  batch {b:>4}: -")
        print(f"{system}: one prefill, us (measured conv + chunked scan / roofline gdn_prefill)")
        for n in PROMPTS:
            m = pair(table, PREFILL_KERNELS, 1, n)
            r = roofline.latency(GdnPrefill(1, n, *shape)).us
            print(f"  {n:>6} tokens: {m:9.1f} / {r:9.1f}  ({r / m:.2f}x)" if m else f"  {n:>6} tokens: -")
    return 0


if __name__ == "__main__":
    sys.exit(main())
