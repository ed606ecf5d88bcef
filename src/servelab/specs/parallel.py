"""Parallel: how one replica of a model is split over GPUs, and the checks that it can be."""

from pydantic import BaseModel, ConfigDict, Field

from servelab.errors import ServelabError
from servelab.specs.model import ModelSpec


class Parallel(BaseModel):
    """tp GPUs per pipeline stage, pp stages. With dp_attn, attention runs data parallel (one TP rank
    each, as vLLM's --data-parallel-size and SGLang's --enable-dp-attention do) while MoE layers spread over
    ep ranks.
    """

    model_config = ConfigDict(frozen=True)
    tp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    dp_attn: bool = False
    pp: int = Field(1, ge=1)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def attn_tp(self) -> int:
        return 1 if self.dp_attn else self.tp

    @property
    def attn_dp(self) -> int:
        return self.tp if self.dp_attn else 1

    @property
    def moe_ep(self) -> int:
        return self.ep

    @property
    def moe_tp(self) -> int:
        return self.tp // self.ep

    def label(self) -> str:
        parts = [f"tp{self.tp}"]
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.dp_attn:
            parts.append("dpattn")
        if self.pp > 1:
            parts.append(f"pp{self.pp}")
        return "-".join(parts)

    def kv_heads_local(self, model: ModelSpec) -> int:
        """KV heads each attention rank holds."""
        return model.attention.kv_heads_local(self.attn_tp)

    def heads_local(self, model: ModelSpec) -> int:
        return model.attention.num_heads // self.attn_tp

    # The name shadows pydantic's deprecated classmethod BaseModel.validate; callers across servelab use it.
    def validate(self, model: ModelSpec) -> "Parallel":  # type: ignore[override]
        """Raise a one-line ServelabError when this split cannot serve the model."""
        where = f"parallel {self.label()} for {model.name}"
        if self.tp & (self.tp - 1):
            raise ServelabError(f"{where}: tp must be a power of two (1, 2, 4, 8, ...), got {self.tp}")
        heads = model.attention.num_heads
        if heads % self.attn_tp:
            raise ServelabError(f"{where}: {heads} attention heads do not divide over tp {self.attn_tp}")
        problem = model.attention.split_problem(self.attn_tp)
        if problem:
            raise ServelabError(f"{where}: {problem}")
        moe = model.moe
        if self.ep > 1 and moe is None:
            raise ServelabError(f"{where}: ep {self.ep} needs a MoE model; {model.name} is dense")
        if self.tp % self.ep:
            raise ServelabError(
                f"{where}: ep {self.ep} must divide tp {self.tp} (MoE layers use tp/ep x ep GPUs)"
            )
        if moe is not None:
            if moe.num_experts % self.ep:
                raise ServelabError(f"{where}: {moe.num_experts} experts do not divide over ep {self.ep}")
            if moe.intermediate_size % self.moe_tp:
                raise ServelabError(
                    f"{where}: MoE width {moe.intermediate_size} does not divide over {self.moe_tp}"
                )
        if model.intermediate_size and model.num_dense_layers and model.intermediate_size % self.attn_tp:
            raise ServelabError(
                f"{where}: FFN width {model.intermediate_size} does not divide over tp {self.attn_tp}"
            )
        if self.dp_attn and self.tp == 1:
            raise ServelabError(
                f"{where}: dp_attn needs tp > 1 (it runs tp attention replicas of one rank each)"
            )
        if self.pp > model.num_layers:
            raise ServelabError(f"{where}: pp {self.pp} exceeds the {model.num_layers} layers")
        return self
