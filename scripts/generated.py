"""Every checked-in generated file: what it is made from, the command that makes it, in the order they are
made (a file's inputs come before it); `--check` says which are stale.

    python scripts/generated.py --list              # the manifest, in order
    python scripts/generated.py --check [--quick]   # exit 1 naming every stale file
    python scripts/generated.py --check --slow      # only the checks --quick leaves out
    python scripts/generated.py --write             # record the recorded entries' inputs and outputs

Each entry is checked one of three ways:
- regenerated: cheap, offline and deterministic, so it is made again by its own generator into a temporary
  directory and compared byte for byte (Parquet tables: the rows and the metadata, all but the merge's date
  and command line; efficiencies.json: the fitted entry, all but its date, command and wording);
- self-checked: its generator has a mode that makes it again and compares, writing nothing
  (scripts/ix_launch.py profiles --check, docs --check; capture --check-sample re-runs one job per script):
  --check runs it;
- recorded: too slow to make here (calibrated.json: about 45 minutes on 2 cores) or made from what a checkout
  lacks (InferenceX's and perf-eval's repositories, AIConfigurator, a GPU): the SHA-256 of its inputs (the
  generator included) and of the file itself, kept in scripts/generated.json by --write when it was made,
  must still match. Run --write after making one again.
--quick leaves out the checks that take more than a second or two (perf table merges, the roofline fit,
scripts/ix_launch.py's checks).

Not here, because no generator makes them from files in the repository: measurements (campaigns' rows from
the GPU and device/ files, accuracy/results/*.json, the tables of docs/accuracy.md and docs/benchmarks.md
made from them) and hand-written data (specs/data, recipes/data/recipes, runners.yaml, perf-changelog.yaml,
engines.json, efficiencies.json's default block).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from servelab.calibrate.calibration_file import servelab_state

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "scripts" / "generated.json"
TABLES = "src/servelab/perfdb/data"
IX = "tests/data/inferencex"
MASTERS = (f"{IX}/configs/nvidia-master.yaml", f"{IX}/configs/amd-master.yaml")
AMD_DISAGG = "scripts/amd_disagg_capture.py"
TILERT = "scripts/tilert_capture.py"
LLMD = "scripts/llmd_capture.py"
NODE_CAPTURE = "scripts/node_capture.py"  # the command line the three share
IX_LAUNCH = "scripts/ix_launch.py"
CAPTURE = "src/servelab/recipes/capture/*"  # the sandbox, stubs and residual ix_launch.py runs

Made = dict[str, Path]  # output (repository-relative) -> the file made now, in a temporary directory


@dataclass(frozen=True)
class Entry:
    outputs: tuple[str, ...]  # repository-relative files or globs
    inputs: tuple[str, ...]  # what it is made from, its generator included (files or globs)
    command: str  # how it is made, from the repository root
    make: Callable[[Path], Made] | None = None  # regenerated: make it again under a temporary directory
    same: Callable[[Path, Path], str | None] | None = None  # (checked-in, made) -> how they differ
    self_check: tuple[str, ...] = ()  # self-checked: the generator's own compare mode (exit 0: current)
    recorded: str = ""  # recorded: why it is not made here
    own_check: Callable[[], str | None] | None = None  # what the file records of its own inputs
    quick: bool = True

    @property
    def name(self) -> str:
        return self.outputs[0]


def run(argv: list[str], cwd: Path = REPO) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()[-500:]}")
    return done.stdout


def servelab(*args: str) -> list[str]:
    return [sys.executable, "-m", "servelab.cli.main", *args]


# --- generators, each writing into a temporary directory -------------------------------------------------


def vllm_moe_campaign(name: str, csvs: tuple[str, ...], kernel: str) -> Callable[[Path], Made]:
    """scripts/vllm_moe_campaign.py into tmp, with the device run's date and command (and DeepGEMM commit)
    taken from the campaign's provenance: facts of the measurement, not of the conversion."""

    def make(tmp: Path) -> Made:
        prov = json.loads((REPO / "campaigns" / name / "provenance.json").read_text())
        argv = [sys.executable, "scripts/vllm_moe_campaign.py", "--kernel", kernel]
        argv += ["--csv", *(f"campaigns/{name}/device/{c}" for c in csvs)]
        argv += ["--env", f"campaigns/{name}/device/env.txt"]
        argv += ["--vllm-version", prov["vllm"], "--date", prov["date"], "--command", prov["command"]]
        argv += ["--out", str(tmp / name)]
        if "deepgemm_commit" in prov:
            argv += ["--deepgemm-commit", prov["deepgemm_commit"]]
        run(argv)
        return {f"campaigns/{name}/{f}": tmp / name / f for f in ("provenance.json", "rows/moe.jsonl")}

    return make


def compare_repeat(first: str, second: str) -> Callable[[Path], Made]:
    def make(tmp: Path) -> Made:
        out = tmp / "compare.json"
        answer = json.loads(run(servelab("db", "compare-repeat", first, second, "--json")))
        spread = {k: v for k, v in answer.items() if k not in ("schema", "schema_version")}
        out.write_text(json.dumps(spread, indent=1) + "\n")
        return {f"{second}/compare.json": out}

    return make


def db_merge(campaigns: tuple[str, ...], into: str, options: tuple[str, ...]) -> Callable[[Path], Made]:
    def make(tmp: Path) -> Made:
        target = tmp.joinpath(*Path(into).parts[-3:])  # <system>/<backend>/<version>: merge reads them here
        run(servelab("db", "merge", *campaigns, *options, "--into", str(target)))
        return {f"{into}/{p.name}": p for p in sorted(target.glob("*.parquet"))}

    return make


def db_fit(tmp: Path) -> Made:
    """Ratios and transfer efficiencies fitted on the package's tables (the search path), written to tmp."""
    run(servelab("db", "fit", "--into", str(tmp)))
    made = {f"src/servelab/perfdb/data/ratios/{p.name}": p for p in sorted((tmp / "ratios").glob("*.json"))}
    return {**made, "src/servelab/perfdb/data/transfer.json": tmp / "transfer.json"}


def roofline_fit(tmp: Path) -> Made:
    out = tmp / "h200_sxm.json"
    answer = json.loads(run(servelab("calibrate", "roofline", "--system", "h200_sxm", "--dry-run", "--json")))
    out.write_text(json.dumps(answer["fit"]))  # the fitted entry of its --json answer (docs/output.md)
    return {"src/servelab/perfdb/data/efficiencies.json": out}


def recipes_lock(tmp: Path) -> Made:
    store = tmp / "recipes"
    # the shipped store, copied: `recipes lock` writes fingerprints.lock beside the recipes it reads
    shutil.copytree(REPO / "src/servelab/recipes/data", store)
    run(servelab("recipes", "lock", "--dir", str(store)))
    return {"src/servelab/recipes/data/fingerprints.lock": store / "fingerprints.lock"}


def package_graph(tmp: Path) -> Made:
    out = tmp / "graph.mmd"
    out.write_text(run([sys.executable, "tests/architecture/test_imports.py"]))
    return {"docs/architecture.md": out}


# --- comparisons: None when the checked-in file is what its generator makes now ----------------------------


def same_bytes(checked_in: Path, made: Path) -> str | None:
    return None if checked_in.read_bytes() == made.read_bytes() else "differs from what its generator makes"


def same_table(checked_in: Path, made: Path) -> str | None:
    """Rows and metadata, all but the merge's date and command line (when and where it ran)."""
    a, b = pq.read_table(checked_in), pq.read_table(made)
    if not a.replace_schema_metadata(None).equals(b.replace_schema_metadata(None)):
        return "its rows differ from a merge of its campaign"
    meta_a, meta_b = (json.loads(t.schema.metadata[b"servelab"]) for t in (a, b))
    for meta in (meta_a, meta_b):
        for key in ("date", "command"):
            meta.get("merged", {}).pop(key, None)
    keys = sorted(k for k in meta_a.keys() | meta_b.keys() if meta_a.get(k) != meta_b.get(k))
    return f"its metadata differs from a merge of its campaign: {', '.join(keys)}" if keys else None


def same_fit(checked_in: Path, made: Path) -> str | None:
    """The shipped h200_sxm entry against a fit now, all but its date, command and wording."""
    shipped = json.loads(checked_in.read_text())["systems"]["h200_sxm"]
    fitted = json.loads(made.read_text())
    for entry in (shipped, fitted):
        for key in ("date", "command", "what"):
            entry["_provenance"].pop(key, None)
    keys = sorted(k for k in shipped.keys() | fitted.keys() if shipped.get(k) != fitted.get(k))
    return f"systems.h200_sxm differs from a fit now: {', '.join(keys)}" if keys else None


def same_picture(checked_in: Path, made: Path) -> str | None:
    picture = f"```mermaid\n{made.read_text()}```"
    return None if picture in checked_in.read_text() else "its package graph differs from the code's"


def calibration_tables() -> str | None:
    """calibrated.json records the digest of the perf data it was fitted against (servelab_state)."""
    doc = json.loads((REPO / "src/servelab/predict/data/calibrated.json").read_text())
    then = doc["provenance"]["servelab_state"].split("perf data ")[-1]
    now = servelab_state().split("perf data ")[-1]
    return None if then == now else f"fitted against perf data {then}; the package's is {now} now"


# --- the manifest, in the order the files are made -------------------------------------------------------


def _campaign(name: str, csv: str | tuple[str, ...], kernel: str, version: str) -> Entry:
    csvs = (csv,) if isinstance(csv, str) else csv
    paths = tuple(f"campaigns/{name}/device/{c}" for c in csvs)
    return Entry(
        outputs=(f"campaigns/{name}/rows/moe.jsonl", f"campaigns/{name}/provenance.json"),
        inputs=(*paths, f"campaigns/{name}/device/env.txt", "scripts/vllm_moe_campaign.py"),
        command=f"python scripts/vllm_moe_campaign.py --kernel {kernel} --csv {' '.join(paths)} "
        f"--env campaigns/{name}/device/env.txt --vllm-version {version} --date DATE --command COMMAND "
        f"--out campaigns/{name}  (DATE, COMMAND and DeepGEMM's commit: the device run's, in its provenance)",
        make=vllm_moe_campaign(name, csvs, kernel),
        same=same_bytes,
    )


def _tables(into: str, *campaigns: str, options: tuple[str, ...] = ()) -> Entry:
    merge = " ".join((*campaigns, *options))
    return Entry(
        outputs=(f"{into}/*.parquet",),
        inputs=tuple(f for c in campaigns for f in (f"{c}/rows/*.jsonl", f"{c}/provenance.json")),
        command=f"servelab db merge {merge} --into {into}  (into an empty directory)",
        make=db_merge(campaigns, into, options),
        same=same_table,
        quick=False,
    )


def _repeat(second: str) -> Entry:
    return Entry(
        outputs=(f"{second}/compare.json",),
        inputs=("campaigns/h200_sxm/rows/*.jsonl", f"{second}/rows/*.jsonl"),
        command=f"servelab db compare-repeat campaigns/h200_sxm {second} --json  (its per_op and all)",
        make=compare_repeat("campaigns/h200_sxm", second),
        same=same_bytes,
    )


ENTRIES: tuple[Entry, ...] = (
    Entry(
        outputs=(
            f"{IX}/LICENSE",
            f"{IX}/UPSTREAM.md",
            f"{IX}/configs/*.yaml",
            f"{IX}/perf-changelog.yaml",
            f"{IX}/sweep/*",
            f"{IX}/changelog/*",
            f"{IX}/utils/*.py",
            "tests/data/perf-eval/**/*",
        ),
        inputs=("scripts/refresh_upstream_data.py",),
        command="python scripts/refresh_upstream_data.py --inferencex PATH --perf-eval PATH",
        recorded="made from checkouts of InferenceX and perf-eval (the network)",
    ),
    Entry(
        outputs=("tests/data/vllm_bench_serve/*.json",),
        inputs=("scripts/vllm_bench_options.py",),
        command="VLLM_VENV/bin/python scripts/vllm_bench_options.py",
        recorded="made from vLLM's own `bench serve` parser in an environment where vLLM is installed",
    ),
    Entry(
        outputs=(f"{IX}/agentic/traces.jsonl",),
        inputs=("scripts/agentic_sample.py",),
        command="python scripts/agentic_sample.py pin --inferencex PATH",
        recorded="made by InferenceX's trace converter in its checkout",
    ),
    Entry(
        outputs=("tests/data/inferencex_refs/**/*",),
        inputs=(
            "scripts/refresh_inferencex_refs.py",
            "src/servelab/recipes/ix_generator.py",
            "src/servelab/recipes/ix_generator_fields.py",
            "src/servelab/recipes/ix_validator.py",
        ),
        command="PYTHONPATH=src python scripts/refresh_inferencex_refs.py pin --mirror GIT_DIR",
        recorded="made from a clone of InferenceX with its pull-request refs: each ref's own generator run,"
        " and its source parsed by servelab's ix_generator.py into generator-facts.json",
    ),
    Entry(
        outputs=("tests/data/inferencex_refs_heldout/**/*",),
        inputs=(
            "scripts/refresh_inferencex_refs.py",
            "src/servelab/recipes/ix_generator.py",
            "src/servelab/recipes/ix_generator_fields.py",
            "src/servelab/recipes/ix_validator.py",
        ),
        command="PYTHONPATH=src python scripts/refresh_inferencex_refs.py --set heldout pin --mirror GIT_DIR",
        recorded="held-out set 2, made as the corpus above: each ref's own generator run, and its source"
        " parsed by servelab's ix_generator.py into generator-facts.json",
    ),
    Entry(
        outputs=(f"{IX}/results/agg_benchmark_result.json",),
        inputs=(f"{IX}/results/README.md",),
        command=f"InferenceX's utils/process_result.py, as {IX}/results/README.md says",
        recorded="made by InferenceX's code in its checkout",
    ),
    Entry(
        outputs=(f"{IX}/benchmarks/single_node/**/*",),
        inputs=(*MASTERS, IX_LAUNCH),
        command=f"python {IX_LAUNCH} pin --inferencex PATH",
        recorded="copied from a checkout of InferenceX",
    ),
    Entry(
        outputs=(
            "tests/data/srtslurm/*",
            f"{IX}/benchmarks/multi_node/**/*",
            "src/servelab/recipes/data/srtslurm/**/*",
        ),
        inputs=(
            *MASTERS,
            "scripts/srtslurm_capture.py",
            "scripts/srtslurm_probe.py",
            "scripts/srtslurm_stubs/*",
        ),
        command="python scripts/srtslurm_capture.py resolve; ... capture; ... index",
        recorded="made from mirrors of InferenceX and srt-slurm, srtctl run from each revision in a venv",
    ),
    Entry(
        outputs=(f"{IX}/launch/launches.json.gz",),
        inputs=(f"{IX}/benchmarks/single_node/**/*", *MASTERS, IX_LAUNCH, CAPTURE),
        command=f"python {IX_LAUNCH} capture",
        self_check=(IX_LAUNCH, "capture", "--check-sample"),  # one job per script, not all 690
        quick=False,
    ),
    Entry(
        outputs=("src/servelab/recipes/data/launch-profiles.json",),
        inputs=(f"{IX}/launch/launches.json.gz", *MASTERS, IX_LAUNCH, CAPTURE),
        command=f"python {IX_LAUNCH} profiles",
        self_check=(IX_LAUNCH, "profiles", "--check"),
        quick=False,
    ),
    Entry(
        outputs=("docs/recipes.md",),  # the conformance table between its markers
        inputs=(f"{IX}/launch/launches.json.gz", *MASTERS, "src/servelab/recipes/engines/*.py"),
        command=f"python {IX_LAUNCH} docs",
        self_check=(IX_LAUNCH, "docs", "--check"),
        quick=False,
    ),
    Entry(
        outputs=(f"{IX}/launch/amd-disagg-launches.json.gz",),
        inputs=(
            *MASTERS,
            AMD_DISAGG,
            NODE_CAPTURE,
            "src/servelab/recipes/capture/amd_disagg.py",
            "src/servelab/recipes/capture/amd_agentic.py",
        ),
        command=f"python {AMD_DISAGG} capture --inferencex PATH/TO/InferenceX  (the pinned commit)",
        recorded="InferenceX's amd_utils scripts (and agentic recipe script) run under bash (a checkout)",
    ),
    Entry(
        outputs=("src/servelab/recipes/data/amd_disagg.json",),
        inputs=(
            f"{IX}/launch/amd-disagg-launches.json.gz",
            AMD_DISAGG,
            NODE_CAPTURE,
            "src/servelab/recipes/amd_disagg.py",
        ),
        command=f"python {AMD_DISAGG} profiles",
        self_check=(AMD_DISAGG, "profiles", "--check"),
    ),
    Entry(
        outputs=(f"{IX}/launch/tilert-launches.json.gz",),
        inputs=(
            *MASTERS,
            TILERT,
            NODE_CAPTURE,
            "src/servelab/recipes/capture/tilert*.py",
            "src/servelab/recipes/capture/workflow.py",
        ),
        command=f"python {TILERT} capture --inferencex PATH/TO/InferenceX  (the pinned commit)",
        recorded="InferenceX's launcher, tilert disagg script and tilert_utils run under bash (a checkout)",
    ),
    Entry(
        outputs=("src/servelab/recipes/data/tilert.json",),
        inputs=(
            f"{IX}/launch/tilert-launches.json.gz",
            TILERT,
            NODE_CAPTURE,
            "src/servelab/recipes/tilert.py",
        ),
        command=f"python {TILERT} profiles",
        self_check=(TILERT, "profiles", "--check"),
    ),
    Entry(
        outputs=(f"{IX}/launch/llmd-launches.json.gz",),
        inputs=(
            *MASTERS,
            LLMD,
            NODE_CAPTURE,
            "src/servelab/recipes/capture/llmd*.py",
            "src/servelab/recipes/capture/workflow.py",
        ),
        command=f"python {LLMD} capture --inferencex PATH/TO/InferenceX  (the pinned commit; as root)",
        recorded="InferenceX's launcher, llm-d scripts and job.slurm run under bash (a checkout)",
    ),
    Entry(
        outputs=("src/servelab/recipes/data/llmd.json",),
        inputs=(f"{IX}/launch/llmd-launches.json.gz", LLMD, NODE_CAPTURE, "src/servelab/recipes/llmd.py"),
        command=f"python {LLMD} profiles",
        self_check=(LLMD, "profiles", "--check"),
    ),
    Entry(
        outputs=(
            "tests/data/aiconfigurator/*_sxm/**/*",
            "tests/data/aiconfigurator/*.md",
            "tests/data/aiconfigurator/LICENSE",
        ),
        inputs=("scripts/refresh_aic_dsv4.py",),
        command="python scripts/refresh_aic_dsv4.py PATH/TO/aiconfigurator",
        recorded="copied from a checkout of AIConfigurator",
    ),
    Entry(
        outputs=("tests/data/aiconfigurator/int4_moe/*",),
        inputs=("scripts/refresh_aic_int4_moe.py",),
        command="python scripts/refresh_aic_int4_moe.py PATH/TO/aiconfigurator",
        recorded="rows copied from a checkout of AIConfigurator",
    ),
    Entry(
        outputs=("src/servelab/engines/*/releases/*.json",),
        inputs=("scripts/capture_engine_flags.py",),
        command="python scripts/capture_engine_flags.py refresh ENGINE VERSION --python PATH  (per release)",
        recorded="each release's wheel from PyPI, imported in a throwaway venv with its dependencies",
    ),
    Entry(
        outputs=("src/servelab/calibrate/data/inferencex_recipes.json",),
        inputs=("scripts/inferencex_recipes.py",),
        command="python scripts/inferencex_recipes.py --git-dir PATH/TO/InferenceX/.git",
        recorded="read from InferenceX's git history (a checkout)",
    ),
    Entry(
        outputs=("src/servelab/calibrate/data/inferencex_runs.json",),
        inputs=("scripts/inferencex_runs.py",),
        command="python scripts/inferencex_runs.py --git-dir PATH/TO/InferenceX/.git",
        recorded="read from InferenceX's git history (a checkout)",
    ),
    _campaign("h200_sxm_vllm_moe_0.12.0", "moe_vllm.csv", "triton", "0.12.0"),
    _campaign("h200_sxm_vllm_deepgemm_moe_0.12.0", "moe_deepgemm.csv", "deepgemm", "0.12.0"),
    _campaign("h200_sxm_vllm_marlin_moe_0.24.0", "h200_sxm_vllm_marlin_moe.csv", "marlin", "0.24.0"),
    # expert parallelism (TEP), asked of an H200, timed on the H100 that came; the ep=1 check CSV beside
    # them is raw only (docs/accuracy.md)
    _campaign("h100_sxm_vllm_moe_ep_0.12.0", ("moe_vllm_ep.csv", "moe_vllm_ep_tp24.csv"), "triton", "0.12.0"),
    _repeat("campaigns/h200_sxm_repeat"),
    _repeat("campaigns/h200_sxm_repeat_fp8"),
    _tables(f"{TABLES}/h200_sxm/torch/2.11.0", "campaigns/h200_sxm"),
    _tables(f"{TABLES}/h200_sxm/vllm/0.12.0", "campaigns/h200_sxm_vllm_moe_0.12.0"),
    _tables(f"{TABLES}/h200_sxm/vllm-deepgemm/0.12.0", "campaigns/h200_sxm_vllm_deepgemm_moe_0.12.0"),
    _tables(f"{TABLES}/h200_sxm/vllm-marlin/0.24.0", "campaigns/h200_sxm_vllm_marlin_moe_0.24.0"),
    _tables(
        f"{TABLES}/h100_sxm/torch/2.11.0",
        "campaigns/h100_sxm_torch_at_engine_keys",
        "campaigns/h100_sxm_torch_at_vllm",
        "campaigns/h100_sxm_torch_sample",
        "campaigns/h100_sxm_vllm_0.25.0_fp8gemm/torch",
        "campaigns/h100_sxm_torch_elementwise",
        "campaigns/h100_sxm_torch_elementwise_base",
    ),
    _tables(
        f"{TABLES}/h100_sxm/vllm/0.25.0",
        "campaigns/h100_sxm_vllm_0.25.0/vllm",
        "campaigns/h100_sxm_vllm_0.25.0_elementwise/vllm",
        "campaigns/h100_sxm_vllm_0.25.0_bf16moe/vllm",
        # the DeepSeek-V4 decode rows are left out: their time is servelab's stand-ins (docs/accuracy.md)
        options=("--ops", "dsv4_csa_context_module,dsv4_hca_context_module,moe,elementwise"),
    ),
    _tables(f"{TABLES}/h100_sxm/vllm/0.12.0", "campaigns/h100_sxm_vllm_moe_ep_0.12.0"),
    _tables(f"{TABLES}/h100_sxm/vllm-marlin/0.25.0", "campaigns/h100_sxm_vllm_0.25.0/vllm-marlin"),
    _tables(f"{TABLES}/h100_sxm/vllm-cutlass/0.25.0", "campaigns/h100_sxm_vllm_0.25.0_fp8gemm/vllm-cutlass"),
    Entry(
        outputs=(f"{TABLES}/ratios/*.json", f"{TABLES}/transfer.json"),
        inputs=(f"{TABLES}/*/*/*/*.parquet",),
        command=f"servelab db fit --into {TABLES}",
        make=db_fit,
        same=same_bytes,
    ),
    Entry(
        outputs=("src/servelab/perfdb/data/efficiencies.json",),  # its systems.h200_sxm entry
        inputs=(f"{TABLES}/h200_sxm/torch/2.11.0/*.parquet",),
        command="servelab calibrate roofline --system h200_sxm",
        make=roofline_fit,
        same=same_fit,
        quick=False,
    ),
    Entry(
        outputs=("src/servelab/recipes/data/fingerprints.lock",),
        inputs=(
            "src/servelab/recipes/data/recipes/*.yaml",
            "src/servelab/recipes/data/runners.yaml",
            "src/servelab/recipes/data/launch-profiles.json",
        ),
        command="servelab recipes lock",
        make=recipes_lock,
        same=same_bytes,
    ),
    Entry(
        # the calibration and its rows' out-of-sample residuals (the prediction bands': predict/bands.py)
        outputs=(
            "src/servelab/predict/data/calibrated.json",
            "src/servelab/predict/data/calibrated.residuals.json",
        ),
        inputs=(
            f"{TABLES}/**/*.parquet",
            f"{TABLES}/**/*.json",  # efficiencies, ratios, transfer
            "src/servelab/predict/data/engines.json",
            "src/servelab/calibrate/data/inferencex_recipes.json",
            "src/servelab/calibrate/data/inferencex_runs.json",
        ),
        command="servelab calibrate engines --aic --jobs 2 --out src/servelab/predict/data/calibrated.json"
        "  (with the [aic] extra or --aic-python PATH)",
        recorded="about 45 minutes on 2 cores, and AIConfigurator's sample (the [aic] extra)",
        own_check=calibration_tables,
    ),
    Entry(
        outputs=("docs/architecture.md",),  # its mermaid picture of the package graph
        inputs=("src/servelab/**/*.py", "tests/architecture/test_imports.py"),
        command="python tests/architecture/test_imports.py  (paste its output into the mermaid block)",
        make=package_graph,
        same=same_picture,
    ),
)


# --- checking ----------------------------------------------------------------------------------------------


def files(pattern: str) -> list[Path]:
    if any(c in pattern for c in "*?["):
        return sorted(p for p in REPO.glob(pattern) if p.is_file())
    return [REPO / pattern]


def digest(pattern: str) -> str:
    """SHA-256 over the files a path or glob names (each file's path and bytes); 'missing' when none is."""
    found = [p for p in files(pattern) if p.is_file()]
    if not found:
        return "missing"
    h = hashlib.sha256()
    for path in found:
        h.update(f"{path.relative_to(REPO)}\n".encode() + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def hashes(entry: Entry) -> dict[str, dict[str, str]]:
    return {
        "inputs": {p: digest(p) for p in entry.inputs},
        "outputs": {p: digest(p) for p in entry.outputs},
    }


def check_recorded(entry: Entry, record: dict) -> dict[str, str]:
    was = record.get(entry.name)
    if was is None:
        return {entry.name: "not recorded: make it, then run scripts/generated.py --write"}
    now = hashes(entry)
    stale = {}
    for path, sha in now["outputs"].items():
        if was["outputs"].get(path) != sha:
            stale[path] = "changed since it was recorded (made again? then --write)"
    changed = [p for p, sha in now["inputs"].items() if was["inputs"].get(p) != sha]
    if changed:
        stale[entry.name] = f"its inputs changed since it was made ({', '.join(changed)}): {entry.command}"
    return stale


def check_made(entry: Entry) -> dict[str, str]:
    assert entry.make is not None and entry.same is not None
    with tempfile.TemporaryDirectory() as name:
        made = entry.make(Path(name))
        stale = {}
        for rel, new in made.items():
            if not (REPO / rel).is_file():
                stale[rel] = "its generator makes it, but it is not checked in"
            elif why := entry.same(REPO / rel, new):
                stale[rel] = f"{why}: {entry.command}"
        for pattern in entry.outputs:
            for path in files(pattern):
                rel = str(path.relative_to(REPO))
                if path.is_file() and rel not in made:
                    stale[rel] = f"checked in, but its generator no longer makes it: {entry.command}"
        return stale


def check_itself(entry: Entry) -> dict[str, str]:
    done = subprocess.run([sys.executable, *entry.self_check], cwd=REPO, capture_output=True, text=True)
    if done.returncode == 0:
        return {}
    said = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no message"]
    return {entry.name: f"python {' '.join(entry.self_check)}: {said[0]}: {entry.command}"}


def check(entry: Entry, record: dict) -> dict[str, str]:
    if entry.recorded:
        stale = check_recorded(entry, record)
    elif entry.self_check:
        stale = check_itself(entry)
    else:
        stale = check_made(entry)
    if entry.own_check and (why := entry.own_check()):
        stale[entry.name] = f"{why}: {entry.command}"
    return stale


def how(entry: Entry) -> str:
    if entry.recorded:
        return f"recorded ({entry.recorded})"
    return "self-checked" if entry.self_check else "regenerated"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="print the manifest in order")
    mode.add_argument("--check", action="store_true", help="exit 1 naming each stale file")
    mode.add_argument("--write", action="store_true", help="record the recorded entries as current")
    speed = ap.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_true", help="--check without the checks that take seconds")
    speed.add_argument("--slow", action="store_true", help="--check with only the checks --quick leaves out")
    ap.add_argument("--only", metavar="TEXT", help="only the entries whose first output contains TEXT")
    ap.add_argument(
        "--except",
        dest="leave_out",
        metavar="OUTPUT",
        action="append",
        default=[],
        help="leave out the entry whose first output is OUTPUT (repeatable)",
    )
    ap.add_argument("--json", action="store_true", help="print JSON: the entries, or {stale file: why}")
    ap.add_argument("--record", type=Path, default=RECORD, help="the record file (default: %(default)s)")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.leave_out) - {e.name for e in ENTRIES})
    if unknown:
        ap.error(f"--except: {', '.join(unknown)} is no entry's first output (see --list)")
    entries = [e for e in ENTRIES if (not args.only or args.only in e.name) and e.name not in args.leave_out]
    record = json.loads(args.record.read_text()) if args.record.is_file() else {}
    if args.list and args.json:
        listed = [
            {
                "outputs": e.outputs,
                "inputs": e.inputs,
                "command": e.command,
                "checked": how(e),
                "self_check": list(e.self_check),
                "quick": e.quick,
            }
            for e in entries
        ]
        print(json.dumps(listed, indent=1))
    elif args.list:
        for i, e in enumerate(entries, 1):
            print(f"{i:2d}. {', '.join(e.outputs)}\n    from: {', '.join(e.inputs)}")
            print(f"    made by: {e.command}\n    checked: {how(e)}")
    if args.list:
        return 0
    if args.write:
        for e in entries:
            if e.recorded:
                record[e.name] = hashes(e)
        args.record.write_text(json.dumps(dict(sorted(record.items())), indent=1) + "\n")
        print(f"recorded {sum(bool(e.recorded) for e in entries)} entries in {args.record}")
        return 0
    stale: dict[str, str] = {}
    for e in entries:
        if (args.quick and not e.quick) or (args.slow and e.quick):
            continue
        stale |= check(e, record)
    if args.json:
        print(json.dumps(stale, indent=1))
    else:
        for path, why in stale.items():
            print(f"stale: {path}: {why}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
