"""What DSA attention costs in a GLM-5 step (zai-org/GLM-5-FP8, TP8), by the roofline, summed over all 78
layers: decode (32 sequences) by cached tokens and one prefill by length, on H200 (BF16 cache, SGLang's
Hopper default) and B200 (FP8 cache). docs/accuracy.md, "GLM-5 embedded, with DeepSeek's sparse attention".

    PYTHONPATH=src python accuracy/glm5_attention_cost.py
"""

from servelab.perfdb.db import perfdb_for
from servelab.predict.graph import StepShape, step_ops
from servelab.specs import Parallel, load_model, load_system

TP8 = Parallel(tp=8)
DECODE_BATCH = 32
KV_LENS = (1024, 2048, 8192, 32768, 131072)
PROMPTS = (1024, 2048, 4096, 8192, 32768)


def attention_ms(db, model, shape: StepShape, names: tuple[str, ...]) -> dict[str, float]:
    """Milliseconds of each named op in one step, all layers."""
    ms = dict.fromkeys(names, 0.0)
    for op in step_ops(model, TP8, shape):
        if op.name in ms:
            ms[op.name] += db.query(op.key).us * op.count / 1e3
    return ms


def main() -> None:
    for system, kv in (("h200_sxm", "bf16"), ("b200_sxm", "fp8")):
        model = load_model("zai-org/GLM-5-FP8", kv_dtype=kv, hub=False)
        db = perfdb_for(load_system(system), "sglang")
        print(f"{system}, {kv} KV cache, decode batch {DECODE_BATCH} (ms per step, all layers):")
        for kv_len in KV_LENS:
            shape = StepShape(decode_batch=DECODE_BATCH, decode_kv_len=kv_len)
            t = attention_ms(db, model, shape, ("dsa_decode", "dsa_indexer"))
            print(f"  kv {kv_len:>6}: attention {t['dsa_decode']:.3f}, indexer {t['dsa_indexer']:.3f}")
        print(f"{system}: one prefill of N tokens (ms, all layers):")
        for n in PROMPTS:
            t = attention_ms(db, model, StepShape(prefill=((n, 0),)), ("dsa_prefill", "dsa_indexer"))
            print(f"  {n:>6}: attention {t['dsa_prefill']:.2f}, indexer {t['dsa_indexer']:.2f}")


if __name__ == "__main__":
    main()
