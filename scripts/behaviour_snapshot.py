"""Write what servelab answers to a fixed set of questions, one file per question, so two checkouts can be
diffed (`diff -r A B`) before and after a refactor: plan, estimate on every engine, the twin, sweeps of the
shipped and the pinned InferenceX recipes with their launches, recipes render, sweep --predict.

    python scripts/behaviour_snapshot.py OUT_DIR [--quick]

Runs the CLI in-process (typer's CliRunner). Timings and dates are not in the answers it keeps.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from typer.testing import CliRunner

from servelab.cli.main import app

REPO = Path(__file__).resolve().parents[1]
IX_CONFIGS = REPO / "tests" / "data" / "inferencex" / "configs"
DSV4 = "sgl-project/DeepSeek-V4-Flash-FP8"
SIM = [
    "--base-url",
    "http://127.0.0.1:9",
    "--model",
    "deepseek-ai/DeepSeek-R1",
    "--simulate",
    "--system",
    "h200_sxm",
    "--tp",
    "8",
    "--ep",
    "8",
    "--random-input-len",
    "2048",
    "--random-output-len",
    "256",
    "--num-prompts",
    "200",
    "--max-concurrency",
    "32",
    "--save-result",
    "--result-dir",
    "{tmp}",
]


def questions(quick: bool) -> dict[str, list[str]]:
    q: dict[str, list[str]] = {
        "plan_default": ["plan", "--json"],
        "plan_dsv3": ["plan", "deepseek-v3", "--system", "h200_sxm", "--gpus", "8", "--json"],
    }
    for backend in ("torch", "vllm", "sglang", "trtllm"):
        base = [
            "estimate",
            DSV4,
            "--system",
            "h200_sxm",
            "--tp",
            "8",
            "--ep",
            "8",
            "--batch",
            "64",
            "--isl",
            "8192",
            "--osl",
            "1024",
            "--backend",
            backend,
            "--json",
        ]
        q[f"estimate_{backend}"] = base
        q[f"estimate_agg_{backend}"] = [*base, "--mode", "agg"]
    for engine in ("vllm", "sglang", "trtllm"):
        q[f"twin_{engine}"] = ["bench", *SIM, "--engine", engine]
    q["sweep_shipped"] = ["sweep", "--format", "json"]
    q["sweep_shipped_sh"] = ["sweep", "--format", "sh", "--out", "{tmp}/sh"]
    q["sweep_ix_full"] = ["sweep", "--dir", str(IX_CONFIGS), "--format", "json"]
    if not quick:
        q["sweep_shipped_predict"] = ["sweep", "--format", "json", "--predict", "--max-conc", "16"]
    return q


def recipe_questions() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    jobs = json.loads(CliRunner().invoke(app, ["sweep", "--format", "json"]).stdout)
    for key in sorted({j["config-key"] if "config-key" in j else j.get("key", "") for j in jobs}):
        if key:
            out[f"render_{key}"] = ["recipes", "render", key, "--json"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--quick", action="store_true", help="leave out sweep --predict (minutes)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runner = CliRunner()
    qs = {**questions(args.quick), **recipe_questions()}
    for name, argv in qs.items():
        tmp = args.out / "_tmp" / name
        argv = [a.replace("{tmp}", str(tmp)) for a in argv]
        result = runner.invoke(app, argv)
        text = f"$ servelab {' '.join(argv)}\nexit {result.exit_code}\n{result.output}"
        if tmp.is_dir():
            for f in sorted(tmp.rglob("*")):
                if f.is_file():
                    text += f"\n--- {f.relative_to(tmp)}\n{f.read_text()}"
        text = re.sub(r"\d{8}-\d{6}", "{date}", text.replace(str(tmp), "{tmp}"))
        text = re.sub(r'"wall_ms": [0-9.e+-]+', '"wall_ms": ...', text)
        (args.out / f"{name}.txt").write_text(text)
        print(f"{name}: exit {result.exit_code}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
