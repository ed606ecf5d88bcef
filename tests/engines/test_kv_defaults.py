"""The KV-cache format an engine picks itself where the launch names none (servelab.engines.engine_kv_dtype):
SGLang runs a model with DeepSeek's sparse attention (GLM-5) in FP8 on Blackwell and in BF16 on Hopper
(0.5.10, server_args.py _set_default_nsa_kv_cache_dtype). Every user path that knows its engine takes it
(estimate, memory and plan here): a format given by hand wins."""

import json

import pytest
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.engines import engine_kv_dtype, with_engine_kv
from servelab.predict.plan.request import PlanRequest
from servelab.predict.plan.search import make_plan
from servelab.specs import Dtype, load_model

GLM5 = "zai-org/GLM-5-FP8"


def test_sglang_picks_fp8_for_a_sparse_attention_cache_on_blackwell_only():
    glm5, deepseek = load_model(GLM5), load_model("deepseek-v3")
    assert glm5.precision.kv_cache == Dtype.bf16  # the checkpoint declares none
    assert engine_kv_dtype("sglang", glm5, 100) == Dtype.fp8
    assert engine_kv_dtype("SGLang", glm5, 103) == Dtype.fp8  # any spelling, B300
    assert engine_kv_dtype("sglang", glm5, 90) is None  # Hopper keeps BF16
    assert engine_kv_dtype("sglang", deepseek, 100) is None  # MLA without the indexer: the checkpoint's
    for other in ("vllm", "trtllm", "torch"):  # no rule read for them: the checkpoint's
        assert engine_kv_dtype(other, glm5, 100) is None
    assert with_engine_kv(glm5, "sglang", 100).precision.kv_cache == Dtype.fp8
    assert with_engine_kv(glm5, "sglang", 90) is glm5


def memory(*flags: str) -> dict:
    args = ["memory", GLM5, "--tp", "8", "--backend", "sglang", "--json", *flags]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    return json.loads(done.output)


@pytest.mark.parametrize(
    ("system", "same_as"), [("b200_sxm", "fp8"), ("b300_sxm", "fp8"), ("h200_sxm", "bf16")]
)
def test_the_memory_answer_sizes_sglangs_own_cache_unless_one_is_given(system, same_as):
    default = memory("-s", system)["kv_bytes_per_token_per_gpu"]
    given = {
        kv: memory("-s", system, "--kv-dtype", kv)["kv_bytes_per_token_per_gpu"] for kv in ("bf16", "fp8")
    }
    assert given["fp8"] < given["bf16"]  # the formats differ, so the default's match names one
    assert default == given[same_as]


def test_the_estimate_prices_sglangs_own_cache():
    def answer(*flags: str) -> dict:
        args = ["estimate", GLM5, "-s", "b200_sxm", "--tp", "8", "--backend", "sglang", "--mode", "static"]
        done = CliRunner().invoke(app, [*args, "-b", "4", "--isl", "1024", "--osl", "64", "--json", *flags])
        assert done.exit_code == 0, done.output
        data = json.loads(done.output)
        return {
            "kv tokens": data["memory"]["max_kv_tokens"],
            "ttft": data["ttft_ms"],
            "tpot": data["tpot_ms"],
        }

    default, fp8, bf16 = answer(), answer("--kv-dtype", "fp8"), answer("--kv-dtype", "bf16")
    assert default == fp8
    # the cache's format moves the attention kernels: the decode step (a prompt step's kernels hide behind
    # the MoE layers' eager CPU time, which SGLang's GLM-5 pays as DeepSeek does)
    assert bf16["kv tokens"] < fp8["kv tokens"] and bf16["tpot"] != fp8["tpot"]


def test_the_plan_prices_sglangs_own_cache():
    def first(kv_dtype: str | None):
        question = PlanRequest(
            model=GLM5,
            system="b200_sxm",
            gpus=8,
            backend="sglang",
            mode="agg",
            isl=1024,
            osl=256,
            kv_dtype=kv_dtype,
        )
        return make_plan(question).candidates[0]

    default, fp8, bf16 = first(None), first("fp8"), first("bf16")
    assert default.ttft_ms == fp8.ttft_ms and default.tpot_ms == fp8.tpot_ms
    # a bf16 cache takes more of the memory for the same load (the latencies hide behind the MoE layers'
    # eager CPU time and the expert weights' bytes)
    assert bf16.kv_utilization > fp8.kv_utilization
