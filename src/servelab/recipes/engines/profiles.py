"""InferenceX launch profiles: the flags, environment and engine options upstream's launch scripts add.

InferenceX keeps most of a deployment in shell scripts (`benchmarks/single_node/...sh`), picked by model
prefix, precision, GPU, framework and speculative decoding, some of whose flags depend on the layout and the
job's concurrency. servelab keeps that knowledge as data: `data/launch-profiles.json`, one profile per script,
generated from the pinned scripts by `scripts/ix_launch.py profiles` (never edited by hand). A profile holds
what every job of the script shares and, per variant, what depends on tp / ep / dp-attn / isl / osl /
concurrency: server flags, environment, engine options, and the benchmark client's options (`client`: the
chat template, DeepSeek-V4 framing, request API... the script asks of InferenceX's client). An adapter's own
flags (from the recipe's typed fields and the arm's layout) win over a profile's flag of the same name;
everything rendered is fingerprinted.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import Field, ValidationError

from servelab.engines.grammar import Grammar, merge_options
from servelab.engines.names import Engine, engine_of, is_engine
from servelab.errors import ServelabError
from servelab.recipes.engines.base import Launch, base_env
from servelab.recipes.inferencex import IxModel
from servelab.recipes.tokens import ArgText, EnvName, ModelId, Name, Text

PROFILES_PATH = Path(__file__).resolve().parents[1] / "data" / "launch-profiles.json"
CLUSTER_PREFIX = "cluster:"
FIXED_SEQ_LEN: Final = "fixed-seq-len"
AGENTIC: Final = "agentic-coding"
MODEL_SLOT = "{model}"

# A flag of the adapter's argv, as `drop` lists it (the adapter's spelling, hyphenated; read through the
# engine's grammar, so any spelling of the flag matches).
Flag = Annotated[str, Field(pattern=r"^--?[A-Za-z][A-Za-z0-9_.-]*$")]
# A file the runner writes beside the server: relative, and no segment starts with a dot (so no `..`).
RelativePath = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*$")
]


@dataclass(frozen=True)
class JobPoint:
    """What a launch may depend on beyond the arm: the job's scenario (whose scripts upstream runs), its
    sequence lengths and concurrency, and an agentic job's KV offload tier and DRAM budget."""

    isl: int | None = None
    osl: int | None = None
    conc: int | None = None
    scenario: str = FIXED_SEQ_LEN
    kv_offloading: str | None = None
    total_cpu_dram_gb: int | None = None


def hardware_of(runner: str) -> str:
    """The GPU part of a runner label, as InferenceX's launchers name their scripts: b200-dgxc -> b200."""
    return runner.removeprefix(CLUSTER_PREFIX).split("-", 1)[0]


class ProfileKey(IxModel):
    """What selects an upstream launch script."""

    model_prefix: Name
    precision: Name
    hardware: Name
    framework: Name
    spec_decoding: Name
    scenario: Literal["fixed-seq-len", "agentic-coding"] = FIXED_SEQ_LEN


class When(IxModel):
    """The jobs a variant applies to; a field left out matches any value. conc-min/conc-max are inclusive."""

    tp: int | None = None
    ep: int | None = None
    dp_attn: bool | None = None
    isl: int | None = None
    osl: int | None = None
    conc_min: int | None = None
    conc_max: int | None = None
    kv_offloading: Literal["none", "dram"] | None = None
    total_cpu_dram_gb: int | None = None

    def matches(self, arm, job: JobPoint) -> bool:
        layout = (
            ("tp", arm.tp_),
            ("ep", arm.ep_),
            ("dp_attn", arm.dp_attn_),
            ("isl", job.isl),
            ("osl", job.osl),
            ("kv_offloading", job.kv_offloading),
            ("total_cpu_dram_gb", job.total_cpu_dram_gb),
        )
        for name, value in layout:
            want = getattr(self, name)
            if want is not None and value is not None and want != value:
                return False
        if job.conc is None:
            return True
        return (self.conc_min is None or job.conc >= self.conc_min) and (
            self.conc_max is None or job.conc <= self.conc_max
        )


class ClientOptions(IxModel):
    """The benchmark client options an upstream script chooses (its run_benchmark_serving arguments, read by
    servelab.recipes.ix_client), named as `servelab bench` names them; None: the script passes none."""

    backend: Literal["openai", "openai-chat", "vllm"] | None = None
    endpoint: Text | None = None
    use_chat_template: bool | None = None
    dsv4: bool | None = None
    trust_remote_code: bool | None = None
    tokenizer_mode: Name | None = None

    def merged(self, other: ClientOptions) -> ClientOptions:
        """These options with `other`'s set ones over them."""
        return ClientOptions.model_validate(self.dump() | other.dump())


class Extras(IxModel):
    """Flags (argv tokens), environment and engine options (TensorRT-LLM's YAML) added to a launch, and the
    adapter's own flags that upstream does not pass (or passes with another value: then `args` has
    upstream's), and the benchmark client's options. `{model}` in a value stands for the recipe's model."""

    args: list[ArgText] = Field(default_factory=list)
    env: dict[EnvName, Text] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)
    files: dict[RelativePath, str] = Field(
        default_factory=dict, description="Files a flag names (chat templates): relative path -> content."
    )
    drop: list[Flag] = Field(default_factory=list)
    client: ClientOptions = Field(default_factory=ClientOptions)
    refused: Text | None = Field(
        None,
        description="Why upstream's script launches no server for these jobs under servelab's stub "
        "servers (its last line of output): such a job has no launch.",
    )


class Variant(Extras):
    when: When


class LaunchProfile(ProfileKey, Extras):
    """One upstream script: what all its jobs share (args, env, options) and what varies (variants)."""

    script: Text = Field(description="The upstream script, relative to InferenceX's benchmarks/.")
    script_sha256: Text | None = Field(
        None, description="sha256 of the script the profile was captured from (script_sha256)."
    )
    models: list[ModelId] = Field(
        min_length=1,
        description="The checkpoints InferenceX runs the script for; another checkpoint under the same model "
        "prefix (DeepSeek-V4-Flash beside -Pro) is another deployment and gets no profile.",
    )
    variants: list[Variant] = Field(default_factory=list)

    def resolve(self, arm, job: JobPoint, model: str) -> Extras:
        """The shared extras plus those of the first variant that matches the arm and job."""
        args, env, options, drop = list(self.args), dict(self.env), dict(self.options), list(self.drop)
        files, client, refused = dict(self.files), self.client, self.refused
        for variant in self.variants:
            if variant.when.matches(arm, job):
                args += variant.args
                env |= variant.env
                options = merge_options(options, variant.options)
                files |= variant.files
                drop += variant.drop
                client = client.merged(variant.client)
                refused = variant.refused or refused
                break
        return Extras(
            args=[a.replace(MODEL_SLOT, model) for a in args],
            env={k: v.replace(MODEL_SLOT, model) for k, v in env.items()},
            options=options,
            files=files,
            drop=drop,
            client=client,
            refused=refused,
        )


class ProfileTable(IxModel):
    source: Text = Field(description="Upstream repository and commit the scripts were pinned from.")
    profiles: list[LaunchProfile]


def script_sha256(content: bytes) -> str:
    """A launch script's hash, as profiles record it: CRLF read as LF (a checkout on Windows), so only a
    change a shell would see counts."""
    return hashlib.sha256(content.replace(b"\r\n", b"\n")).hexdigest()


def launch_profile_file(path: Path = PROFILES_PATH) -> ProfileTable:
    try:
        return ProfileTable.model_validate(json.loads(path.read_text()))
    except ValidationError as e:
        raise ServelabError.from_validation(e, str(path)) from None


@functools.cache
def profiles_source() -> str:
    """Where the shipped profiles were captured: upstream repository and commit."""
    return launch_profile_file().source


@functools.cache
def _by_key() -> dict[tuple[str, ...], LaunchProfile]:
    """Profiles by (model prefix, precision, hardware, engine, speculative decoding, scenario); InferenceX's
    framework names (`trt`) read as servelab's engines."""
    return {
        (p.model_prefix, p.precision, p.hardware, engine_of(p.framework), p.spec_decoding, p.scenario): p
        for p in launch_profile_file().profiles
        if is_engine(p.framework)
    }


def profile_for(recipe, arm, engine: Engine, scenario: str = FIXED_SEQ_LEN) -> LaunchProfile | None:
    """The upstream launch profile for a recipe's arm on `engine` in a scenario (the agentic scripts are
    others than the fixed-seq-len ones), if InferenceX runs that combination."""
    key = (recipe.model_prefix, recipe.precision, hardware_of(recipe.runner), engine, arm.spec_, scenario)
    profile = _by_key().get(key)
    return profile if profile is not None and recipe.model in profile.models else None


def launch_of(grammar: Grammar, settings, recipe, port: int, extra: Extras) -> Launch:
    """The Launch of an adapter whose server is its grammar's command alone: the typed settings rendered,
    the profile's extras applied, the env and files beside them."""
    argv = apply(grammar, grammar.render(settings).argv, extra)
    return Launch(argv=argv, env=base_env(recipe, extra.env), files=extra.files, port=port)


def apply(grammar: Grammar, argv: list[str], extra: Extras) -> list[str]:
    """The adapter's argv with a profile applied: upstream's dropped flags out, its other flags in (by
    canonical name in the engine's grammar, so `--tp` and `--tp-size` are one SGLang flag)."""
    return grammar.merged(grammar.without(argv, extra.drop), extra.args)
