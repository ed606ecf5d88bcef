"""scripts/inferencex_recipes.py, run on a small git history of recipe scripts (stand-ins for InferenceX's):
each version's settings (TensorRT-LLM's config, SGLang's launch flags by branch, vLLM's config.yaml and
flags), ranges of equal settings merged, and a form it does not know stops it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "inferencex_recipes.py"
PATH = "benchmarks/dsr1_fp8_h200_trt_slurm.sh"
RECIPE = """#!/usr/bin/env bash
cat > $EXTRA_CONFIG_FILE << EOF
cuda_graph_config:
    enable_padding: true
    max_batch_size: 128
kv_cache_config:
    dtype: fp8
    free_gpu_memory_fraction: 0.75
stream_interval: 10
EOF
if [[ "$DP_ATTENTION" == "true" ]]; then
    cat << EOF >> $EXTRA_CONFIG_FILE
attention_dp_config:
    batching_wait_iters: 0
    enable_balance: true
    timeout_iters: 60
EOF
fi
MAX_NUM_TOKENS=$(( ($CONC+$ISL+64+63)/64*64 ))
{floor}
# trtllm-serve $MODEL --max_num_tokens 99   (a comment: not read)
trtllm-serve $MODEL --max_num_tokens=$MAX_NUM_TOKENS --tp_size=$TP
"""
FLOOR = "MAX_NUM_TOKENS=$(( MAX_NUM_TOKENS > 8192 ? MAX_NUM_TOKENS : 8192 ))"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="the script reads history with git")


def _commit(repo: Path, text: str, date: str, path: str = PATH, time: str = "12:00:00") -> None:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    stamp = f"{date}T{time}+0000"
    env = dict(os.environ, GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp)
    for args in (["add", path], ["commit", "-qm", date]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "ix"
    (repo / "benchmarks").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for key, value in (("user.email", "t@example.com"), ("user.name", "t")):
        subprocess.run(["git", "-C", str(repo), "config", key, value], check=True)
    return repo


def _run(repo: Path, out: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(SCRIPT), "--git-dir", str(repo / ".git"), "--out", str(out)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_versions_become_date_ranges_of_equal_settings(repo, tmp_path):
    _commit(repo, RECIPE.format(floor=""), "2025-09-18")
    _commit(repo, RECIPE.format(floor="") + "\n", "2025-11-03")  # same settings: the same range
    _commit(repo, RECIPE.format(floor=FLOOR), "2026-01-21")
    done = _run(repo, tmp_path / "out.json")
    assert done.returncode == 0, done.stderr
    ranges = json.loads((tmp_path / "out.json").read_text())["recipes"]
    assert [(r["from"], r["until"], len(r["versions"])) for r in ranges] == [
        ("2025-09-18", "2026-01-21", 2),
        ("2026-01-21", None, 1),
    ]
    first, second = ranges[0]["settings"], ranges[1]["settings"]
    assert first["max_num_tokens"] == {"conc_plus_isl_plus": 64, "round_up_to": 64, "at_least": None}
    assert second["max_num_tokens"]["at_least"] == 8192
    assert (first["kv_memory_fraction"], first["cuda_graph_max_batch"], first["kv_cache_dtype"]) == (
        0.75,
        128,
        "fp8",
    )
    assert first["attention_dp_balance"] == {"timeout_iters": 60, "batching_wait_iters": 0}
    assert first["stream_interval"] == 10 and first["max_batch_size"] is None
    assert ranges[0]["models"] == ["deepseek-r1", "deepseek-v3"] and ranges[0]["engine"] == "trtllm"


def test_a_form_it_does_not_know_stops_it(repo, tmp_path):
    _commit(
        repo,
        RECIPE.format(floor="").replace("--max_num_tokens=$MAX_NUM_TOKENS", "--max_num_tokens=$X"),
        "2025-09-18",
    )
    done = _run(repo, tmp_path / "out.json")
    assert done.returncode != 0 and "--max_num_tokens $X" in done.stderr
    assert not (tmp_path / "out.json").exists()


SGLANG_PATH = "benchmarks/single_node/dsr1_fp8_h200.sh"
SGLANG = """#!/usr/bin/env bash
if [[ -n "$SLURM_JOB_ID" ]]; then
  echo "JOB $SLURM_JOB_ID"
fi
if [[ $ISL -eq 1024 && $OSL -eq 1024 ]]; then
    python3 -m sglang.launch_server --model-path $MODEL \\
    --tensor-parallel-size=$TP --data-parallel-size=1 \\
    --disable-radix-cache --max-running-requests 512 --cuda-graph-max-bs 512 \\
    --chunked-prefill-size 32768 --max-prefill-tokens 32768 --mem-fraction-static 0.82 \\
    --attention-backend flashinfer --stream-interval 10 \\
    > $SERVER_LOG 2>&1 &
else
    python3 -m sglang.launch_server --model-path $MODEL \\
    --tensor-parallel-size=$TP --data-parallel-size=1 \\
    --disable-radix-cache --max-running-requests 256 --cuda-graph-max-bs 256 \\
    --chunked-prefill-size 32768 --max-prefill-tokens 32768 --mem-fraction-static 0.82 \\
    --attention-backend flashinfer --stream-interval 10 \\
    > $SERVER_LOG 2>&1 &
fi
"""


def _ranges(repo: Path, tmp_path: Path, engine: str) -> list[dict]:
    done = _run(repo, tmp_path / "out.json")
    assert done.returncode == 0, done.stderr
    return [r for r in json.loads((tmp_path / "out.json").read_text())["recipes"] if r["engine"] == engine]


def test_sglang_launches_per_branch_become_settings_by_length(repo, tmp_path):
    _commit(repo, SGLANG, "2026-03-06", SGLANG_PATH)
    (only,) = _ranges(repo, tmp_path, "sglang")
    s = only["settings"]
    assert (s["chunked_prefill_size"], s["max_prefill_tokens"], s["mem_fraction_static"]) == (
        32768,
        32768,
        0.82,
    )
    # the branches differ on these two: the first launch runs at 1024/1024, the second otherwise
    for key in ("max_running_requests", "cuda_graph_max_bs"):
        assert s[key] == {"when": {"isl": 1024, "osl": 1024}, "then": 512, "else": 256}
    assert s["recorded"] == {
        "stream_interval": 10,
        "attention_backend": "flashinfer",
        "disable_radix_cache": True,
    }
    assert only["models"] == ["deepseek-r1", "deepseek-v3"]


def test_an_sglang_kv_cache_dtype_is_written_where_the_launch_sets_it(repo, tmp_path):
    """InferenceX's GLM-5 B200 script sets --kv-cache-dtype fp8_e4m3; a launch without it writes no key (the
    engine's default stands)."""
    glm5 = "python3 -m sglang.launch_server --model-path=$MODEL --kv-cache-dtype fp8_e4m3 \\\n"
    glm5 += "--chunked-prefill-size 32768 --mem-fraction-static 0.85 > $SERVER_LOG 2>&1 &\n"
    _commit(repo, SGLANG, "2026-03-06", SGLANG_PATH)
    _commit(repo, "#!/usr/bin/env bash\n" + glm5, "2026-03-20", "benchmarks/single_node/glm5_fp8_b200.sh")
    by_model = {r["models"][0]: r["settings"] for r in _ranges(repo, tmp_path, "sglang")}
    assert by_model["glm-5"]["kv_cache_dtype"] == "fp8_e4m3"
    assert by_model["glm-5"]["chunked_prefill_size"] == 32768
    assert "kv_cache_dtype" not in by_model["deepseek-r1"]


QWEN35 = """#!/usr/bin/env bash
if [[ $CONC -ge 16 ]]; then
  SCHEDULER_RECV_INTERVAL=30
else
  SCHEDULER_RECV_INTERVAL=10
fi
MEM_FRAC_STATIC=0.82
CHUNKED_PREFILL_SIZE=32768
MAX_RUNNING_REQUESTS=128
CUDA_GRAPH_MAX_BATCH_SIZE=$CONC
python3 -m sglang.launch_server --model-path=$MODEL --kv-cache-dtype fp8_e4m3 --mamba-ssm-dtype bfloat16 \\
--cuda-graph-max-bs $CUDA_GRAPH_MAX_BATCH_SIZE --max-running-requests $MAX_RUNNING_REQUESTS \\
--mem-fraction-static $MEM_FRAC_STATIC --chunked-prefill-size ${CHUNKED_PREFILL_SIZE} \\
--scheduler-recv-interval $SCHEDULER_RECV_INTERVAL > $SERVER_LOG 2>&1 &
"""


def test_an_sglang_launch_of_script_constants_and_a_state_dtype(repo, tmp_path):
    """InferenceX's Qwen3.5 scripts assign their settings to variables once, outside any `if`, and launch
    with `$NAME`: each is read as its value (a variable set in an `if` is left as written: it sets no priced
    flag here); --mamba-ssm-dtype is the linear-attention state's format."""
    _commit(repo, QWEN35, "2026-03-06", "benchmarks/single_node/qwen3.5_fp8_b200.sh")
    (qwen,) = _ranges(repo, tmp_path, "sglang")
    assert qwen["models"] == ["qwen3.5-397b-a17b"] and qwen["precision"] == "fp8"
    settings = qwen["settings"]
    assert (settings["chunked_prefill_size"], settings["max_running_requests"]) == (32768, 128)
    assert (settings["cuda_graph_max_bs"], settings["mem_fraction_static"]) == ("conc", 0.82)
    assert (settings["kv_cache_dtype"], settings["mamba_ssm_dtype"]) == ("fp8_e4m3", "bfloat16")


def test_a_variable_assigned_twice_is_not_read_as_a_constant(repo, tmp_path):
    twice = QWEN35.replace(
        "MAX_RUNNING_REQUESTS=128\n", "MAX_RUNNING_REQUESTS=128\nMAX_RUNNING_REQUESTS=64\n"
    )
    _commit(repo, twice, "2026-03-06", "benchmarks/single_node/qwen3.5_fp8_b200.sh")
    done = _run(repo, tmp_path / "out.json")
    assert done.returncode != 0 and "--max-running-requests $MAX_RUNNING_REQUESTS" in done.stderr


@pytest.mark.parametrize(
    "change, message",
    [
        (
            ("[[ $ISL -eq 1024 && $OSL -eq 1024 ]]", "[[ $CONC -gt 64 ]]"),
            "a condition this script does not read",
        ),
        (
            ("--chunked-prefill-size 32768 --max", "--chunked-prefill-size $X --max"),
            "--chunked-prefill-size $X",
        ),
        (
            ("--attention-backend flashinfer", "--enable-mixed-chunk"),
            "--enable-mixed-chunk changes scheduling",
        ),
        (("else\n", "elif [[ $ISL -eq 8192 ]]; then\n"), "nested `if` or `elif`"),
    ],
)
def test_an_sglang_form_it_does_not_know_stops_it(repo, tmp_path, change, message):
    _commit(repo, SGLANG.replace(*change), "2026-03-06", SGLANG_PATH)
    done = _run(repo, tmp_path / "out.json")
    assert done.returncode != 0 and message in done.stderr and SGLANG_PATH in done.stderr
    assert not (tmp_path / "out.json").exists()


VLLM_PATH = "benchmarks/70b_fp8_h200_slurm.sh"
VLLM = """#!/usr/bin/env bash
if [ "$ISL" = "1024" ] && [ "$OSL" = "1024" ]; then
    CALCULATED_MAX_MODEL_LEN=$((ISL + OSL + 20))
else
    CALCULATED_MAX_MODEL_LEN=${MAX_MODEL_LEN:-10240}
fi
cat > config.yaml << EOF
kv-cache-dtype: fp8
async-scheduling: true
no-enable-prefix-caching: true
compilation-config: '{"cudagraph_mode":"PIECEWISE"}'
cuda-graph-sizes: 2048
max-num-batched-tokens: 8192
max-model-len: $CALCULATED_MAX_MODEL_LEN
EOF
export TORCH_CUDA_ARCH_LIST="9.0"
export VLLM_MXFP4_USE_MARLIN=1
PYTHONNOUSERSITE=1 vllm serve $MODEL --host 0.0.0.0 --port $PORT --config config.yaml \\
 --gpu-memory-utilization 0.85 --tensor-parallel-size $TP --max-num-seqs $CONC  \\
 --disable-log-requests > $SERVER_LOG 2>&1 &
"""


def test_vllm_settings_are_read_from_its_config_yaml_and_flags(repo, tmp_path):
    _commit(repo, VLLM, "2025-09-28", VLLM_PATH)
    # a flag wins over the config file, as in vLLM; a later commit of the same UTC day takes the day
    later = VLLM.replace("--max-num-seqs $CONC", "--max-num-seqs 128 --max-num-batched-tokens 4096")
    _commit(repo, later, "2025-10-29", VLLM_PATH, time="01:00:00")
    _commit(repo, later.replace("fp8", "auto"), "2025-10-29", VLLM_PATH, time="23:00:00")
    first, same_day, last = _ranges(repo, tmp_path, "vllm")
    assert first["settings"] == {
        "max_num_batched_tokens": 8192,
        "max_num_seqs": "conc",
        "gpu_memory_utilization": 0.85,
        "max_cudagraph_capture_size": 2048,
        "kv_cache_dtype": "fp8",
        "recorded": {
            "async_scheduling": True,
            "enable_prefix_caching": False,
            "max_model_len": "$CALCULATED_MAX_MODEL_LEN",
            "cudagraph_mode": "PIECEWISE",
            "VLLM_MXFP4_USE_MARLIN": 1,  # vLLM's kernel switches; other exports are not vLLM's
        },
    }
    assert (same_day["settings"]["max_num_seqs"], same_day["settings"]["max_num_batched_tokens"]) == (
        128,
        4096,
    )
    assert (same_day["from"], same_day["until"], last["from"]) == ("2025-10-29", "2025-10-29", "2025-10-29")
    assert last["settings"]["kv_cache_dtype"] == "auto" and last["until"] is None


MINIMAX_PATH = "benchmarks/single_node/minimaxm2.5_fp8_b300.sh"
MINIMAX = """#!/usr/bin/env bash
export VLLM_FLOAT32_MATMUL_PRECISION=high
COMPILATION_CONFIG=${COMPILATION_CONFIG:-'{"mode":3}'}
vllm serve $MODEL --port $PORT \\
--tensor-parallel-size $TP \\
--gpu-memory-utilization 0.90 \\
--max-model-len $MAX_MODEL_LEN \\
--kv-cache-dtype fp8 \\
--max-cudagraph-capture-size 2048 \\
--max-num-batched-tokens "$((ISL * 2 ))" \\
--max-num-seqs "$MAX_NUM_SEQS" \\
--compilation-config "$COMPILATION_CONFIG" \\
--stream-interval 20 --no-enable-prefix-caching > $SERVER_LOG 2>&1 &
"""


def test_a_vllm_budget_of_twice_the_input_length_and_job_variables(repo, tmp_path):
    """InferenceX's MiniMax-M2.5 scripts (one per GPU and precision) set the token budget to twice the job's
    input length; a flag set from a job-level variable is recorded as written, not priced."""
    _commit(repo, MINIMAX, "2026-04-21", MINIMAX_PATH)
    (only,) = _ranges(repo, tmp_path, "vllm")
    assert (only["system"], only["precision"], only["models"]) == ("b300_sxm", "fp8", ["minimax-m2.5"])
    s = only["settings"]
    assert s["max_num_batched_tokens"] == {"isl_times": 2}
    assert (s["kv_cache_dtype"], s["gpu_memory_utilization"], s["max_cudagraph_capture_size"]) == (
        "fp8",
        0.9,
        2048,
    )
    assert s["max_num_seqs"] is None  # the job's $MAX_NUM_SEQS: not known for a row
    assert s["recorded"]["max_num_seqs"] == "$MAX_NUM_SEQS"
    assert s["recorded"]["compilation_config"] == "$COMPILATION_CONFIG"
    assert s["recorded"]["enable_prefix_caching"] is False


def test_a_vllm_capture_size_of_twice_the_concurrency(repo, tmp_path):
    """InferenceX's Kimi-K2.5 FP4 scripts capture CUDA graphs up to twice the concurrency (9607d7071)."""
    kimi = MINIMAX.replace(
        "--max-cudagraph-capture-size 2048", '--max-cudagraph-capture-size "$((CONC * 2))"'
    )
    _commit(repo, kimi, "2026-08-07", "benchmarks/single_node/kimik2.5_fp4_b300.sh")
    (only,) = _ranges(repo, tmp_path, "vllm")
    assert only["models"] == ["kimi-k2.5"] and only["precision"] == "fp4"
    assert only["settings"]["max_cudagraph_capture_size"] == {"conc_times": 2}


def test_a_vllm_multiple_of_another_variable_stops_it(repo, tmp_path):
    _commit(repo, MINIMAX.replace("$((ISL * 2 ))", "$((OSL * 2 ))"), "2026-04-21", MINIMAX_PATH)
    done = _run(repo, tmp_path / "out.json")
    assert done.returncode != 0 and "--max-num-batched-tokens $((OSL * 2 ))" in done.stderr


H200_MINIMAX_PATH = "benchmarks/single_node/minimaxm2.5_fp8_h200.sh"
EP_TEST = """if [ "$EP_SIZE" {op} 1 ]; then
  EP=" --enable-expert-parallel"
else
  EP=" "
fi
"""
EP_LAUNCH = """vllm serve $MODEL --port $PORT \\
--tensor-parallel-size=$TP \\
$EP \\
--gpu-memory-utilization 0.95 \\
--trust-remote-code > $SERVER_LOG 2>&1 &
"""


def test_expert_parallel_switched_on_for_every_job_is_read(repo, tmp_path):
    """InferenceX's H200 MiniMax-M2.5 FP8 script turned on vLLM's expert parallelism under
    `[ "$EP_SIZE" -ge 1 ]` from 5e2c705d3 (every job passes it: the sweep writes ep 1 where a search space
    names none) until `-gt 1` replaced it in 8014ee637 (the job's ep, which its rows record); the first
    version set no EP at all."""
    _commit(repo, "#!/usr/bin/env bash\n" + EP_LAUNCH, "2026-03-01", H200_MINIMAX_PATH)
    _commit(
        repo, "#!/usr/bin/env bash\n" + EP_TEST.format(op="-ge") + EP_LAUNCH, "2026-03-13", H200_MINIMAX_PATH
    )
    _commit(
        repo, "#!/usr/bin/env bash\n" + EP_TEST.format(op="-gt") + EP_LAUNCH, "2026-05-26", H200_MINIMAX_PATH
    )
    first, every_job, by_job = _ranges(repo, tmp_path, "vllm")
    assert (every_job["from"], every_job["until"]) == ("2026-03-13", "2026-05-26")
    assert every_job["settings"]["expert_parallel"] is True
    # written only where set: the ranges around it read as before
    assert "expert_parallel" not in first["settings"] and "expert_parallel" not in by_job["settings"]
    assert first["settings"] == by_job["settings"]


def test_an_ep_switch_the_launch_does_not_pass_is_not_read(repo, tmp_path):
    _commit(
        repo,
        "#!/usr/bin/env bash\n" + EP_TEST.format(op="-ge") + EP_LAUNCH.replace("$EP \\\n", ""),
        "2026-03-13",
        H200_MINIMAX_PATH,
    )
    (only,) = _ranges(repo, tmp_path, "vllm")
    assert "expert_parallel" not in only["settings"]


B200_LLAMA_PATH = "benchmarks/70b_fp8_b200_docker.sh"
# InferenceX's vLLM Llama-3.3-70B FP8 script for B200 (benchmarks/70b_fp8_b200_docker.sh, 4b860b78e): a
# `<<-EOF` heredoc, the compilation config from a variable, and a single-quoted JSON export
B200_LLAMA = """#!/usr/bin/bash
FUSION_FLAG='{'\\
'"cudagraph_mode": "FULL_DECODE_ONLY",'\\
'"splitting_ops": []'\\
'}'
cat > config.yaml <<-EOF
\tkv-cache-dtype: fp8
\tcompilation-config: QUOTED
\tasync-scheduling: true
\tno-enable-prefix-caching: true
\tmax-num-batched-tokens: 8192
\tmax-model-len: $MAX_MODEL_LEN
\tEOF
export VLLM_FLASHINFER_ALLREDUCE_FUSION_THRESHOLDS_MB='{"2":32,"4":32,"8":8}'
vllm serve $MODEL --host=0.0.0.0 --port=$PORT \\
--gpu-memory-utilization=0.9 \\
--tensor-parallel-size=$TP \\
--max-num-seqs=512 \\
--config config.yaml \\
--disable-log-requests
"""


def test_a_tab_stripped_heredoc_and_a_quoted_export_are_read_whole(repo, tmp_path):
    """`cat > config.yaml <<-EOF` (bash strips the tabs before each line and the delimiter) is read as `<<EOF`
    is; a value quoted with escaped quotes (`\\'$FUSION_FLAG\\'`, InferenceX 5f91fd91d) reads as the one in
    plain quotes; a single-quoted export is recorded whole, not cut at its first double quote."""
    _commit(
        repo, B200_LLAMA.replace("QUOTED", "\\'$FUSION_FLAG\\'"), "2025-09-16", B200_LLAMA_PATH, "19:00:00"
    )
    _commit(repo, B200_LLAMA.replace("QUOTED", "'$FUSION_FLAG'"), "2025-09-24", B200_LLAMA_PATH)
    (only,) = _ranges(repo, tmp_path, "vllm")
    assert (only["from"], only["until"], only["precision"]) == ("2025-09-16", None, "fp8")
    assert only["models"] == ["llama-3.1-70b"] and only["system"] == "b200_sxm"
    assert only["settings"] == {
        "max_num_batched_tokens": 8192,
        "max_num_seqs": 512,
        "gpu_memory_utilization": 0.9,
        "max_cudagraph_capture_size": None,
        "kv_cache_dtype": "fp8",
        "recorded": {
            "async_scheduling": True,
            "enable_prefix_caching": False,
            "max_model_len": "$MAX_MODEL_LEN",
            "compilation_config": "$FUSION_FLAG",  # a variable: recorded as written
            "VLLM_FLASHINFER_ALLREDUCE_FUSION_THRESHOLDS_MB": '{"2":32,"4":32,"8":8}',
        },
    }
