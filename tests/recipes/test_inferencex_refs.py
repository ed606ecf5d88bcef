"""servelab on InferenceX checkouts it was not built on.

The corpus (tests/data/inferencex_refs, chosen by the rule in scripts/refresh_inferencex_refs.py): 25 refs,
each with its configs and what its own `generate_sweep_configs.py full-sweep` printed. On each, servelab's
sweep must equal upstream's row for row, field for field, in order (or refuse where upstream refuses),
unless the ref is listed in the script's KNOWN with the reason; a listed ref that starts to match fails too,
so the list stays honest. Beside it: tolerant reading (names and fields servelab does not know, duplicate
keys, an empty match) and the warning for a launch script that changed since its flags were captured.
"""

import gzip
import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.errors import ServelabError
from servelab.recipes.inferencex import TOLERANT, MasterEntry, Notes, load_master
from servelab.recipes.recipe_store import open_store

ROOT = Path(__file__).resolve().parents[2]
REFS = ROOT / "tests" / "data" / "inferencex_refs"
IX = ROOT / "tests" / "data" / "inferencex"
_spec = importlib.util.spec_from_file_location(
    "refresh_inferencex_refs", ROOT / "scripts" / "refresh_inferencex_refs.py"
)
assert _spec is not None and _spec.loader is not None
refs_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(refs_script)
INDEX = json.loads((REFS / "index.json").read_text())
SAME = ("equal", "both refuse")


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    return {e["short"]: refs_script.compare(REFS / e["short"]) for e in INDEX}


def test_corpus_follows_its_rule():
    kinds = [e["chosen-as"].split()[-1] for e in INDEX]
    assert len(INDEX) == 25 and kinds.count("parent)") == 12 and kinds.count("head)") == 13
    assert refs_script.PINNED[:9] not in {e["short"] for e in INDEX}
    for e in INDEX:
        assert (REFS / e["short"] / "UPSTREAM.md").read_text().count(e["commit"]) == 1
        assert {p.name for p in (REFS / e["short"] / "configs").iterdir()} == {
            *(Path(m).name + ".gz" for m in e["masters"]),
            "runners.yaml.gz",
        }


@pytest.mark.parametrize("short", [e["short"] for e in INDEX])
def test_sweep_equals_upstream_or_the_difference_is_known(short, results):
    result = results[short]
    if short in refs_script.KNOWN:
        assert result["verdict"] not in SAME, f"{short} now matches upstream: remove it from KNOWN"
        assert not result["verdict"].startswith("servelab refuses"), result["verdict"]
    else:
        assert result["verdict"] in SAME, result["verdict"]
        assert result["equal"] == result["upstream"]


def test_every_ref_reads(results):
    """Tolerant reading: no ref of the corpus is refused where upstream's generator accepts it."""
    refused = {s: r["verdict"] for s, r in results.items() if r["verdict"].startswith("servelab refuses")}
    assert refused == {}


def test_docs_table_is_current(results):
    text = (ROOT / "docs" / "recipes.md").read_text()
    start, end = text.index(refs_script.BEGIN), text.index(refs_script.END) + len(refs_script.END)
    assert text[start:end] == refs_script.table(REFS, results), "run scripts/refresh_inferencex_refs.py table"


# --- tolerant reading ---

ENTRY = """
k-fp8-mi355x-vllm-disagg:
  image: vllm/vllm-openai:v0.25.0
  model: org/model
  model-prefix: k
  runner: mi355x
  precision: fp8
  framework: {framework}
  multinode: true
  disagg: true
  router: {{name: {router}, version: "1.0"}}
  kv-p2p-transfer: {transfer}
  {extra_field}
  scenarios:
    fixed-seq-len:
    - isl: 1024
      osl: 1024
      search-space:
      - prefill: {{num-worker: 1, tp: 8, ep: 8, dp-attn: true}}
        decode: {{num-worker: 1, tp: 8, ep: 8, dp-attn: true}}
        conc-list: [8, 16]
"""


def entry(**kw) -> str:
    fields = {"framework": "vllm", "router": "vllm-router", "transfer": "nixl", "extra_field": ""} | kw
    return ENTRY.format(**fields)


@pytest.mark.parametrize(
    ("field", "value", "what"),
    [
        ("router", "brand-new-router", "router"),
        ("transfer", "brand-new-engine", "KV transfer engine"),
        ("framework", "brand-new-framework", "framework"),
    ],
)
def test_an_unknown_name_is_kept_with_a_note_and_refused_strictly(field, value, what):
    text = entry(**{field: value})
    with pytest.raises(ServelabError, match=f"'{value}' is not a"):
        load_master(text)
    notes = Notes()
    data = yaml.safe_load(text)
    key, raw = next(iter(data.items()))
    parsed = MasterEntry.model_validate(raw, context={TOLERANT: notes})
    assert parsed.dump() == raw  # kept verbatim
    assert list(notes) == [f"{what} '{value}' is not one servelab knows; kept as written"]


def test_upstream_names_are_known():
    # names InferenceX uses that servelab had refused: a strict read takes them
    for kw in ({"router": "infera"}, {"transfer": "moriio"}):
        load_master(entry(**kw))


def test_an_unknown_field_passes_through_and_is_written_back():
    text = entry(extra_field="new-upstream-field: {a: 1}")
    with pytest.raises(ServelabError, match="new-upstream-field: Extra inputs are not permitted"):
        load_master(text)
    raw = next(iter(yaml.safe_load(text).values()))
    notes = Notes()
    parsed = MasterEntry.model_validate(raw, context={TOLERANT: notes})
    assert parsed.dump() == raw
    assert list(notes) == ["field 'new-upstream-field' is not one servelab knows; kept as written"]


def checkout(tmp_path: Path, master: str | None = None, runners: str | None = None) -> Path:
    """An InferenceX-like checkout: the pinned configs (or the given ones) and benchmarks/."""
    configs = tmp_path / "ix" / "configs"
    configs.mkdir(parents=True)
    if master is None:
        shutil.copy(IX / "configs" / "amd-master.yaml", configs / "amd-master.yaml")
        shutil.copy(IX / "configs" / "nvidia-master.yaml", configs / "nvidia-master.yaml")
    else:
        (configs / "amd-master.yaml").write_text(master)
    (configs / "runners.yaml").write_text(runners or (IX / "configs" / "runners.yaml").read_text())
    shutil.copytree(IX / "benchmarks", tmp_path / "ix" / "benchmarks")
    return configs


def sweep(configs: Path, *args: str):
    return CliRunner().invoke(app, ["sweep", "--dir", str(configs), "--format", "json", *args])


def test_a_checkout_with_new_names_sweeps_with_one_note_per_value(tmp_path):
    two = entry(router="brand-new-router") + entry(router="brand-new-router").replace("k-fp8", "k2-fp8")
    configs = checkout(tmp_path, master=two, runners="labels:\n  mi355x: [mi355x-amd_0]\n")
    result = sweep(configs)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 2 and [r["conc"] for r in rows] == [[8, 16]] * 2
    assert result.stderr.count("router 'brand-new-router' is not one servelab knows") == 1
    assert all(r["not-renderable"] for r in rows)  # disaggregated: no launch, as before


def test_duplicate_keys_keep_the_last_as_upstreams_loader(tmp_path):
    runners = "labels:\n  mi355x: [old-node_0]\n  mi355x: [mi355x-amd_0]\n"
    configs = checkout(tmp_path, master=entry(), runners=runners)
    store = open_store(configs)
    assert store.runner_labels.runners["mi355x"].nodes == ["mi355x-amd_0"]
    assert [n for n in store.notes if "duplicate key 'mi355x'" in n]
    result = sweep(configs)
    assert result.exit_code == 0 and "note: " in result.stderr and "duplicate key 'mi355x'" in result.stderr


def test_shipped_store_stays_strict(tmp_path):
    recipes = tmp_path / "store" / "recipes"
    recipes.mkdir(parents=True)
    (recipes / "a.yaml").write_text(entry(router="brand-new-router"))
    (tmp_path / "store" / "runners.yaml").write_text("labels:\n  mi355x: [mi355x-amd_0]\n")
    with pytest.raises(ServelabError, match="'brand-new-router' is not a router"):
        open_store(tmp_path / "store")


def test_an_empty_match_is_an_empty_list(tmp_path):
    result = sweep(checkout(tmp_path), "--model-prefix", "no-such-model")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [] and "no jobs match" in result.stderr


def test_older_layouts_read():
    old = """
k-fp8-mi355x-sglang:
  image: lmsysorg/sglang:v0.5.9
  model: org/model
  model-prefix: k
  runner: mi355x
  precision: fp8
  framework: sglang
  multinode: false
  seq-len-configs:
  - {isl: 1024, osl: 1024, search-space: [{tp: 8, conc-start: 4, conc-end: 8}]}
"""
    raw = next(iter(yaml.safe_load(old).values()))
    notes = Notes()
    parsed = MasterEntry.model_validate(raw, context={TOLERANT: notes})
    assert parsed.scenarios.fixed_seq_len is not None and parsed.scenarios.fixed_seq_len[0].isl == 1024
    assert any("seq-len-configs" in n for n in notes)


# --- a launch script that changed since its flags were captured ---


def test_a_changed_launch_script_warns_and_marks_its_jobs(tmp_path):
    configs = checkout(tmp_path)
    script = tmp_path / "ix" / "benchmarks" / "single_node" / "fixed_seq_len" / "dsr1_fp8_h200.sh"
    script.write_text(script.read_text().replace("--trust-remote-code", "--trust-remote-code --new-flag"))
    gone = tmp_path / "ix" / "benchmarks" / "single_node" / "fixed_seq_len" / "dsr1_fp8_h200_trt.sh"
    gone.unlink()
    result = sweep(configs, "dsr1-fp8-h200-*", "--seq-lens", "8k1k")
    assert result.exit_code == 0, result.output
    jobs = json.loads(result.stdout)
    changed = {j["config-key"]: j.get("launch-script-changed") for j in jobs if j["launch"]}
    assert (
        changed["dsr1-fp8-h200-sglang"]["script"] == "benchmarks/single_node/fixed_seq_len/dsr1_fp8_h200.sh"
    )
    assert changed["dsr1-fp8-h200-sglang"]["checkout-sha256"] not in (
        None,
        changed["dsr1-fp8-h200-sglang"]["captured-sha256"],
    )
    assert changed["dsr1-fp8-h200-trt"]["checkout-sha256"] is None
    assert changed["dsr1-fp8-h200-sglang-mtp"] is None  # its own script is unchanged
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2  # one per script, not per job
    assert (
        "dsr1_fp8_h200.sh differs from" in result.stderr and "dsr1_fp8_h200_trt.sh is not in" in result.stderr
    )


def test_unchanged_scripts_say_nothing(tmp_path):
    result = sweep(checkout(tmp_path), "dsr1-fp8-h200-*", "--seq-lens", "8k1k")
    assert result.exit_code == 0 and "warning:" not in result.stderr
    assert not any("launch-script-changed" in j for j in json.loads(result.stdout))


def test_pinned_data_is_small():
    size = sum(p.stat().st_size for p in REFS.rglob("*") if p.is_file())
    assert size < 2_500_000, size
    for p in REFS.rglob("*.gz"):
        gzip.decompress(p.read_bytes())  # every pinned file is gzip'd whole
