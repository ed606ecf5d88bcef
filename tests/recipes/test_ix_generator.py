"""servelab follows the checkout's own sweep generator (recipes/ix_generator.py) and reads InferenceX's
agentic blocks before June 2026.

The generators here are small sources written for these tests in the shape InferenceX's take (rows built as
dict literals keyed by `Fields.<MEMBER>.value`); the 25 real ones of the refs corpus are pinned in
tests/data/inferencex_refs as the facts read from them (generator-facts.json) and compared row for row in
test_inferencex_refs.py.
"""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.errors import ServelabError
from servelab.recipes.inferencex import TOLERANT, MasterEntry, Notes, dump_master, parse_master
from servelab.recipes.ix_generator import (
    GENERATOR,
    TODAY,
    find_generator,
    generator_from_json,
    generator_to_json,
    parse_generator,
)
from servelab.recipes.ix_generator_fields import printed_fields
from servelab.recipes.job import SERVELAB_FIELDS
from servelab.recipes.matrix import MatrixRow
from servelab.recipes.recipe_store import open_store

# A generator in the form InferenceX's took until March 2026: rows without pp/dcp-size/pcp-size, a 200-token
# margin, a 1k8k name, evals only on request, at the highest concurrency of the highest and lowest tp.
OLD_GENERATOR = """
seq_len_stoi = {
    "1k1k": (1024, 1024),
    "1k8k": (1024, 8192),
    "8k1k": (8192, 1024)
}


def mark_eval_entries(matrix_values):
    target_isl, target_osl = seq_len_stoi["1k8k"]
    for i, entry in enumerate(matrix_values):
        max_tp = max(e[Fields.TP.value] for e in matrix_values)
    return matrix_values


def generate_full_sweep(args, all_config_data, runner_data):
    for isl, osl in pairs:
        entry = {
            Fields.IMAGE.value: image,
            Fields.MODEL.value: model,
            Fields.TP.value: tp,
            Fields.EP.value: ep,
            Fields.DP_ATTN.value: dp_attn,
            Fields.SPEC_DECODING.value: spec,
            Fields.MAX_MODEL_LEN.value: isl + osl + 200,
        }
        entry = {
            Fields.IMAGE.value: image,
            Fields.MODEL.value: model,
            Fields.PREFILL.value: prefill,
            Fields.DECODE.value: decode,
            Fields.MAX_MODEL_LEN.value: isl + osl + 200,
        }


def main():
    if args.run_evals or args.evals_only:
        matrix_values = mark_eval_entries(matrix_values)
"""

# Today's shape: pools completed by a helper's literal, layout fields in the rows, evals by default.
NEW_GENERATOR = """
MIN_EVAL_CONC = 16
seq_len_stoi = {
    "1k1k": (1024, 1024),
    "8k1k": (8192, 1024)
}


def with_worker_parallelism_defaults(worker):
    return {**worker, Fields.PP.value: 1, Fields.DCP_SIZE.value: 1, Fields.PCP_SIZE.value: 1}


def mark_eval_entries(matrix_values, include_agentic=False):
    target_isl, target_osl = seq_len_stoi["8k1k"]
    key = _multinode_parallelism_key(entry[Fields.PREFILL.value])


def generate_full_sweep(args, all_config_data, runner_data):
    entry = {
        Fields.IMAGE.value: image,
        Fields.MODEL.value: model,
        Fields.TP.value: tp,
        Fields.PP.value: pp,
        Fields.DCP_SIZE.value: dcp,
        Fields.PCP_SIZE.value: pcp,
        Fields.SPEC_DECODING.value: spec,
        Fields.MAX_MODEL_LEN.value: isl + osl + 256,
    }
"""

RUNNERS = "labels:\n  h200: [h200-nb_0]\n  b200-multinode: [b200-nv_0]\n"

MASTER = """\
k-fp8-h200-vllm:
  image: vllm/vllm-openai:v0.25.0
  model: org/model
  model-prefix: k
  runner: h200
  precision: fp8
  framework: vllm
  seq-len-configs:
  - isl: 1024
    osl: 8192
    search-space:
    - {tp: 4, conc-start: 4, conc-end: 16}
    - {tp: 8, conc-start: 4, conc-end: 32}
k-fp8-b200-dynamo-vllm:
  image: vllm/vllm-openai:v0.25.0
  model: org/model
  model-prefix: k
  runner: b200-multinode
  precision: fp8
  framework: dynamo-vllm
  multinode: true
  disagg: true
  seq-len-configs:
  - isl: 8192
    osl: 1024
    search-space:
    - prefill: {num-worker: 1, tp: 8, ep: 8, dp-attn: true}
      decode: {num-worker: 2, tp: 8, ep: 8, dp-attn: false}
      conc-list: [16, 64]
"""


def checkout(tmp_path: Path, generator: str | None, master: str = MASTER) -> Path:
    """An InferenceX-like checkout: configs/ (a master file, runners.yaml) and, when given, its generator."""
    configs = tmp_path / "ix" / "configs"
    configs.mkdir(parents=True)
    (configs / "nvidia-master.yaml").write_text(master)
    (configs / "runners.yaml").write_text(RUNNERS)
    if generator is not None:
        path = tmp_path / "ix" / GENERATOR
        path.parent.mkdir(parents=True)
        path.write_text(generator)
    return configs


def sweep(configs: Path, *args: str) -> list[dict]:
    result = CliRunner().invoke(app, ["sweep", "--dir", str(configs), "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_facts_of_an_older_generator():
    gen = parse_generator(OLD_GENERATOR, "old.py")
    assert gen.model_len_margin == 200 and gen.seq_len_name(1024, 8192) == "1k8k"
    assert not gen.evals_by_default and gen.eval_seq_len == (1024, 8192)
    assert gen.single_node_evals == "tp-extremes" and gen.multinode_evals == "none"
    assert gen.min_eval_conc == 1  # no MIN_EVAL_CONC: every concurrency may run an eval
    assert not gen.prints("fixed", "pp") and not gen.prints("pool", "dcp-size")
    assert gen.prints("fixed", "spec-decoding") and gen.prints("fixed", "image")
    assert not gen.prints("fixed-multinode", "spec-decoding")  # not in its multinode literal
    assert gen.prints("agentic", "pp")  # no agentic literal: printed as today


def test_the_facts_of_todays_shape_are_todays():
    gen = parse_generator(NEW_GENERATOR, "new.py")
    assert gen.model_len_margin == TODAY.model_len_margin and gen.seq_len_names == TODAY.seq_len_names
    assert gen.evals_by_default and gen.min_eval_conc == 16
    assert (gen.single_node_evals, gen.multinode_evals) == ("high-median", "topology")
    assert all(gen.prints(kind, f) for kind in ("fixed", "pool") for f in ("pp", "dcp-size", "pcp-size"))


def test_a_source_with_nothing_to_read_is_today():
    assert printed_fields("def f(:") is None and printed_fields("x = 1") is None
    gen = parse_generator("x = 1", "empty.py")
    assert gen.row_fields is None and gen.model_len_margin == TODAY.model_len_margin
    assert gen.prints("pool", "pp") and gen.evals_by_default


@pytest.mark.parametrize("text", [OLD_GENERATOR, NEW_GENERATOR, "x = 1"])
def test_the_facts_round_trip_through_json(text):
    gen = parse_generator(text, "gen.py")
    data = json.loads(json.dumps(generator_to_json(gen)))  # what a file holds
    assert generator_from_json(data, "facts.json") == gen
    if gen.row_fields is not None:  # sets as sorted lists, pairs keyed "isl,osl"
        assert all(v == sorted(v) for v in data["row_fields"].values())
    assert data["seq_len_names"]["8192,1024"] == "8k1k"


def test_the_older_facts_survive_the_round_trip():
    gen = generator_from_json(
        json.loads(json.dumps(generator_to_json(parse_generator(OLD_GENERATOR, "o")))), "f"
    )
    assert gen.eval_seq_len == (1024, 8192) and gen.seq_len_name(1024, 8192) == "1k8k"
    assert not gen.prints("fixed", "pp") and gen.single_node_evals == "tp-extremes"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"margin": 1}, "expected an object with exactly the fields"),
        ({"multinode_evals": "sometimes"}, "facts.json: multinode_evals: Input should be"),
        ({"seq_len_names": {"1k,1k": "1k1k"}}, "facts.json: seq_len_names"),
        ({"row_fields": {"fixed": "pp"}}, "facts.json: row_fields.fixed"),
    ],
)
def test_facts_that_are_not_facts_are_refused_in_one_line(change, says):
    data = generator_to_json(TODAY) | change
    with pytest.raises(ServelabError, match=says) as e:
        generator_from_json(data, "facts.json")
    assert "\n" not in str(e.value)


def test_a_store_without_a_generator_is_today(tmp_path):
    assert open_store(checkout(tmp_path, None)).generator == TODAY
    assert find_generator(None) == TODAY


def test_an_older_checkout_sweeps_as_its_generator_printed(tmp_path):
    configs = checkout(tmp_path, OLD_GENERATOR)
    rows = sweep(configs)
    single = [r for r in rows if "tp" in r]
    assert [(r["tp"], r["conc"]) for r in single] == [
        (4, 4),
        (4, 8),
        (4, 16),
        (8, 4),
        (8, 8),
        (8, 16),
        (8, 32),
    ]
    assert {r["exp-name"] for r in single} == {"k_1k8k"}
    assert {r["max-model-len"] for r in single} == {1024 + 8192 + 200}
    assert not any(k in r for r in single for k in ("pp", "dcp-size", "pcp-size"))
    multi = next(r for r in rows if "prefill" in r)
    assert "pp" not in multi["prefill"] and "spec-decoding" not in multi
    assert not any(r["run-eval"] for r in rows)  # evals only on request in that generator
    marked = sweep(configs, "--evals-only")
    # the highest concurrency of the highest tp and of the lowest; multinode rows never
    assert [(r["tp"], r["conc"]) for r in marked] == [(4, 16), (8, 32)]


def test_todays_checkout_sweeps_as_before(tmp_path):
    rows = sweep(checkout(tmp_path, NEW_GENERATOR))
    single = [r for r in rows if "tp" in r]
    assert {(r["pp"], r["dcp-size"], r["pcp-size"]) for r in single} == {(1, 1, 1)}
    assert {r["max-model-len"] for r in single} == {1024 + 8192 + 256} and single[0][
        "exp-name"
    ] == "k_1024_8192"
    multi = next(r for r in rows if "prefill" in r)
    assert multi["run-eval"] and multi["eval-conc"] == 64 and multi["prefill"]["pp"] == 1


OLDER_AGENTIC = """\
k-fp8-h200-vllm:
  image: vllm/vllm-openai:v0.25.0
  model: org/model
  model-prefix: k
  runner: h200
  precision: fp8
  framework: vllm
  scenarios:
    agentic-coding:
    - duration: 600
      search-space:
      - {tp: 8, offloading: none, conc-list: [1, 4]}
      - {tp: 4, ep: 4, dp-attn: true, offloading: cpu, conc-list: [2]}
k-fp8-b200-dynamo-vllm:
  image: vllm/vllm-openai:v0.25.0
  model: org/model
  model-prefix: k
  runner: b200-multinode
  precision: fp8
  framework: dynamo-vllm
  multinode: true
  disagg: true
  scenarios:
    agentic-coding:
    - duration: 300
      search-space:
      - prefill: {num-worker: 1, tp: 4, ep: 4, dp-attn: true, additional-settings: ["CONFIG_FILE=a.yaml"]}
        decode: {num-worker: 2, tp: 8, ep: 8, dp-attn: false}
        conc-list: [8, 16]
"""


# The eval marking of the generators of that form: agentic rows are passed over, left without run-eval.
AGENTIC_ERA_MARKING = """
def mark_eval_entries(matrix_values):
    for i, entry in enumerate(matrix_values):
        if entry.get(Fields.SCENARIO_TYPE.value) == 'agentic-coding':
            continue
        entry[Fields.RUN_EVAL.value] = i in eval_indices
    return matrix_values
"""


def test_older_agentic_blocks_give_the_rows_that_forms_generator_printed(tmp_path):
    configs = checkout(tmp_path, AGENTIC_ERA_MARKING, OLDER_AGENTIC)
    assert not open_store(configs).generator.agentic_run_eval
    result = CliRunner().invoke(app, ["sweep", "--dir", str(configs), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "agentic-coding blocks in InferenceX's form before June 2026" in result.stderr
    jobs = json.loads(result.stdout)
    common = {
        "image": "vllm/vllm-openai:v0.25.0",
        "model": "org/model",
        "model-prefix": "k",
        "precision": "fp8",
        "scenario-type": "agentic-coding",
    }
    rows = [{k: v for k, v in j.items() if k not in SERVELAB_FIELDS} for j in jobs]
    assert rows[0] == {
        **common,
        "framework": "vllm",
        "runner": "h200",
        "tp": 8,
        "ep": 1,
        "dp-attn": False,
        "conc": 1,
        "offloading": "none",
        "duration": 600,
        "exp-name": "k_tp8_conc1_offloadnone",
    }
    assert [j["exp-name"] for j in jobs] == [
        "k_tp8_conc1_offloadnone",
        "k_tp8_conc4_offloadnone",
        "k_tp4_conc2_offloadcpu",
        "k_p1x4_d2x8_conc8",
        "k_p1x4_d2x8_conc16",
    ]
    assert not any("run-eval" in j or "pp" in j or "kv-offloading" in j for j in jobs)
    multi = jobs[3]
    assert multi["conc"] == 8 and multi["duration"] == 300  # one concurrency a row, the block's duration
    assert multi["prefill"] == {
        "num-worker": 1,
        "tp": 4,
        "ep": 4,
        "dp-attn": True,
        "additional-settings": ["CONFIG_FILE=a.yaml"],
    }
    assert jobs[0]["benches"][0]["max_seconds"] == 600  # the replay runs for the block's duration
    assert jobs[2]["launch"] is None and "offloading: cpu" in jobs[2]["not-renderable"]


def test_older_agentic_blocks_are_written_back_as_they_were():
    data = yaml.safe_load(OLDER_AGENTIC)
    notes = Notes()
    assert dump_master(parse_master(data, "master.yaml", notes)) == data
    assert any("before June 2026" in n for n in notes)


def test_a_bare_offload_backend_is_printed_and_written_back_bare():
    raw = {
        "image": "vllm/vllm-openai:v0.25.0",
        "model": "org/model",
        "model-prefix": "k",
        "runner": "cluster:h200",
        "precision": "fp8",
        "framework": "vllm",
        "scenarios": {
            "agentic-coding": [
                {
                    "dram-utilization": 0.5,
                    "search-space": [
                        {"tp": 8, "kv-offloading": "dram", "kv-offload-backend": "native", "conc-list": [4]}
                    ],
                }
            ]
        },
    }
    entry = MasterEntry.model_validate(raw, context={TOLERANT: Notes()})
    assert entry.dump() == raw
    arm = entry.scenarios.agentic_coding[0].search_space[0]
    assert arm.kv_offload_backend.name == "native" and arm.kv_offload_backend.dump() == "native"
    row = {"image": "i", "model": "m", "framework": "vllm", "runner": "r", "exp-name": "e", "conc": 4}
    assert MatrixRow.model_validate({**row, "kv-offload-backend": "native"}).kv_offload_backend == {
        "name": "native"
    }
