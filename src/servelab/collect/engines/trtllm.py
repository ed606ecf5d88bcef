"""TensorRT-LLM's kernels: declared, not run. Its DeepSeek-V4 attention and MoE kernels live in the
TensorRT-LLM wheel's libth_common.so, which loads only with TensorRT-LLM's own C++ runtime (TensorRT, its
NCCL and MPI bindings) beside it: no single library of it loads into a bare torch process. The entry plans
the same DeepSeek-V4 keys as vLLM's, so a table measured with TensorRT-LLM installed (AIConfigurator's
collector does so) answers the same questions."""

from servelab.collect.engines import Catalogue, KernelEntry
from servelab.collect.engines import vllm as v
from servelab.engines import Engine
from servelab.perfdb.ops import DSV4_CONTEXT_OPS, DSV4_GENERATION_OPS

ENTRIES = (
    KernelEntry(
        name="dsv4_attention",
        ops=DSV4_CONTEXT_OPS + DSV4_GENERATION_OPS,
        backend=Engine.TRTLLM.value,
        kernel="TensorRT-LLM's DeepSeek-V4 attention (thop ops of libth_common.so)",
        bench="servelab.collect.engines.runtime:pending",
        runs=lambda key: True,
        plan=v.dsv4_plan,
        cost=v.dsv4_cost,
        pending="TensorRT-LLM's kernels load only with its whole C++ runtime (TensorRT, MPI), not standalone",
    ),
)

CATALOGUE = Catalogue(Engine.TRTLLM, "tensorrt-llm", ENTRIES)
