"""The sonnet and hf datasets as `vllm bench serve` has them, read from local files only (issue 15)."""

import json

import pytest
from clirun import servelab

from servelab.bench.config import BenchConfig
from servelab.bench.datasets import SONNET_BASE_PROMPT, build_dataset
from servelab.bench.tokenizer import load_tokenizer
from servelab.errors import ServelabError

POEM = [f"Line {k} of the sonnet, where the river meets the town\n" for k in range(40)]


def config(**kw) -> BenchConfig:
    return BenchConfig(model="m", **kw)


@pytest.fixture
def sonnet_file(tmp_path):
    path = tmp_path / "sonnet.txt"
    path.write_text("".join(POEM))
    return path


def test_sonnet_prefix_lines_and_lengths(sonnet_file, tiny_tokenizer):
    tok = load_tokenizer(str(tiny_tokenizer))
    line_len = sum(tok.count(x) for x in POEM) / len(POEM)
    base = tok.count(SONNET_BASE_PROMPT)
    # vLLM's rule: round((len - base) / tokens per line) lines; so 4 lines in all, the first 2 the prefix
    input_len, prefix_len = base + round(4.3 * line_len), base + round(1.8 * line_len)
    cfg = config(
        dataset_name="sonnet",
        dataset_path=str(sonnet_file),
        num_prompts=8,
        sonnet_input_len=input_len,
        sonnet_prefix_len=prefix_len,
        sonnet_output_len=7,
    )
    data = build_dataset(cfg, tok)
    assert len(data.items) == 8
    for it in data.items:
        assert it.prompt.startswith(SONNET_BASE_PROMPT + POEM[0] + POEM[1])
        assert it.prompt.count("\n") == 1 + 4
        assert it.prompt_len == tok.count(it.prompt) <= input_len and it.output_len == 7
    assert len({it.prompt for it in data.items}) > 1  # the last 2 lines are drawn at random
    again = build_dataset(cfg, tok)
    assert [it.prompt for it in again.items] == [it.prompt for it in data.items]  # the seed decides


def test_sonnet_input_len_must_exceed_the_base_prompt(sonnet_file):
    cfg = config(dataset_name="sonnet", dataset_path=str(sonnet_file), sonnet_input_len=5)
    with pytest.raises(ServelabError, match="--sonnet-input-len"):
        build_dataset(cfg, None)


ROWS = [
    {"question": "What is the river called?", "answer": "one two three four five"},
    {"conversations": [{"from": "human", "value": "Name the town"}, {"from": "gpt", "value": "a b c"}]},
    {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "Hi there"}]},
    {"label": 3},  # no prompt: skipped
    {"prompt": "Write a poem"},
]


@pytest.mark.parametrize("fmt", ["json", "jsonl", "parquet"])
def test_hf_local_files(tmp_path, fmt):
    path = tmp_path / f"rows.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps(ROWS))
    elif fmt == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in ROWS))
    else:
        pq = pytest.importorskip("pyarrow.parquet")
        pa = pytest.importorskip("pyarrow")
        flat = [
            {"question": r.get("question"), "answer": r.get("answer"), "prompt": r.get("prompt")}
            for r in ROWS
        ]
        pq.write_table(pa.Table.from_pylist(flat), path)
    data = build_dataset(config(dataset_name="hf", dataset_path=str(path), num_prompts=10), None)
    prompts = [(it.prompt, it.output_len) for it in data.items]
    if fmt == "parquet":  # flat columns only: the conversation rows have no prompt there
        assert prompts == [("What is the river called?", 5), ("Write a poem", 256)]
    else:
        assert prompts == [
            ("What is the river called?", 5),
            ("Name the town", 3),
            ("Hi there", 256),
            ("Write a poem", 256),
        ]
    data = build_dataset(
        config(dataset_name="hf", dataset_path=str(path), hf_output_len=9, num_prompts=1), None
    )
    assert [(it.prompt, it.output_len) for it in data.items] == [("What is the river called?", 9)]


def test_hf_folder_without_datasets_is_one_clear_line(tmp_path):
    try:
        import datasets  # noqa: F401, PLC0415 (only to know whether the error path applies)

        pytest.skip("the datasets package is installed")
    except ImportError:
        pass
    with pytest.raises(ServelabError, match="needs the `datasets` package"):
        build_dataset(config(dataset_name="hf", dataset_path=str(tmp_path)), None)


@pytest.mark.slow  # 0.8 s of CPU a case: a whole bench with its load worker processes
def test_sonnet_and_hf_runs_against_the_mock(mock_server, tmp_path, sonnet_file):
    s = mock_server("--token-delay-ms", "2")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps(r) for r in ROWS))
    for name, path, extra in (("sonnet", sonnet_file, ["--sonnet-output-len", "3"]), ("hf", rows, [])):
        out = tmp_path / f"{name}.json"
        cmd = ["bench", "--base-url", s.url, "--model", "mock"]
        cmd += ["--dataset-name", name, "--dataset-path", str(path), "--num-prompts", "4", *extra]
        cmd += ["--hf-output-len", "2", "--save-result", "--result-dir", str(tmp_path)]
        cmd += ["--result-filename", out.name]
        p = servelab(*cmd)
        assert p.returncode == 0, p.stderr
        r = json.loads(out.read_text())
        assert r["completed"] == 4 and r["total_output_tokens"] == 4 * (3 if name == "sonnet" else 2)


def _speed_bench_dir(tmp_path):
    rows = [
        {"category": "low_entropy", "messages": [{"role": "user", "content": f"low {i}"}, {"content": "x"}]}
        for i in range(3)
    ] + [{"category": "coding", "messages": [{"role": "user", "content": "code 0"}]}]
    d = tmp_path / "throughput_8k-low_entropy"
    d.mkdir()
    (d / "throughput_8k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_speed_bench_prompts_are_first_turns_of_the_category(tmp_path):
    d = _speed_bench_dir(tmp_path)
    cfg = config(
        dataset_name="speed_bench",
        dataset_path=str(d),
        speed_bench_dataset_subset="throughput_8k",
        speed_bench_category="low_entropy",
        speed_bench_output_len=77,
        num_prompts=7,
    )
    items = build_dataset(cfg, None).items
    # 7 requests drawn from the 3 low_entropy first turns (oversampled, as vLLM does), 77 tokens each
    assert len(items) == 7 and {i.prompt for i in items} == {"low 0", "low 1", "low 2"}
    assert all(i.output_len == 77 for i in items)
    assert [i.prompt for i in build_dataset(cfg, None).items] == [i.prompt for i in items]  # seeded
    everything = build_dataset(cfg.model_copy(update={"speed_bench_category": None}), None).items
    assert "code 0" in {i.prompt for i in everything}


def test_speed_bench_missing_or_malformed_is_one_line(tmp_path):
    d = _speed_bench_dir(tmp_path)
    missing = config(
        dataset_name="speed_bench", dataset_path=str(d), speed_bench_dataset_subset="qualitative"
    )
    with pytest.raises(ServelabError, match="qualitative.jsonl.*prepare.py"):
        build_dataset(missing, None)
    (d / "throughput_8k.jsonl").write_text('{"category": "x", "turns": ["no messages"]}\n')
    bad = config(dataset_name="speed_bench", dataset_path=str(d), speed_bench_dataset_subset="throughput_8k")
    with pytest.raises(ServelabError, match=r"throughput_8k.jsonl:1: expected"):
        build_dataset(bad, None)


def test_speed_bench_runs_against_the_mock(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "1")
    d = _speed_bench_dir(tmp_path)
    cmd = ["bench", "--base-url", s.url, "--model", "mock"]
    cmd += ["--dataset-name", "speed_bench", "--dataset-path", str(d), "--num-prompts", "5"]
    cmd += ["--speed-bench-dataset-subset", "throughput_8k", "--speed-bench-category", "low_entropy"]
    cmd += ["--speed-bench-output-len", "3", "--save-result", "--result-dir", str(tmp_path)]
    cmd += ["--result-filename", "sb.json"]
    p = servelab(*cmd)
    assert p.returncode == 0, p.stderr
    r = json.loads((tmp_path / "sb.json").read_text())
    assert r["completed"] == 5 and r["total_output_tokens"] == 5 * 3
