"""Op names: the one vocabulary shared by the op keys, the perf tables, the roofline and the collector.

A member equals its string (`OpName.gemm == "gemm"`), so keys built from JSON rows or table columns and keys
built in code compare and hash alike, and files keep the plain names."""

from enum import StrEnum


class OpName(StrEnum):
    gemm = "gemm"
    attention_prefill = "attention_prefill"
    attention_decode = "attention_decode"
    mla_prefill = "mla_prefill"
    mla_decode = "mla_decode"
    dsa_prefill = "dsa_prefill"
    dsa_decode = "dsa_decode"
    dsa_indexer = "dsa_indexer"
    gdn_prefill = "gdn_prefill"
    gdn_decode = "gdn_decode"
    dsv4_csa_context_module = "dsv4_csa_context_module"
    dsv4_hca_context_module = "dsv4_hca_context_module"
    dsv4_csa_generation_module = "dsv4_csa_generation_module"
    dsv4_hca_generation_module = "dsv4_hca_generation_module"
    moe = "moe"
    allreduce = "allreduce"
    allgather = "allgather"
    reducescatter = "reducescatter"
    alltoall = "alltoall"
    p2p = "p2p"
    elementwise = "elementwise"


DSV4_CONTEXT_OPS = (OpName.dsv4_csa_context_module, OpName.dsv4_hca_context_module)
DSV4_GENERATION_OPS = (OpName.dsv4_csa_generation_module, OpName.dsv4_hca_generation_module)
# DeepSeek-V4 modules with the compressed sparse attention (an indexer picks top-k); the others are HCA
DSV4_CSA_OPS = (OpName.dsv4_csa_context_module, OpName.dsv4_csa_generation_module)
COMM_OPS = (OpName.allreduce, OpName.allgather, OpName.reducescatter, OpName.alltoall, OpName.p2p)
