"""The agentic trace reader (InferenceX's format, the pinned sample its own converter wrote), the replay plan
it makes (what each request keeps of the last, its wait, the subagents it starts and waits for), the prompts
built from hash ids, and the server prefix-cache counters."""

import json
from pathlib import Path

import pytest

from servelab.bench.agentic.prompts import StreamPrompt, block_texts
from servelab.bench.agentic.replay import salt_of
from servelab.bench.agentic.server_cache import hit_rates, parse_counters
from servelab.bench.agentic.trace import read_trace_file
from servelab.errors import ServelabError

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "inferencex" / "agentic" / "traces.jsonl"


def raw_traces() -> dict[str, dict]:
    return {t["id"]: t for t in map(json.loads, SAMPLE.read_text().splitlines())}


def flat(trace: dict) -> list[tuple[int, dict]]:
    """(stream, request) in file order, as the plan numbers them: the main agent 0, subagents 1, 2, ..."""
    out, sub = [], 0
    for entry in trace["requests"]:
        if entry["type"] == "subagent":
            sub += 1
            out += [(sub, r) for r in entry["requests"]]
        else:
            out.append((0, entry))
    return out


def test_the_pinned_sample_is_read_whole():
    tf = read_trace_file(str(SAMPLE))
    raw = raw_traces()
    assert [t.trace_id for t in tf.traces] == list(raw)
    for t in tf.traces:
        rows = flat(raw[t.trace_id])
        assert t.num_requests == len(rows) and t.block_size == raw[t.trace_id]["block_size"] == 64
        previous: dict[int, list[int]] = {}
        seen: set[int] = set()
        for req, (stream, row) in zip(t.requests, rows, strict=True):
            ids = row["hash_ids"]
            assert (req.stream, req.input_tokens, req.output_tokens, req.blocks) == (
                stream,
                row["in"],
                row["out"],
                len(ids),
            )
            # the plan keeps what differs from the stream's previous prompt; put together, it is the prompt
            before = previous.get(stream, [])
            assert before[: req.keep] + list(req.new_ids) == ids
            assert req.keep == 0 or before[req.keep - 1] == ids[req.keep - 1]
            assert req.keep == len(before) or req.keep == len(ids) or before[req.keep] != ids[req.keep]
            previous[stream] = ids
            # an unbounded cache holds the leading blocks some earlier request of the session sent
            lead = next((k for k, h in enumerate(ids) if h not in seen), len(ids))
            assert req.cached_blocks == lead
            seen.update(ids)


def test_waits_follow_the_recording_end_to_start():
    t = {x.trace_id: x for x in read_trace_file(str(SAMPLE)).traces}["main-subagents"]
    rows = [r for _s, r in flat(raw_traces()["main-subagents"])]
    end = [r["t"] + r["api_time"] for r in rows]
    main, first_sub, background = t.streams
    assert [t.requests[i].turn for i in main] == list(range(len(main)))
    # the first subagent starts after the main-agent request before it, and the next main-agent request waits
    # for it (it had ended when that request started); the second runs in the background until the last turn
    assert t.requests[main[2]].spawns == (1,) and t.requests[main[3]].spawns == (2,)
    assert t.requests[main[3]].waits_for == (1,)
    assert t.requests[main[4]].waits_for == ()
    assert t.requests[main[5]].waits_for == (2,)
    for k, idx in enumerate(main[1:], 1):
        req = t.requests[idx]
        waited = [end[i] for s in req.waits_for for i in t.streams[s]]
        assert req.delay_s == pytest.approx(rows[idx]["t"] - max([end[main[k - 1]], *waited]))
    assert t.requests[first_sub[0]].delay_s == pytest.approx(rows[first_sub[0]]["t"] - end[main[2]])
    assert t.requests[first_sub[1]].delay_s == pytest.approx(rows[first_sub[1]]["t"] - end[first_sub[0]])
    assert t.requests[background[0]].delay_s == pytest.approx(rows[background[0]]["t"] - end[main[3]])


def test_waits_are_capped(tmp_path):
    trace = {
        "id": "long-think",
        "requests": [
            {"t": 0, "in": 64, "out": 4, "hash_ids": [1], "api_time": 1},
            {"t": 901, "in": 128, "out": 4, "hash_ids": [1, 2], "api_time": 1},
        ],
    }
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(trace) + "\n")
    assert read_trace_file(str(path)).traces[0].requests[1].delay_s == 900
    assert read_trace_file(str(path), max_gap_s=300).traces[0].requests[1].delay_s == 300


def test_other_layouts_of_the_format(tmp_path):
    """A pretty-printed trace file (the converter's per-trace output), a JSON list, a folder of them, and a
    trace without times (its think times are the waits, subagents joined by the next turn)."""
    untimed = {
        "id": "untimed",
        "requests": [
            {"type": "n", "hash_ids": [1, 2, 3], "out": 50, "in": 150},
            {"type": "subagent", "requests": [{"hash_ids": [1, 9], "input_length": 100, "output_length": 7}]},
            {"type": "n", "hash_ids": [1, 2, 3, 4], "out": 60, "in": 250, "think_time": 2.5},
        ],
    }
    (tmp_path / "a.json").write_text(json.dumps(untimed, indent=2))
    (tmp_path / "b.json").write_text(json.dumps([raw_traces()["compaction"]]))
    one = read_trace_file(str(tmp_path / "a.json")).traces[0]
    assert [(r.stream, r.input_tokens, r.output_tokens) for r in one.requests] == [
        (0, 150, 50),
        (1, 100, 7),
        (0, 250, 60),
    ]
    assert one.requests[2].waits_for == (1,) and one.requests[2].delay_s == 2.5
    assert one.requests[2].keep == 3 and list(one.requests[2].new_ids) == [4]
    both = read_trace_file(str(tmp_path))
    assert [t.trace_id for t in both.traces] == ["untimed", "compaction"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"id": "a", "requests": [{"in": 5}]}\n{"id": "b", "requests": [\n', ":2: not JSON"),
        ('{"id": "a"}\n', "requests: Field required"),
        (
            '{"id": "a", "requests": [{"in": -1}]}\n',
            "requests.0.in: Input should be greater than or equal to 0",
        ),
        ('{"id": "a", "requests": [{"type": "subagent"}]}\n', "a subagent entry needs its requests"),
        ("[1, 2]", "expected a trace object, got int"),
        ("", "no trace in it"),
    ],
)
def test_a_broken_trace_is_refused_in_one_line(tmp_path, content, expected):
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    with pytest.raises(ServelabError) as e:
        read_trace_file(str(path))
    assert expected in str(e.value) and "\n" not in str(e.value)
    assert str(path) in str(e.value) and e.value.field == "dataset_path"


def test_prompts_repeat_the_history_and_grow():
    t = {x.trace_id: x for x in read_trace_file(str(SAMPLE)).traces}["compaction"]
    prompt = StreamPrompt(salt=7, block_size=t.block_size)
    texts = [prompt.text(r) for r in t.requests]
    for req, text in zip(t.requests, texts, strict=True):
        assert len(text.split()) == req.input_tokens and text.startswith(" ")
    for before, req, text in zip(texts, t.requests[1:], texts[1:], strict=False):
        # the blocks a turn keeps are the same words as in the turn before: the shared prefix
        shared = min(req.keep * t.block_size, len(before.split()))
        assert text.split()[:shared] == before.split()[:shared]
    # the compaction keeps three blocks of the system prompt and replaces the rest
    assert t.requests[3].keep == 3
    assert texts[3].split()[3 * 64 : 4 * 64] != texts[2].split()[3 * 64 : 4 * 64]


def test_a_prompt_longer_than_its_blocks_gets_words_of_its_own():
    t = read_trace_file(str(SAMPLE)).traces[0]
    req = t.requests[0]
    longer = type(req)(
        **{**{s: getattr(req, s) for s in req.__slots__}, "input_tokens": req.blocks * 64 + 10}
    )
    text = StreamPrompt(1, 64).text(longer)
    assert len(text.split()) == req.blocks * 64 + 10
    assert text.startswith("".join(block_texts(list(req.new_ids), 1, 64)))


def test_replays_of_one_trace_do_not_share_text():
    """Each replay of a trace has its own salt (its blocks never hit another replay's cache), and so has each
    run (its nonce); a trace whose ids are global shares one salt per pass over the file."""
    t = read_trace_file(str(SAMPLE)).traces[0]
    salts = {salt_of(t, n, 2, nonce=0) for n in range(6)}
    assert len(salts) == 6
    assert salt_of(t, 0, 2, nonce=1) not in salts
    assert block_texts([5], 1, 64) != block_texts([5], 2, 64)
    assert block_texts([5], 1, 64) == block_texts([5], 1, 64)
    t.shared_ids = True
    assert salt_of(t, 0, 2, 0) == salt_of(t, 1, 2, 0) != salt_of(t, 2, 2, 0)


VLLM_METRICS = """\
# HELP vllm:prefix_cache_queries Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 500.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e9
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 600.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 150.0
vllm:external_prefix_cache_queries_total{engine="0",model_name="m"} 400.0
vllm:external_prefix_cache_hits_total{engine="0",model_name="m"} 100.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"} 750.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 650.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 1500.0
"""


def test_vllm_counters_give_the_run_hit_rates():
    before = parse_counters(VLLM_METRICS.replace("1000.0", "100.0").replace("600.0", "0.0"))
    after = parse_counters(VLLM_METRICS)
    assert after["vllm:prefix_cache_queries"] == 1500 and after["vllm:prefix_cache_hits"] == 750
    r = hit_rates(before, after)
    assert r["engine"] == "vllm"
    assert (r["queries"], r["hits"]) == (900, 600)  # what the run added: engine 0 grew by 900 and 600
    assert r["hit_rate"] == pytest.approx(600 / 900)
    assert r["external_queries"] == 0 and r["external_hit_rate"] is None  # nothing looked up there
    assert r["prompt_tokens_by_source"] == {"local_cache_hit": 0.0, "local_compute": 0.0}


def test_sglang_counters_and_none():
    page = (
        'sglang:prompt_tokens_total{model_name="m"} 2000\n'
        'sglang:cached_tokens_total{model_name="m",cache_source="device"} 900\n'
        'sglang:cached_tokens_total{model_name="m",cache_source="host"} 300\n'
    )
    r = hit_rates({}, parse_counters(page))
    assert (r["engine"], r["hit_rate"], r["external_hit_rate"]) == ("sglang", 0.6, 0.15)
    assert hit_rates({}, parse_counters("other_metric 1\n"))["engine"] is None
