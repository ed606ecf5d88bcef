"""Every option of `vllm bench serve` (vLLM 0.32.0's parser, pinned in tests/data/vllm_bench_serve by
scripts/vllm_bench_options.py) is taken by `servelab bench` into its config, or refused in one line naming it
and why: never "no such option"."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from servelab.bench import runner
from servelab.bench.vllm_compat import REFUSED_OPTIONS
from servelab.cli import bench as bench_cli
from servelab.cli.main import main

PINNED = Path(__file__).parents[1] / "data" / "vllm_bench_serve" / "options-0.32.0.json"
OPTIONS = json.loads(PINNED.read_text())["options"]
REFUSED = set(REFUSED_OPTIONS)

# a value unlike the default for each valued option (and what else it needs to be valid)
VALUES: dict[str, list[str]] = {
    "--seed": ["7"],
    "--num-prompts": ["7"],
    "--dataset-name": ["prefix_repetition"],
    "--dataset-path": ["data.jsonl", "--dataset-name", "custom"],
    "--custom-output-len": ["7"],
    "--spec-bench-output-len": ["7"],
    "--spec-bench-category": ["coding"],
    "--sharegpt-output-len": ["7"],
    "--random-input-len": ["7"],
    "--random-output-len": ["7"],
    "--random-range-ratio": ["0.5"],
    "--random-prefix-len": ["7"],
    "--hf-split": ["test"],
    "--hf-output-len": ["7"],
    "--prefix-repetition-prefix-len": ["7"],
    "--prefix-repetition-suffix-len": ["7"],
    "--prefix-repetition-num-prefixes": ["7"],
    "--prefix-repetition-output-len": ["7"],
    "--speed-bench-dataset-subset": ["throughput_1k"],
    "--speed-bench-output-len": ["7"],
    "--speed-bench-category": ["coding"],
    "--label": ["mine"],
    "--backend": ["openai-chat"],
    "--base-url": ["http://example.test:9000"],
    "--host": ["example.test"],
    "--port": ["9001"],
    "--endpoint": ["/v1/chat/completions"],
    "--header": ["X-A=1"],
    "--max-concurrency": ["7"],
    "--model": ["m"],
    "--input-len": ["7"],
    "--output-len": ["7"],
    "--tokenizer": ["tok"],
    "--tokenizer-mode": ["deepseek_v4"],
    "--logprobs": ["3"],
    "--request-rate": ["5"],
    "--burstiness": ["2"],
    "--num-warmups": ["3"],
    "--metadata": ["k=v"],
    "--result-dir": ["out"],
    "--result-filename": ["r.json"],
    "--percentile-metrics": ["e2el"],
    "--metric-percentiles": ["50,90"],
    "--goodput": ["ttft:500"],
    "--request-id-prefix": ["run7-"],
    "--top-p": ["0.5"],
    "--top-k": ["5"],
    "--min-p": ["0.1"],
    "--temperature": ["0.7"],
    "--frequency-penalty": ["0.5"],
    "--presence-penalty": ["0.5"],
    "--repetition-penalty": ["1.2"],
    "--served-model-name": ["served"],
    "--lora-modules": ["ad-a", "ad-b"],
    "--lora-assignment": ["round-robin"],
    "--ramp-up-strategy": ["linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "5"],
    "--ramp-up-start-rps": ["2", "--ramp-up-strategy", "linear", "--ramp-up-end-rps", "5"],
    "--ramp-up-end-rps": ["9", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1"],
    "--ready-check-timeout-sec": ["0"],
    "--chat-template-kwargs": ['{"enable_thinking": false}'],
    "--extra-body": ['{"chat_template_kwargs": {"enable_thinking": false}}'],
}

# options whose given value is the default on the random dataset: compared on a file dataset
CONTEXT = {"--ignore-eos": ["--dataset-name", "custom", "--dataset-path", "data.jsonl"]}


def _is_flag(option: dict) -> bool:
    return option["nargs"] == 0


def _cli(monkeypatch, capsys, args: list[str]) -> tuple[int, str, list]:
    """Run `servelab bench ARGS` in this process with the load generator replaced: (exit code, stderr, the
    configs it would have run)."""
    seen: list = []

    def fake_run(points, **kwargs):
        seen.extend(points)
        return 0

    monkeypatch.setattr(runner, "run", fake_run)
    monkeypatch.setattr(bench_cli, "wait_for_server", lambda cfg: 0.0)
    monkeypatch.setattr(sys, "argv", ["servelab", "bench", *args])
    with pytest.raises(SystemExit) as done:
        main()
    return int(done.value.code or 0), capsys.readouterr().err, seen


def _dump(cfg) -> dict:
    return cfg.public_dump()


def test_the_pinned_list_is_vllm_032s_whole_parser():
    doc = json.loads(PINNED.read_text())
    assert doc["vllm_version"] == "0.32.0" and doc["licence"].startswith("Apache-2.0")
    assert doc["count"] == len(OPTIONS) == 101
    names = [n for o in OPTIONS for n in o["names"]]
    assert len(names) == len(set(names)) and "--extra-body" in names and "--append-result" in names


@pytest.mark.parametrize(
    "option", [o for o in OPTIONS if not REFUSED & set(o["names"])], ids=lambda o: o["names"][0]
)
def test_every_other_option_is_taken_into_the_config(option, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    name = option["names"][0]
    context = CONTEXT.get(name, [])
    code, err, base = _cli(monkeypatch, capsys, context)
    assert code == 0, err
    args = [*context, name] if _is_flag(option) else [*context, name, *VALUES[name]]
    code, err, points = _cli(monkeypatch, capsys, args)
    assert code == 0, err
    changed = _dump(points[0]) != _dump(base[0])
    assert changed, f"{name} left the config as it was"


@pytest.mark.parametrize("name", sorted(REFUSED_OPTIONS))
def test_each_refused_option_says_why_in_one_line(name, monkeypatch, capsys):
    option = next(o for o in OPTIONS if name in o["names"])
    args = [name] if _is_flag(option) else [name, "1"]
    code, err, points = _cli(monkeypatch, capsys, args)
    lines = err.strip().splitlines()
    assert code == 2 and not points and len(lines) == 1, err
    assert lines[0].startswith(f"error: {name}: not supported by servelab bench: ")
    assert "No such option" not in err and "Traceback" not in err


def test_bare_profile_is_vllms_server_profiler_and_profile_name_is_guidellms(monkeypatch, capsys):
    for args in (["--profile", "--save-result"], ["--save-result", "--profile"]):
        code, err, points = _cli(monkeypatch, capsys, args)
        assert code == 0 and points[0].server_profile and points[0].save_result, err
    code, err, points = _cli(monkeypatch, capsys, ["--profile", "synchronous"])
    assert code == 0 and points[0].max_concurrency == 1 and not points[0].server_profile


def test_options_of_several_values_take_them_after_one_flag(monkeypatch, capsys):
    args = ["--lora-modules", "a", "b", "--header", "X-A=1", "X-B=2", "--metadata", "k=v", "j=w"]
    code, err, points = _cli(monkeypatch, capsys, [*args, "--goodput", "ttft:5", "tpot:9"])
    cfg = points[0]
    assert code == 0, err
    assert cfg.lora_modules == ["a", "b"] and cfg.headers == {"X-A": "1", "X-B": "2"}
    assert cfg.metadata == {"k": "v", "j": "w"} and cfg.goodput == {"ttft": 5.0, "tpot": 9.0}


def test_random_range_ratio_takes_vllms_json_form(monkeypatch, capsys):
    code, err, points = _cli(monkeypatch, capsys, ["--random-range-ratio", '{"input": 0.3, "output": 0.5}'])
    assert code == 0 and (points[0].random_range_ratio, points[0].random_output_range_ratio) == (0.3, 0.5)
    code, err, _ = _cli(monkeypatch, capsys, ["--random-range-ratio", '{"inputs": 0.3}'])
    assert code == 2 and err.startswith("error: --random-range-ratio ")


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--backend", "openai-embeddings"), ("--dataset-name", "random-mm"), ("--dataset-name", "timed_trace")],
)
def test_vllm_values_servelab_cannot_send_are_refused_with_the_reason(flag, value, monkeypatch, capsys):
    code, err, _ = _cli(monkeypatch, capsys, [flag, value])
    assert code == 2 and err.count("\n") == 1 and f"vLLM's {value} is not supported: " in err


def test_the_count_the_docs_give():
    refused = [o for o in OPTIONS if REFUSED & set(o["names"])]
    assert (len(OPTIONS) - len(refused), len(refused)) == (74, 27)
    doc = (Path(__file__).parents[2] / "docs" / "bench.md").read_text()
    assert "74 of vLLM 0.32's 101 options honoured, 27 refused with reasons, 0 unknown" in doc
