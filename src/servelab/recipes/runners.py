"""Runners registry: CI runner labels -> nodes, each node of a kind with known hardware (tied to system
specs).

The label -> node-list mapping is InferenceX's runners.yaml form unchanged; servelab adds `node-kinds` (the
node name without its `_N` suffix) with the system spec, GPUs per node, CPU DRAM and the CI queue, and
`gpu-profiles` (perf-eval `gpu:` keys -> a runner label).
"""

from __future__ import annotations

import re

from pydantic import Field, ValidationError

from servelab.errors import ServelabError, closest
from servelab.recipes.inferencex import IxModel
from servelab.recipes.tokens import Label, Name
from servelab.specs import load_system

_SUFFIX = re.compile(r"_\d+$")


class NodeKind(IxModel):
    system: Name = Field(description="servelab system spec name, e.g. b200_sxm")
    gpus_per_node: int = Field(ge=1)
    cpu_dram_gib: int | None = Field(None, ge=1)
    queue: Label = Field(description="CI queue (Buildkite agents queue, GitHub runs-on label)")
    agents: dict[Name, Label] = Field(default_factory=dict, description="extra Buildkite agent tags")


class RunnersFile(IxModel):
    runners: dict[Label, list[Label]]
    node_kinds: dict[Label, NodeKind]
    gpu_profiles: dict[Name, Label] = Field(default_factory=dict)


class Runner(IxModel):
    label: str
    nodes: list[str]
    kind: str
    node: NodeKind


class Registry:
    def __init__(self, file: RunnersFile, source: str):
        self.file = file
        self.source = source
        self.runners: dict[str, Runner] = {}
        for label, nodes in file.runners.items():
            if not nodes:
                raise ServelabError(f"{source}: runners.{label}: needs at least one node")
            kinds = {_SUFFIX.sub("", n) for n in nodes}
            if len(kinds) != 1:
                raise ServelabError(f"{source}: runners.{label}: nodes mix kinds {sorted(kinds)}")
            kind = kinds.pop()
            if kind not in file.node_kinds:
                raise ServelabError(
                    f"{source}: runners.{label}: node kind {kind!r} is not in node-kinds"
                    + closest(kind, list(file.node_kinds))
                )
            self.runners[label] = Runner(label=label, nodes=nodes, kind=kind, node=file.node_kinds[kind])
        for gpu, label in file.gpu_profiles.items():
            if label not in self.runners:
                raise ServelabError(f"{source}: gpu-profiles.{gpu}: runner {label!r} is not defined")

    def get(self, label: str) -> Runner:
        if label not in self.runners:
            raise ServelabError(
                f"runner {label!r} is not a label in {self.source}" + closest(label, list(self.runners))
            )
        return self.runners[label]

    def label_for_gpu(self, gpu: str) -> str:
        if gpu not in self.file.gpu_profiles:
            raise ServelabError(
                f"gpu {gpu!r} has no entry in gpu-profiles of {self.source}"
                + closest(gpu, list(self.file.gpu_profiles))
            )
        return self.file.gpu_profiles[gpu]

    def gpu_for_label(self, label: str) -> str:
        """The perf-eval `gpu:` key that maps to this runner label, else the GPU of its system (b200_sxm ->
        B200), as perf-eval names it."""
        mapped = [gpu for gpu, lab in self.file.gpu_profiles.items() if lab == label]
        return mapped[0] if mapped else self.get(label).node.system.split("_")[0].upper()

    def check_against_specs(self) -> list[str]:
        """Problems where a node kind disagrees with its system spec (unknown system, wrong GPU count)."""
        problems = []
        for name, kind in self.file.node_kinds.items():
            try:
                system = load_system(kind.system)
            except ServelabError as e:
                problems.append(f"{self.source}: node-kinds.{name}.system: {e}")
                continue
            if kind.gpus_per_node != system.gpus_per_node:
                problems.append(
                    f"{self.source}: node-kinds.{name}.gpus-per-node is {kind.gpus_per_node} but system "
                    f"{system.name} has {system.gpus_per_node} GPUs per node"
                )
        return problems


def parse_runners(data: object, source: str) -> Registry:
    try:
        return Registry(RunnersFile.model_validate(data), source)
    except ValidationError as e:
        raise ServelabError.from_validation(e, source) from None
