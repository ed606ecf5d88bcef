"""Where a calibration's fitted MoE terms reach: the MoE model families and the systems of the rows they were
fitted on, and what the fit's leave-one-family-out cross-validation showed of them.

The MoE terms (EngineProfile's moe_prompt_token_us, eager_moe_route_us, moe_route_us) price what a step's MoE
layers cost on the fit's rows beyond their kernels' price, and what that is depends on the model's MoE path
and the GPU (docs/accuracy.md, "TensorRT-LLM's fitted MoE terms, bounded to their evidence"). The evidence
for carrying them, by case:
- the fit's MoE families on the fit's system: its own rows;
- another MoE family on the fit's system: the fit's cross-validation prices each family left out with a fit on
  the others (TensorRT-LLM's H200 rows: DeepSeek left out TTFT 6.8 %, gpt-oss 9.5 %; calibrated.json
  `cv_by_family`), so there they carry from family to family;
- a fit family on another system: TensorRT-LLM's DeepSeek points on B200 priced without them come out short
  ("TensorRT-LLM's gpt-oss points on B200"), so the term of CPU time (eager_moe_route_us: the host's and the
  engine's Python path) carries with the family (where its experts' backend is the fitted one:
  servelab.engines.trtllm.moe); the terms of GPU time (moe_prompt_token_us, moe_route_us: the fit GPU's
  kernel floors) do not: with them, TensorRT-LLM's DeepSeek decode steps on B200 came out 1.2-1.7x slow, 5-6
  ms a step of 464 MoE layers x routed experts at 12.4 us (docs/accuracy.md, "MoE terms of GPU time stay on
  their GPU", twenty-first session; predict.engines.GPU_MOE_TERMS);
- another family on another system: no evidence carries them, and some refutes them (Qwen3-235B-A22B-FP8 on
  H100 with TensorRT-LLM: AIConfigurator's measured MoE module costs what the roofline charges, and the
  points' TPOT is 1.58x with the terms, 0.99x without: "TensorRT-LLM's Qwen3 points on H100" and the section
  above), so they are not applied there.
"""

from pydantic import BaseModel, ConfigDict

from servelab.errors import ServelabError
from servelab.specs import load_model
from servelab.specs.families import family_of


class FitReach(BaseModel):
    """The rows a calibration fitted an engine's MoE terms on: their systems and their MoE models."""

    model_config = ConfigDict(frozen=True)
    systems: tuple[str, ...]
    moe_models: tuple[str, ...]  # embedded names, of the fit's rows whose model has MoE layers

    @classmethod
    def of(cls, models: list[str], systems: list[str]) -> "FitReach":
        """From a calibration file's record of an engine's fit: the models of its rows and their systems."""
        return cls(systems=tuple(sorted(systems)), moe_models=tuple(sorted(m for m in models if _has_moe(m))))

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted({family_of(m) for m in self.moe_models}))

    def verdict(self, model: str, system: str, runs_as: str | None = None) -> tuple[bool, str]:
        """Whether the terms reach `model` (its name as servelab reads it: ModelSpec.name) on `system`, and
        why; `runs_as`: the family whose MoE code the engine runs it with, where another's
        (servelab.engines.moe_code_family)."""
        family = family_of(model)
        on = f"on {', '.join(self.systems)}"
        if family in self.families:
            own = ", ".join(m for m in self.moe_models if family_of(m) == family)
            return True, f"fitted on this family's rows ({own}) {on}"
        if runs_as in self.families:
            own = ", ".join(m for m in self.moe_models if family_of(m) == runs_as)
            return True, f"fitted on {runs_as} rows ({own}) {on}, whose MoE code the engine runs {model} with"
        fitted = f"fitted on {', '.join(self.families) or 'no MoE'} rows {on}"
        if system in self.systems:
            return True, f"{fitted}, which carry to a family left out there (leave-one-family-out)"
        return (
            False,
            f"{fitted}; {model} (family {family}) on {system} is neither of those families nor there",
        )


def _has_moe(name: str) -> bool:
    """Whether an embedded model of a calibration's rows has MoE layers (a name servelab does not embed:
    no, its rows say nothing of a family it can name)."""
    try:
        return load_model(name).moe is not None
    except ServelabError:
        return False
