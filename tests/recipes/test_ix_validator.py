"""A checkout's own validator: the top-level fields it lets a master entry carry (recipes/ix_validator.py).

InferenceX's generator validates every entry before printing a row; a field its validator forbids makes it
refuse the checkout (held-out ref 4e824dde9: a pull request writing a newer schema's router: on an older
base). servelab reads newer schemas, so it follows that checkout's validator, not its own knowledge.
"""

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli.main import app, main
from servelab.recipes.ix_generator import generator_from_json, generator_to_json, parse_generator
from servelab.recipes.ix_validator import entry_fields

VALIDATOR = """
from enum import Enum
from pydantic import BaseModel, ConfigDict, Field

class Fields(Enum):
    MODEL_PREFIX = 'model-prefix'
    KV_P2P_TRANSFER = 'kv-p2p-transfer'

class SingleNodeMasterConfigEntry(BaseModel):
    model_config = ConfigDict(extra='forbid', populate_by_name=True)
    image: str
    model: str
    model_prefix: str = Field(alias=Fields.MODEL_PREFIX.value)
    precision: str
    framework: str
    runner: str
    multinode: bool
    scenarios: dict

class MultiNodeMasterConfigEntry(BaseModel):
    model_config = ConfigDict(extra='forbid')
    image: str
    model: str
    model_prefix: str = Field(alias='model-prefix')
    precision: str
    framework: str
    runner: str
    multinode: bool
    disagg: bool = Field(default=False)
    {extra}
    scenarios: dict
"""
ROUTER = "router: dict | None = None"

ENTRY = """
k-fp8-mi355x-vllm-disagg:
  image: vllm/vllm-openai:v0.25.0
  model: org/model
  model-prefix: k
  runner: mi355x
  precision: fp8
  framework: vllm
  multinode: true
  disagg: true
  router: {name: vllm-router, version: "1.0"}
  kv-p2p-transfer: nixl
  scenarios:
    fixed-seq-len:
    - isl: 1024
      osl: 1024
      search-space:
      - prefill: {num-worker: 1, tp: 8, ep: 8, dp-attn: true}
        decode: {num-worker: 1, tp: 8, ep: 8, dp-attn: true}
        conc-list: [8]
"""


def test_fields_by_alias_enum_member_and_name():
    accepted = entry_fields(VALIDATOR.format(extra=ROUTER))
    assert accepted is not None
    # populate_by_name: the python name is accepted beside the alias
    assert {"model-prefix", "model_prefix", "scenarios"} <= accepted["single-node"]
    assert "router" not in accepted["single-node"]
    assert "model-prefix" in accepted["multinode"] and "model_prefix" not in accepted["multinode"]
    assert "router" in accepted["multinode"] and "kv-p2p-transfer" not in accepted["multinode"]


def test_a_model_that_allows_extras_or_is_missing_constrains_nothing():
    lax = VALIDATOR.format(extra="").replace("ConfigDict(extra='forbid')", "ConfigDict()")
    assert set(entry_fields(lax) or {}) == {"single-node"}
    assert entry_fields("x = 1\n") is None
    assert entry_fields("def broken(:\n") is None


def test_the_facts_round_trip_as_json():
    gen = parse_generator("", "gen.py", VALIDATOR.format(extra=ROUTER))
    assert gen.entry_fields is not None
    assert generator_from_json(generator_to_json(gen), "facts.json") == gen
    assert parse_generator("", "gen.py").entry_fields is None  # no validator: no constraint


def checkout(tmp_path: Path, validator: str | None) -> Path:
    top = tmp_path / "ix"
    (top / "configs").mkdir(parents=True)
    (top / "configs" / "amd-master.yaml").write_text(ENTRY)
    (top / "configs" / "runners.yaml").write_text("labels:\n  mi355x: [mi355x-amd_0]\n")
    logic = top / "utils" / "matrix_logic"
    logic.mkdir(parents=True)
    (logic / "generate_sweep_configs.py").write_text("# a generator servelab reads, never runs\n")
    if validator is not None:
        (logic / "validation.py").write_text(validator)
    return top / "configs"


def sweep(configs: Path, *args: str):
    return CliRunner().invoke(app, ["sweep", "--dir", str(configs), "--format", "json", *args])


def refused(monkeypatch, capsys, configs: Path, *args: str) -> str:
    """What `servelab sweep` says on stderr when it refuses (exit 2)."""
    monkeypatch.setattr(sys, "argv", ["servelab", "sweep", "--dir", str(configs), "--format", "json", *args])
    with pytest.raises(SystemExit) as info:
        main()
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == "" and "Traceback" not in err
    return err


def test_a_field_the_checkouts_validator_forbids_refuses_the_sweep(tmp_path, monkeypatch, capsys):
    err = refused(monkeypatch, capsys, checkout(tmp_path, VALIDATOR.format(extra=ROUTER)))
    assert len([line for line in err.splitlines() if not line.startswith("note: ")]) == 1
    assert "k-fp8-mi355x-vllm-disagg: field 'kv-p2p-transfer' is not one this checkout's validator" in err


@pytest.mark.parametrize(
    "validator",
    [None, VALIDATOR.format(extra=ROUTER + "\n    kv_p2p_transfer: str = Field(alias='kv-p2p-transfer')")],
)
def test_a_validator_that_accepts_the_fields_or_none_sweeps(tmp_path, validator):
    result = sweep(checkout(tmp_path, validator))
    assert result.exit_code == 0, result.output
    assert [r["conc"] for r in json.loads(result.stdout)] == [[8]]


def test_filters_do_not_hide_a_forbidden_entry(tmp_path, monkeypatch, capsys):
    """Upstream validates every entry before it filters, so a filter matching nothing still refuses."""
    configs = checkout(tmp_path, VALIDATOR.format(extra=ROUTER))
    assert "kv-p2p-transfer" in refused(monkeypatch, capsys, configs, "--model-prefix", "other")
