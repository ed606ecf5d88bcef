"""vLLM's batch defaults by GPU and release (engines/vllm/batch_defaults.json) and the profile on them."""

import pytest

from servelab.engines.vllm.batch import batch_defaults, rules
from servelab.predict.engines import engine_profile
from servelab.specs import load_system

H200 = load_system("h200_sxm")
B200 = load_system("b200_sxm")
MI355X = load_system("mi355x")
A100 = (80.0, "NVIDIA A100-SXM4-80GB")  # no A100 system is shipped: vLLM reads its device name


@pytest.mark.parametrize(
    ("gpu_gib", "gpu_name", "version", "tokens", "seqs"),
    [
        (H200.hbm_gib, H200.gpu_name, "0.34.0", 8192, 1024),
        (H200.hbm_gib, H200.gpu_name, "0.13.0", 8192, 1024),
        (B200.hbm_gib, B200.gpu_name, "0.34.0", 16384, 1024),
        (B200.hbm_gib, B200.gpu_name, "0.28.0", 16384, 1024),
        (B200.hbm_gib, B200.gpu_name, "0.27.1", 8192, 1024),  # the 160 GiB tier came with 0.28.0
        (MI355X.hbm_gib, MI355X.gpu_name, "0.24.0", 8192, 1024),
        (*A100, "0.34.0", 2048, 256),
        (*A100, "0.10.0", 2048, 256),
        (40.0, "NVIDIA A100-SXM4-40GB", "0.25.0", 2048, 256),
        (128.0, "NVIDIA GB10", "0.32.0", 8192, 1024),
        (128.0, "NVIDIA GB10", "0.33.0", 2048, 256),  # kept on the smallest tier from 0.33.0
    ],
)
def test_the_rule_per_tier_and_release(gpu_gib, gpu_name, version, tokens, seqs):
    got = batch_defaults(gpu_gib, gpu_name, version)
    assert (got.max_num_batched_tokens, got.max_num_seqs) == (tokens, seqs)


def test_a_release_is_read_from_an_image_tag_and_an_unknown_one_takes_the_newest_rule():
    assert (
        batch_defaults(B200.hbm_gib, B200.gpu_name, "vllm/vllm-openai:v0.27.1").max_num_batched_tokens == 8192
    )
    for unknown in (None, "nightly-100c7b65", "latest", "0.99.0"):
        got = batch_defaults(B200.hbm_gib, B200.gpu_name, unknown)
        assert got.max_num_batched_tokens == 16384
        assert rules()[-1].releases in got.why


def test_the_rules_cover_the_releases_read_without_gaps():
    """Each range starts at the release after the last one's end (no release read falls between)."""
    known = rules()
    assert (known[0].first, known[-1].last) == ("0.10.0", "0.34.0")
    assert [(r.first, r.last) for r in known] == [
        ("0.10.0", "0.27.1"),
        ("0.28.0", "0.32.0"),
        ("0.33.0", "0.34.0"),
    ]
    for rule in known:
        assert "arg_utils.py" in rule.citation and "sha256" in rule.citation


def test_the_vllm_profile_takes_the_rule_for_the_system_and_says_which():
    h200 = engine_profile("vllm", H200.hbm_gib, gpu_name=H200.gpu_name)
    assert (h200.max_num_batched_tokens, h200.max_num_seqs) == (8192, 1024)
    assert "release not known: the newest rule (vLLM 0.33.0-0.34.0)" in h200.source
    assert ">= 70 GiB" in h200.source
    b200 = engine_profile("vllm", B200.hbm_gib, gpu_name=B200.gpu_name, engine_version="0.28.0")
    assert (b200.max_num_batched_tokens, b200.max_num_seqs) == (16384, 1024)
    assert "vLLM 0.28.0-0.32.0 rule, >= 160 GiB" in b200.source
    a100 = engine_profile("vllm", A100[0], gpu_name=A100[1], engine_version="0.25.0")
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)
    assert "smallest tier" in a100.source


def test_a_setting_the_launch_gives_wins():
    seqs = engine_profile("vllm", H200.hbm_gib, gpu_name=H200.gpu_name, max_num_seqs=64)
    assert (seqs.max_num_batched_tokens, seqs.max_num_seqs) == (8192, 64)
    assert "max_num_seqs as given" in seqs.source
    both = engine_profile(
        "vllm", B200.hbm_gib, gpu_name=B200.gpu_name, max_num_seqs=8, max_num_batched_tokens=512
    )
    assert (both.max_num_batched_tokens, both.max_num_seqs) == (512, 8)
    assert "batch defaults" not in both.source


def test_a_default_seq_cap_is_at_most_the_given_token_budget():
    """vLLM (0.12.0 on) caps a default max_num_seqs at the step's token budget."""
    small = engine_profile("vllm", H200.hbm_gib, gpu_name=H200.gpu_name, max_num_batched_tokens=512)
    assert (small.max_num_batched_tokens, small.max_num_seqs) == (512, 512)


def test_without_the_gpu_the_documented_defaults_stand():
    flat = engine_profile("vllm")
    assert (flat.max_num_batched_tokens, flat.max_num_seqs) == (8192, 256)
    assert "batch defaults" not in flat.source


def test_other_engines_keep_their_own_rules():
    sglang = engine_profile("sglang", B200.hbm_gib, gpu_name=B200.gpu_name)
    assert sglang.max_num_batched_tokens == 16384  # SGLang's chunked_prefill_size above 160 GiB
    assert "batch defaults" not in sglang.source
