"""Launch profiles: servelab renders what InferenceX's launch script runs for each single-node key and job.

The upstream side is the capture of the pinned scripts (tests/data/inferencex/launch/launches.json.gz, made by
servelab.recipes.engines.upstream running each script under bash with stub servers); a sample is re-run here
so the capture cannot drift from the scripts.
"""

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from servelab.errors import ServelabError
from servelab.recipes.engines import JobPoint, render
from servelab.recipes.engines import upstream as ix
from servelab.recipes.engines.profiles import (
    PROFILES_PATH,
    When,
    drop_flags,
    flag_pairs,
    hardware_of,
    merge_args,
)
from servelab.recipes.inferencex import SearchSpaceEntry
from servelab.recipes.store import Store, open_store
from servelab.recipes.sweep import expand

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def capture():
    return ix.read_capture()


@pytest.fixture(scope="module")
def upstream_recipes():
    return ix.recipes()


@pytest.fixture(scope="module")
def verdicts(capture, upstream_recipes):
    return ix.conformance(capture, upstream_recipes)


def arm(**kw):
    return SearchSpaceEntry(conc_list=[1], **kw)


def test_capture_covers_every_single_node_fixed_seq_len_job(capture):
    # 690 = the single-node fixed-seq-len rows of InferenceX's own full-sweep at the pinned commit.
    assert len(capture) == len(list(ix.jobs())) == 690
    assert all("argv" in r for r in capture)


def test_profile_table_is_derived_from_the_capture(capture, upstream_recipes):
    assert ix.derive(capture, upstream_recipes) == json.loads(PROFILES_PATH.read_text())


def test_every_key_with_an_adapter_matches_upstream_on_every_job(verdicts, upstream_recipes):
    fixed = {k: v for k, v in verdicts.items() if v["jobs"]}
    differing = {k for k, v in fixed.items() if v["differences"]}
    no_adapter = {k for k in fixed if upstream_recipes[k].framework == "atom"}
    assert differing == no_adapter
    assert len(fixed) - len(no_adapter) == 68
    agentic = {k for k, v in verdicts.items() if not v["jobs"]}
    assert all(upstream_recipes[k].scenarios.agentic_coding for k in agentic)


def test_conformance_table_in_docs_is_current(verdicts):
    text = ix.DOCS.read_text()
    assert ix.docs_text(text, ix.table(verdicts)) == text


@pytest.mark.skipif(shutil.which("bash") is None, reason="the capture runs upstream's scripts under bash")
def test_capture_reproduces_from_the_pinned_scripts(capture):
    # One job per script (its highest concurrency): the committed capture is what the scripts run today.
    available = {p.relative_to(ix.SCRIPTS).as_posix() for p in ix.SCRIPTS.rglob("*.sh")}
    stored = {r["id"]: r for r in capture}
    sample = {}
    for key, entry, seq, a, conc in ix.jobs():
        sample[ix.script_for(entry, a.spec_, available)] = (key, entry, seq, a, conc)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        ix.sandbox(tmp)
        for script, (key, entry, seq, a, conc) in sample.items():
            got = ix.run_script(script, ix.job_env(entry, seq, a, conc), tmp)
            want = stored[ix.job_id(key, seq, a, conc)]
            assert {k: want[k] for k in ("argv", "env", "files")} == got, script


def test_concurrency_reaches_the_launch(tmp_path):
    # dsv4_fp4_b200_vllm.sh: --max-num-batched-tokens is ISL (8192) up to concurrency 128, 2048 above.
    store = _store(tmp_path, "dsv4-fp4-b200-vllm")
    jobs = [j for j in expand(store) if j.row["isl"] == 8192 and j.row["dp-attn"]]
    by_conc = {j.row["conc"]: dict(flag_pairs(j.launch.argv))["--max-num-batched-tokens"] for j in jobs}
    assert by_conc[min(by_conc)] == "8192" and by_conc[max(by_conc)] == "2048"
    fingerprints = {j.fingerprint for j in jobs}
    assert len(fingerprints) == len(jobs)


def test_mtp_key_gets_upstreams_speculative_config(upstream_recipes):
    recipe = upstream_recipes["dsv4-fp4-b300-sglang-mtp"]
    _, seq, _, a = next(recipe.arms())
    assert a.spec_ == "mtp" and recipe.engine.speculative_config is None
    pairs = dict(flag_pairs(render(recipe, a, 9472, job=JobPoint(seq.isl, seq.osl, 4)).argv))
    assert pairs["--speculative-algorithm"] == "EAGLE"
    assert pairs["--speculative-num-steps"] == "3"


def test_trt_mtp_options_file_carries_upstreams_options(upstream_recipes):
    recipe = upstream_recipes["dsr1-fp4-b200-trt-mtp"]
    _, seq, _, a = next(recipe.arms())
    launch = render(recipe, a, 9472, job=JobPoint(seq.isl, seq.osl, 4))
    options = yaml.safe_load(launch.files[ix.OPTIONS_FILE])
    assert options["speculative_config"]["decoding_type"] == "MTP"
    assert "--pp-size" not in dict(flag_pairs(launch.argv))  # upstream passes no --pp_size


def test_typed_field_wins_over_the_profile(upstream_recipes):
    recipe = upstream_recipes["dsv4-fp4-b200-vllm"].model_copy(deep=True)
    recipe.engine.max_num_batched_tokens = 4096
    argv = render(recipe, arm(tp=8), 9472, job=JobPoint(8192, 1024, 512)).argv
    assert [v for k, v in flag_pairs(argv) if k == "--max-num-batched-tokens"] == ["4096"]


def test_recipe_env_wins_over_the_profile_env(upstream_recipes):
    recipe = upstream_recipes["dsv4-fp4-b200-vllm"].model_copy(deep=True)
    assert render(recipe, arm(tp=8), 9472).env["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600"
    recipe.env = {"VLLM_ENGINE_READY_TIMEOUT_S": "60"}
    assert render(recipe, arm(tp=8), 9472).env["VLLM_ENGINE_READY_TIMEOUT_S"] == "60"


def test_another_checkpoint_under_the_prefix_gets_no_profile(upstream_recipes):
    recipe = upstream_recipes["dsv4-fp4-b200-vllm"].model_copy(
        update={"model": "deepseek-ai/DeepSeek-V4-Flash"}
    )
    launch = render(recipe, arm(tp=8), 9472, job=JobPoint(8192, 1024, 4))
    assert "--block-size" not in launch.argv and launch.env == {}


def test_shipped_dsv4_pro_recipe_runs_upstreams_flags(shipped, capture):
    # Every flag and env variable upstream runs for this key and job; servelab adds only its own two pins
    # (kernel-config, CUDA_HOME).
    want = next(r for r in capture if r["key"] == "dsv4-fp4-b200-vllm" and r["dp-attn"] and r["conc"] == 512)
    launch = render(
        shipped.get("dsv4-fp4-b200-vllm"), arm(tp=8, ep=8, dp_attn=True), 9472, job=JobPoint(8192, 1024, 512)
    )
    ours = set(flag_pairs(ix.server_args(launch.argv))) - {("--port", "8000")}
    theirs = set(flag_pairs(ix.server_args(want["argv"]))) - {("--port", "8888")}
    assert ours - theirs == {("--kernel-config", '{"enable_jit_warmup":false}')}
    assert theirs - ours == set()
    assert launch.env == want["env"] | {"CUDA_HOME": "/usr/local/cuda"}


def test_spec_decoding_without_profile_or_config_is_refused(upstream_recipes):
    recipe = upstream_recipes["dsv4-fp4-b300-sglang-mtp"].model_copy(update={"model": "someone/other-model"})
    _, _, _, a = next(recipe.arms())
    with pytest.raises(ServelabError, match="needs engine.speculative-config"):
        render(recipe, a, 9472)


def test_flag_reading_and_merging():
    assert flag_pairs(["--tp=8", "--ep-size", "1", "--max_num_tokens", "-1", "--flag"]) == [
        ("--tp", "8"),
        ("--ep", "1"),
        ("--max-num-tokens", "-1"),
        ("--flag", None),
    ]
    assert merge_args(["x", "--tp", "8"], ["--tensor-parallel-size=4", "--a", "1", "--b"]) == [
        "x",
        "--tp",
        "8",
        "--a",
        "1",
        "--b",
    ]
    assert drop_flags(["x", "--context-length", "9", "--b", "--c", "2"], ["--context-length", "--b"]) == [
        "x",
        "--c",
        "2",
    ]


def test_variant_conditions():
    when = When(dp_attn=True, conc_min=64, conc_max=255)
    assert when.matches(arm(tp=8, dp_attn=True), JobPoint(8192, 1024, 64))
    assert not when.matches(arm(tp=8, dp_attn=True), JobPoint(8192, 1024, 256))
    assert not when.matches(arm(tp=8), JobPoint(8192, 1024, 64))
    assert hardware_of("cluster:mi325x-tw") == "mi325x" and hardware_of("h200-dgxc") == "h200"


def _store(tmp_path: Path, key: str) -> Store:
    """A store holding one upstream key as the master file has it, with upstream's runners.yaml."""
    master = yaml.safe_load((ix.IX / "configs" / "nvidia-master.yaml").read_text())
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "one.yaml").write_text(yaml.safe_dump({key: master[key]}))
    shutil.copyfile(ix.IX / "configs" / "runners.yaml", tmp_path / "runners.yaml")
    return open_store(tmp_path)


def test_files_a_flag_names_travel_with_the_launch(upstream_recipes, capture):
    # dsv4_fp4_mi355x_sglang.sh passes upstream's DeepSeek-V4 chat template by path: the launch carries it.
    recipe = upstream_recipes["dsv4-fp4-mi355x-sglang"]
    record = next(r for r in capture if r["key"] == "dsv4-fp4-mi355x-sglang")
    launch = render(recipe, ix.arm_of(recipe, record), 9472, job=JobPoint(8192, 1024, record["conc"]))
    path = dict(flag_pairs(launch.argv))["--chat-template"]
    assert path == "benchmarks/single_node/chat_templates/deepseek_v4_thinking.jinja"
    pinned = ix.SCRIPTS / "single_node" / "chat_templates" / "deepseek_v4_thinking.jinja"
    assert launch.files[path] == pinned.read_text()
