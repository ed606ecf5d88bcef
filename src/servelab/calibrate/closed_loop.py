"""Public closed-loop benchmark points, read as the twin replays them (accuracy/closed_loop.py prices them;
docs/accuracy.md, "main's twin against the pinned closed-loop results").

Two sources, pinned in one folder by scripts/refresh_closed_loop.py (its docstring has the split rule):
- InferenceX's token-position sweeps of MiniMax-M2.5 (`inferencex/results/*.json`): vLLM on 8 H200s, every
  request of the nominal lengths, 2 x C warm-up requests of one prompt and then 10 x C measured ones at
  concurrency C; the files hold the median and p99 of TTFT, TPOT and E2EL.
- AIConfigurator's silicon_sample.csv rows that the calibration never reads
  (`aiconfigurator/silicon_sample_rows.csv`), aggregated ones: one TTFT and one TPOT each, the statistic not
  named (InferenceX's rows measured without a warm-up carry a first wave's stall as a mean would:
  docs/accuracy.md, "SGLang's DeepSeek points on Blackwell"). Rows InferenceX measured (the source note has a
  measured time and an image or a database dump) are replayed with InferenceX's client (lengths uniform in
  [0.8 L, L], 10 x C requests from an idle engine; its 2 x C warm-up requests, sent since 2026-01-21, are
  not replayed, and the rows measured before are told apart as `inferencex-no-warmup`);
  AIConfigurator's own rows with AIConfigurator's client (every request at the nominal lengths, and its
  undated rows with the requests their means average over, 20 x C or 10 x C: calibrate/clients.py),
  otherwise as the calibration replays its rows (calibrate/price.py: 10 x C requests from an idle engine).

Every point is a calibrate Case (deployment, load, measured medians and the settings it ran with) plus its
protocol and what else was measured; `heldout` says which part of the split it is in.
"""

import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from servelab.calibrate.clients import (
    FIXED_LENGTHS,
    client_settings,
    cold_inferencex_row,
    measured_by_inferencex,
)
from servelab.calibrate.recipes import RunSettings
from servelab.calibrate.rows import Case, build_cases
from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.specs import Parallel, load_model

MINIMAX = "minimaxai/minimax-m2.5"
# models servelab embedded after their silicon rows were pinned here as closed-loop evidence (rows of models
# it did not embed, so that no calibration fitted them): the calibration still never fits their rows
# (calibrate/sources.py), or the pinned points would price the rows they were fitted on
# (AIConfigurator 095f58a5's aggregated GLM-5, Kimi-K2.5 and Qwen3.5 rows are all pinned)
EVIDENCE_ONLY_MODELS = frozenset(
    {"zhipuai/glm-5", "moonshotai/kimi-k2.5", "nvidia/kimi-k2.5-nvfp4", "qwen/qwen3.5-397b-a17b"}
)
_IX_NAME = re.compile(
    r"minimax_m25_vllm_(?P<split>tep8|dep8)_isl(?P<isl>\d+)_osl(?P<osl>\d+)_conc(?P<c>\d+)\.json"
)


@dataclass
class Point:
    """One measured closed-loop point: the case the twin prices, and what else the source measured."""

    case: Case
    heldout: bool
    # inferencex-token-position; inferencex (a silicon row InferenceX measured after a warm-up) or
    # inferencex-no-warmup (before its client had one: clients.cold_inferencex_row); aiconfigurator
    source: str
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None

    @property
    def key(self) -> str:
        return self.case.row_id


def heldout_ids(folder: Path) -> frozenset[str]:
    """The upstream ids the split holds out (the folder's heldout.txt)."""
    return read_heldout(folder / "heldout.txt")


def read_heldout(path: Path) -> frozenset[str]:
    """The ids of a heldout.txt: one a line, # comments."""
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise ServelabError(f"{path}: cannot read ({e.strerror})", field="closed_loop") from None
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def inferencex_points(folder: Path, heldout: frozenset[str]) -> Iterator[Point]:
    """InferenceX's MiniMax-M2.5 token-position results: TP8 + EP ('tep8') or DP8 attention + EP ('dep8')."""
    model = load_model(str(folder / "aiconfigurator" / "minimax-m2.5" / "config.json"))
    for path in sorted((folder / "inferencex" / "results").glob("*.json")):
        m = _IX_NAME.fullmatch(path.name)
        if m is None:
            continue
        data = json.loads(path.read_text())
        if data.get("completed") != data.get("num_prompts"):
            continue  # the sweep script deletes such a run, but say nothing of one that slipped through
        c = int(m["c"])
        parallel = Parallel(tp=8, ep=8, dp_attn=m["split"] == "dep8")
        date = data["date"]
        case = Case(
            row_id=path.name,
            family="minimax",
            engine=Engine.VLLM,
            version="nightly 2026-02-14",
            model=model,
            parallel=parallel,
            concurrency=c,
            isl=int(m["isl"]),
            osl=int(m["osl"]),
            ttft_ms=data["median_ttft"] * 1e3,
            tpot_ms=data["median_tpot"] * 1e3,
            source="inferencex token-position",
            system="h200_sxm",
            measured=f"{date[:4]}-{date[4:6]}-{date[6:8]}",
            settings=RunSettings(recipe="InferenceX token-position sweep", client_range_ratio=FIXED_LENGTHS),
        )
        yield Point(
            case,
            path.name in heldout,
            "inferencex-token-position",
            ttft_p99_ms=data["p99_ttft"] * 1e3,
            tpot_p99_ms=data["p99_tpot"] * 1e3,
        )


def silicon_points(
    folder: Path, heldout: frozenset[str], systems: tuple[str, ...]
) -> tuple[list[Point], dict]:
    """The aggregated silicon rows of `systems` servelab can map, and the others counted by reason."""
    path = folder / "aiconfigurator" / "silicon_sample_rows.csv"
    with open(path, newline="") as f:
        rows = [row for row in csv.DictReader(f) if row.get("mode") == "agg"]
    configs = {MINIMAX: folder / "aiconfigurator" / "minimax-m2.5" / "config.json"}
    points: list[Point] = []
    skipped: dict[str, int] = {}
    for system in systems:
        cases, left = build_cases(rows, system, configs)
        for reason, n in left.items():
            skipped[reason] = skipped.get(reason, 0) + n
        for case in cases:
            if case.settings is None:  # no recipe of that system: the client its campaign ran
                sent = client_settings(
                    case.silicon_source, case.engine, clients=case.concurrency, isl=case.isl
                )
                case = replace(case, settings=sent)
            if case.model.name.startswith("minimax"):
                case = replace(case, family="minimax")
            points.append(Point(case, case.row_id in heldout, source_of_row(case)))
    return points, skipped


def source_of_row(case: Case) -> str:
    """Who measured a silicon row, and for InferenceX's rows whether its client warmed the server up first."""
    if not measured_by_inferencex(case.silicon_source):
        return "aiconfigurator"
    return "inferencex-no-warmup" if cold_inferencex_row(case.silicon_source, case.measured) else "inferencex"


def read_points(folder: Path, systems: tuple[str, ...]) -> tuple[list[Point], dict]:
    """Every point of the pinned closed-loop data on `systems`, and the rows left out by reason."""
    heldout = heldout_ids(folder)
    points, skipped = silicon_points(folder, heldout, systems)
    if "h200_sxm" in systems:
        points = list(inferencex_points(folder, heldout)) + points
    return points, skipped
