"""InferenceX result files as calibration rows.

The format is InferenceX's utils/process_result.py output (`agg_<RESULT_FILENAME>.json`): one dict per
benchmark point with the deployment (`hw` = runner type, `model` = the checkpoint the client asked for,
`framework`, `precision`, `tp`, `ep`, `dp_attention`, `pp`, `dcp_size`, `spec_decoding`, `is_multinode`,
`disagg`), the load (`isl`, `osl`, `conc`) and every `*_ms` field of the benchmark result in seconds with
`_ms` dropped (`median_ttft`, `median_tpot` from InferenceX's benchmark_serving.py; `ttft_p50`, `tpot_p50`
from clients that name percentiles so). utils/collect_results.py gathers them into one JSON list
(`agg_bmk.json`); both shapes are read, and a directory is searched for `*.json` files.
"""

import json
from pathlib import Path

from servelab.calibrate.rows import Case
from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.predict.deployment import engine_of_framework, system_of_gpu
from servelab.specs import Parallel, load_model
from servelab.specs.families import family_of

FIELD = "from_inferencex"
# A row names its checkpoint in `model`; one that carries only the model prefix is read with the checkpoint
# InferenceX's master configs (.github/configs/*-master.yaml) serve for that prefix and precision
PREFIX_CHECKPOINTS = {
    ("dsr1", "fp8"): "deepseek-ai/DeepSeek-R1-0528",
    ("dsv4", "fp4"): "deepseek-ai/DeepSeek-V4-Pro",
}


def result_files(path: Path) -> list[Path]:
    """The JSON files under a directory (sorted), or the file itself."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.json") if p.is_file())
        if not files:
            raise ServelabError(f"{path}: no *.json InferenceX result files in this directory", field=FIELD)
        return files
    if not path.is_file():
        raise ServelabError(f"{path}: no such file or directory", field=FIELD)
    return [path]


def read_items(path: Path) -> list[dict]:
    """The result rows of one file (a dict, or a list of them), or a ServelabError naming the file."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ServelabError(f"{path}: not a JSON file ({e})", field=FIELD) from e
    items = data if isinstance(data, list) else [data]
    return [item for item in items if isinstance(item, dict)]


def _true(value: object) -> bool:
    return str(value).strip().lower() == "true"


def _int(item: dict, key: str, default: int | None = None) -> int:
    value = item.get(key, default)
    if value is None:
        raise ValueError(f"no {key}")
    return int(value)


def _median(item: dict, metric: str) -> float:
    for key in (f"median_{metric}", f"{metric}_p50"):
        if isinstance(item.get(key), int | float):
            return float(item[key])
    raise ValueError(f"no median_{metric} or {metric}_p50")


def to_case(item: dict, row_id: str, source: str) -> Case:
    """One InferenceX result row as a Case, or ValueError saying why it cannot be fitted."""
    if not {"hw", "framework", "conc"} <= item.keys():
        raise ValueError("not an InferenceX result row (no hw, framework, conc)")
    if _true(item.get("is_multinode")) or _true(item.get("disagg")):
        raise ValueError("multinode or disaggregated (only single-node aggregated rows are fitted)")
    spec = str(item.get("spec_decoding") or "none").lower()
    if spec != "none":
        raise ValueError(f"speculative decoding {spec} (acceptance not recorded)")
    if _int(item, "dcp_size", 1) != 1 or _int(item, "pcp_size", 1) != 1:
        raise ValueError("decode or prefill context parallelism (servelab has no such split)")
    system = system_of_gpu(str(item["hw"]))
    engine = engine_of_framework(str(item["framework"]))
    prefix = (str(item.get("infmax_model_prefix")), str(item.get("precision")))
    checkpoint = str(item.get("model") or PREFIX_CHECKPOINTS.get(prefix, ""))
    try:
        model = load_model(checkpoint, hub=False)
    except ServelabError:
        raise ValueError(f"model {checkpoint or '(none)'} is not embedded") from None
    ep = _int(item, "ep", 1)
    parallel = Parallel(
        tp=_int(item, "tp"),
        ep=ep if model.is_moe else 1,
        dp_attn=_true(item.get("dp_attention")),
        pp=_int(item, "pp", 1),
    )
    ttft, tpot = _median(item, "ttft"), _median(item, "tpot")
    return Case(
        row_id=row_id,
        family=family_of(model.name),
        engine=Engine(engine),
        version=str(item.get("image") or "?"),
        model=model,
        parallel=parallel,
        concurrency=_int(item, "conc"),
        isl=_int(item, "isl"),
        osl=_int(item, "osl"),
        ttft_ms=ttft * 1000.0,  # process_result.py writes seconds
        tpot_ms=tpot * 1000.0,
        source=source,
        system=system,
    )
