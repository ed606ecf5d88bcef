"""The flags each captured engine release accepts (servelab.engines.releases), read from the pinned data the
engines' own parsers produced, and the launch check `recipes validate` and `servelab run` make with it."""

import gzip
import json
from importlib import resources
from pathlib import Path

import pytest
import yaml

from servelab.engines import Engine
from servelab.engines.releases import (
    Release,
    check_launch,
    engine_of_command,
    releases,
)
from servelab.engines.version import version_of
from servelab.recipes.recipe_store import DATA_DIR, open_store
from servelab.recipes.validate import validate_store

IX = Path(__file__).parents[1] / "data" / "inferencex"
PROFILES = Path(__file__).parents[2] / "src" / "servelab" / "recipes" / "data" / "launch-profiles.json"
VLLM = ["vllm", "serve", "deepseek-ai/DeepSeek-V4-Pro", "--tensor-parallel-size", "8"]


def vllm(*flags: str, image: str = "vllm/vllm-openai:v0.25.0"):
    return check_launch(Engine.VLLM, image, [*VLLM, *flags])


def sglang(*flags: str, image: str = "lmsysorg/sglang:v0.5.16-cu130"):
    return check_launch(
        "sglang", image, ["python3", "-m", "sglang.launch_server", "--model-path", "m", *flags]
    )


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("vllm/vllm-openai:v0.25.0", "0.25.0"),
        ("vllm/vllm-openai-rocm:v0.27.1", "0.27.1"),
        ("lmsysorg/sglang:v0.5.9-cu129", "0.5.9"),
        ("lmsysorg/sglang:v0.5.15.post1-cu130", "0.5.15.post1"),
        ("lmsysorg/sglang:v0.5.14-cu130@sha256:" + "5" * 64, "0.5.14"),
        ("nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc2", "1.2.0rc2"),
        ("nvcr.io#nvidia/tensorrt-llm/release:1.3.0rc23.post1", "1.3.0rc23.post1"),
        ("localhost:5000/vllm:v0.25.0", "0.25.0"),
        ("0.25.0", "0.25.0"),
        ("v0.5.16", "0.5.16"),
        ("lmsysorg/sglang:latest", "latest"),
        ("localhost:5000/vllm", "latest"),
        (None, "latest"),
        ("vllm/vllm-openai:nightly-09663abde0f50944a8d5ea30120666024b503faa", None),
        ("vllm/vllm-openai:vllm-x86_64-cu13-0.25.1-7a33ba9", None),
        ("lmsysorg/sglang:deepseek-v4-hopper", None),
    ],
)
def test_the_release_an_image_names(image, version):
    assert version_of(image) == version


def test_every_release_file_says_where_it_came_from():
    for engine in (Engine.VLLM, Engine.SGLANG):
        found = releases(engine)
        assert len(found) >= 2, f"{engine}: a removed flag needs two releases to be told from a misspelt one"
        folder = resources.files("servelab.engines") / engine.value / "releases"
        assert sorted(f"{r.version}.json" for r in found) == sorted(p.name for p in folder.iterdir())
        for r in found:
            assert r.engine is engine
            assert r.provenance.wheel and r.provenance.wheel.startswith(f"{engine.value}-{r.version}-")
            assert r.provenance.sha256 and len(r.provenance.sha256) == 64
            assert "parser walked" in r.provenance.method
            assert "--host" in r.flags and "--port" in r.flags


def test_the_engine_of_a_command():
    assert engine_of_command(["python3", "-m", "sglang.launch_server"]) is Engine.SGLANG
    assert engine_of_command(["trtllm-serve", "m"]) is Engine.TRTLLM
    assert engine_of_command(["vllm", "serve", "m"]) is Engine.VLLM
    assert engine_of_command(["python3", "-m", "atom.entrypoints.openai_server"]) is Engine.ATOM
    assert engine_of_command(["python3", "-m", "http.server"]) is None


def test_a_launch_the_release_takes_has_no_problem():
    check = vllm(
        "--kv-cache-dtype", "fp8", "--block-size", "256", "--no-enable-prefix-caching", "-tp", "8",
        "--compilation-config", '{"mode":3,"cudagraph_mode":"FULL_AND_PIECEWISE","pass_config":{}}',
        "--attention_config.use_fp4_indexer_cache", "True", "--speculative-config",
        '{"method": "mtp", "num_speculative_tokens": 2}', "--max_num_seqs=256",
        "--served-model-name", "a", "b",
    )  # fmt: skip
    assert (check.release, check.note, check.problems) == ("vllm 0.25.0", None, [])


def test_a_misspelt_flag_is_refused_with_a_suggestion():
    check = vllm("--gpu-memory-utilisation", "0.9")
    assert len(check.errors) == 1
    assert check.errors[0].startswith(
        "--gpu-memory-utilisation: unknown flag for vllm 0.25.0 (did you mean --gpu-memory-utilization"
    )
    [error] = sglang("--mem-fraction-statc", "0.8").errors
    assert error.startswith(
        "--mem-fraction-statc: unknown flag for sglang 0.5.16 (did you mean --mem-fraction-static"
    )


def test_a_removed_flag_is_named_with_the_last_release_that_had_it():
    assert vllm("--max-num-partial-prefills", "2", image="vllm/vllm-openai:v0.27.1").errors == [
        "--max-num-partial-prefills: removed from vllm 0.27.1 (last in 0.26.0)"
    ]
    assert vllm("--max-num-partial-prefills", "2", image="vllm/vllm-openai:v0.26.0").errors == []
    assert sglang("--enable-deepep-waterfill").errors == [
        "--enable-deepep-waterfill: removed from sglang 0.5.16 (last in 0.5.15.post1)"
    ]


def test_a_flag_newer_than_the_release_is_named_with_its_first_release():
    assert vllm("--prefill-schedule-interval", "4", image="vllm/vllm-openai:v0.23.0").errors == [
        "--prefill-schedule-interval: not in vllm 0.23.0 (first in 0.24.0)"
    ]


def test_an_unknown_config_key_is_refused():
    check = vllm("--compilation-config", '{"mode": 3, "cudagraph_mod": "FULL"}')
    assert len(check.errors) == 1
    assert check.errors[0].startswith("--compilation-config: unknown key 'cudagraph_mod' for vllm 0.25.0")
    assert "did you mean cudagraph_mode" in check.errors[0]
    nested = vllm("--compilation-config", '{"pass_config": {"fuse_norm_quantt": true}}')
    assert nested.errors[0].startswith("--compilation-config: unknown key 'pass_config.fuse_norm_quantt'")
    dotted = vllm("--attention_config.use_fp4_indexer", "True")
    assert dotted.errors[0].startswith("--attention_config.use_fp4_indexer: unknown key 'use_fp4_indexer'")
    assert "did you mean use_fp4_indexer_cache" in dotted.errors[0]


def test_a_config_key_newer_than_the_release_is_named_with_its_first_release():
    # vLLM's KernelConfig forbids keys it does not have; enable_jit_warmup came after 0.26.0
    assert vllm("--kernel-config", '{"enable_jit_warmup": false}').errors == [
        "--kernel-config: key 'enable_jit_warmup' not in vllm 0.25.0 (first in 0.27.1)"
    ]
    ok = vllm("--kernel-config", '{"enable_jit_warmup": false}', image="vllm/vllm-openai:v0.27.1")
    assert ok.problems == []


def test_values_switches_and_choices():
    assert vllm("--enable-expert-parallel", "true").errors == [
        "--enable-expert-parallel: a switch in vllm 0.25.0; it takes no value (got 'true')"
    ]
    assert vllm("--enforce_eager", "True").errors == [
        "--enforce_eager: a switch in vllm 0.25.0; it takes no value (got 'True')"
    ]
    assert vllm("--enforce-eager", "deepseek-ai/DeepSeek-V4-Pro").problems == []  # vLLM's model, positional
    assert vllm("--async-scheduling=1").errors == [
        "--async-scheduling: a switch in vllm 0.25.0; it takes no value (got '1')"
    ]
    assert vllm("--max-model-len", "--enforce-eager").errors == [
        "--max-model-len: needs a value in vllm 0.25.0"
    ]
    [bad] = vllm("--kv-cache-dtype", "fp9").errors
    assert bad.startswith("--kv-cache-dtype fp9: not a choice of vllm 0.25.0 (did you mean fp8")
    assert vllm("--kv-cache-dtype", "fp8").problems == []
    assert vllm("--compilation-config", "{mode: 3").errors == ["--compilation-config: not JSON ('{mode: 3')"]


def test_spellings_follow_the_parser():
    # vLLM's FlexibleArgumentParser folds underscores into hyphens; SGLang's plain argparse does not
    assert vllm("--gpu_memory_utilization", "0.9").problems == []
    assert sglang("--mem_fraction_static", "0.8").errors == [
        "--mem_fraction_static: sglang 0.5.16 does not read underscores in flag names "
        "(write --mem-fraction-static)"
    ]
    # argparse takes a unique prefix of a flag (allow_abbrev), but not an ambiguous one
    assert sglang("--mem-fraction", "0.8").problems == []
    assert sglang("--cuda-graph-max-bs", "8").warnings  # an exact name wins over the longer flags it begins
    ambiguous = sglang("--cuda-graph-max", "8").errors
    assert ambiguous[0].startswith("--cuda-graph-max: unknown flag for sglang 0.5.16 (did you mean")


def test_deprecated_flags_are_warnings():
    check = sglang("--cuda-graph-max-bs", "256")
    assert check.errors == []
    assert check.warnings == [
        "--cuda-graph-max-bs: deprecated in sglang 0.5.16; use --cuda-graph-max-bs-decode"
    ]


def test_which_release_an_image_is_checked_against():
    newest = releases(Engine.VLLM)[-1]
    latest = vllm("--gpu-memory-utilisation", "0.9", image="vllm/vllm-openai:latest")
    assert latest.release == newest.label and latest.note and "newest captured" in latest.note
    assert latest.errors and not latest.warnings
    nightly = vllm("--gpu-memory-utilisation", "0.9", image="vllm/vllm-openai:nightly-0123abc")
    assert nightly.release == newest.label and not nightly.errors
    assert nightly.warnings[0].startswith("--gpu-memory-utilisation: unknown flag")
    assert "problems are warnings" in (nightly.note or "")
    newer = vllm("--bogus-flag", image="vllm/vllm-openai:v9.0.0")
    assert newer.release == newest.label and newer.warnings and not newer.errors
    # a release between two captured ones: the flags of both neighbours are accepted, others refused
    between = vllm("--enable-bf16x3-router-gemm", "--bogus-flag", image="vllm/vllm-openai:v0.25.5")
    assert between.release == "vllm 0.25.1" and "checked against 0.25.1 and 0.26.0" in (between.note or "")
    assert [p.flag for p in between.problems] == ["--bogus-flag"] and between.errors


def test_an_engine_without_captured_releases_is_not_checked():
    check = check_launch("trtllm", "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc14", ["trtllm-serve", "m"])
    assert check.release is None and check.problems == [] and "no captured release" in (check.note or "")


def _trtllm_release() -> Release:
    """A TensorRT-LLM release written here (no TensorRT-LLM wheel is captured: NVIDIA's index serves them),
    shaped as the capture writes one, to test the options-file check."""
    return Release.model_validate(
        {
            "engine": "trtllm",
            "version": "1.3.0rc14",
            "provenance": {"method": "written by the test", "tool": "tests/engines/test_releases.py"},
            "parser": {"underscores": True, "abbreviations": False, "dotted_configs": False},
            "flags": {
                "--extra-llm-api-options": {"aliases": ["--config"]},
                "--tp-size": {},
                "--trust-remote-code": {"value": "none"},
            },
            "options_flags": ["--extra-llm-api-options"],
            "options_keys": [
                "cuda_graph_config", "cuda_graph_config.enable_padding", "cuda_graph_config.max_batch_size",
                "enable_attention_dp", "kv_cache_config", "kv_cache_config.dtype",
                "kv_cache_config.free_gpu_memory_fraction", "print_iter_log",
            ],
        }
    )  # fmt: skip


def test_an_unknown_trtllm_option_key_is_refused():
    argv = ["trtllm-serve", "m", "--tp_size", "8", "--trust_remote_code", "--extra_llm_api_options", "x.yml"]
    options = {
        "kv_cache_config": {"free_gpu_memory_fractio": 0.8, "dtype": "fp8"},
        "enable_attention_dpp": True,
        "cuda_graph_config": {"enable_padding": True},
    }
    check = check_launch("trtllm", "1.3.0rc14", argv, {"x.yml": options}, catalog=[_trtllm_release()])
    assert check.errors == [
        "--extra_llm_api_options x.yml: unknown key 'kv_cache_config.free_gpu_memory_fractio' for trtllm "
        "1.3.0rc14 (did you mean free_gpu_memory_fraction?)",
        "--extra_llm_api_options x.yml: unknown key 'enable_attention_dpp' for trtllm 1.3.0rc14 "
        "(did you mean enable_attention_dp?)",
    ]
    same = check_launch("trtllm", "1.3.0rc14", argv[:-2] + ["--config", "x.yml"], {"x.yml": options},
                        catalog=[_trtllm_release()])  # fmt: skip
    assert len(same.errors) == 2


def _master() -> dict:
    out = {}
    for name in ("nvidia-master.yaml", "amd-master.yaml"):
        out.update(yaml.safe_load((IX / "configs" / name).read_text()))
    return out


@pytest.mark.slow  # 1.4 s of CPU a case: every launch of the pinned store
def test_every_captured_upstream_launch_is_accepted_by_its_release():
    """InferenceX's launch scripts, run for every single-node job, against the image each job names."""
    master = _master()
    launches = json.loads(gzip.decompress((IX / "launch" / "launches.json.gz").read_bytes()))
    checked, refused = 0, []
    for launch in launches:
        entry = master[launch["key"]]
        if entry["framework"] not in ("vllm", "sglang"):
            continue  # TensorRT-LLM: no captured release; ATOM: not an engine servelab checks
        check = check_launch(entry["framework"], entry["image"], launch["argv"])
        checked += check.release is not None
        refused += [f"{launch['id']} ({entry['image']}): {e}" for e in check.errors]
    assert refused == []
    assert checked > 400


@pytest.mark.slow  # 2.1 s of CPU a case: every launch of the pinned store
def test_every_launch_profile_is_accepted_by_its_release():
    """recipes/data/launch-profiles.json: each profile's flags (and each variant's) against the image of every
    InferenceX key whose script the profile was derived from."""
    master = _master()
    images: dict[str, set[str]] = {}
    for capture in ("launches.json.gz", "agentic-launches.json.gz"):  # fixed-seq-len and agentic scripts
        for launch in json.loads(gzip.decompress((IX / "launch" / capture).read_bytes())):
            if launch.get("script"):
                images.setdefault(launch["script"], set()).add(master[launch["key"]]["image"])
    profiles = json.loads(PROFILES.read_text())["profiles"]
    refused, checked = [], 0
    for p in profiles:
        if p["framework"] not in ("vllm", "sglang"):
            continue
        program = ["vllm", "serve", "m"] if p["framework"] == "vllm" else ["sglang", "serve"]
        # an agentic script's profile may keep every flag in its variants; a refused variant launches nothing
        for variant in [{"args": []}, *(v for v in p.get("variants", []) if "refused" not in v)]:
            for image in sorted(images[p["script"]]):
                argv = [*program, *p.get("args", []), *variant.get("args", [])]
                check = check_launch(p["framework"], image, argv)
                checked += check.release is not None
                refused += [f"{p['script']} ({image}): {e}" for e in check.errors]
    assert refused == []
    assert checked > 50


def test_every_shipped_recipe_is_accepted_by_its_release():
    store = open_store(DATA_DIR)
    # dsv4-fp4-b200-vllm once set --kernel-config {"enable_jit_warmup": false} on vllm/vllm-openai:v0.25.0,
    # whose KernelConfig has no such key (first in 0.27.1): that server would not have started
    refused = [f"{rep.key}: {e}" for rep in validate_store(store) for e in rep.errors]
    assert refused == []
    checked = [n for rep in validate_store(store) for n in rep.notes if "checked as" in n]
    assert checked  # the recipes on `latest` are checked as the newest captured release
