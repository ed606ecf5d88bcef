"""What vLLM's `bench serve` options servelab honours really do, against the mock server (its own process;
--log-requests shows what each request carried, --spec-decode gives vLLM's speculative-decoding counters)."""

from __future__ import annotations

import json
import shutil
import ssl
import sys
from pathlib import Path

import pytest
from clirun import servelab

from servelab.bench import runner
from servelab.bench.config import BenchConfig
from servelab.bench.datasets import build_dataset
from servelab.bench.payload import Target
from servelab.bench.spec_decode import parse, result_fields
from servelab.bench.tokenizer import load_tokenizer
from servelab.cli.main import main
from servelab.errors import ServelabError


def bench(server, tmp_path: Path, *args: str) -> tuple[int, str]:
    cmd = ["bench", "--base-url", server.url, "--model", "mock", "--random-input-len", "8"]
    cmd += ["--random-output-len", "4", "--num-prompts", "4", "--num-workers", "1", *args]
    p = servelab(*cmd, cwd=tmp_path)  # in-process (tests/clirun.py); its load worker is a process
    return p.returncode, p.stderr


def logged(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sampling_logprobs_extra_body_and_request_ids_reach_every_request(mock_server, tmp_path):
    log = tmp_path / "requests.jsonl"
    s = mock_server("--token-delay-ms", "1", "--log-requests", str(log))
    extra = '{"chat_template_kwargs": {"enable_thinking": false}, "top_k": 3}'
    rc, err = bench(
        s, tmp_path, "--min-p", "0.1", "--frequency-penalty", "0.5", "--presence-penalty", "0.25",
        "--repetition-penalty", "1.1", "--top-k", "9", "--logprobs", "2", "--extra-body", extra,
        "--request-id-prefix", "run7-", "--no-ready-check",
    )  # fmt: skip
    assert rc == 0, err
    reqs = logged(log)
    assert len(reqs) == 4
    for r in reqs:
        body = r["body"]
        assert (body["min_p"], body["frequency_penalty"], body["presence_penalty"]) == (0.1, 0.5, 0.25)
        assert body["repetition_penalty"] == 1.1 and body["logprobs"] == 2
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
        assert body["top_k"] == 3  # --extra-body over the sampling options, as vLLM merges them
    assert sorted(r["request_id"] for r in reqs) == ["run7-0", "run7-1", "run7-2", "run7-3"]


def test_without_the_options_the_body_has_none_of_them_and_ids_are_vllms_form(mock_server, tmp_path):
    log = tmp_path / "requests.jsonl"
    s = mock_server("--token-delay-ms", "1", "--log-requests", str(log))
    rc, err = bench(s, tmp_path, "--no-ready-check")
    assert rc == 0, err
    reqs = logged(log)
    for r in reqs:
        assert not {"min_p", "logprobs", "repetition_penalty", "chat_template_kwargs"} & set(r["body"])
        assert r["request_id"].startswith("bench-") and len(r["request_id"].split("-")[1]) == 8
    assert len({r["request_id"].rsplit("-", 1)[0] for r in reqs}) == 1  # one prefix a run


def test_logprobs_on_the_chat_api_asks_for_top_logprobs(mock_server, tmp_path):
    log = tmp_path / "requests.jsonl"
    s = mock_server("--token-delay-ms", "1", "--log-requests", str(log))
    rc, err = bench(s, tmp_path, "--endpoint", "/v1/chat/completions", "--logprobs", "3", "--no-ready-check")
    assert rc == 0, err
    assert all(r["body"]["logprobs"] is True and r["body"]["top_logprobs"] == 3 for r in logged(log))


def test_append_result_adds_one_json_line_a_run(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "1")
    for _ in range(2):
        rc, err = bench(s, tmp_path, "--append-result", "--result-filename", "all.json", "--label", "x")
        assert rc == 0, err
    lines = (tmp_path / "all.json").read_text().splitlines()
    results = [json.loads(line) for line in lines]
    assert len(results) == 2 and all(r["completed"] == 4 for r in results)
    assert results[0]["records_file"] != results[1]["records_file"]  # each run's records kept
    assert all((tmp_path / r["records_file"]).exists() for r in results)
    # without it, an existing result file is still refused before the run
    rc, err = bench(s, tmp_path, "--save-result", "--result-filename", "all.json")
    assert rc == 2 and "exists" in err


def test_spec_decode_acceptance_fields_when_the_server_reports_them(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "1", "--spec-decode", "2")
    rc, err = bench(s, tmp_path, "--save-result", "--result-filename", "r.json", "--no-ready-check")
    assert rc == 0, err
    r = json.loads((tmp_path / "r.json").read_text())
    # 4 requests of 4 tokens: 3 drafts each of 2 tokens; position 0 always accepted, position 1 every 2nd
    assert r["spec_decode_num_drafts"] == 12 and r["spec_decode_draft_tokens"] == 24
    assert r["spec_decode_accepted_tokens"] == 18
    assert r["spec_decode_acceptance_rate"] == pytest.approx(75.0)
    assert r["spec_decode_acceptance_length"] == pytest.approx(2.5)
    assert r["spec_decode_per_position_acceptance_rates"] == pytest.approx([1.0, 0.5])
    plain = mock_server("--token-delay-ms", "1")
    rc, err = bench(plain, tmp_path, "--save-result", "--result-filename", "p.json")
    assert rc == 0 and not [k for k in json.loads((tmp_path / "p.json").read_text()) if "spec_decode" in k]


def test_spec_decode_counters_are_read_as_vllm_reads_them():
    page = "\n".join(
        [
            "# TYPE vllm:spec_decode_num_drafts counter",
            'vllm:spec_decode_num_drafts_total{engine="0"} 10.0',
            'vllm:spec_decode_num_drafts_total{engine="1"} 5.0',
            'vllm:spec_decode_num_draft_tokens_total{engine="0"} 45.0',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 30.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 14.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 9.0',
            'vllm:spec_decode_num_drafts_created{engine="0"} 99.0',  # not a _total sample: skipped
        ]
    )
    after = parse(page)
    assert after is not None and after.num_drafts == 15 and after.accepted_per_pos == {0: 14, 1: 9}
    before = parse("vllm:spec_decode_num_drafts_total 5.0\nvllm:spec_decode_num_draft_tokens_total 15.0")
    fields = result_fields(before, after)
    assert fields["spec_decode_num_drafts"] == 10 and fields["spec_decode_draft_tokens"] == 30
    assert fields["spec_decode_acceptance_rate"] == pytest.approx(100.0)
    assert parse("vllm:prefix_cache_hits_total 3.0") is None and result_fields(None, after) == {}


def test_ready_check_timeout_waits_then_fails_in_one_line(tmp_path):
    p = servelab(
        "bench",
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--ready-check-timeout-sec",
        "1",
        cwd=tmp_path,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert p.stderr.startswith("error: --ready-check-timeout-sec: the server at http://127.0.0.1:9 did not")


def test_ready_check_timeout_passes_against_a_live_server(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "1")
    rc, err = bench(s, tmp_path, "--ready-check-timeout-sec", "5")
    assert rc == 0, err


def test_spec_bench_reads_first_turns_by_category_and_oversamples(tmp_path):
    path = tmp_path / "question.jsonl"
    rows = [
        {"category": "coding" if i % 2 else "math", "turns": [f"q{i} please", "follow"]} for i in range(6)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    cfg = BenchConfig(dataset_name="spec_bench", dataset_path=str(path), num_prompts=5, disable_shuffle=True)
    items = list(build_dataset(cfg, None).items)
    assert [it.prompt for it in items] == ["q0 please", "q1 please", "q2 please", "q3 please", "q4 please"]
    assert {it.output_len for it in items} == {256}
    cfg = BenchConfig(
        dataset_name="spec_bench", dataset_path=str(path), num_prompts=7, spec_bench_category="coding"
    )
    items = list(build_dataset(cfg, None).items)
    assert len(items) == 7 and {it.prompt for it in items} == {"q1 please", "q3 please", "q5 please"}
    cfg = cfg.model_copy(update={"no_oversample": True})
    assert len(list(build_dataset(cfg, None).items)) == 3
    path.write_text('{"category": "x"}\n')
    with pytest.raises(ServelabError, match=r"question.jsonl:1: expected"):
        build_dataset(BenchConfig(dataset_name="spec_bench", dataset_path=str(path)), None)


def test_burstgpt_keeps_gpt4_rows_and_their_lengths(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "1,GPT-4,12,30,42,Conversation log\n"
        "2,ChatGPT,50,60,110,Conversation log\n"
        "3,GPT-4,20,0,20,Conversation log\n"
        "4,GPT-4,7,9,16,API log\n"
    )
    cfg = BenchConfig(dataset_name="burstgpt", dataset_path=str(path), num_prompts=2)
    items = list(build_dataset(cfg, None).items)
    assert sorted((it.prompt_len, it.output_len) for it in items) == [(7, 9), (12, 30)]
    more = list(build_dataset(cfg.model_copy(update={"num_prompts": 5}), None).items)
    assert len(more) == 5 and {(it.prompt_len, it.output_len) for it in more} <= {(7, 9), (12, 30)}


def test_custom_is_shuffled_and_oversampled_as_vllms_unless_asked_not_to(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"p{i}", "output_tokens": 3}) for i in range(8)))
    base = dict(dataset_name="custom", dataset_path=str(path), num_prompts=8)
    kept = [it.prompt for it in build_dataset(BenchConfig(**base, disable_shuffle=True), None).items]
    shuffled = [it.prompt for it in build_dataset(BenchConfig(**base), None).items]
    assert kept == [f"p{i}" for i in range(8)] and shuffled != kept and sorted(shuffled) == kept
    more = BenchConfig(**dict(base, num_prompts=12))
    assert len(build_dataset(more, None).items) == 12
    assert len(build_dataset(more.model_copy(update={"no_oversample": True}), None).items) == 8


def test_output_len_sets_every_datasets_output_length(monkeypatch, capsys):
    """vLLM's --output-len is the output length of every dataset, not only random's."""
    seen: list = []
    monkeypatch.setattr(runner, "run", lambda points, **kw: seen.extend(points) or 0)
    monkeypatch.setattr(sys, "argv", ["servelab", "bench", "--output-len", "5"])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0, capsys.readouterr().err
    cfg = seen[0]
    lens = [cfg.random_output_len, cfg.sharegpt_output_len, cfg.custom_output_len, cfg.hf_output_len]
    assert lens + [cfg.spec_bench_output_len, cfg.prefix_repetition_output_len] == [5] * 6


def test_skip_tokenizer_init_loads_no_tokenizer():
    assert BenchConfig(tokenizer="/some/tok", skip_tokenizer_init=True).tokenizer is None


def test_lora_modules_name_each_requests_model(mock_server, tmp_path):
    log = tmp_path / "requests.jsonl"
    s = mock_server("--token-delay-ms", "1", "--log-requests", str(log))
    args = ["--lora-modules", "ad-a", "ad-b", "--lora-assignment", "round-robin", "--no-ready-check"]
    rc, err = bench(s, tmp_path, *args)
    assert rc == 0, err
    by_id = {r["request_id"].rsplit("-", 1)[1]: r["body"]["model"] for r in logged(log)}
    assert by_id == {"0": "ad-a", "1": "ad-b", "2": "ad-a", "3": "ad-b"}
    log.unlink()
    rc, err = bench(s, tmp_path, "--lora-modules", "ad-a", "ad-b", "--num-prompts", "40", "--no-ready-check")
    assert rc == 0, err
    assert {r["body"]["model"] for r in logged(log)} == {"ad-a", "ad-b"}  # random: drawn, both appear


def test_bare_profile_starts_and_stops_the_servers_profiler_around_the_run(mock_server, tmp_path):
    log = tmp_path / "requests.jsonl"
    s = mock_server("--token-delay-ms", "1", "--log-requests", str(log))
    rc, err = bench(s, tmp_path, "--num-warmups", "2", "--no-ready-check", "--profile")
    assert rc == 0, err
    paths = [r["path"] for r in logged(log)]
    assert paths[2] == "/start_profile" and paths[-1] == "/stop_profile"  # after the 2 warm-ups
    assert paths.count("/v1/completions") == 6


def test_range_ratio_apart_for_inputs_and_outputs():
    cfg = BenchConfig(
        random_input_len=100,
        random_output_len=100,
        random_range_ratio=0.0,
        random_output_range_ratio=0.5,
        num_prompts=200,
    )
    items = list(build_dataset(cfg, None).items)
    assert {it.prompt_len for it in items} == {100}
    outs = [it.output_len for it in items]
    assert min(outs) >= 50 and max(outs) <= 150 and len(set(outs)) > 20


# a template that shows a --chat-template-kwargs variable when it is set
KW_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}"
    "<nothink>{% endif %}{% endif %}"
)


@pytest.fixture
def kw_tokenizer(tmp_path, tiny_tokenizer):
    d = tmp_path / "kw-tok"
    d.mkdir()
    shutil.copy(tiny_tokenizer / "tokenizer.json", d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": KW_TEMPLATE}))
    return d


def test_custom_and_spec_bench_prompts_take_the_chat_template_as_vllms_client(tmp_path, kw_tokenizer):
    tok = load_tokenizer(str(kw_tokenizer))
    custom = tmp_path / "c.jsonl"
    custom.write_text(json.dumps({"prompt": "the cat sat", "output_tokens": 3}))
    spec = tmp_path / "q.jsonl"
    spec.write_text(json.dumps({"category": "x", "turns": ["the cat sat"]}))
    for name, path in (("custom", custom), ("spec_bench", spec)):
        base = dict(dataset_name=name, dataset_path=str(path), num_prompts=1, tokenizer=str(kw_tokenizer))
        (it,) = build_dataset(BenchConfig(**base), tok).items
        assert it.prompt == "<|user|>the cat sat</s><|assistant|>" and it.prompt_len == tok.count(it.prompt)
        kw = BenchConfig(**base, chat_template_kwargs={"enable_thinking": False})
        assert next(iter(build_dataset(kw, tok).items)).prompt.endswith("<|assistant|><nothink>")
        raw = BenchConfig(**base, skip_chat_template=True)
        assert next(iter(build_dataset(raw, tok).items)).prompt == "the cat sat"
    # without a template to apply: one line that says how to send prompts as written
    (kw_tokenizer / "tokenizer_config.json").write_text("{}")
    plain = load_tokenizer(str(kw_tokenizer))
    with pytest.raises(ServelabError, match="--skip-chat-template"):
        build_dataset(BenchConfig(dataset_name="custom", dataset_path=str(custom)), plain)


def test_custom_output_len_minus_one_takes_each_rows_own(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"prompt": "a b", "output_tokens": 7}) + "\n" + json.dumps({"prompt": "c"}))
    cfg = BenchConfig(dataset_name="custom", dataset_path=str(path), custom_output_len=-1, num_prompts=1)
    with pytest.raises(ServelabError, match=r"c.jsonl:2: no output_tokens"):
        build_dataset(cfg, None)
    path.write_text(json.dumps({"prompt": "a b", "output_tokens": 7}))
    assert [it.output_len for it in build_dataset(cfg, None).items] == [7]
    with pytest.raises(ValueError, match="or -1"):
        BenchConfig(custom_output_len=0)


def test_insecure_turns_certificate_checks_off_for_https_only():
    checked = Target.from_url("https://example.test").tls_context()
    unchecked = Target.from_url("https://example.test", verify=False).tls_context()
    assert checked is not None and checked.verify_mode == ssl.CERT_REQUIRED and checked.check_hostname
    assert unchecked is not None and unchecked.verify_mode == ssl.CERT_NONE and not unchecked.check_hostname
    assert Target.from_url("http://example.test", verify=False).tls_context() is None
    template = runner.template_of(BenchConfig(base_url="https://example.test", insecure=True), "m", ())
    assert template.target.verify is False


def test_warm_ups_and_the_ready_check_carry_no_request_id(mock_server, tmp_path):
    """They repeat the first request, at once: one id in flight several times would collide at the server
    (vLLM's own warm-ups and test request send none)."""
    log = tmp_path / "requests.jsonl"
    s = mock_server("--token-delay-ms", "1", "--log-requests", str(log))
    rc, err = bench(s, tmp_path, "--num-warmups", "3", "--request-id-prefix", "r-")
    assert rc == 0, err
    ids = [r["request_id"] for r in logged(log)]
    assert ids[:4] == [None] * 4 and sorted(ids[4:]) == ["r-0", "r-1", "r-2", "r-3"]
