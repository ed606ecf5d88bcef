"""Launch profiles: servelab renders what InferenceX's launch script runs for each single-node key and job.

The upstream side is the capture of the pinned scripts (tests/data/inferencex/launch/launches.json.gz, made by
scripts/ix_launch.py running each script under bash with stub servers); a sample is re-run here so the
capture cannot drift from the scripts, and the profile table and the conformance table in docs/recipes.md are
checked to be what the script derives today.
"""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from servelab.engines.command import grammar_of
from servelab.engines.names import Engine
from servelab.engines.trtllm.grammar import OPTIONS_FILE
from servelab.errors import ServelabError
from servelab.recipes.engines import JobPoint, render
from servelab.recipes.engines.profiles import When, hardware_of
from servelab.recipes.inferencex import SearchSpaceEntry
from servelab.recipes.recipe_store import RecipeStore, open_store, parse_recipe_file
from servelab.recipes.sweep import expand

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ix_launch.py"
IX = ROOT / "tests" / "data" / "inferencex"
VLLM, SGLANG, TRTLLM = (grammar_of(e) for e in (Engine.VLLM, Engine.SGLANG, Engine.TRTLLM))


def ix_launch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def flags(grammar, argv: list[str]) -> dict[str, str | None]:
    """Canonical flag -> value of a server command, as the engine's grammar reads it."""
    return {a.name: a.value for a in grammar.args(grammar.split(argv)[1]) if a.name is not None}


@pytest.fixture(scope="module")
def capture():
    with gzip.open(IX / "launch" / "launches.json.gz", "rt") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def upstream_recipes():
    out = {}
    for name in ("nvidia-master.yaml", "amd-master.yaml"):
        out |= parse_recipe_file(yaml.safe_load((IX / "configs" / name).read_text()), name)
    return out


def arm(**kw):
    return SearchSpaceEntry(conc_list=[1], **kw)


def arm_of(recipe, record):
    """The arm of a recipe a captured job ran."""
    for seq in recipe.scenarios.fixed_seq_len or []:
        for a in seq.search_space:
            layout = (seq.isl, seq.osl, a.tp_, a.ep_, a.dp_attn_, a.spec_)
            want = (record["isl"], record["osl"], record["tp"], record["ep"], record["dp-attn"])
            if layout == (*want, record["spec-decoding"]):
                return a
    raise KeyError(record["id"])


@pytest.mark.slow
def test_profile_table_is_derived_from_the_capture():
    done = ix_launch("profiles", "--check")
    assert done.returncode == 0, done.stdout + done.stderr


# scripts/ix_launch.py's conformance again in a process of its own (5-26 s): quick, the verdicts themselves
# (test_every_key_with_an_adapter_matches_upstream_on_every_job)
@pytest.mark.slow
def test_conformance_table_in_docs_is_current():
    done = ix_launch("docs", "--check")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow  # 1.1 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_every_key_with_an_adapter_matches_upstream_on_every_job(upstream_recipes, capture, ix_conformance):
    verdicts = ix_conformance
    fixed = {k: v for k, v in verdicts.items() if "scenario" not in v}
    # 690 = the single-node fixed-seq-len rows of InferenceX's own full-sweep at the pinned commit; the
    # capture holds a launch for each.
    assert sum(v["jobs"] for v in fixed.values()) == len(capture) == 690
    assert all("argv" in r for r in capture)
    # every key matches, the 9 atom keys included
    assert not {k for k, v in fixed.items() if v["differences"]}
    assert len(fixed) == 77 and sum(upstream_recipes[k].framework == "atom" for k in fixed) == 9
    # the single-node agentic keys (tests/recipes/test_agentic_launch.py): every job servelab launches
    # equals upstream's; the others have no launch, and say why
    agentic = {k: v for k, v in verdicts.items() if v.get("scenario") == "agentic-coding"}
    assert agentic and all(upstream_recipes[k].scenarios.agentic_coding for k in agentic)
    assert all(d.startswith("no ") or ": no launch" in d for v in agentic.values() for d in v["differences"])


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="the capture runs upstream's scripts under bash")
def test_capture_reproduces_from_the_pinned_scripts():
    # One job per script (its highest concurrency): the committed capture is what the scripts run today.
    done = ix_launch("capture", "--check-sample")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow  # 1.0 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_concurrency_reaches_the_launch(tmp_path):
    # dsv4_fp4_b200_vllm.sh: --max-num-batched-tokens is ISL (8192) up to concurrency 128, 2048 above.
    store = _store(tmp_path, "dsv4-fp4-b200-vllm")
    jobs = [j for j in expand(store) if j.row["isl"] == 8192 and j.row["dp-attn"]]
    by_conc = {j.row["conc"]: flags(VLLM, j.launch.argv)["--max-num-batched-tokens"] for j in jobs}
    assert by_conc[min(by_conc)] == "8192" and by_conc[max(by_conc)] == "2048"
    fingerprints = {j.fingerprint for j in jobs}
    assert len(fingerprints) == len(jobs)


def test_mtp_key_gets_upstreams_speculative_config(upstream_recipes):
    recipe = upstream_recipes["dsv4-fp4-b300-sglang-mtp"]
    _, seq, _, a = next(recipe.arms())
    assert a.spec_ == "mtp" and recipe.engine.speculative_config is None
    pairs = flags(SGLANG, render(recipe, a, 9472, job=JobPoint(seq.isl, seq.osl, 4)).argv)
    assert pairs["--speculative-algorithm"] == "EAGLE"
    assert pairs["--speculative-num-steps"] == "3"


def test_trt_mtp_options_file_carries_upstreams_options(upstream_recipes):
    recipe = upstream_recipes["dsr1-fp4-b200-trt-mtp"]
    _, seq, _, a = next(recipe.arms())
    launch = render(recipe, a, 9472, job=JobPoint(seq.isl, seq.osl, 4))
    options = yaml.safe_load(launch.files[OPTIONS_FILE])
    assert options["speculative_config"]["decoding_type"] == "MTP"
    assert "--pp-size" not in flags(TRTLLM, launch.argv)  # upstream passes no --pp_size
    settings = TRTLLM.parse(launch.argv, options)
    assert settings.speculative_config == options["speculative_config"]


def test_typed_field_wins_over_the_profile(upstream_recipes):
    recipe = upstream_recipes["dsv4-fp4-b200-vllm"].model_copy(deep=True)
    recipe.engine.max_num_batched_tokens = 4096
    argv = render(recipe, arm(tp=8), 9472, job=JobPoint(8192, 1024, 512)).argv
    read = [a.value for a in VLLM.args(argv) if a.name == "--max-num-batched-tokens"]
    assert read == ["4096"] and VLLM.parse(argv).max_num_batched_tokens == 4096


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
    # Every flag and env variable upstream runs for this key and job; servelab adds only its own pin,
    # CUDA_HOME.
    want = next(r for r in capture if r["key"] == "dsv4-fp4-b200-vllm" and r["dp-attn"] and r["conc"] == 512)
    launch = render(
        shipped.get("dsv4-fp4-b200-vllm"), arm(tp=8, ep=8, dp_attn=True), 9472, job=JobPoint(8192, 1024, 512)
    )
    ours = set(flags(VLLM, launch.argv).items()) - {("--port", "8000")}
    theirs = set(flags(VLLM, want["argv"]).items()) - {("--port", "8888")}
    assert ours - theirs == set()
    assert theirs - ours == set()
    assert launch.env == want["env"] | {"CUDA_HOME": "/usr/local/cuda"}


def test_spec_decoding_without_profile_or_config_is_refused(upstream_recipes):
    recipe = upstream_recipes["dsv4-fp4-b300-sglang-mtp"].model_copy(update={"model": "someone/other-model"})
    _, _, _, a = next(recipe.arms())
    with pytest.raises(ServelabError, match="needs engine.speculative-config"):
        render(recipe, a, 9472)


def test_profile_flags_are_merged_and_dropped_by_the_engines_grammar():
    # SGLang: --tp, --tp-size and --tensor-parallel-size are one flag; a negative number is a value.
    assert [
        (a.name, a.value) for a in SGLANG.args(["--tp=8", "--ep", "1", "--chunked-prefill-size", "-1"])
    ] == [
        ("--tp-size", "8"),
        ("--ep-size", "1"),
        ("--chunked-prefill-size", "-1"),
    ]
    assert SGLANG.merged(["x", "--tp", "8"], ["--tensor-parallel-size=4", "--a", "1", "--b"]) == [
        "x",
        "--tp",
        "8",
        "--a",
        "1",
        "--b",
    ]
    # a drop name matches any spelling of the flag (launch-profiles.json lists SGLang's --ep-size as --ep)
    assert SGLANG.without(["x", "--ep-size", "8", "--b", "--c", "2"], ["--ep", "--b"]) == ["x", "--c", "2"]
    # TensorRT-LLM writes underscores; its drop names are hyphenated
    assert TRTLLM.without(
        ["trtllm-serve", "m", "--pp_size", "1", "--max_num_tokens", "-1"], ["--pp-size"]
    ) == [
        "trtllm-serve",
        "m",
        "--max_num_tokens",
        "-1",
    ]
    # vLLM: -tp is --tensor-parallel-size; SGLang's --tp is not a vLLM flag, so it is kept
    assert VLLM.merged(["vllm", "serve", "m", "-tp", "8"], ["--tensor-parallel-size", "4", "--tp", "2"]) == [
        "vllm",
        "serve",
        "m",
        "-tp",
        "8",
        "--tp",
        "2",
    ]


def test_variant_conditions():
    when = When(dp_attn=True, conc_min=64, conc_max=255)
    assert when.matches(arm(tp=8, dp_attn=True), JobPoint(8192, 1024, 64))
    assert not when.matches(arm(tp=8, dp_attn=True), JobPoint(8192, 1024, 256))
    assert not when.matches(arm(tp=8), JobPoint(8192, 1024, 64))
    assert hardware_of("cluster:mi325x-tw") == "mi325x" and hardware_of("h200-dgxc") == "h200"


def _store(tmp_path: Path, key: str) -> RecipeStore:
    """A store holding one upstream key as the master file has it, with upstream's runners.yaml."""
    master = yaml.safe_load((IX / "configs" / "nvidia-master.yaml").read_text())
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "one.yaml").write_text(yaml.safe_dump({key: master[key]}))
    shutil.copyfile(IX / "configs" / "runners.yaml", tmp_path / "runners.yaml")
    return open_store(tmp_path)


def test_files_a_flag_names_travel_with_the_launch(upstream_recipes, capture):
    # dsv4_fp4_mi355x_sglang.sh passes upstream's DeepSeek-V4 chat template by path: the launch carries it.
    recipe = upstream_recipes["dsv4-fp4-mi355x-sglang"]
    record = next(r for r in capture if r["key"] == "dsv4-fp4-mi355x-sglang")
    launch = render(recipe, arm_of(recipe, record), 9472, job=JobPoint(8192, 1024, record["conc"]))
    path = flags(SGLANG, launch.argv)["--chat-template"]
    assert path == "benchmarks/single_node/chat_templates/deepseek_v4_thinking.jinja"
    pinned = IX / "benchmarks" / "single_node" / "chat_templates" / "deepseek_v4_thinking.jinja"
    assert launch.files[path] == pinned.read_text()
