"""What attention costs in a Qwen3.5-397B-A17B step (Qwen/Qwen3.5-397B-A17B-FP8, TP8, InferenceX's FP8 KV
cache and bfloat16 state), as SGLang's perf tables or the roofline price it: the 45 Gated DeltaNet layers
against the 15 gated GQA layers, decode (32 sequences) by cached tokens and one prefill by length, on H200
and B200. docs/accuracy.md, "Qwen3.5-397B-A17B embedded".

    PYTHONPATH=src python accuracy/qwen35_attention_cost.py
"""

from servelab.perfdb.db import perfdb_for
from servelab.predict.graph import StepShape, step_ops
from servelab.specs import Dtype, Parallel, load_model, load_system

TP8 = Parallel(tp=8)
DECODE_BATCH = 32
KV_LENS = (1024, 8192, 32768, 131072)
PROMPTS = (1024, 8192, 32768)
LINEAR, FULL = "gdn", "attention"


def attention_ms(db, model, shape: StepShape) -> dict[str, float]:
    """Milliseconds of the linear layers' and the full layers' attention cores in one step, all layers."""
    ms = {LINEAR: 0.0, FULL: 0.0}
    for op in step_ops(model, TP8, shape):
        if op.name in ("gdn_prefill", "gdn_decode"):
            ms[LINEAR] += db.query(op.key).us * op.count / 1e3
        elif op.name in ("attention_prefill", "attention_decode"):
            ms[FULL] += db.query(op.key).us * op.count / 1e3
    return ms


def main() -> None:
    model = load_model("Qwen/Qwen3.5-397B-A17B-FP8", kv_dtype="fp8", hub=False).with_state_dtype(Dtype.bf16)
    for system in ("h200_sxm", "b200_sxm"):
        db = perfdb_for(load_system(system), "sglang")
        print(f"{system}, decode batch {DECODE_BATCH} (ms per step): linear layers / full layers")
        for kv_len in KV_LENS:
            t = attention_ms(db, model, StepShape(decode_batch=DECODE_BATCH, decode_kv_len=kv_len))
            print(f"  kv {kv_len:>6}: {t[LINEAR]:.3f} / {t[FULL]:.3f}")
        print(f"{system}, one prefill of N tokens (ms): linear layers / full layers")
        for n in PROMPTS:
            t = attention_ms(db, model, StepShape(prefill=((n, 0),)))
            print(f"  {n:>6}: {t[LINEAR]:.2f} / {t[FULL]:.2f}")


if __name__ == "__main__":
    main()
