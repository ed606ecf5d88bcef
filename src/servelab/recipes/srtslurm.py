"""A multinode job's Deployment from its srt-slurm recipe (InferenceX's dynamo-* jobs, issue #32).

InferenceX launches a disaggregated or multinode job by cloning NVIDIA/srt-slurm at a revision its launcher
picks, copying its own benchmarks/multi_node/srt-slurm-recipes into it and running `srtctl apply -f
$CONFIG_FILE`. srtctl reads the recipe YAML (resources, backend config per role, frontend) and starts, per
node: NATS and etcd on the infra node, the workers (prefill / decode / aggregated: the engine's Dynamo worker
with the recipe's flags for that role), and the frontend (Dynamo's, behind nginx when several). This module
reads the recipe (typed, one-line errors naming the file and field) and renders the same processes as a
Deployment.

Node addresses are not known before the job runs: argv and env name them `{{node:N}}` (N: the node's index in
the deployment, 0 first), which the runner replaces with node N's address. The reference is srtctl itself
(scripts/srtslurm_capture.py records what its own code starts for every recipe; tests/recipes/test_srtslurm.py
compares).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.engines.names import Engine
from servelab.errors import ServelabError
from servelab.recipes.engines.base import Deployment, NodeProcess, Role
from servelab.recipes.yamlio import safe_dump

FRONTEND_PORT = 8000  # the one the benchmark sends to (nginx's when several frontends, else the frontend's)
FRONTEND_BEHIND_NGINX = 8180
NATS_PORT = 4222
ETCD_PORT = 2379
DP_RPC_BASE = 8400  # vLLM's data-parallel RPC port, per leader node, where the revision allocates it
DP_RPC_DEFAULT = 13345  # where the recipe names none and the revision does not allocate it
KV_EVENTS_BASE = 5200  # the ZMQ port KV events are published on: one per worker process over the deployment
MOONCAKE_MASTER_PORT = 8700  # its HTTP metadata server one above, its metrics two above
MOONCAKE_STORE_CONFIG = "mooncake_store_config.json"  # in /logs, where vLLM's Mooncake connector reads it
# the revisions whose Mooncake KV store (backend.mooncake_kv_store: a mooncake_master on the infra node, the
# store config it reads, the workers' MOONCAKE_* environment) equals srtctl's for every captured recipe
MOONCAKE_REVISIONS = frozenset(
    {
        "cb651682117df129162cd276cf567ec70dc57b36",  # v1.0.36
        "9d8d92b20c350a5d42f0709f5a0b64e30eb37d33",  # v1.0.45
        "217f94387abeddfed7149a71955dc523e07cd765",  # v1.0.53
    }
)
# the revisions whose vLLM frontend (frontend.type vllm: `vllm serve` workers, the leader serving the
# endpoint) equals srtctl's for every captured recipe
VLLM_FRONTEND_REVISIONS = frozenset({"217f94387abeddfed7149a71955dc523e07cd765"})  # v1.0.53
# the revisions whose KV-event publishing (backend.kv_events_config) equals srtctl's for every captured recipe
KV_EVENTS_REVISIONS = frozenset(
    {
        "cb651682117df129162cd276cf567ec70dc57b36",  # v1.0.36
        "e4019633c9e2bc25f38c44b81edf52bb0504d937",  # v1.0.50
    }
)


@dataclass(frozen=True)
class Rules:
    """What differs between the srt-slurm revisions InferenceX's launchers pin: the port plan and defaults."""

    http_base: int  # per node
    http_stride: int
    bootstrap_base: int  # per node, one per prefill endpoint
    sys_base: int  # DYN_SYSTEM_PORT, one per worker process
    dist_init: int  # SGLang's --dist-init-addr port
    request_plane: str  # dynamo.request_plane's default
    sglang_drops_served_name: bool = True  # the role's served-model-name is not repeated among its flags
    sglang_bootstrap_flag: bool = True  # a prefill worker is given its --disaggregation-bootstrap-port
    request_plane_flag: bool = True  # SGLang and vLLM workers are given --request-plane
    vllm_device_ids: bool = (
        True  # vLLM workers name their GPUs (--device-ids) unless set_cuda_visible_devices
    )
    sglang_nccl_base: int | None = None  # SGLang workers get --nccl-port base + their DYN_SYSTEM_PORT offset
    # vLLM's data-parallel mode: "config" (a process per GPU, the RPC port the recipe's or 13345), "headless"
    # (the RPC port allocated per leader node from 8400; dp_launch_mode per_node: one process per node, the
    # non-first headless unless the recipe asks for hybrid load balancing) or "hybrid" (per_node always
    # with --data-parallel-hybrid-lb)
    vllm_dp: Literal["config", "headless", "hybrid"] = "hybrid"


# before srt-slurm's ports module (topology.py's NodePortAllocator) / after it (srtctl/ports.py, v1.0.x)
ALLOCATOR = Rules(
    30000,
    1,
    31000,
    8081,
    29500,
    "nats",
    sglang_drops_served_name=False,
    sglang_bootstrap_flag=False,
    vllm_device_ids=False,
)
ALLOCATOR_NO_PLANE = Rules(
    30000, 1, 31000, 8081, 29500, "nats", False, False, False, vllm_device_ids=False, vllm_dp="config"
)
ALLOCATOR_DROPS = Rules(
    30000, 1, 31000, 8081, 29500, "nats", request_plane_flag=False, vllm_device_ids=False, vllm_dp="config"
)
PORTS_MODULE = Rules(6100, 32, 7200, 7500, 8300, "tcp")
PORTS_MODULE_DP_HEADLESS = Rules(6100, 32, 7200, 7500, 8300, "tcp", vllm_dp="headless")
PORTS_MODULE_NO_PLANE = Rules(
    6100, 32, 7200, 7500, 8300, "nats", request_plane_flag=False, vllm_device_ids=False
)
PORTS_MODULE_NCCL = Rules(6100, 32, 7200, 7500, 8300, "tcp", sglang_nccl_base=17500)
# revision -> its rules and the backends whose rendering equals srtctl's for every captured recipe
# (tests/recipes/test_srtslurm.py); another backend at that revision is refused, not guessed
REVISIONS: dict[str, tuple[Rules, frozenset[str]]] = {
    "deb1dfd9934398664f92d194169c183e009da83b": (
        ALLOCATOR,
        frozenset({Engine.SGLANG, Engine.TRTLLM}),
    ),  # sa-submission-q2-2026
    "517d3c37afeff9c50cb56c38145c38e24135924e": (
        ALLOCATOR_DROPS,
        frozenset({Engine.VLLM}),
    ),  # aflowers/vllm-gb200-v0.20.0
    "758becd9d18dcab1fb722abc1875d73ee81a20cb": (
        ALLOCATOR_NO_PLANE,
        frozenset({Engine.VLLM}),
    ),  # aflowers/gb200-dsv4-recipes
    "a98738de9b2233459b5456e9ed71af09ce893f92": (
        PORTS_MODULE_NO_PLANE,
        frozenset({Engine.SGLANG}),
    ),  # v1.0.6 line
    "3435776cd6db4c14f8b771ff7a3976deb62fe133": (PORTS_MODULE, frozenset({Engine.SGLANG})),  # v1.0.25
    "c1b6b5c97f323baefad577d70c4e8392b6f537d9": (PORTS_MODULE, frozenset({Engine.TRTLLM})),  # v1.0.29
    "0f31474a9b3831af28b5f44c95913776daed9f38": (
        PORTS_MODULE_DP_HEADLESS,
        frozenset({Engine.VLLM}),
    ),  # v1.0.31
    "cb651682117df129162cd276cf567ec70dc57b36": (PORTS_MODULE, frozenset({Engine.VLLM})),  # v1.0.36
    "c180328b98c3793ca84a1e24a030f90545eb7d5d": (
        PORTS_MODULE,
        frozenset({Engine.SGLANG, Engine.TRTLLM, Engine.VLLM}),
    ),  # v1.0.38
    "04e87fcc505d6d851451781a5499ca19a02ec2b4": (PORTS_MODULE, frozenset({Engine.SGLANG})),  # v1.0.44
    "9d8d92b20c350a5d42f0709f5a0b64e30eb37d33": (
        PORTS_MODULE,
        frozenset({Engine.VLLM, Engine.SGLANG}),
    ),  # v1.0.45
    "e4019633c9e2bc25f38c44b81edf52bb0504d937": (
        PORTS_MODULE,
        frozenset({Engine.SGLANG, Engine.TRTLLM, Engine.VLLM}),
    ),  # v1.0.50
    "217f94387abeddfed7149a71955dc523e07cd765": (PORTS_MODULE, frozenset({Engine.VLLM})),  # v1.0.53
    "c88ef731636890ff6385a783e152c1790e15b194": (
        PORTS_MODULE_NCCL,
        frozenset({Engine.SGLANG}),
    ),  # main (v1.0.68)
}

# revision -> the frontends other than Dynamo's whose rendering equals srtctl's for every captured recipe
# (SGLang's router in front of sglang.launch_server workers); another is refused, not guessed
OTHER_FRONTENDS: dict[str, frozenset[str]] = {
    "c180328b98c3793ca84a1e24a030f90545eb7d5d": frozenset({Engine.SGLANG}),  # v1.0.38
    "9d8d92b20c350a5d42f0709f5a0b64e30eb37d33": frozenset({Engine.SGLANG}),  # v1.0.45
}


def node(i: int) -> str:
    """The placeholder the runner replaces with node i's address."""
    return f"{{{{node:{i}}}}}"


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Resources(_Open):
    gpu_type: str
    gpus_per_node: int = 4
    prefill_nodes: int | None = None
    decode_nodes: int | None = None
    prefill_workers: int | None = None
    decode_workers: int | None = None
    agg_nodes: int | None = None
    agg_workers: int | None = None
    spread_workers: bool = False
    gpus_per_prefill: int | None = None
    gpus_per_decode: int | None = None
    gpus_per_agg: int | None = None

    @property
    def disaggregated(self) -> bool:
        return self.prefill_nodes is not None or self.decode_nodes is not None

    @property
    def total_nodes(self) -> int:
        if self.disaggregated:
            return (self.prefill_nodes or 0) + (self.decode_nodes or 0)
        return self.agg_nodes or 1

    def gpus_per(self, mode: str) -> int:
        explicit = {
            "prefill": self.gpus_per_prefill,
            "decode": self.gpus_per_decode,
            "agg": self.gpus_per_agg,
        }
        nodes = {"prefill": self.prefill_nodes, "decode": self.decode_nodes, "agg": self.agg_nodes}[mode]
        workers = self.workers(mode)
        if explicit[mode] is not None:
            return explicit[mode]  # type: ignore[return-value]
        if nodes and workers:
            return nodes * self.gpus_per_node // workers
        if mode == "decode" and self.decode_nodes == 0 and workers:
            return self.gpus_per("prefill")  # decode shares prefill's nodes
        return self.gpus_per_node

    def workers(self, mode: str) -> int:
        return {"prefill": self.prefill_workers, "decode": self.decode_workers, "agg": self.agg_workers}[
            mode
        ] or 0


class MooncakeStore(_Open):
    """backend.mooncake_kv_store: the store config vLLM's connector reads, extra environment for the
    workers and extra flags for the master."""

    store_config: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    master_extra_args: list[str] = Field(default_factory=list)


class Backend(_Open):
    """The recipe's `backend:` block: engine, its config and environment per role."""

    type: Engine = Engine.SGLANG  # srtctl's default backend (its names are servelab's engine names)
    prefill_environment: dict[str, str] = Field(default_factory=dict)
    decode_environment: dict[str, str] = Field(default_factory=dict)
    aggregated_environment: dict[str, str] = Field(default_factory=dict)
    sglang_config: dict[str, dict[str, Any] | None] | None = None
    vllm_config: dict[str, dict[str, Any] | None] | None = None
    trtllm_config: dict[str, dict[str, Any] | None] | None = None
    connector: str | None = "nixl"
    kv_events_config: bool | dict[str, Any] | None = None
    set_cuda_visible_devices: bool = False
    dp_launch_mode: Literal["per_gpu", "per_node"] = "per_gpu"
    mooncake_kv_store: MooncakeStore | None = None

    def config(self, mode: str) -> dict[str, Any]:
        table = {
            Engine.SGLANG: self.sglang_config,
            Engine.VLLM: self.vllm_config,
            Engine.TRTLLM: self.trtllm_config,
        }[self.type]
        return dict((table or {}).get("aggregated" if mode == "agg" else mode) or {})

    def environment(self, mode: str) -> dict[str, str]:
        return dict(
            {"prefill": self.prefill_environment, "decode": self.decode_environment}.get(
                mode, self.aggregated_environment
            )
        )

    def served_model_name(self, default: str) -> str:
        for mode in ("prefill", "agg", "decode"):
            cfg = self.config(mode)
            name = cfg.get("served-model-name") or cfg.get("served_model_name")
            if name:
                return str(name)
        return default


class Frontend(_Open):
    type: str = "dynamo"
    enable_multiple_frontends: bool = True
    num_additional_frontends: int = 9
    args: dict[str, Any] | None = None
    env: dict[str, str] | None = None
    orchestrator_placement: Literal["head", "first_decode", "last_decode"] = (
        "head"  # the single frontend's node
    )


class Dynamo(_Open):
    request_plane: str | None = None  # the revision's default


class Infra(_Open):
    etcd_nats_dedicated_node: bool = False  # NATS and etcd alone on the first node, the workers after it


class Model(_Open):
    path: str


class SrtRecipe(_Open):
    name: str = "srt"
    model: Model
    resources: Resources
    backend: Backend
    frontend: Frontend = Field(default_factory=Frontend)
    dynamo: Dynamo = Field(default_factory=Dynamo)
    environment: dict[str, str] = Field(default_factory=dict)
    infra: Infra = Field(default_factory=Infra)


def read_recipe(
    text: str, source: str, synthetic_acceptance: float | None = None, selector: str | None = None
) -> SrtRecipe:
    """The recipe, typed: a ServelabError naming `source` and the field when it is not one srtctl reads.
    `synthetic_acceptance`: the mean acceptance length InferenceX's launcher writes into the recipe before
    srtctl reads it (a row with SYNTHETIC_ACCEPTANCE=true), see `with_synthetic_acceptance`. `selector`: the
    variant of an override file CONFIG_FILE names after its `:` (`select_variant`)."""
    try:
        data = copy.deepcopy(_parsed(text))  # a copy: the synthetic acceptance edits it
    except yaml.YAMLError as e:
        raise ServelabError(f"{source}: not YAML ({e})".splitlines()[0]) from e
    if not isinstance(data, dict):
        raise ServelabError(f"{source}: an srt-slurm recipe is a mapping")
    if synthetic_acceptance is not None:
        with_synthetic_acceptance(data, synthetic_acceptance, source)
    if selector is not None:
        data = select_variant(data, selector, source)
    try:
        return SrtRecipe.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ServelabError(f"{source}: {where}: {err['msg']}") from e


# libyaml's loader where PyYAML has it: a sweep reads several hundred recipes (the pure-Python one took 8 s)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> Any:
    """The YAML of a recipe, parsed once per text (rows of one recipe share it)."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 (a safe loader)


def _merged(base: Any, override: Any) -> Any:
    """`override` over `base` as srtctl merges a variant: mappings key by key, a null removing the key,
    anything else (lists included) replacing the base's value."""
    if not (isinstance(base, dict) and isinstance(override, dict)):
        return copy.deepcopy(override)
    out = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = (
                _merged(out.get(key), value) if isinstance(out.get(key), dict) else copy.deepcopy(value)
            )
    return out


def _list_lengths(group: dict) -> list[int]:
    out: list[int] = []
    for value in group.values():
        if isinstance(value, list):
            out.append(len(value))
        elif isinstance(value, dict):
            out += _list_lengths(value)
    return out


def _zip_slice(group: dict, i: int) -> dict:
    """Variant i of a zip group: each list its i-th value (a one-value list the same for every variant)."""
    return {
        k: v[0 if len(v) == 1 else i]
        if isinstance(v, list)
        else _zip_slice(v, i)
        if isinstance(v, dict)
        else v
        for k, v in group.items()
    }


def select_variant(data: dict, selector: str, source: str) -> dict:
    """The one variant `selector` picks from an override file (`base` plus `override_<name>` sections, each
    merged over base, and `zip_override_<name>` sections whose lists give one variant per index):
    `base`, `override_<name>` or `zip_override_<name>[N]`. A selector of several variants (a whole zip
    group, a pattern) names no one recipe, so it is refused."""
    base = data.get("base")
    if not isinstance(base, dict):
        raise ServelabError(f"{source}: CONFIG_FILE selects {selector!r} but the recipe has no base mapping")
    if selector == "base":
        return copy.deepcopy(base)
    zipped = re.fullmatch(r"(zip_override_[\w-]+)\[(\d+)\]", selector)
    key = zipped.group(1) if zipped else selector
    if not (zipped or re.fullmatch(r"override_\S+", selector)) or "*" in key or "?" in key:
        raise ServelabError(f"{source}: selector {selector!r} does not name one variant")
    section = data.get(key)
    if not isinstance(section, dict):
        raise ServelabError(f"{source}: the recipe has no {key!r} section")
    if not zipped:
        return _merged(base, section)
    every = _list_lengths(section)  # a zip group of no list, or of an empty one, has no variant
    lengths = {n for n in every if n != 1} or {1}
    index = int(zipped.group(2))
    if not every or 0 in every or len(lengths) > 1 or index >= lengths.pop():
        raise ServelabError(f"{source}: {key} has no variant {index}")
    return _merged(base, _zip_slice(section, index))


SGLANG_ROLE_ENVIRONMENTS = ("aggregated_environment", "prefill_environment", "decode_environment")


def with_synthetic_acceptance(data: dict, length: float, source: str) -> None:
    """The recipe as InferenceX's launcher rewrites it for a throughput run with synthetic acceptance
    (runners/inject_synthetic_acceptance.py): vLLM's speculative-config JSON of each role gets
    rejection_sample_method=synthetic and the length; SGLang's workers get SGLANG_SIMULATE_ACC_* in each role
    environment the recipe has. Nothing to rewrite is an error, as it is for the launcher."""
    found = data.get("backend")
    backend: dict = found if isinstance(found, dict) else {}
    count = 0
    if backend.get("type") == Engine.VLLM:
        for cfg in (backend.get("vllm_config") or {}).values():
            spec = cfg.get("speculative-config") if isinstance(cfg, dict) else None
            if isinstance(spec, str):
                parsed = json.loads(spec)
                parsed["rejection_sample_method"] = "synthetic"
                parsed["synthetic_acceptance_length"] = length
                cfg["speculative-config"] = json.dumps(parsed, separators=(",", ":"))
                count += 1
    elif backend.get("type", Engine.SGLANG) == Engine.SGLANG:
        if any("SGLANG_SIMULATE_ACC_LEN" in (backend.get(k) or {}) for k in SGLANG_ROLE_ENVIRONMENTS):
            raise ServelabError(f"{source}: SYNTHETIC_ACCEPTANCE is set but the recipe already simulates it")
        for key in SGLANG_ROLE_ENVIRONMENTS:
            if isinstance(backend.get(key), dict):
                backend[key].update(
                    SGLANG_SIMULATE_ACC_LEN=f"{length:g}",
                    SGLANG_SIMULATE_ACC_METHOD="match-expected",
                    SGLANG_SIMULATE_ACC_TOKEN_MODE="real-draft-token",
                )
                count += 1
    if not count:
        raise ServelabError(f"{source}: SYNTHETIC_ACCEPTANCE is set but the recipe has nothing it rewrites")


@dataclass
class _Endpoint:
    mode: str
    index: int
    nodes: list[int]
    gpus: list[int]


@dataclass
class _Proc:
    """One worker process of an endpoint: its node, its rank among the endpoint's nodes, its GPUs and, in
    vLLM's data-parallel mode, its first data-parallel rank and the endpoint's RPC port."""

    node: int
    rank: int
    gpus: list[int]
    dp_rank: int | None = None
    dp_rpc: int | None = None


@dataclass
class _Ports:
    rules: Rules
    http: dict[int, int] = field(default_factory=dict)
    bootstrap: dict[int, int] = field(default_factory=dict)
    dp_rpc: dict[int, int] = field(default_factory=dict)
    kv_events: int = KV_EVENTS_BASE

    def next_kv_events(self, count: int) -> int:
        """The first of `count` KV-event ports (one per data-parallel rank a process owns)."""
        port = self.kv_events
        self.kv_events += count
        return port

    def next_dp_rpc(self, n: int) -> int:
        port = self.dp_rpc.get(n, DP_RPC_BASE)
        self.dp_rpc[n] = port + 1
        return port

    def next_http(self, n: int) -> int:
        port = self.http.get(n, self.rules.http_base)
        self.http[n] = port + self.rules.http_stride
        return port

    def next_bootstrap(self, n: int) -> int:
        port = self.bootstrap.get(n, self.rules.bootstrap_base)
        self.bootstrap[n] = port + 1
        return port


def allocate(r: Resources) -> list[_Endpoint]:
    """Workers onto nodes as srtctl packs them: prefill, then decode (on a fresh node when prefill left one
    partly used), then aggregated; a worker of a node or more takes whole nodes, smaller ones fill a node's
    GPUs in order (one per node with spread_workers)."""
    out: list[_Endpoint] = []
    per_node, total = r.gpus_per_node, r.total_nodes
    at, offset = 0, 0
    for mode in ("prefill", "decode", "agg"):
        gpus, count = r.gpus_per(mode), r.workers(mode)
        if mode == "decode" and count and offset and at + 1 < total:
            at, offset = at + 1, 0
        for i in range(count):
            if gpus >= per_node:
                span = -(-gpus // per_node)
                out.append(_Endpoint(mode, i, list(range(at, at + span)), list(range(per_node))))
                at += span
                continue
            if offset + gpus > per_node:
                at, offset = at + 1, 0
            out.append(_Endpoint(mode, i, [at], list(range(offset, offset + gpus))))
            offset += gpus
            if offset >= per_node or r.spread_workers:
                at, offset = at + 1, 0
    used = max((n for ep in out for n in ep.nodes), default=0) + 1
    if used > total:
        raise ServelabError(f"the workers need {used} nodes, the recipe has {total}", field="resources")
    return out


def _flags(config: dict[str, Any]) -> list[str]:
    """A backend config mapping as srtctl writes it on the command line: sorted keys, `_` -> `-`, a true
    boolean a bare flag, a list its values after the flag."""
    args: list[str] = []
    for key, value in sorted(config.items()):
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                args.append(flag)
        elif isinstance(value, list):
            args.append(flag)
            args.extend(str(v) for v in value)
        elif value is not None:
            args += [flag, str(value)]
    return args


# srt-slurm's connector shorthands, as the JSON vLLM's --kv-transfer-config takes (anything else: as written)
CONNECTORS = {
    "nixl": {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
    "lmcache": {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"},
    "kvbm": {
        "kv_connector": "DynamoConnector",
        "kv_connector_module_path": "kvbm.vllm_integration.connector",
        "kv_role": "kv_both",
    },
}

ROLE = {"prefill": Role.PREFILL, "decode": Role.DECODE, "agg": Role.WORKER}


def render(recipe: SrtRecipe, source: str, model_path: str, revision: str) -> Deployment:
    """The deployment srtctl at `revision` starts for `recipe` (`model_path`: what its model alias resolves
    to)."""
    rules, verified = REVISIONS.get(revision, (None, frozenset()))
    if rules is None:
        raise ServelabError(
            f"srt-slurm {revision} is not a revision servelab knows the rules of", field="revision"
        )
    frontend = recipe.frontend.type
    if frontend == Engine.VLLM and (
        revision not in VLLM_FRONTEND_REVISIONS
        or recipe.backend.type != Engine.VLLM
        or recipe.resources.disaggregated
        or recipe.resources.workers("agg") != 1
    ):
        raise ServelabError(
            f"vLLM's own frontend is rendered for one aggregated vLLM worker at srt-slurm "
            f"{', '.join(sorted(r[:12] for r in VLLM_FRONTEND_REVISIONS))} only",
            field="frontend.type",
        )
    if frontend not in ("dynamo", Engine.VLLM) and frontend not in OTHER_FRONTENDS.get(revision, frozenset()):
        raise ServelabError(
            f"{frontend!r}: only Dynamo's frontend is rendered yet at srt-slurm {revision[:12]}",
            field="frontend.type",
        )
    # SGLang's router as captured: alone, before aggregated SGLang HTTP workers (disaggregated workers, gRPC
    # ones or several routers behind nginx are not among InferenceX's recipes, so not checked: refused)
    if frontend == Engine.SGLANG and (
        recipe.backend.type != Engine.SGLANG
        or recipe.resources.disaggregated
        or any(recipe.backend.config(m).get("grpc-mode") for m in ROLE)
        or (recipe.frontend.enable_multiple_frontends and recipe.resources.total_nodes > 1)
    ):
        raise ServelabError(
            "SGLang's router is rendered alone in front of aggregated SGLang HTTP workers only",
            field="frontend.type",
        )
    if recipe.backend.mooncake_kv_store is not None and (
        revision not in MOONCAKE_REVISIONS or recipe.backend.type != Engine.VLLM
    ):
        raise ServelabError(
            "a Mooncake KV store is rendered for vLLM workers at srt-slurm "
            f"{', '.join(sorted(r[:12] for r in MOONCAKE_REVISIONS))} only",
            field="backend.mooncake_kv_store",
        )
    if recipe.backend.kv_events_config and revision not in KV_EVENTS_REVISIONS:
        raise ServelabError(
            f"KV-event publishing (its ports) is not rendered yet at srt-slurm {revision[:12]}",
            field="backend.kv_events_config",
        )
    if recipe.backend.dp_launch_mode == "per_node" and rules.vllm_dp == "config":
        raise ServelabError(
            f"srt-slurm {revision[:12]} has no dp_launch_mode per_node", field="backend.dp_launch_mode"
        )
    if recipe.backend.type not in verified:
        raise ServelabError(
            f"servelab's rendering of srt-slurm {revision[:12]}'s {recipe.backend.type} workers is not "
            "verified against srtctl yet",
            field="backend.type",
        )
    plane = recipe.dynamo.request_plane or rules.request_plane
    r, b = recipe.resources, recipe.backend
    # the infra node (NATS, etcd) is node 0; with a dedicated one the workers (and the head) start at node 1
    first = 1 if recipe.infra.etcd_nats_dedicated_node else 0
    endpoints = allocate(r)
    for ep in endpoints:
        ep.nodes = [n + first for n in ep.nodes]
    nodes = r.total_nodes + first
    model_name = model_path.removeprefix("hf:").rstrip("/").rsplit("/", 1)[-1]
    served = b.served_model_name(model_name)
    processes: list[NodeProcess] = [
        NodeProcess(role=Role.SIDE, node=0, argv=["nats-server", "-js"], port=NATS_PORT, health_path=None),
        NodeProcess(
            role=Role.SIDE,
            node=0,
            argv=[
                "etcd",
                "--listen-client-urls",
                f"http://0.0.0.0:{ETCD_PORT}",
                "--advertise-client-urls",
                f"http://{node(0)}:{ETCD_PORT}",
            ],
            port=ETCD_PORT,
            health_path="/health",
        ),
    ]
    store = b.mooncake_kv_store
    if store is not None:  # its RPC port, HTTP metadata server (one above) and metrics (two above)
        master = ["mooncake_master", f"--port={MOONCAKE_MASTER_PORT}", "--enable_http_metadata_server=true"]
        master += [
            f"--http_metadata_server_port={MOONCAKE_MASTER_PORT + 1}",
            "--eviction_high_watermark_ratio=0.9",
        ]
        master += ["--default_kv_lease_ttl=10000", "--rpc_thread_num=16", "--enable_metric_reporting=true"]
        master += [f"--metrics_port={MOONCAKE_MASTER_PORT + 2}", *store.master_extra_args]
        processes.append(
            NodeProcess(role=Role.SIDE, node=0, argv=master, port=MOONCAKE_MASTER_PORT, health_path=None)
        )
    ports = _Ports(rules)
    sys_port = rules.sys_base
    own_frontend = recipe.frontend.type == Engine.VLLM  # `vllm serve` serves the endpoint itself
    leaders: list[tuple[str, int, int, int | None]] = []  # (mode, node, HTTP port, bootstrap port)
    # TensorRT-LLM's workers are MPI ranks: srtctl starts each endpoint as one srun over its nodes (a task
    # per GPU, --mpi=pmix), every rank with the endpoint's first process's environment
    mpi = b.type == Engine.TRTLLM
    for group, ep in enumerate(endpoints):
        mode = ep.mode
        boot = ports.next_bootstrap(ep.nodes[0]) if mode == "prefill" else None
        procs = _layout(recipe, rules, ep, ports)
        leader_env: dict[str, str] | None = None
        for proc in procs:
            n = proc.node
            leader = proc is procs[0]
            # a process per node of vLLM's per-node data-parallel mode serves HTTP on each
            per_node = proc.dp_rank is not None and b.dp_launch_mode == "per_node"
            http = ports.next_http(n) if leader or per_node else 0
            kv_port = ports.next_kv_events(len(proc.gpus) if per_node else 1)
            argv = _worker_argv(recipe, rules, plane, mode, ep, proc, (http, boot, sys_port, kv_port), served)
            env = {
                "HEAD_NODE_IP": node(first),
                "ETCD_ENDPOINTS": f"http://{node(0)}:{ETCD_PORT}",
                "NATS_SERVER": f"nats://{node(0)}:{NATS_PORT}",
                "DYN_SYSTEM_PORT": str(sys_port),
                "DYN_REQUEST_PLANE": plane,
                **b.environment(mode),
                **recipe.environment,
            }
            if store is not None:  # the worker's own address unless the store's env names one
                env["MOONCAKE_LOCAL_HOSTNAME"] = node(n)
                env.update(store.env)
                env["MOONCAKE_MASTER"] = f"{node(0)}:{MOONCAKE_MASTER_PORT}"
                env["MOONCAKE_TE_META_DATA_SERVER"] = f"http://{node(0)}:{MOONCAKE_MASTER_PORT + 1}/metadata"
                env["MOONCAKE_CONFIG_PATH"] = f"/logs/{MOONCAKE_STORE_CONFIG}"
            # vLLM where it takes --device-ids names its GPUs itself (CUDA_VISIBLE_DEVICES only if asked)
            names_gpus = b.type == Engine.VLLM and rules.vllm_device_ids and not b.set_cuda_visible_devices
            if len(proc.gpus) < r.gpus_per_node and not names_gpus:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, proc.gpus))
            if mpi:  # the ranks share the srun's environment: the leader's DYN_SYSTEM_PORT on every node
                leader_env = env if leader_env is None else leader_env
                env = dict(leader_env)
            processes.append(
                NodeProcess(
                    role=ROLE[mode],
                    node=n,
                    argv=argv,
                    env=env,
                    port=(FRONTEND_PORT if own_frontend else http)
                    if leader and b.type != Engine.TRTLLM
                    else None,
                    health_path="/health" if own_frontend and leader else None,
                    gpus=len(proc.gpus),
                    mpi_group=group if mpi else None,
                )
            )
            if leader:
                leaders.append((mode, n, http, boot))
            sys_port += 1
    decode_leaders = [ep.nodes[0] for ep in endpoints if ep.mode == "decode"]
    if not own_frontend:
        processes += _frontends(recipe, first, nodes, plane, decode_leaders, leaders)
    # the endpoint: the frontend (nginx before several); with vLLM's own, the worker's leader serving it
    endpoint = next(
        i
        for i, p in enumerate(processes)
        if p.role in (Role.ROUTER, Role.WORKER) and p.port == FRONTEND_PORT and p.health_path
    )
    # the files the argv name under /logs (srtctl's log directory, mounted there in every container)
    files = {}
    if b.type == Engine.TRTLLM:
        for mode in sorted({ep.mode for ep in endpoints}):
            files[f"trtllm_config_{mode}.yaml"] = safe_dump(b.config(mode))
    behind = [p.node for p in processes if p.role == Role.ROUTER and p.port == FRONTEND_BEHIND_NGINX]
    if behind:
        files["nginx.conf"] = _nginx_conf(behind)
    if store is not None:  # its master's address filled in, as the workers' connector reads it
        config = {**store.store_config, "master_server_address": f"{node(0)}:{MOONCAKE_MASTER_PORT}"}
        files[MOONCAKE_STORE_CONFIG] = json.dumps(config, indent=2)
    return Deployment(nodes=nodes, processes=processes, endpoint=endpoint, files=files)


def _data_parallel_size(recipe: SrtRecipe, mode: str) -> Any:
    """vLLM's data-parallel size for the role (None: not in data-parallel mode)."""
    if recipe.backend.type != Engine.VLLM:
        return None
    config = recipe.backend.config(mode)
    size = config.get("data-parallel-size")
    return size if size is not None else config.get("data_parallel_size")


def _layout(recipe: SrtRecipe, rules: Rules, ep: _Endpoint, ports: _Ports) -> list[_Proc]:
    """The endpoint's worker processes: one per node; in vLLM's data-parallel mode one per GPU (per_gpu, the
    default) or one per node owning its GPUs' ranks (per_node)."""
    size = _data_parallel_size(recipe, ep.mode)
    if size is None or recipe.frontend.type == Engine.VLLM:  # `vllm serve` runs its ranks itself
        return [_Proc(n, rank, ep.gpus) for rank, n in enumerate(ep.nodes)]
    rpc = None if rules.vllm_dp == "config" else ports.next_dp_rpc(ep.nodes[0])
    if recipe.backend.dp_launch_mode == "per_node":
        total = len(ep.nodes) * len(ep.gpus)
        if size != total:
            raise ServelabError(
                f"{ep.mode} data-parallel-size {size} is not the endpoint's {total} GPUs",
                field="backend.vllm_config",
            )
        return [_Proc(n, i, ep.gpus, i * len(ep.gpus), rpc) for i, n in enumerate(ep.nodes)]
    pairs = [(i, n, g) for i, n in enumerate(ep.nodes) for g in sorted(ep.gpus)]
    return [_Proc(n, i, [g], dp_rank, rpc) for dp_rank, (i, n, g) in enumerate(pairs)]


def _kv_events(recipe: SrtRecipe, mode: str, port: int) -> list[str]:
    """--kv-events-config for a worker of `mode`: ZMQ publishing on `port` where kv_events_config turns it
    on (true: prefill and decode; per role: true, or a mapping over the defaults)."""
    b = recipe.backend
    setting: Any = b.kv_events_config
    if isinstance(setting, dict):
        setting = setting.get("aggregated" if mode == "agg" else mode)
    elif setting is True and mode == "agg":
        setting = None
    if setting is not True and not isinstance(setting, dict):
        return []
    events: dict[str, Any] = {"publisher": "zmq", "topic": "kv-events"}
    if b.type == Engine.VLLM:
        events["enable_kv_cache_events"] = True
    events.update(setting if isinstance(setting, dict) else {})
    events["endpoint"] = f"tcp://*:{port}"
    return ["--kv-events-config", json.dumps(events)]


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in {"1", "true", "yes", "on"})


def _data_parallel_flags(rules: Rules, per_node: bool, proc: _Proc, leader: str, config: dict) -> list[str]:
    """vLLM's data-parallel flags of one process (the keys they replace taken out of `config`)."""
    kebab, snake = "data-parallel-rpc-port", "data_parallel_rpc_port"
    if not per_node:
        rpc = proc.dp_rpc or config.pop(kebab, None) or config.pop(snake, DP_RPC_DEFAULT)
        if proc.dp_rpc:  # the recipe's port is dropped for the allocated one
            config.pop(kebab, None)
            config.pop(snake, None)
        address = ["--data-parallel-address", leader, "--data-parallel-rpc-port", str(rpc)]
        return ["--data-parallel-rank", str(proc.dp_rank), *address]
    config.pop(kebab, None)
    config.pop(snake, None)
    for key in ("data-parallel-size-local", "data-parallel-start-rank"):
        config.pop(key, None)
        config.pop(key.replace("-", "_"), None)
    flags = ["--data-parallel-size-local", str(len(proc.gpus)), "--data-parallel-start-rank"]
    flags += [
        str(proc.dp_rank),
        "--data-parallel-address",
        leader,
        "--data-parallel-rpc-port",
        str(proc.dp_rpc),
    ]
    if rules.vllm_dp == "hybrid":  # every node's process registers with the frontend
        for key in ("data-parallel-hybrid-lb", "data_parallel_hybrid_lb", "headless"):
            config.pop(key, None)
        return [*flags, "--data-parallel-hybrid-lb"]
    hybrid = config.get("data-parallel-hybrid-lb", config.get("data_parallel_hybrid_lb", False))
    return flags + (["--headless"] if proc.dp_rank and not _truthy(hybrid) else [])


def _worker_argv(
    recipe: SrtRecipe,
    rules: Rules,
    plane: str,
    mode: str,
    ep: _Endpoint,
    proc: _Proc,
    ports: tuple[int, int | None, int, int],
    served: str,
) -> list[str]:
    """One worker process's argv (`ports`: its HTTP, bootstrap, DYN_SYSTEM_PORT and KV-event ports)."""
    http, boot, sys_port, kv_port = ports
    events = _kv_events(recipe, mode, kv_port)
    rank = proc.rank
    b = recipe.backend
    # a Hugging Face model (`hf:org/name`) is fetched by the engine, a local one is mounted at /model
    path = recipe.model.path
    model = path.removeprefix("hf:") if path.startswith("hf:") else "/model"
    config = b.config(mode)
    if b.type == Engine.TRTLLM:
        argv = (
            ["numactl", "-m", "0,1"]
            if recipe.resources.gpu_type in ("gb200", "gb300") and mode != "agg"
            else []
        )
        argv += ["trtllm-llmapi-launch", "python3", "-m", f"dynamo.{b.type}", "--model-path", "/model"]
        argv += ["--served-model-name", served]
        if mode != "agg":
            argv += ["--disaggregation-mode", mode]
        return argv + ["--extra-engine-args", f"/logs/trtllm_config_{mode}.yaml", "--request-plane", plane]
    leader = node(ep.nodes[0])
    if b.type == Engine.SGLANG:
        if rules.sglang_drops_served_name:  # the flags srtctl writes itself
            for k in ("model-path", "model_path", "served-model-name", "served_model_name"):
                config.pop(k, None)
        # with SGLang's own router the workers are SGLang's server, not Dynamo's (no dump, no request plane)
        own = recipe.frontend.type == Engine.SGLANG
        module = "sglang.launch_server" if own else f"dynamo.{b.type}"
        argv = ["python3", "-m", module, "--model-path", model, "--served-model-name", served]
        argv += ["--host", "0.0.0.0", "--port", str(http)]
        if rules.sglang_nccl_base is not None:
            config.pop("nccl-port", None)
            config.pop("nccl_port", None)
            argv += ["--nccl-port", str(rules.sglang_nccl_base + sys_port - rules.sys_base)]
        if mode != "agg":
            argv += ["--disaggregation-mode", mode]
            if boot is not None and rules.sglang_bootstrap_flag:
                argv += ["--disaggregation-bootstrap-port", str(boot)]
        if len(ep.nodes) > 1:
            argv += ["--dist-init-addr", f"{leader}:{rules.dist_init}", "--nnodes", str(len(ep.nodes))]
            argv += ["--node-rank", str(rank)]
        if own:
            return argv + events + _flags(config)
        argv += ["--dump-config-to", f"/logs/{node(proc.node)}_config.json", *events]
        return argv + (["--request-plane", plane] if rules.request_plane_flag else []) + _flags(config)
    if recipe.frontend.type == Engine.VLLM:
        return _vllm_serve_argv(recipe, ep, proc, model, served, config)
    # vllm
    argv = ["python3", "-m", f"dynamo.{b.type}", "--model", model, "--served-model-name", served]
    if mode != "agg":
        argv += ["--disaggregation-mode", mode]
    connector = config.pop("connector", None)
    connector = connector if connector is not None else b.connector
    if connector and connector not in ("null", "none"):
        preset = CONNECTORS.get(connector.lower())
        argv += ["--kv-transfer-config", json.dumps(preset) if preset else connector]
    if rules.vllm_device_ids and not b.set_cuda_visible_devices:
        argv += ["--device-ids", ",".join(map(str, proc.gpus))]
    if proc.dp_rank is not None:
        argv += _data_parallel_flags(rules, b.dp_launch_mode == "per_node", proc, leader, config)
    elif len(ep.nodes) > 1:
        argv += ["--master-addr", leader, "--nnodes", str(len(ep.nodes)), "--node-rank", str(rank)]
        if rank:
            argv.append("--headless")
    if rules.request_plane_flag:
        argv += ["--request-plane", plane]
    argv += ["--dump-config-to", f"/logs/{node(proc.node)}_config.json", *events]
    return argv + _flags(config)


# what srt-slurm sets itself for `vllm serve` (a recipe's value dropped), and what a headless rank refuses
VLLM_SERVE_OWNED = frozenset({"headless", "host", "port", "master-addr", "nnodes", "node-rank"})
VLLM_API_SERVER_ONLY = frozenset({"api-server-count"})


def _vllm_serve_argv(
    recipe: SrtRecipe, ep: _Endpoint, proc: _Proc, model: str, served: str, config: dict[str, Any]
) -> list[str]:
    """A worker of vLLM's own frontend: `vllm serve`, the first node serving the endpoint, the others
    headless ranks of it."""
    for key in [k for k in config if k.replace("_", "-") in VLLM_SERVE_OWNED]:
        del config[key]
    config.pop("connector", None)
    config.setdefault("served-model-name", served)
    argv = [str(recipe.backend.type), "serve", model]  # vLLM's own CLI
    if proc.rank == 0:
        argv += ["--host", "0.0.0.0", "--port", str(FRONTEND_PORT)]
    if len(ep.nodes) > 1:
        argv += [
            "--master-addr",
            node(ep.nodes[0]),
            "--nnodes",
            str(len(ep.nodes)),
            "--node-rank",
            str(proc.rank),
        ]
        if proc.rank:
            argv.append("--headless")
            for key in [k for k in config if k.replace("_", "-") in VLLM_API_SERVER_ONLY]:
                del config[key]
    if not recipe.backend.set_cuda_visible_devices:
        argv += ["--device-ids", ",".join(map(str, proc.gpus))]
    return argv + _flags(config)


def _nginx_conf(frontend_nodes: list[int]) -> str:
    """nginx on the head node spreading requests over the frontends (round robin), unbuffered and without a
    timeout a long generation could hit."""
    upstream = "".join(f"        server {node(n)}:{FRONTEND_BEHIND_NGINX};\n" for n in frontend_nodes)
    return (
        "worker_processes auto;\n"
        "events { worker_connections 65535; multi_accept on; }\n"
        "http {\n"
        "    access_log off;\n"
        f"    upstream frontends {{\n{upstream}    }}\n"
        "    server {\n"
        f"        listen {FRONTEND_PORT};\n"
        "        location / {\n"
        "            proxy_pass http://frontends;\n"
        "            proxy_buffering off;\n"
        "            proxy_read_timeout 24h;\n"
        "            proxy_send_timeout 24h;\n"
        "        }\n"
        "    }\n"
        "}\n"
    )


def _router_argv(port: int, leaders: list[tuple[str, int, int, int | None]]) -> list[str]:
    """SGLang's router in front of the aggregated workers' leaders (their URLs)."""
    urls = [f"http://{node(n)}:{http}" for _, n, http, _ in leaders]
    argv = ["python", "-m", "sglang_router.launch_router", "--worker-urls", *urls]
    return [*argv, "--host", "0.0.0.0", "--port", str(port)]


def _frontends(
    recipe: SrtRecipe,
    head: int,
    nodes: int,
    plane: str,
    decode_leaders: list[int],
    leaders: list[tuple[str, int, int, int | None]],
) -> list[NodeProcess]:
    """One frontend (Dynamo's, or SGLang's router) on the head node; or, with several worker nodes and
    multiple frontends on, nginx there in front of frontends on the other worker nodes."""
    fe = recipe.frontend
    args: list[str] = []
    for key, value in (fe.args or {}).items():
        if value is True:
            args.append(f"--{key}")
        elif value is not False and value is not None:
            args += [f"--{key}", str(value)]
    env = {
        "ETCD_ENDPOINTS": f"http://{node(0)}:{ETCD_PORT}",
        "NATS_SERVER": f"nats://{node(0)}:{NATS_PORT}",
        "DYN_REQUEST_PLANE": plane,
        **(fe.env or {}),
    }

    def frontend(port: int) -> list[str]:
        if fe.type == Engine.SGLANG:
            return [*_router_argv(port, leaders), *args]
        return ["python3", "-m", "dynamo.frontend", f"--http-port={port}", *args]

    if fe.type == Engine.SGLANG:  # the router talks to the workers directly: no etcd, NATS or plane
        env = dict(fe.env or {})
    if nodes - head == 1 or not fe.enable_multiple_frontends:
        argv = frontend(FRONTEND_PORT)
        at = head
        if fe.orchestrator_placement != "head":  # on a decode worker's leader node
            if not decode_leaders:
                raise ServelabError(
                    f"{fe.orchestrator_placement!r} but the recipe has no decode workers",
                    field="frontend.orchestrator_placement",
                )
            at = decode_leaders[0 if fe.orchestrator_placement == "first_decode" else -1]
        return [
            NodeProcess(
                role=Role.ROUTER, node=at, argv=argv, env=env, port=FRONTEND_PORT, health_path="/health"
            )
        ]
    count = min(fe.num_additional_frontends + 1, nodes - head - 1)
    out = [
        NodeProcess(
            role=Role.ROUTER,
            node=head,
            argv=["bash", "-c", "nginx -c /logs/nginx.conf -g 'daemon off;'"],
            port=FRONTEND_PORT,
            health_path="/health",
        )
    ]
    for n in range(head + 1, head + count + 1):
        argv = frontend(FRONTEND_BEHIND_NGINX)
        out.append(
            NodeProcess(
                role=Role.ROUTER,
                node=n,
                argv=argv,
                env=env,
                port=FRONTEND_BEHIND_NGINX,
                health_path="/health",
            )
        )
    return out
