"""The MoE router GEMM as vLLM runs it: the architectures whose gate vLLM keeps in float32.

vLLM builds these models' gate with float32 weights (`params_dtype=torch.float32`) whatever the checkpoint
stores, so the router GEMM computes in float32 on the CUDA cores, not in bf16 on the tensor cores. Read in
vLLM 0.32.0 (and 0.19.0, the release most of the closed-loop MiniMax-M2.5 rows ran, for the first three):

- MiniMaxM2ForCausalLM (models/minimax_m2.py): 0.12.0 and 0.19.0 a float32 ReplicatedLinear called on
  `hidden_states.to(torch.float32)`, at every token count; from 0.23 a float32 GateLinear
  (fused_moe/router/gate_linear.py): on Hopper and Blackwell up to FP32_MAX_TOKENS (32) tokens a specialised
  float32 kernel (ops.fp32_router_gemm, for MiniMax-M2's (3072, 256) shape), above that `F.linear` on the
  input cast to float32 (cuBLAS SGEMM; VLLM_FLOAT32_MATMUL_PRECISION defaults to "highest": no TF32). So
  float32 at every token count: both kernels read float32 weights and multiply on the CUDA cores.
- Glm4MoeForCausalLM (models/glm4_moe.py, GLM-4.5 to 4.7) and Ernie4_5_MoeForCausalLM (models/ernie45_moe.py):
  the same float32 gate in 0.19.0 (input cast to float32) and 0.32.0 (GateLinear; their shapes have no
  specialised kernel, so `F.linear` in float32 at every count).
- AfmoeForCausalLM, BailingMoeV3ForCausalLM, HYV3ForCausalLM, Param2MoEForCausalLM, Step3p5ForCausalLM: a
  float32 GateLinear in 0.32.0 (models/afmoe.py, bailing_moe_v3.py, hy_v3.py, param2moe.py, step3p5.py).

Not here: gates whose float32 is only their output (DeepSeek-V2/V3's `moe_router_dtype`, GLM-5: bf16 weights,
cuBLAS bf16 with a float32 epilogue), and gates whose dtype a config field chooses (Bailing-MoE's
`router_dtype`, MiMo-V2's `moe_router_dtype`, LongCat-Flash's `router_dtype`), which a model spec does not
carry. From vLLM 0.26 a Blackwell GPU runs a float32 gate above 32 tokens as three bf16 tensor-core GEMMs
(bf16x3_router_gemm_cutedsl.py); the rule does not see the GPU, so Blackwell keeps the CUDA-core price.
"""

FLOAT32_ROUTER_ARCHITECTURES = frozenset(
    {
        "MiniMaxM2ForCausalLM",
        "Glm4MoeForCausalLM",
        "Ernie4_5_MoeForCausalLM",
        "AfmoeForCausalLM",
        "BailingMoeV3ForCausalLM",
        "HYV3ForCausalLM",
        "Param2MoEForCausalLM",
        "Step3p5ForCausalLM",
    }
)
