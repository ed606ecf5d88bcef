"""BenchSpec: the `servelab bench` options a sweep job sets, typed, and the command line rendered from them.

A sweep job (servelab.recipes.job) carries one BenchSpec per concurrency. `servelab run --job` builds the
load generator's BenchConfig from it (`config`), `servelab sweep --predict` replays it in the twin, and
`argv` writes the same point as a `servelab bench` command line (the job's fingerprint hashes that line).
Nothing reads the command line back: the spec is the boundary.

Every field is a BenchConfig field of the same name and meaning (tests/bench/test_bench_spec.py checks
both), so the spec is a view of the load generator's own model, not a second vocabulary.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from servelab.bench.config import BenchConfig, DatasetName
from servelab.errors import ServelabError
from servelab.traffic.lengths import RangeRule

# Flags that have a `--no-` form in `servelab bench`: False is written as that form, so the command line
# says what the job runs (ignore_eos: None means "on for the random dataset" in BenchConfig).
NEGATABLE = frozenset({"ignore_eos"})
# Where a run's results go and whom it asks: `servelab run` takes these from its own target and run folder.
TARGET_FIELDS = frozenset({"base_url", "model", "save_result", "result_dir", "result_filename"})


class BenchSpec(BaseModel):
    """One benchmark point of a job, in the load generator's names; None: bench's default (not rendered)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str
    model: str
    backend: Literal["openai", "openai-chat", "vllm"] | None = None
    tokenizer_mode: str | None = None
    trust_remote_code: bool = False
    dataset_name: DatasetName = "random"
    # dataset trace (an agentic-coding job): its file is the user's, given at run time
    # (SERVELAB_AGENTIC_TRACE), so the spec has no dataset_path; random lengths and num_prompts are unset
    random_input_len: int | None = None
    random_output_len: int | None = None
    random_range_ratio: float | None = None
    random_range_rule: RangeRule | None = None
    use_chat_template: bool = False
    dsv4: bool = False
    num_prompts: int | None = None
    max_concurrency: int
    request_rate: float | None = None
    max_seconds: float | None = None
    endpoint: str | None = None
    num_warmups: int = 0
    ignore_eos: bool | None = None
    percentile_metrics: tuple[str, ...] | None = None
    metric_percentiles: tuple[float, ...] | None = None
    save_result: bool = False
    result_dir: str | None = None
    result_filename: str | None = None

    @property
    def conc(self) -> int:
        return self.max_concurrency

    def argv(self) -> list[str]:
        """`servelab bench` with the set options, in field order (flags named as bench names them)."""
        argv = ["servelab", "bench"]
        for name in type(self).model_fields:
            value = getattr(self, name)
            flag = "--" + name.replace("_", "-")
            if value is None:
                continue
            if isinstance(value, bool):
                if value:
                    argv.append(flag)
                elif name in NEGATABLE:
                    argv.append("--no-" + name.replace("_", "-"))
                continue
            if isinstance(value, tuple):  # bench's comma lists: --percentile-metrics ttft,tpot
                argv += [flag, ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)]
                continue
            argv += [flag, "inf" if isinstance(value, float) and math.isinf(value) else str(value)]
        return argv

    def options(self) -> dict:
        """The point's BenchConfig fields less where results go and whom it asks (the run supplies those)."""
        return {k: v for k, v in self.model_dump(exclude_none=True).items() if k not in TARGET_FIELDS}

    def config(self, where: str = "bench", **extra) -> BenchConfig:
        """The load generator's config of this point (and `extra` fields: a trace's dataset_path, given at
        run time), validated (bench's defaults where the spec is silent); one line naming the field
        otherwise."""
        try:
            return BenchConfig(**self.model_dump(exclude_none=True), **extra)
        except ValidationError as e:
            raise ServelabError.from_validation(e, where) from None
