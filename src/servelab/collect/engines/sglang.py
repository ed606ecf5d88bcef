"""SGLang's kernels: declared, not run yet. SGLang runs DeepSeek-V4's sparse attention on Hopper through the
same FlashMLA kernels as vLLM (its sgl-kernel / sglang-kernel wheel builds them into its common_ops library,
against the torch of its release) and its fused MoE through a Triton kernel in its Python source; the
entries below plan the same keys as vLLM's, so a table of each engine answers the same questions. They stay
pending until their loading is written and checked on a GPU (docs/collect.md, Engine kernels)."""

from servelab.collect.engines import Catalogue, KernelEntry
from servelab.collect.engines import vllm as v
from servelab.engines import Engine
from servelab.perfdb.ops import DSV4_CONTEXT_OPS, DSV4_GENERATION_OPS, OpName

ENTRIES = (
    KernelEntry(
        name="dsv4_flashmla",
        ops=DSV4_CONTEXT_OPS + DSV4_GENERATION_OPS,
        backend=Engine.SGLANG.value,
        kernel="DeepSeek-V4 CSA / HCA attention through FlashMLA's sparse kernels in sgl-kernel's common_ops",
        bench="servelab.collect.engines.runtime:pending",
        runs=lambda key: True,
        plan=v.dsv4_plan,
        cost=v.dsv4_cost,
        files=("sgl_kernel/common_ops.*.so",),
        libraries=("sgl_kernel/common_ops.*.so",),
        pending="sgl-kernel's library is not loaded by the collector yet (its op names and the torch it is "
        "built against are to be checked on the GPU machine)",
    ),
    KernelEntry(
        name="fused_moe",
        ops=(OpName.moe,),
        backend=Engine.SGLANG.value,
        kernel="SGLang's fused_moe_kernel (Triton) from sglang/srt/layers/moe/fused_moe_triton",
        bench="servelab.collect.engines.runtime:pending",
        runs=v._fp8_block,
        plan=v.fused_moe_plan,
        pending="SGLang's fused-MoE source is not read by the collector yet",
    ),
)

CATALOGUE = Catalogue(Engine.SGLANG, Engine.SGLANG.value, ENTRIES)
