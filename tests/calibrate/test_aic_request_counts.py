"""accuracy/aic_request_counts.py: how many requests the development points of AIConfigurator's campaign
averaged, read from their figures (a mean over N whole-nanosecond times is whole over N), and the replay
with K x C requests."""

from tests.accuracy_python import ACCURACY, run_accuracy_python

SCRIPT = str(ACCURACY / "aic_request_counts.py")
COLUMNS = ("1", "C", "10 C", "20 C", "20 C - 1", "none")


def _counts(lines: list[str], name: str) -> tuple[int, dict[str, int], dict[str, int]]:
    """A file's points, and its TTFT and TPOT counts by column."""
    cells = next(line for line in lines if line.startswith(f"| {name} |")).strip("| ").split(" | ")
    numbers = [int(c) for c in cells[3:]]
    ttft, tpot = numbers[: len(COLUMNS)], numbers[len(COLUMNS) :]
    return int(cells[2]), dict(zip(COLUMNS, ttft, strict=True)), dict(zip(COLUMNS, tpot, strict=True))


def test_the_campaigns_means_are_whole_over_the_requests_its_clients_sent():
    lines = run_accuracy_python([SCRIPT]).splitlines()
    # the vLLM 0.12.0 points: every one a mean over 10 x C (the eval harness's genai-perf), none rounded
    points, ttft, tpot = _counts(lines, "vllm/0.12.0/Qwen_Qwen3-32B.csv")
    assert ttft["10 C"] == tpot["10 C"] == points and ttft["1"] == 0
    # the TensorRT-LLM 1.0.0rc3 Llama points: one pool of 20 x C (so only some whole over 10 x C), some with a
    # request lost, and TPOTs whole the same way (genai-perf rounds each inter-token latency)
    points, ttft, tpot = _counts(lines, "trtllm/1.0.0rc3/meta-llama_Llama-3.1-8B-Instruct.csv")
    assert ttft["1"] == 0 and ttft["10 C"] < ttft["20 C"] and ttft["20 C - 1"] > 0
    assert ttft["20 C"] + ttft["20 C - 1"] + ttft["none"] == points
    assert tpot["20 C"] == ttft["20 C"] and tpot["20 C - 1"] == ttft["20 C - 1"]


def test_the_replay_prices_the_undated_points_with_each_count():
    out = run_accuracy_python([SCRIPT, "--replay", "1,10", "--only", "sglang/0.5.8.post1"]).splitlines()
    assert any(line.startswith("| points | n | k = 1 | k = 10 |") for line in out)
    table = out[out.index(next(line for line in out if line.startswith("| points | n |"))) :]
    row = next(line for line in table if line.startswith("| sglang/0.5.8.post1/Qwen_Qwen3-32B.csv | "))
    assert row.split(" | ")[1] == "6" and len(row.split(" | ")) == 4  # the file, n and one cell per k


def test_bad_input_is_one_line_and_exit_2():
    for args, says in ((["--replay", "0"], "--replay 0: expected"), (["--only", "no-such-file"], "--only")):
        err = run_accuracy_python([SCRIPT, *args], returncode=2)
        assert err.startswith(f"error: {says}") and len(err.strip().splitlines()) == 1
