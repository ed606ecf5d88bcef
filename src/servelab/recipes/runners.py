"""Runner labels (runners.yaml): CI runner labels -> nodes, each node of a kind with known hardware (tied to
system specs).

InferenceX's runners.yaml is read as it is: `labels:` (a runner label -> the nodes that can take its jobs; a
label may mix node kinds, e.g. h100 spans h100-cw and h100-dgxc-slurm nodes) and `hardware:` (host facts per
label: CPU DRAM available to jobs, GPUs per node). servelab's own file may call the label map `runners:` and
adds `node-kinds` (the node name without its `_N` suffix) with the system spec, GPUs per node, CPU DRAM and CI
queue, and `gpu-profiles` (perf-eval `gpu:` keys -> a runner label). A label whose nodes are not all of one
described kind has no system spec; its CI queue is the label itself, as InferenceX's workflows run on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import Field, ValidationError, model_validator

from servelab.errors import ServelabError, closest
from servelab.recipes.inferencex import TOLERANT, IxModel, Notes
from servelab.recipes.tokens import Label, Name
from servelab.specs import load_system

_SUFFIX = re.compile(r"_\d+$")
# InferenceX names its nodes <gpu>-<site>[-<scheduler>]_<n> (b200-dgxc-slurm_0, mi355x-amds_3): the GPU of a
# node kind, and with it the system spec, where the runners file describes no node kinds
GPU_SYSTEMS = {
    "h100": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
    "mi300x": "mi300x",
    "mi325x": "mi325x",
    "mi355x": "mi355x",
    "rtx6000pro": "rtx_pro_6000",
}


class NodeKind(IxModel):
    system: Name = Field(description="servelab system spec name, e.g. b200_sxm")
    gpus_per_node: int = Field(ge=1)
    cpu_dram_gib: int | None = Field(None, ge=1)
    queue: Label = Field(description="CI queue (Buildkite agents queue, GitHub runs-on label)")
    agents: dict[Name, Label] = Field(default_factory=dict, description="extra Buildkite agent tags")


class RunnerHardware(IxModel):
    """InferenceX's host facts for a runner label (sizes DRAM KV offload of agentic jobs)."""

    available_cpu_dram_mib: int = Field(gt=0)
    gpus_per_node: int = Field(gt=0)


class RunnersFile(IxModel):
    labels: dict[Label, list[Label]] | None = Field(None, description="InferenceX's name for the label map")
    runners: dict[Label, list[Label]] | None = Field(None, description="servelab's name for the label map")
    hardware: dict[Label, RunnerHardware] = Field(default_factory=dict)
    node_kinds: dict[Label, NodeKind] = Field(default_factory=dict)
    gpu_profiles: dict[Name, Label] = Field(default_factory=dict)

    @classmethod
    def read_older(cls, data: Any, notes: Notes) -> tuple[Any, dict[str, Any]]:
        known = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
        if (
            isinstance(data, dict)
            and data
            and not set(data) & known
            and all(isinstance(v, list) for v in data.values())
        ):
            # InferenceX's runners.yaml until mid-2026: the label map itself, with no labels: / hardware:
            notes.add(
                "runners.yaml holds the label map alone (InferenceX's form before mid-2026): read as labels:"
            )
            return {"labels": data}, {}
        return data, {}

    @model_validator(mode="after")
    def _one_map(self) -> RunnersFile:
        if (self.labels is None) == (self.runners is None):
            raise ValueError("expected the label map under labels: (InferenceX) or runners:, exactly one")
        return self

    @property
    def label_map(self) -> dict[str, list[str]]:
        return self.labels if self.labels is not None else self.runners or {}


class Runner(IxModel):
    label: str
    nodes: list[str]
    kinds: list[str]
    node: NodeKind | None = Field(None, description="the node kind, when every node is of one described kind")
    hardware: RunnerHardware | None = None

    @property
    def queue(self) -> str:
        return self.node.queue if self.node else self.label

    @property
    def agents(self) -> dict[str, str]:
        return dict(self.node.agents) if self.node else {}


def gpu_of(kind: str) -> str | None:
    """The system spec of an InferenceX node kind, from the GPU its name starts with (None: unknown)."""
    return GPU_SYSTEMS.get(kind.split("-", 1)[0])


def inferred_kind(label: str, kinds: list[str], hardware: RunnerHardware | None) -> NodeKind | None:
    """The node kind of a label whose nodes all carry one known GPU, for a runners file without node-kinds
    (InferenceX's): its system, GPUs per node and CPU DRAM from the label's hardware facts where it has them
    (else the system spec's), and the label itself as the CI queue, as InferenceX's workflows run on it."""
    systems = {gpu_of(k) for k in kinds}
    if len(systems) != 1 or None in systems:
        return None
    (system,) = systems
    assert system is not None
    gpus = hardware.gpus_per_node if hardware else load_system(system).gpus_per_node
    dram = hardware.available_cpu_dram_mib // 1024 if hardware else None
    return NodeKind(system=system, gpus_per_node=gpus, cpu_dram_gib=dram or None, queue=label)


class RunnerLabels:
    def __init__(self, file: RunnersFile, source: str, notes: Notes | None = None):
        self.file = file
        self.source = source
        self.notes = notes
        self.runners: dict[str, Runner] = {}
        section = "labels" if file.labels is not None else "runners"
        for label, nodes in file.label_map.items():
            if not nodes:
                raise ServelabError(f"{source}: {section}.{label}: needs at least one node")
            kinds = sorted({_SUFFIX.sub("", n) for n in nodes})
            if file.node_kinds:  # a file that describes node kinds describes every kind it uses
                for kind in kinds:
                    if kind not in file.node_kinds:
                        raise ServelabError(
                            f"{source}: {section}.{label}: node kind {kind!r} is not in node-kinds"
                            + closest(kind, list(file.node_kinds))
                        )
            described = [file.node_kinds[k] for k in kinds if k in file.node_kinds]
            node = described[0] if len(kinds) == 1 and len(described) == 1 else None
            if not file.node_kinds and notes is not None:
                node = inferred_kind(label, kinds, file.hardware.get(label))
                if node is not None:
                    notes.add(
                        f"{source}: describes no node kinds; each label's system is read from its nodes' "
                        "names (b200-cw_0 -> b200_sxm) where they all name one GPU"
                    )
            self.runners[label] = Runner(
                label=label, nodes=nodes, kinds=kinds, node=node, hardware=file.hardware.get(label)
            )
        for gpu, label in file.gpu_profiles.items():
            if label not in self.runners:
                raise ServelabError(f"{source}: gpu-profiles.{gpu}: runner {label!r} is not defined")

    def fill_from(self, other: RunnerLabels, labels: Iterable[str]) -> list[str]:
        """Add the labels of `labels` this file lacks and `other` describes, as `other` describes them; the
        labels added. servelab's runners.yaml describes the labels InferenceX's master files run on that
        its runners.yaml does not list (GitHub runner labels of its self-hosted nodes; see that file)."""
        added = [lab for lab in sorted(set(labels)) if lab not in self.runners and lab in other.runners]
        for label in added:
            self.runners[label] = other.runners[label]
            if self.notes is not None:
                runner = other.runners[label]
                kind = (
                    f"{runner.node.system}, {runner.node.gpus_per_node} GPUs per node" if runner.node else ""
                )
                self.notes.add(
                    f"runner label {label!r} is not in {self.source}: read as {other.source} describes it "
                    f"({len(runner.nodes)} {'/'.join(runner.kinds)} node(s){': ' + kind if kind else ''})"
                )
        return added

    def get(self, label: str) -> Runner:
        if label not in self.runners and self.notes is not None:
            found = self._node_kind_as_label(label)
            if found is not None:
                return found
        if label not in self.runners:
            raise ServelabError(
                f"runner {label!r} is not a label in {self.source}" + closest(label, list(self.runners))
            )
        return self.runners[label]

    def _node_kind_as_label(self, label: str) -> Runner | None:
        """A runner that names a node kind rather than a label (InferenceX jobs on `gb300-nv`, whose
        nodes are gb300-nv_0, ...): read tolerantly as that kind's nodes, with a note."""
        nodes = sorted({n for ns in self.file.label_map.values() for n in ns if _SUFFIX.sub("", n) == label})
        if not nodes:
            return None
        assert self.notes is not None
        self.notes.add(
            f"runner {label!r} is not a label in {self.source}: read as the {len(nodes)} node(s) of that kind"
        )
        node = self.file.node_kinds.get(label) or inferred_kind(label, [label], None)
        return self.runners.setdefault(label, Runner(label=label, nodes=nodes, kinds=[label], node=node))

    def node_kind(self, label: str) -> NodeKind:
        """The node kind behind a label, which ties it to a system spec; InferenceX's file has none."""
        runner = self.get(label)
        if runner.node is None:
            raise ServelabError(
                f"runner {label!r}: {self.source} gives no one node kind for its nodes "
                f"({', '.join(runner.kinds)}); add node-kinds to judge it against a system spec"
            )
        return runner.node

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
        if mapped:
            return mapped[0]
        return self.node_kind(label).system.split("_")[0].upper()

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


def parse_runners(data: object, source: str, notes: Notes | None = None) -> RunnerLabels:
    """The runner labels of a runners file; with `notes`, read tolerantly (inferencex.py)."""
    context = None if notes is None else {TOLERANT: notes}
    try:
        return RunnerLabels(RunnersFile.model_validate(data, context=context), source, notes)
    except ValidationError as e:
        raise ServelabError.from_validation(e, source) from None
