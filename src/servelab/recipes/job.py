"""A sweep job as a versioned model: InferenceX's matrix row plus what servelab runs for it.

The JSON form (`servelab sweep --format json`, the job file a pipeline writes for `servelab run --job`) is
flat: the row's fields exactly as InferenceX's generator prints them, then servelab's own (SERVELAB_FIELDS).
Its benchmark points are typed `BenchSpec`s (servelab.bench.spec) and its evals typed `EvalSpec`s; their
command lines are rendered from them, never parsed back. `job-format` says which shape a file has:

  1  (no `job-format` key) benches as {conc, client: `servelab bench` argv, dataset: {name, input-len, ...}},
     evals as `lm_eval` argvs; read by turning those command lines (which servelab wrote) into the specs once
  2  benches as BenchSpec fields, evals as EvalSpec fields
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from servelab.bench.spec import BenchSpec
from servelab.engines import argv as argv_reader
from servelab.errors import ServelabError
from servelab.recipes.engines import Deployment, Launch
from servelab.recipes.matrix import MatrixRow
from servelab.recipes.schema import Bound

JOB_FORMAT = 2
AGENTIC_CODING = "agentic-coding"
NO_AGENTIC_CLIENT = (
    "agentic-coding: the job has no trace replay point (its row gives no single concurrency and duration)"
)
# Where `servelab run` (and a job's script) finds the trace an agentic-coding job replays
AGENTIC_TRACE_ENV = "SERVELAB_AGENTIC_TRACE"
JOB_FORMATS = (1, 2)
COMPLETIONS = "/v1/completions"

# The job fields servelab adds beside InferenceX's row fields (a flat JSON job holds both).
SERVELAB_FIELDS = (
    "job-format",
    "config-key",
    "fingerprint",
    "image-digest",
    "launch",
    "not-renderable",
    "secret-env",
    "benches",
    "evals",
    "assertions",
    "queue",
    "agents",
    "launch-script-changed",
    "launch-source",
    "launch-derive-failed",
    "deployment",
)


# model_args servelab sets itself: the server, and those EvalSpec has fields for.
RESERVED_MODEL_ARGS = frozenset({"model", "base_url", "num_concurrent", "max_gen_toks"})


class EvalSpec(BaseModel):
    """One accuracy eval of a job: lm-eval's task against the server's completions endpoint (perf-eval's
    flow), and where lm-eval writes its output."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["lm-eval"] = "lm-eval"
    model: str
    base_url: str = Field(description="the server, without /v1")
    task: str
    num_fewshot: int = Field(ge=0)
    num_concurrent: int | None = Field(None, ge=1)
    max_gen_toks: int | None = Field(None, ge=1)
    model_args: dict[str, bool | int | float | str | None] | None = Field(
        None,
        description="further lm-eval model_args (a perf-eval workload's max_length, timeout, "
        "tokenized_requests, tokenizer_backend, ...), passed after the server's as perf-eval's "
        "lib/run_lm_eval.sh passes them",
    )
    output_path: str

    @field_validator("model_args")
    @classmethod
    def _one_list(cls, args: dict | None) -> dict | None:
        for name, value in (args or {}).items():
            if name in RESERVED_MODEL_ARGS:
                raise ValueError(f"model_args: {name} is set by servelab (the server, or its own field)")
            if "," in str(value) or "=" in name:
                # lm-eval splits --model_args at commas and each pair at its first '='
                raise ValueError(f"model_args: {name}={value!r}: lm-eval cannot read a ',' here")
        return args

    def argv(self) -> list[str]:
        """The `lm_eval` command of this eval."""
        model_args = [f"model={self.model}", f"base_url={self.base_url}{COMPLETIONS}"]
        if self.num_concurrent:
            model_args.append(f"num_concurrent={self.num_concurrent}")
        # str(): True, False and None as lm-eval reads them back (perf-eval's parse_workload.fmt writes so)
        model_args += [f"{k}={v}" for k, v in (self.model_args or {}).items()]
        argv = ["lm_eval", "--model", "local-completions", "--model_args", ",".join(model_args)]
        argv += ["--tasks", self.task, "--num_fewshot", str(self.num_fewshot)]
        if self.max_gen_toks:
            argv += ["--gen_kwargs", f"max_gen_toks={self.max_gen_toks}"]
        return argv + ["--output_path", self.output_path]


class Job(BaseModel):
    key: str
    scenario: str
    row: dict = Field(description="InferenceX's matrix row, as its generator prints it")
    image_digest: str | None = None
    launch: Launch | None
    deployment: Deployment | None = Field(
        None,
        description="a multinode or disaggregated job's processes (prefill, decode, router, ...) in place of "
        "one server's launch; in the JSON only when set",
    )
    not_renderable: str | None = Field(None, description="why there is no launch (or no client)")
    secret_env: list[str] = Field(default_factory=list)
    benches: list[BenchSpec] = Field(default_factory=list, description="one per concurrency of the row")
    evals: list[EvalSpec] = Field(default_factory=list, description="accuracy evals (GSM8K) when run-eval")
    assertions: dict[str, Bound] = Field(default_factory=dict)
    queue: str
    agents: dict[str, str] = Field(default_factory=dict)
    fingerprint: str
    launch_script_changed: dict | None = Field(
        None,
        description="the checkout's launch script for this job differs from the one its launch flags were "
        "captured from: {script, captured-sha256, checkout-sha256}; in the JSON only when set",
    )
    launch_source: str | None = Field(
        None,
        description="where the launch comes from when the checkout's script is not the one its flags were "
        "captured from: `checkout <sha256>` (derived from that script), `shipped profile` or `servelab "
        "adapter (no launch profile)` (it could not be: launch-derive-failed says why); in the JSON only "
        "when set, absent meaning the shipped profile",
    )
    launch_derive_failed: str | None = Field(
        None, description="why the launch could not be derived from the checkout's script"
    )

    @property
    def unrunnable(self) -> str | None:
        """Why `servelab run` cannot run the job (None: it can): no launch, or an agentic-coding job without
        a trace replay point (a job file written before sweep jobs had one). An agentic job's trace file is
        given at run time (AGENTIC_TRACE_ENV), so it does not decide whether the job can run."""
        if self.launch is None and self.deployment is None:
            return self.not_renderable
        if not self.benches and self.scenario == AGENTIC_CODING:
            return NO_AGENTIC_CLIENT
        return None

    @property
    def point(self) -> MatrixRow:
        """The row, typed."""
        return MatrixRow.model_validate(self.row)

    def topology(self) -> str:
        """The layout in a file-name-safe tag: tp8-ep1-dpa0-pp1, or p1x4_d1x8ep8dpa for pools."""
        r = self.point
        if r.prefill is None or r.decode is None:
            return f"tp{r.tp}-ep{r.ep}-dpa{int(r.dp_attn)}-pp{r.pp}"
        pools = ((r.prefill, "p"), (r.decode, "d"))
        return "_".join(
            f"{role}{w.num_worker}x{w.tp}ep{w.ep}" + ("dpa" if w.dp_attn else "") for w, role in pools
        )

    def concs(self) -> list[int]:
        return self.point.concs

    def label(self) -> str:
        concs = ",".join(map(str, self.concs()))
        return f"{self.key} {self.point.exp_name} {self.topology()} conc{concs}"

    @property
    def result_dir(self) -> str | None:
        """Where the job's client writes its results (its CI artifacts)."""
        return self.benches[0].result_dir if self.benches else None

    def matrix_entry(self) -> dict:
        """The flat JSON row: InferenceX's fields plus config-key and fingerprint."""
        return {"config-key": self.key, **self.row, "fingerprint": self.fingerprint}

    def to_json(self) -> dict:
        return {
            "job-format": JOB_FORMAT,
            **self.matrix_entry(),
            "image-digest": self.image_digest,
            "launch": None if self.launch is None else self.launch.model_dump(),
            "not-renderable": self.not_renderable,
            "secret-env": self.secret_env,
            "benches": [b.model_dump(exclude_none=True) for b in self.benches],
            "evals": [e.model_dump(exclude_none=True) for e in self.evals],
            "assertions": {k: v.dump() for k, v in self.assertions.items()},
            "queue": self.queue,
            "agents": self.agents,
        } | {
            name: value
            for name, value in (
                ("launch-script-changed", self.launch_script_changed),
                ("launch-source", self.launch_source),
                ("launch-derive-failed", self.launch_derive_failed),
                ("deployment", None if self.deployment is None else self.deployment.model_dump()),
            )
            if value
        }

    @classmethod
    def from_json(cls, data: dict, where: str) -> Job:
        """A job from its JSON form (either format); one line naming `where` and the field otherwise."""
        fmt = data.get("job-format", 1)
        if fmt not in JOB_FORMATS:
            raise ServelabError(
                f"{where}: job-format {fmt!r}; this servelab reads {', '.join(map(str, JOB_FORMATS))}",
                field="job",
            )
        fields = {k.replace("-", "_"): v for k, v in data.items() if k in SERVELAB_FIELDS}
        fields.pop("job_format", None)
        fields["key"] = fields.pop("config_key", None)
        # InferenceX writes scenario-type on agentic rows only
        fields["scenario"] = data.get("scenario-type", "fixed-seq-len")
        fields["row"] = {k: v for k, v in data.items() if k not in SERVELAB_FIELDS}
        try:
            if fmt == 1:
                fields["benches"] = [_bench_v1(b) for b in fields.get("benches") or []]
                fields["evals"] = [_eval_v1(e) for e in fields.get("evals") or []]
            job = cls.model_validate(fields)
            _ = job.point  # the row typed now: a hand-edited row is refused here, naming its field
            return job
        except ValidationError as e:
            raise ServelabError.from_validation(e, where) from None
        except (TypeError, ValueError) as e:
            raise ServelabError(f"{where}: {e}") from None


def _bench_v1(bench: dict) -> dict:
    """A format-1 bench entry's `servelab bench` argv as BenchSpec fields. Format 1's `servelab run` ran
    --ignore-eos only where the argv had it, so its absence is False here."""
    client = bench.get("client") if isinstance(bench, dict) else None
    if not isinstance(client, list) or client[:2] != ["servelab", "bench"]:
        raise ValueError(f"benches: {client!r} is not a `servelab bench` command servelab wrote")
    args = argv_reader.parse(client[2:], switches=("--ignore-eos", "--save-result"))
    fields: dict = {"ignore_eos": False}
    for a in args:
        if a.name is None:
            raise ValueError(f"benches: {a.value!r} is not an option of the `servelab bench` command")
        fields[a.name.removeprefix("--").replace("-", "_")] = True if a.value is None else a.value
    return fields


def _eval_v1(argv: list) -> dict:
    """A format-1 `lm_eval` argv (as servelab wrote it) as EvalSpec fields."""
    if not isinstance(argv, list) or argv[:1] != ["lm_eval"]:
        raise ValueError(f"evals: {argv!r} is not an lm_eval command servelab wrote")
    flags = argv_reader.flag_values(argv_reader.parse(argv[1:]))
    model_args = dict(kv.split("=", 1) for kv in (flags.get("--model-args") or "").split(",") if kv)
    gen = dict(kv.split("=", 1) for kv in (flags.get("--gen-kwargs") or "").split(",") if kv)
    return {
        "model": model_args.get("model"),
        "base_url": (model_args.get("base_url") or "").removesuffix(COMPLETIONS),
        "task": flags.get("--tasks"),
        "num_fewshot": flags.get("--num-fewshot") or 0,
        "num_concurrent": model_args.get("num_concurrent"),
        "max_gen_toks": gen.get("max_gen_toks"),
        "output_path": flags.get("--output-path"),
    }
