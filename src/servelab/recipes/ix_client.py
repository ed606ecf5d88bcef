"""InferenceX's benchmark client as its launch scripts call it, in servelab bench's names.

A launch script ends with `run_benchmark_serving` (benchmarks/benchmark_lib.sh), which runs InferenceX's
fork of vLLM's client (utils/bench_serving/benchmark_serving.py) with the options the script gives and a set
of its own (FIXED). What each option becomes in a sweep job's benchmark point (servelab.bench.spec) is said
here once: the per-script options (PER_SCRIPT) travel in the launch profile captured from the script
(recipes/engines/profiles.py, `client`), the per-job ones are computed from the job's row as upstream
computes them, and the rest are the wrapper's own. docs/recipes.md has the table.
"""

from __future__ import annotations

from servelab.engines import argv as argvlib

# run_benchmark_serving's flags that take no value
SWITCHES = argvlib.flag_set("--use-chat-template", "--dsv4", "--trust-remote-code")
# options a script chooses -> the servelab bench field it sets (a launch profile's `client` keys, hyphenated)
PER_SCRIPT = {
    "--backend": "backend",
    "--endpoint": "endpoint",
    "--use-chat-template": "use_chat_template",
    "--dsv4": "dsv4",
    "--trust-remote-code": "trust_remote_code",
    "--tokenizer-mode": "tokenizer_mode",
}
# options of every call whose values come from the job (its row), computed by servelab as upstream does:
# run_benchmark_serving's flag -> the servelab bench field
PER_JOB = {
    "--model": "model",
    "--port": "base_url",
    "--input-len": "random_input_len",
    "--output-len": "random_output_len",
    "--random-range-ratio": "random_range_ratio",
    "--num-prompts": "num_prompts",
    "--max-concurrency": "max_concurrency",
    "--result-filename": "result_filename",
    "--result-dir": "result_dir",
}
# what the run supplies instead (servelab run: --tokenizer, its own server watch, no script folder)
RUN_SUPPLIED = {
    "--tokenizer": "the run's --tokenizer (servelab run), else the model id in the local Hugging Face cache",
    "--server-pid": "servelab run watches the server it started itself",
    "--bench-serving-dir": "where InferenceX's client script lives; servelab bench is the client",
}
# benchmark_serving.py options run_benchmark_serving always adds, with the values it gives them (the client's
# defaults for the ones it leaves out are listed in docs/recipes.md)
FIXED = {
    "--dataset-name": "random",
    "--request-rate": "inf",
    "--ignore-eos": None,
    "--save-result": None,
    "--num-warmups": "2 x max-concurrency",
    "--percentile-metrics": "ttft,tpot,itl,e2el",
}


def client_options(args: list[str]) -> dict[str, str | bool]:
    """The per-script options of one run_benchmark_serving call (its arguments as the script passed them),
    as a launch profile's `client` mapping: hyphenated servelab bench names, a switch as true."""
    out: dict[str, str | bool] = {}
    for a in argvlib.parse(args, switches=SWITCHES):
        if a.name in PER_SCRIPT:
            out[PER_SCRIPT[a.name].replace("_", "-")] = True if a.value is None else a.value
    return out


def unknown_options(args: list[str]) -> list[str]:
    """Tokens of a call that run_benchmark_serving does not take (it stops with `Unknown parameter`)."""
    known = set(PER_SCRIPT) | set(PER_JOB) | set(RUN_SUPPLIED)
    return [t for a in argvlib.parse(args, switches=SWITCHES) if a.name not in known for t in a.tokens]
