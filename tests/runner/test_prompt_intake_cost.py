"""accuracy/prompt_intake_cost.py's parsing and fitting on small inputs: the per-request / per-prompt-token
fit, the result files' length check, the client's timed window, and prompts built the client's way."""

import json

import pytest
from accuracy_python import run_accuracy_python
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

# runs of the server measurement: CPU per request = 2 ms + 1.5 us x prompt tokens, one run 10 % off
FIT_RUNS = [
    {"prompt_tokens": n, "cpu_s": 0.002 + 1.5e-6 * n} for n in (16, 1024, 2048, 4096, 8192, 16384)
] + [{"prompt_tokens": 4096, "cpu_s": (0.002 + 1.5e-6 * 4096) * 1.1}]
RESULT_FILES = {
    "minimax_m25_vllm_tep8_isl8192_osl128_conc16.json": {"completed": 160, "total_input_tokens": 1310720},
    "minimax_m25_vllm_dep8_isl1024_osl128_conc4.json": {"completed": 40, "total_input_tokens": 41000},
}
# a queued point: the slowest decode (127 gaps of 0.1 s) stalls 12.7 s, against a 15 s longest first token
RESULT = {"median_ttft": 6.0, "p99_ttft": 15.0, "median_tpot": 0.025, "p99_tpot": 0.1}
CLIENT_LINES = [
    "Warming up with 8 requests...\n",
    "Warmup completed.\n",
    "Starting main benchmark run...\n",
    "==================== Serving Benchmark Result ====================\n",
    "Successful requests: 40\n",
]

ASK = """
import json, sys
import prompt_intake_cost as intake
given = json.load(sys.stdin)
out = {"fit": intake.fit_intake(given["runs"]), "lengths": intake.length_check(given["files"])}
try:
    intake.length_check({"result.json": {"completed": 1, "total_input_tokens": 1}})
except ValueError as e:
    out["bad_name"] = str(e)
out["window"] = intake.client_window(given["lines"])
out["stall"] = intake.decode_stall(given["result"], 128)
tok = intake.load_tokenizer(intake.Path(given["tokenizer"]))
texts = intake.prompts(tok, 200, 4, seed=3)
out["prompt_lengths"] = [len(tok.encode(t, add_special_tokens=False).ids) for t in texts]
out["distinct"] = len(set(texts))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> dict:
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    text = [" ".join(words[(i * 7 + j) % len(words)] for j in range(40)) for i in range(200)]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    given = {
        "runs": FIT_RUNS,
        "files": RESULT_FILES,
        "lines": CLIENT_LINES,
        "tokenizer": str(path),
        "result": RESULT,
    }
    return json.loads(run_accuracy_python(["-c", ASK], stdin=json.dumps(given)))


def test_the_fit_splits_per_request_from_per_prompt_token(answers):
    fit = answers["fit"]
    # the 10 % outlier pulls the fit a little; the exact rows dominate
    assert fit["us_per_request"] == pytest.approx(2000, rel=0.15)
    assert fit["us_per_prompt_token"] == pytest.approx(1.5, rel=0.05)
    assert fit["median_rel_residual"] < 0.05
    assert fit["runs"] == 7


def test_lengths_compare_total_input_tokens_with_nominal_times_completed(answers):
    by_isl = {r["isl"]: r for r in answers["lengths"]}
    assert by_isl[8192]["nominal_tokens"] == 8192 * 160 and by_isl[8192]["ratio"] == 1.0
    assert by_isl[1024]["ratio"] == pytest.approx(41000 / 40960)
    assert by_isl[1024]["parallel"] == "dep8" and by_isl[1024]["concurrency"] == 4


def test_a_result_file_without_the_sweep_name_is_named_in_the_error(answers):
    assert answers["bad_name"].startswith("result.json: expected a name like")


def test_the_client_window_lies_between_its_start_and_result_lines(answers):
    assert answers["window"] == [2, 3]


def test_prompts_built_the_clients_way_re_encode_to_the_nominal_length(answers):
    # the client's ten rounds of cut-or-pad need not converge (it prints avg_token_mismatch)
    assert all(abs(n - 200) <= 4 for n in answers["prompt_lengths"])
    assert answers["prompt_lengths"].count(200) >= 3
    assert answers["distinct"] == 4


def test_the_decode_stall_is_p99_tpot_over_every_gap_against_p99_ttft(answers):
    stall = answers["stall"]
    assert stall["decode_stall_s"] == pytest.approx(12.7)
    assert stall["stall_over_p99_ttft"] == pytest.approx(12.7 / 15.0, abs=1e-3)
    assert stall["p99_over_p50_ttft"] == pytest.approx(2.5)
    assert stall["p99_tpot_ms"] == 100.0 and stall["median_tpot_ms"] == 25.0
