"""The settings of a server command that servelab acts on, typed and named once for every engine.

Each engine's grammar (servelab/engines/<engine>/grammar.py) maps these fields to its flags, and for
TensorRT-LLM to keys of its extra_llm_api_options YAML; `Grammar.parse` reads a command into this model and
`Grammar.render` writes it back (parse(render(s)) == s). A field left None (or False for a switch) is not on
the command line: the engine's default applies. Flags servelab has no field for are kept verbatim, in order,
in `extra_args`, so nothing a command says is lost.

Parallel fields are in the engine's own terms (`Grammar.parallel` turns them into servelab's `Parallel`):
vLLM's attention data parallel is `tp=1, dp=N, expert_parallel=True`; SGLang's is `tp=N, dp=N,
attention_dp=True`; TensorRT-LLM's is `tp=N, attention_dp=True` (in its YAML).

`memory_fraction` is one knob with three meanings, as the engines define it:
- vLLM `--gpu-memory-utilization` (and ATOM's, which budgets the same way): the share of the whole GPU the
  engine may fill (weights, activations and KV cache together);
- SGLang `--mem-fraction-static`: the share of the GPU for weights and the KV pool; activations and CUDA
  graphs live in the rest;
- TensorRT-LLM `--kv_cache_free_gpu_memory_fraction`, or `kv_cache_config.free_gpu_memory_fraction` in its
  YAML (which wins): the share of the memory still free after the weights are loaded and a forward pass is
  profiled that goes to the KV cache.
`predict.memory` prices each meaning; `recipes.validate` turns the last two into a share of the whole GPU.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

Size = Annotated[int, Field(ge=1)]


class ServerSettings(BaseModel):
    """One server command's settings; see the module docstring for what each engine calls them."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, description="The checkpoint served (None: server arguments alone).")
    revision: str | None = None
    host: str | None = None
    port: int | None = Field(None, ge=0, le=65535)
    served_model_name: str | None = Field(None, description="The name clients ask for (default: model).")

    tp: Size | None = Field(None, description="Tensor parallel size.")
    dp: Size | None = Field(None, description="Data parallel size (vLLM and SGLang).")
    ep: Size | None = Field(None, description="Expert parallel size (SGLang, TensorRT-LLM).")
    pp: Size | None = Field(None, description="Pipeline parallel size.")
    dcp: Size | None = Field(None, description="vLLM decode context parallel size.")
    pcp: Size | None = Field(None, description="vLLM prefill context parallel size.")
    expert_parallel: bool = Field(False, description="vLLM: experts spread over all TP x DP ranks.")
    attention_dp: bool = Field(False, description="SGLang and TensorRT-LLM attention data parallel.")

    max_model_len: Size | None = Field(
        None, description="vLLM max-model-len, SGLang context-length, TRT max_seq_len."
    )
    max_num_batched_tokens: Size | None = Field(
        None, description="Tokens one step may hold: SGLang chunked-prefill-size, TRT max_num_tokens."
    )
    max_num_seqs: Size | None = Field(
        None, description="Running sequences: SGLang max-running-requests, TRT max_batch_size."
    )
    memory_fraction: float | None = Field(None, gt=0, le=1, description="See the module docstring.")
    chunked_prefill: bool | None = None
    stream_interval: Size | None = Field(
        None, description="Tokens a running request's streamed chunk waits for (vLLM, SGLang, TRT YAML)."
    )
    prefix_caching: bool | None = Field(
        None, description="vLLM prefix caching, SGLang radix cache, TRT block reuse."
    )

    quantization: str | None = None
    kv_cache_dtype: str | None = Field(
        None, description="As the engine names it (SGLang: fp8_e4m3, not fp8)."
    )
    block_size: Size | None = Field(
        None, description="KV-cache block: SGLang page-size, TRT tokens_per_block."
    )
    moe_backend: str | None = Field(
        None, description="vLLM moe-backend, SGLang moe-runner-backend, TRT moe_config.backend."
    )
    attention_config: dict[str, Any] | None = None
    compilation_config: dict[str, Any] | None = None
    kernel_config: dict[str, Any] | None = None
    speculative_config: dict[str, Any] | None = Field(
        None,
        description="vLLM's JSON, SGLang's --speculative-KEY flags by key, TRT's YAML speculative_config.",
    )

    trust_remote_code: bool = False
    tokenizer_mode: str | None = None
    tool_call_parser: str | None = None
    auto_tool_choice: bool = Field(False, description="vLLM --enable-auto-tool-choice.")
    reasoning_parser: str | None = None
    backend: str | None = Field(None, description="trtllm-serve's runtime (pytorch, trt, _autodeploy).")

    engine_options: dict[str, Any] = Field(
        default_factory=dict, description="TensorRT-LLM's YAML options that have no field above, as written."
    )
    extra_args: list[str] = Field(
        default_factory=list, description="Tokens with no field above, verbatim and in order."
    )
