"""Which GEMM ops of servelab's step graph a checkpoint keeps out of its quantization, read from the module
exclusions of its quantization config (ModelOpt's `exclude_modules` in hf_quant_config.json, `ignore` in a
config.json's quantization_config). The engines build an excluded module unquantized, in the checkpoint's own
BF16: vLLM 0.32.0 (model_executor/layers/quantization/modelopt.py, ModelOptQuantConfigBase.is_layer_excluded),
SGLang 0.5.23 (srt/layers/quantization/modelopt_quant.py, is_layer_excluded) and TensorRT-LLM 1.3.0rc20
(_torch/models/modeling_utils.py, apply_quant_config_exclude_modules, as ai-dynamo/aiconfigurator 095f58a
collector/trtllm/collect_mla_module.py cites it)."""

from collections.abc import Iterable

# servelab's attention GEMM ops (predict.graph) -> the checkpoint modules each one runs. An op that fuses
# several modules (MLA's q_a and kv_a down-projections, GQA's q, k and v) is unquantized only when all of them
# are: the engines fuse them into one weight of one format.
ATTENTION_OPS: dict[str, tuple[str, ...]] = {
    "qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa"),
    "q_b_proj": ("q_b_proj",),
    "kv_b_proj": ("kv_b_proj",),
    "o_proj": ("o_proj",),
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "indexer_q_proj": ("indexer",),  # DSA's indexer (GLM-5): its modules sit under self_attn.indexer
    "indexer_k_proj": ("indexer",),
}


def unquantized_ops(patterns: Iterable[str]) -> tuple[str, ...]:
    """The attention ops the exclusion patterns leave unquantized, sorted. A pattern naming the whole block
    (`model.layers.0.self_attn*`, `re:.*self_attn.*`) covers all of them; `model.layers.0.self_attn.q_b_proj`
    names one module. NVIDIA's releases list each module in every layer, so a module named in any layer is
    read as excluded in all of them."""
    modules: set[str] = set()
    for pattern in patterns:
        text = pattern.removeprefix("re:").replace(".*", "*")
        _, found, tail = text.partition("self_attn")
        if not found:
            continue
        module = tail.strip("*.").split(".")[0]
        if not module:
            return tuple(sorted(ATTENTION_OPS))
        modules.add(module)
    return tuple(sorted(op for op, parts in ATTENTION_OPS.items() if set(parts) <= modules))
