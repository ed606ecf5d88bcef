"""Load models by embedded name, checkpoint id, config.json path or Hugging Face id (from the local hub cache,
else the hub: servelab.hfhub); load systems by name."""

import json
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from servelab.errors import ServelabError, closest
from servelab.hfhub import HubError, cached_file, fetch_file, hub_cache_dir, is_repo_id, offline
from servelab.specs.dtypes import Dtype, parse_dtype
from servelab.specs.hf_config import model_from_hf_config
from servelab.specs.model import ModelSpec
from servelab.specs.quant_exclusions import unquantized_ops

DATA = resources.files("servelab.specs") / "data"
CHECKPOINTS_FILE = Path(str(DATA / "checkpoints.json"))


class Checkpoint(BaseModel):
    """A checkpoint id's embedded model, and the precision it overrides (its weights, its experts, the
    KV-cache format its quantization config declares: ModelOpt's kv_cache_quant_algo, which the engines take
    as their `auto` KV cache, servelab.engines.kv_cache; and the modules that config keeps unquantized, its
    exclude_modules patterns, read by specs.quant_exclusions)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    weights: Dtype | None = None
    experts: Dtype | None = None
    kv_cache: Dtype | None = None
    exclude_modules: tuple[str, ...] | None = None

    @property
    def overrides_precision(self) -> bool:
        parts = (self.weights, self.experts, self.kv_cache, self.exclude_modules)
        return any(part is not None for part in parts)

    @property
    def unquantized(self) -> tuple[str, ...]:
        """The step graph's ops this checkpoint keeps unquantized."""
        return unquantized_ops(self.exclude_modules or ())


_CHECKPOINTS = TypeAdapter(dict[str, Checkpoint])


def read_checkpoints(path: Path = CHECKPOINTS_FILE) -> dict[str, Checkpoint]:
    """Checkpoint id -> Checkpoint; one line naming the file and the field where it is malformed."""
    try:
        return _CHECKPOINTS.validate_python(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError) as e:
        raise ServelabError(f"{path}: cannot read the checkpoints ({e})") from None
    except ValidationError as e:
        raise ServelabError.from_validation(e, str(path)) from None


@cache
def _checkpoints() -> dict[str, Checkpoint]:
    return read_checkpoints()


def list_models() -> list[str]:
    return sorted(
        p.name.removesuffix(".json") for p in (DATA / "models").iterdir() if p.name.endswith(".json")
    )


def list_checkpoints() -> dict[str, Checkpoint]:
    return dict(_checkpoints())


@lru_cache(maxsize=64)
def _embedded(name: str) -> ModelSpec:
    cfg = json.loads((DATA / "models" / f"{name}.json").read_text())
    return model_from_hf_config(
        cfg, name=name, source=cfg.get("_servelab", {}).get("source", name), where=f"{name}.json"
    )


def _from_path(path: Path) -> ModelSpec:
    try:
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise ServelabError(f"{path}: no config.json there")
        raw = file.read_bytes()
    except OSError as e:
        raise ServelabError(f"{path}: cannot read ({e.strerror})") from None
    name = path.name if path.is_dir() else path.parent.name or file.stem
    return _from_config(raw, name, str(file), str(file), file.parent / "hf_quant_config.json")


def _from_config(raw: bytes, name: str, source: str, where: str, quant: Path | None = None) -> ModelSpec:
    """A config.json's model; a ModelOpt hf_quant_config.json at `quant` (beside a local config.json) supplies
    the quantization config when config.json has none."""
    try:
        cfg = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ServelabError(f"{where}: not valid JSON ({e})") from None
    if isinstance(cfg, dict) and "quantization_config" not in cfg and quant is not None and _exists(quant):
        cfg = {**cfg, "quantization_config": _modelopt_config(quant)}
    return model_from_hf_config(cfg, name=name, source=source, where=where)


def _from_hub(repo_id: str, choices: list[str]) -> ModelSpec:
    """A Hugging Face model id's config.json: from the local hub cache, else (online) from the hub; one line
    saying where it looked when neither has it."""
    found = cached_file(repo_id, "config.json")
    if found is not None:
        return _from_config(
            found.read_bytes(), repo_id, repo_id, str(found), found.parent / "hf_quant_config.json"
        )
    cache = hub_cache_dir()
    known = f"{closest(repo_id, choices)}; `servelab models` lists the embedded ones"
    if offline():
        raise ServelabError(
            f"unknown model {repo_id!r}: not embedded, and no config.json of it in the Hugging Face cache "
            f"{cache} (HF_HUB_OFFLINE is set: the hub was not asked){known}"
        )
    try:
        fetched = fetch_file(repo_id, "config.json")
    except HubError as e:
        raise ServelabError(
            f"unknown model {repo_id!r}: not embedded, no config.json of it in the Hugging Face cache "
            f"{cache}, and the hub did not give one ({e}){known}"
        ) from None
    return _from_config(fetched.data, repo_id, repo_id, str(fetched.path or f"{repo_id}: config.json"))


def _modelopt_config(path: Path) -> dict:
    """A ModelOpt checkpoint's hf_quant_config.json (beside config.json) as a quantization_config, as vLLM
    reads one: quant_method modelopt with its `quantization` section (quant_algo, kv_cache_quant_algo)."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ServelabError(f"{path}: not valid JSON ({e})") from None
    section = data.get("quantization") if isinstance(data, dict) else None
    if not isinstance(section, dict):
        raise ServelabError(f"{path}: expected an object with a 'quantization' object (ModelOpt's format)")
    return {"quant_method": "modelopt", **section}


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long for the file system, or the like: not a file
        return False


def _resolve(name_or_path: str, hub: bool = True) -> tuple[ModelSpec, Checkpoint | None]:
    """The embedded or parsed spec, and the checkpoint entry it came through (None for a name or a path);
    `hub`: a Hugging Face id servelab does not embed is looked up in the hub cache and the hub (False: it is
    unknown, whatever this machine's cache holds or the network gives)."""
    key = name_or_path.strip()
    checkpoints = _checkpoints()
    lowered = {k.lower(): k for k in checkpoints}
    if key.lower() in lowered:
        entry = checkpoints[lowered[key.lower()]]
        return _embedded(entry.model), entry
    if key.lower() in list_models():
        return _embedded(key.lower()), None
    path = Path(key).expanduser()
    if _exists(path) or key.endswith(".json") or "/" in key and key.startswith((".", "/", "~")):
        return _from_path(path), None
    choices = list_models() + list(checkpoints)
    if is_repo_id(key) and not hub:
        raise ServelabError(
            f"model {name_or_path!r} is not embedded (the hub and its cache are not asked here)"
        )
    if is_repo_id(key):
        return _from_hub(key, choices), None
    raise ServelabError(
        f"unknown model {name_or_path!r}{closest(key, choices)}; `servelab models` lists them"
    )


def load_model(
    name_or_path: str,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    expert_dtype: str | None = None,
    indexer_dtype: str | None = None,
    hub: bool = True,
) -> ModelSpec:
    """A ModelSpec with the checkpoint's default precision, overridden where asked. `hub=False`: embedded
    models, their checkpoints and config.json paths only, as pinned evidence is read (the same rows on every
    machine, and no network)."""
    model, checkpoint = _resolve(name_or_path, hub)
    prec = model.precision.model_dump()
    if checkpoint is not None:
        prec.update(
            {part: d for part in ("weights", "experts", "kv_cache") if (d := getattr(checkpoint, part))}
        )
        if checkpoint.exclude_modules is not None:
            prec["unquantized"] = checkpoint.unquantized
    if weight_dtype is not None:  # an empty name is a mistake, not 'no override'
        prec["weights"] = parse_dtype(weight_dtype, "weight_dtype")
        if expert_dtype is None and not model.precision.experts.is_fp4:
            prec["experts"] = prec["weights"]
    if expert_dtype is not None:
        prec["experts"] = parse_dtype(expert_dtype, "expert_dtype")
    if kv_dtype is not None:
        kv = parse_dtype(kv_dtype, "kv_dtype")
        if kv not in (Dtype.bf16, Dtype.fp16, Dtype.fp8):
            raise ServelabError(
                f"{kv.value} is not a KV-cache format; expected bf16 or fp8", field="kv_dtype"
            )
        prec["kv_cache"] = kv
    if indexer_dtype is not None:
        if model.precision.indexer_cache is None:
            raise ServelabError(
                f"{model.name} has no indexer cache (DeepSeek-V4 only)", field="indexer_dtype"
            )
        idx = parse_dtype(indexer_dtype, "indexer_dtype")
        if idx not in (Dtype.fp8, Dtype.fp4):
            raise ServelabError("expected fp8 or fp4", field="indexer_dtype")
        prec["indexer_cache"] = idx
    # a checkpoint id names its own source
    source = _canonical(name_or_path) if checkpoint is not None else model.source
    return model.model_copy(update={"precision": type(model.precision)(**prec), "source": source})


def released_as(model: ModelSpec, checkpoint_id: str) -> ModelSpec:
    """`model` with the GEMMs an embedded checkpoint keeps unquantized: a run that names only its precision
    (an NVFP4 row of DeepSeek-R1) served that release of the model."""
    checkpoint = _checkpoints()[_canonical(checkpoint_id)]
    precision = model.precision.model_copy(update={"unquantized": checkpoint.unquantized})
    return model.model_copy(update={"precision": precision})


def _canonical(checkpoint: str) -> str:
    lowered = {k.lower(): k for k in _checkpoints()}
    return lowered.get(checkpoint.lower(), checkpoint)
