"""`vllm bench serve` options that servelab cannot apply, each with the one-line reason it gives instead of
"no such option" (tests/data/vllm_bench_serve pins vLLM's whole option list; every other option there is a
`servelab bench` option with vLLM's meaning). Also the --backend and --dataset-name values of vLLM that
servelab refuses, with theirs."""

from __future__ import annotations

from servelab.errors import ServelabError

_MULTIMODAL = "it shapes multimodal requests (images, video, audio), which servelab's client does not send"
_TIMED_TRACE = (
    "it configures vLLM's timed_trace dataset (pre-tokenized prompts made from hash ids, sent at the trace's "
    "timestamps), which servelab does not replay; agentic traces replay with --trace"
)
_HF_HUB = (
    "it selects one of vLLM's Hugging Face hub dataset readers; servelab's hf dataset reads the prompt "
    "column of a saved `datasets` folder (--dataset-path), never the hub"
)
_PLOTS = (
    "vLLM's plotly/matplotlib plots are not made; servelab's plots are --outputs html and servelab report"
)
_ASR = (
    "it configures ASR datasets, sent as audio to the transcription API, which servelab's client does not "
    "speak"
)

REFUSED_OPTIONS: dict[str, str] = {
    "--enable-multimodal-chat": _MULTIMODAL,
    "--custom-ensure-client-side-data": "it loads the images of vLLM's custom_image dataset as data URLs; "
    "servelab's client sends no multimodal requests",
    "--random-mm-base-items-per-request": _MULTIMODAL,
    "--random-mm-num-mm-items-range-ratio": _MULTIMODAL,
    "--random-mm-limit-mm-per-prompt": _MULTIMODAL,
    "--random-mm-bucket-config": _MULTIMODAL,
    "--timed-trace-chunk-hash-size": _TIMED_TRACE,
    "--timed-trace-sec-multiplier": _TIMED_TRACE,
    "--timed-trace-label-timestamp": _TIMED_TRACE,
    "--timed-trace-label-input-length": _TIMED_TRACE,
    "--timed-trace-label-output-length": _TIMED_TRACE,
    "--timed-trace-label-hash-ids": _TIMED_TRACE,
    "--self-timed": _TIMED_TRACE + " (vLLM takes it with timed_trace only)",
    "--no-self-timed": _TIMED_TRACE + " (vLLM takes it with timed_trace only)",
    "--blazedit-min-distance": _HF_HUB,
    "--blazedit-max-distance": _HF_HUB,
    "--bfcl-categories": _HF_HUB,
    "--hf-subset": _HF_HUB + ", which has no subsets: save the subset you want",
    "--hf-name": _HF_HUB,
    "--asr-max-audio-len-sec": _ASR,
    "--asr-min-audio-len-sec": _ASR,
    "--random-batch-size": "it puts several prompts in one request, which only vLLM's embedding and rerank "
    "backends take; servelab's client speaks the completions and chat APIs",
    "--no-reranker": "it shapes vLLM's random-rerank dataset for the rerank API, which servelab's client "
    "does not speak",
    "--use-beam-search": "vLLM 0.32 declares it but sends nothing for it (no request function reads it), so "
    "servelab has nothing to match",
    "--probe-request-rate": "servelab sends no probe requests beside the workload; measure a second stream "
    "with a second servelab bench",
    "--plot-timeline": _PLOTS,
    "--timeline-itl-thresholds": _PLOTS,
    "--plot-dataset-stats": _PLOTS,
}
# vLLM's bare --profile (no value) starts and stops the server's torch profiler; servelab's --profile NAME is
# GuideLLM's load profile: a bare one is read as --server-profile
SERVER_PROFILE = "--server-profile"

REFUSED_BACKENDS: dict[str, str] = {
    "openai-responses": "the Responses API",
    "openai-audio": "the audio transcription API",
    "openai-embeddings": "the embeddings API",
    "openai-embeddings-chat": "the embeddings API",
    "openai-embeddings-clip": "the embeddings API",
    "openai-embeddings-vlm2vec": "the embeddings API",
    "infinity-embeddings": "Infinity's embeddings API",
    "infinity-embeddings-clip": "Infinity's embeddings API",
    "vllm-pooling": "vLLM's pooling API",
    "vllm-rerank": "vLLM's rerank API",
}
REFUSED_DATASETS: dict[str, str] = {
    "random-mm": _MULTIMODAL,
    "custom_audio": _MULTIMODAL,
    "custom_image": _MULTIMODAL,
    "random-rerank": "it is made for the rerank API, which servelab's client does not speak",
    "timed_trace": _TIMED_TRACE.replace("it configures vLLM's timed_trace dataset", "vLLM's timed_trace"),
}


# vLLM's options that take several values after one flag (nargs * or +)
MANY_VALUED = ("--header", "--metadata", "--goodput", "--lora-modules")


def spread_values(args: list[str]) -> list[str]:
    """`--lora-modules a b` as `--lora-modules a --lora-modules b` (and the other MANY_VALUED options): the
    command-line parser takes one value a flag."""
    out: list[str] = []
    flag = None
    for arg in args:
        if arg == "--":
            flag = None
        elif arg.startswith("-"):
            flag = arg if arg in MANY_VALUED else None
        elif flag is not None and out[-1] != flag:
            out.append(flag)
        out.append(arg)
    return out


def refuse_vllm_only(args: list[str]) -> None:
    """Refuse, in one line naming it, the first vLLM option of `args` that servelab cannot apply (given
    alone or as --opt=value); other arguments are left to the parser."""
    for arg in args:
        if arg == "--":
            return
        name = arg.split("=", 1)[0]
        if name in REFUSED_OPTIONS:
            raise ServelabError(f"{name}: not supported by servelab bench: {REFUSED_OPTIONS[name]}")


def bare_profile(args: list[str]) -> list[str]:
    """vLLM's --profile given without a value (last, or before another option) as --server-profile; a
    --profile NAME stays GuideLLM's."""
    out = list(args)
    for k, arg in enumerate(out):
        if arg == "--":
            break
        if arg == "--profile" and (k + 1 == len(out) or out[k + 1].startswith("-")):
            out[k] = SERVER_PROFILE
    return out


def backend_reason(value: str) -> str | None:
    """Why servelab refuses vLLM's --backend `value`, or None when it takes it."""
    api = REFUSED_BACKENDS.get(value)
    return (
        f"it speaks {api}, which servelab's client does not (it speaks completions and chat)" if api else None
    )
