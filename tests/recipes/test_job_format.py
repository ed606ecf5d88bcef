"""A sweep job is a versioned model: it is written and read back unchanged, its benchmark and eval parts are
typed (their command lines rendered from them), and a job file written before the typed form (format 1:
`servelab bench` and `lm_eval` argvs) still reads, as the same job."""

import json
from pathlib import Path

import pytest
import typer

from servelab.bench.config import BenchConfig
from servelab.bench.spec import BenchSpec
from servelab.cli.main import app
from servelab.errors import ServelabError
from servelab.recipes.filters import Filters
from servelab.recipes.fingerprint import dataset_of
from servelab.recipes.job import JOB_FORMAT, Job
from servelab.recipes.pipelines import to_json
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand
from servelab.run.build import read_job
from servelab.run.plan import from_job

# A job of `servelab sweep --format json` as servelab wrote it before jobs carried typed specs.
FORMAT_1 = Path(__file__).parents[1] / "data" / "jobs" / "job-format-1.json"


@pytest.fixture(scope="module")
def jobs():
    return expand(open_store(None), ["dsv4-fp4-b200-vllm"], Filters(seq_lens=["8k1k"]))


def test_a_job_written_reads_back_the_same(jobs, tmp_path):
    path = tmp_path / "jobs.json"
    path.write_text(to_json(jobs))
    for i, job in enumerate(jobs):
        back = read_job(path, i)
        assert back == job and back.to_json() == job.to_json()
    assert json.loads(path.read_text())[0]["job-format"] == JOB_FORMAT


def test_a_format_1_job_reads_as_the_same_job():
    old = json.loads(FORMAT_1.read_text())
    assert "job-format" not in old and old["benches"][0]["client"][:2] == ["servelab", "bench"]
    job = read_job(FORMAT_1, None)
    [bench] = job.benches
    # the typed spec renders exactly the command line and dataset the old file held
    assert bench.argv() == old["benches"][0]["client"] and dataset_of(bench) == old["benches"][0]["dataset"]
    assert [e.argv() for e in job.evals] == old["evals"]
    assert bench.max_concurrency == old["conc"] == 64 and bench.num_warmups == 128 and bench.ignore_eos
    assert job.evals[0].num_concurrent == 64 and job.evals[0].max_gen_toks == 8192
    # written again it is a format-2 job with the same row, launch and fingerprint, and plans the same run
    again = Job.from_json(job.to_json(), "again")
    assert again == job and job.to_json()["fingerprint"] == old["fingerprint"]
    assert {k: v for k, v in job.to_json().items() if k not in ("job-format", "benches", "evals")} == {
        k: v for k, v in old.items() if k not in ("benches", "evals")
    }
    a, b = from_job(job, "old"), from_job(again, "new")
    assert (a.bench, a.lm_tasks, a.stages, a.server) == (b.bench, b.lm_tasks, b.stages, b.server)
    assert a.bench[0].fields["ignore_eos"] is True and a.lm_tasks[0].model_args.num_concurrent == 64


def test_a_format_1_job_without_ignore_eos_runs_without_it(tmp_path):
    """Format 1's `servelab run` ran --ignore-eos only where the client argv had it."""
    old = json.loads(FORMAT_1.read_text())
    old["benches"][0]["client"].remove("--ignore-eos")
    path = tmp_path / "job.json"
    path.write_text(json.dumps(old))
    job = read_job(path, None)
    assert job.benches[0].ignore_eos is False and "--no-ignore-eos" in job.benches[0].argv()
    assert from_job(job, "old").bench[0].fields["ignore_eos"] is False


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda d: d.update({"job-format": 3}), "job-format 3; this servelab reads 1, 2"),
        (lambda d: d["benches"][0].update(client=["vllm", "bench"]), "is not a `servelab bench` command"),
        (lambda d: d.update(evals=[["lm-eval", "--tasks", "x"]]), "is not an lm_eval command servelab wrote"),
        (lambda d: d["benches"][0]["client"].extend(["--no-such-flag", "1"]), "benches.0.no_such_flag"),
        (lambda d: d.update(queue=None), "queue: Input should be a valid string"),
    ],
)
def test_a_malformed_job_is_one_line_naming_the_file_and_field(tmp_path, edit, says):
    data = json.loads(FORMAT_1.read_text())
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ServelabError) as e:
        read_job(path, None)
    assert str(path) in str(e.value) and says in str(e.value) and "\n" not in str(e.value)


def test_bench_spec_fields_are_the_load_generators_own_options():
    """Each field of the spec is a BenchConfig field and a `servelab bench` flag of the same name, so the
    rendered command line runs the point the spec describes."""
    command = typer.main.get_command(app).commands["bench"]  # type: ignore[attr-defined]
    flags = {opt for p in command.params for opt in [*p.opts, *p.secondary_opts]}
    for name in BenchSpec.model_fields:
        assert name in BenchConfig.model_fields
        assert "--" + name.replace("_", "-") in flags
    assert "--no-ignore-eos" in flags


def test_bench_spec_config_checks_values_on_one_line():
    spec = BenchSpec(
        base_url="http://localhost:8000",
        model="m",
        random_input_len=8,
        random_output_len=8,
        random_range_ratio=1.0,  # vLLM's rule (the spec's default) takes [0, 1)
        num_prompts=4,
        max_concurrency=2,
    )
    with pytest.raises(ServelabError, match=r"^job: random_range_ratio must be below 1 by the vllm rule"):
        spec.config("job")
    ok = spec.model_copy(update={"random_range_ratio": 0.5, "request_rate": float("inf")})
    assert ok.config().num_prompts == 4 and ok.config().ignore_eos  # bench's default for random
    assert ok.argv()[-4:] == ["--request-rate", "inf", "--num-warmups", "0"]
