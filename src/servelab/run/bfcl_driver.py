"""Runs BFCL (bfcl-eval) against an OpenAI-compatible server; executed by servelab.run.bfcl with the python of
the BFCL environment (scripts/setup_bfcl.sh), never imported by servelab, so it uses only the standard library
and bfcl_eval.

The caller sets BFCL_PROJECT_ROOT (bfcl-eval's work folder: results, scores, the id file), OPENAI_BASE_URL
and OPENAI_API_KEY in the environment, because bfcl_eval reads them when it is imported. The model is
registered as a function-calling model served through chat completions with tools (bfcl-eval's
OpenAICompletionsHandler), as perf-eval registers it. Every leaf category's cases are listed in bfcl-eval's id
file (the first N in bfcl-eval's order, split evenly across the leaves of a group such as multi_turn, as
perf-eval subsamples), then generated and evaluated. The scores of each leaf (the header of bfcl-eval's
BFCL_v4_<leaf>_score.json) are written to --out as JSON:
{"leaves": {category: [leaf, ...]}, "scores": {leaf: {accuracy, correct_count, total_count}}}.

    python bfcl_driver.py --model M --category simple_python --category multi_turn \
        --max-cases '{"multi_turn": 4}' --out scores.json
"""

import argparse
import json
import sys
from pathlib import Path

import bfcl_eval.constants.model_config as model_config
import bfcl_eval.model_handler.base_handler as base_handler
from bfcl_eval.__main__ import evaluate, generate
from bfcl_eval.constants.category_mapping import TEST_COLLECTION_MAPPING, VERSION_PREFIX
from bfcl_eval.constants.eval_config import PROJECT_ROOT, RESULT_PATH, SCORE_PATH
from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler
from bfcl_eval.utils import (
    get_directory_structure_by_category,
    load_dataset_entry,
    sort_key,
)


def quotas(max_cases: int, num_leaves: int) -> list[int]:
    """max_cases split over the leaves of a group: equal shares, the first leaves taking the remainder."""
    base, extra = divmod(max_cases, num_leaves)
    return [base + (i < extra) for i in range(num_leaves)]


def leaves_of(category: str) -> list[str]:
    """The leaf categories of a group, in bfcl-eval's listing order; a leaf alone."""
    return list(TEST_COLLECTION_MAPPING.get(category, [category]))


def select_ids(categories: list[str], max_cases: dict[str, int]) -> dict[str, list[str]]:
    """{leaf: [case id]}: every case of a category without a limit, else the first N split over its leaves."""
    ids: dict[str, list[str]] = {}
    for category in categories:
        leaves = leaves_of(category)
        limit = max_cases.get(category)
        shares = quotas(limit, len(leaves)) if limit else [None] * len(leaves)
        for leaf, share in zip(leaves, shares, strict=True):
            entries = sorted(load_dataset_entry(leaf), key=sort_key)
            chosen = ids.setdefault(leaf, [])
            chosen += [e["id"] for e in entries[:share] if e["id"] not in chosen]
    return {leaf: chosen for leaf, chosen in ids.items() if chosen}


def inference_errors(result_file: Path) -> dict:
    """The cases whose generation failed (bfcl-eval scores them as wrong), and the first such error."""
    errors = []
    if result_file.is_file():
        for line in result_file.read_text().splitlines():
            result = json.loads(line).get("result") if line.strip() else None
            if isinstance(result, str) and result.startswith("Error during inference"):
                errors.append(result)
    return {"inference_errors": len(errors), "first_error": errors[0] if errors else None}


def register(model: str) -> None:
    model_config.MODEL_CONFIG_MAPPING[model] = model_config.ModelConfig(
        model_name=model,
        display_name=f"{model} (FC) (servelab)",
        url="",
        org="",
        license="",
        model_handler=OpenAICompletionsHandler,
        input_price=None,
        output_price=None,
        is_fc_model=True,
        underscore_to_dot=True,
    )


def run(args: argparse.Namespace) -> dict:
    base_handler.MAXIMUM_STEP_LIMIT = args.maximum_step_limit  # read by the multi-turn loop at each step
    max_cases = json.loads(args.max_cases) if args.max_cases else {}
    ids = select_ids(args.category, max_cases)
    (PROJECT_ROOT / "test_case_ids_to_generate.json").write_text(json.dumps(ids, indent=2))
    register(args.model)
    generate(
        model=[args.model],
        test_category=args.category,
        temperature=args.temperature,
        include_input_log=False,
        exclude_state_log=False,
        num_gpus=1,
        num_threads=args.num_threads,
        gpu_memory_utilization=0.9,
        backend="vllm",
        skip_server_setup=True,
        local_model_path=None,
        result_dir=RESULT_PATH,
        allow_overwrite=True,
        run_ids=True,
        enable_lora=False,
        max_lora_rank=None,
        lora_modules=None,
    )
    evaluate(
        model=[args.model],
        test_category=sorted(ids),
        result_dir=None,
        score_dir=None,
        partial_eval=True,
    )
    scores = {}
    model_dir = args.model.replace("/", "_")
    for leaf in ids:
        folder = model_dir + "/" + get_directory_structure_by_category(leaf)
        path = SCORE_PATH / folder / f"{VERSION_PREFIX}_{leaf}_score.json"
        if path.is_file():
            with path.open() as f:
                header = json.loads(f.readline())
            scores[leaf] = {k: header[k] for k in ("accuracy", "correct_count", "total_count")}
            scores[leaf] |= inference_errors(RESULT_PATH / folder / f"{VERSION_PREFIX}_{leaf}_result.json")
    leaves = {c: [leaf for leaf in leaves_of(c) if leaf in ids] for c in args.category}
    return {"leaves": leaves, "scores": scores}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--category", action="append", required=True)
    p.add_argument("--num-threads", type=int, default=8)
    p.add_argument("--temperature", type=float, default=0.001)
    p.add_argument("--maximum-step-limit", type=int, default=10)
    p.add_argument("--max-cases", default="", help="JSON {category: N}")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    args.out.write_text(json.dumps(run(args), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
