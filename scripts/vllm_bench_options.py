"""Pin the options of `vllm bench serve` as test data, from vLLM's own argument parser (a development tool:
the tests only read the file).

    /path/to/vllm-venv/bin/python scripts/vllm_bench_options.py [--out tests/data/vllm_bench_serve]

Run it with the Python of an environment where vLLM is installed (a CPU build is enough: only the parser is
built, nothing is served). It builds the parser `vllm bench serve` builds (vllm.benchmarks.serve's
add_cli_args on vLLM's FlexibleArgumentParser) and writes OUT/options-<vLLM version>.json: per option its
names, dest, default, choices, nargs, type and argparse action, with vLLM's version and licence. Defaults that
JSON cannot hold are written as their repr; --request-id-prefix's default holds a fresh random id, written
with the id replaced by <random>.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "vllm_bench_serve"


def _plain(value: object) -> object:
    """A default as JSON holds it: inf as the string 'inf', anything JSON cannot write as its repr."""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    try:
        json.dumps(value)
    except TypeError:
        return repr(value)
    return value


def options() -> tuple[str, list[dict]]:
    # vLLM is only importable in the environment this script runs in, never in servelab's
    import vllm  # noqa: PLC0415
    from vllm.benchmarks.serve import add_cli_args  # noqa: PLC0415
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        default = _plain(action.default)
        if action.dest == "request_id_prefix" and isinstance(default, str):
            default = re.sub(r"[0-9a-f]{8}", "<random>", default)
        kind = action.type
        out.append(
            {
                "names": list(action.option_strings),
                "dest": action.dest,
                "default": default,
                "choices": [_plain(c) for c in action.choices] if action.choices else None,
                "nargs": action.nargs,
                "type": getattr(kind, "__name__", repr(kind)) if kind is not None else None,
                "action": type(action).__name__,
            }
        )
    return vllm.__version__, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    version, opts = options()
    doc = {
        "vllm_version": version,
        "licence": "Apache-2.0 (vLLM, https://github.com/vllm-project/vllm): option names, defaults and "
        "choices as its parser declares them",
        "source": "vllm.benchmarks.serve.add_cli_args on vllm.utils.argparse_utils.FlexibleArgumentParser",
        "generator": "scripts/vllm_bench_options.py",
        "count": len(opts),
        "options": opts,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"options-{version}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}: {len(opts)} options")


if __name__ == "__main__":
    main()
