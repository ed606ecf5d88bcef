"""Single-node agentic-coding jobs launch as upstream's agentic scripts run them.

The upstream side is the capture of the pinned scripts of benchmarks/single_node/agentic/
(tests/data/inferencex/launch/agentic-launches.json.gz, made by `scripts/ix_launch.py capture --agentic`
running each job's script under bash with stub servers and the environment InferenceX's benchmark template
gives an agentic job: KV_OFFLOADING, KV_OFFLOAD_BACKEND, TOTAL_CPU_DRAM_GB, DURATION, RESULT_DIR). The
servelab side is `servelab sweep`'s launch of each job, rendered from the shipped profiles.
"""

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from pinned import pinned_jobs
from pydantic import ValidationError
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.recipes.capture.agentic import agentic_job_id, agentic_points
from servelab.recipes.capture.sandbox import Sandbox
from servelab.recipes.checkout_launch import row_env
from servelab.recipes.engines.profiles import Extras
from servelab.recipes.matrix import MatrixRow
from servelab.recipes.recipe_store import open_store

ROOT = Path(__file__).resolve().parents[2]
IX = ROOT / "tests" / "data" / "inferencex"
AGENTIC = "agentic-coding"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="launch scripts run under bash")


@pytest.fixture(scope="module")
def conformance(ix_conformance) -> dict[str, dict]:
    """scripts/ix_launch.py conformance: per key, how servelab's launches differ from the capture's."""
    return ix_conformance


@pytest.fixture(scope="module")
def capture() -> dict[str, dict]:
    with gzip.open(IX / "launch" / "agentic-launches.json.gz", "rt") as f:
        return {r["id"]: r for r in json.load(f)}


@pytest.fixture(scope="module")
def store():
    return open_store(IX / "configs")


@pytest.fixture(scope="module")
def jobs():
    return list(pinned_jobs())


def _single_agentic(store, jobs):
    """(job, point, recipe, row) of every single-node agentic job of the sweep."""
    points = {json.dumps(p.row, sort_keys=True): p for p, _, _ in agentic_points(IX / "configs")}
    out = []
    for job in jobs:
        if job.scenario != AGENTIC or job.point.multinode:
            continue
        point = points[json.dumps(job.row, sort_keys=True)]
        out.append((job, point, store.recipes[job.key], MatrixRow.model_validate(point.row)))
    return out


@pytest.mark.slow  # 9.4 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_every_agentic_launch_equals_upstreams_script(store, jobs, capture, conformance):
    launched = 0
    for job, point, _, row in _single_agentic(store, jobs):
        record = capture[agentic_job_id(point, row)]
        if job.launch is None:
            # no launch exactly where upstream's script launched none under the stubs, there is no script,
            # no adapter, or the runner label is not described
            assert "argv" not in record or "runner label" in (job.not_renderable or ""), job.label()
            continue
        launched += 1
        # flags, options files and environment as upstream's script ran them (the rendered launches the
        # conformance check compares are the sweep's: their argv is the same)
        verdict = conformance[job.key]
        assert verdict["scenario"] == AGENTIC
        assert all(d.startswith("no ") or ": no launch" in d for d in verdict["differences"]), job.label()
        # the server's environment is upstream's, exactly (KV offload settings included)
        assert job.launch.env == record["env"], job.label()
    # 4 of them kimik3-fp4-mi355x-vllm's, whose script first runs apply_k3_container_patches.sh (it patches
    # the image's vLLM and AITER: in the sandbox, stand-ins of them)
    assert launched == 467


def test_the_sweep_launches_1704_of_the_1820_jobs(jobs):
    # servelab sweep --dir tests/data/inferencex/configs --format json: 690 fixed-seq-len jobs and 467
    # single-node agentic jobs launch, 494 multinode jobs deploy from their srt-slurm recipe (304
    # fixed-seq-len, 190 agentic), 48 from InferenceX's AMD scripts (sglang-disagg and atom-disagg, 12 of
    # them agentic: amd_disagg.py), 2 from its TileRT scripts (tilert.py) and 3 from its llm-d scripts
    # (llmd.py); each other row keeps its reason.
    assert len(jobs) == 1820
    launched = Counter(j.scenario for j in jobs if j.launch is not None)
    assert launched == {"fixed-seq-len": 690, AGENTIC: 467}
    deployed = Counter(j.scenario for j in jobs if j.deployment is not None)
    assert deployed == {"fixed-seq-len": 304 + 36 + 2 + 3, AGENTIC: 190 + 12}

    def kind(why: str) -> str:
        if why.startswith("runner label"):
            return "runner label"
        if "launches no server" in why:
            return "agentic script launches no server under the stubs"
        if "no launch captured" in why:
            return "agentic key without an upstream script"
        return why.split(":")[0] if why.startswith(("agentic", "srt-slurm")) else why.split(" ")[0]

    rest = Counter(kind(j.not_renderable) for j in jobs if j.unrunnable and j.not_renderable)
    assert rest == {
        # an srt-slurm recipe servelab does not render (tests/recipes/test_srtslurm.py: forks of srt-slurm,
        # recipes missing or srtctl refuses)
        "srt-slurm": 101,
        "agentic key without an upstream script": 15,
    }
    assert sum(rest.values()) == 1820 - 1704


@pytest.mark.slow  # 7.6 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_dram_offload_reaches_the_launch_from_the_rows_budget(store, jobs):
    # dsv4_fp4_b200_vllm_mtp.sh offloads to CPU DRAM with vLLM's SimpleCPUOffloadConnector, its budget per
    # rank being the row's total-cpu-dram-gb over tp (runners.yaml's available-cpu-dram-mib x
    # dram-utilization); a vLLM job without offload has no KV connector.
    seen = set()
    for job, point, _, row in _single_agentic(store, jobs):
        if job.launch is None or job.point.framework != "vllm":
            continue
        argv = job.launch.argv
        if row.kv_offloading == "none":
            assert "--kv-transfer-config" not in argv, job.label()
            seen.add("none")
            continue
        if job.key != "dsv4-fp4-b200-vllm-agentic-mtp":
            continue
        config = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert row.total_cpu_dram_gb and row.total_cpu_dram_gb > 0
        per_rank = config["kv_connector_extra_config"]["cpu_bytes_to_use_per_rank"]
        assert per_rank == row.total_cpu_dram_gb * 10**9 // point.arm.tp_
        seen.add("dram")
    assert seen == {"none", "dram"}


@pytest.mark.slow  # 20-odd upstream scripts under bash with stub servers: 10-12 s, as the single-node sample
def test_the_capture_reproduces_from_the_pinned_scripts(store, capture):
    # One job per agentic script and offload tier, run again under bash: the committed capture is what the
    # pinned scripts run today.
    sample: dict[tuple, tuple] = {}
    for point, recipe, row in agentic_points(IX / "configs"):
        record = capture[agentic_job_id(point, row)]
        if record.get("script") and "argv" in record:
            sample.setdefault((record["script"], row.kv_offloading), (point, recipe, row, record))
    assert len(sample) >= 20
    with Sandbox(IX / "benchmarks") as box:
        for point, recipe, row, record in sample.values():
            got = box.run(record["script"], row_env(recipe, point.arm, row))
            assert got == {k: record[k] for k in ("argv", "env", "files", "bench") if k in record}


@pytest.mark.slow  # 2.2 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_a_changed_agentic_script_gives_its_jobs_the_changed_launch(tmp_path):
    root = tmp_path / "ix"
    shutil.copytree(IX / "configs", root / "configs")
    shutil.copytree(IX / "benchmarks", root / "benchmarks")
    path = root / "benchmarks" / "single_node" / "agentic" / "minimaxm3_fp8_h100_mtp.sh"
    text = path.read_text()
    assert "--trust-remote-code" in text
    path.write_text(text.replace("--trust-remote-code", "--trust-remote-code --new-flag", 1))
    key = "minimaxm3-fp8-h100-vllm-agentic-mtp"
    result = CliRunner().invoke(app, ["sweep", "--dir", str(root / "configs"), "--format", "json", key])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert rows and all(r["launch"] is not None for r in rows)
    assert all("--new-flag" in r["launch"]["argv"] for r in rows)
    assert all(r["launch-source"].startswith("checkout ") for r in rows)


def test_a_profile_argument_may_hold_newlines_and_no_other_control_character():
    # upstream's agentic vLLM scripts pass --kv-transfer-config as indented JSON: one argv element, kept as is
    config = '{\n  "kv_connector": "SimpleCPUOffloadConnector"\n}'
    assert Extras(args=["--kv-transfer-config", config]).args[1] == config
    for bad in ("a\rb", "a\x1bb", "a\x00b"):
        with pytest.raises(ValidationError, match="control character"):
            Extras(args=["--flag", bad])
