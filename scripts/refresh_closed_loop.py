"""Refresh the pinned public closed-loop benchmark results that the twin is held against
(tests/data/closed_loop), and their development / held-out split.

    python scripts/refresh_closed_loop.py --inferencex PATH --aiconfigurator PATH

Each PATH is a git checkout (or bare git directory) of github.com/SemiAnalysisAI/InferenceX and
github.com/ai-dynamo/aiconfigurator (both Apache-2.0). Only data files are copied, unchanged:

- InferenceX `experimental/token_position_decode_slo/minimax-m2.5/results/*.json` (vLLM on 8 H200s, TP8 + EP
  and DP8 + EP, fixed lengths, 2 x C warm-up then 10 x C measured requests; median and p99 of TTFT, TPOT and
  E2EL) with the server and client scripts that say how they ran. The folder's GLM-5 and Qwen3.5 results
  are not copied: servelab cannot price those architectures (DeepSeek sparse attention with MTP on a GPU
  the scripts do not name; Gated DeltaNet linear attention).
- AIConfigurator `aic-core/src/aiconfigurator_core/systems/silicon_sample.csv`: every row that
  `servelab calibrate engines` never reads (it fits the H200 aggregated rows of embedded models): other
  systems' rows, the H200 rows of models servelab does not embed, and every disaggregated row. Also
  MiniMax-M2.5's config.json from AIConfigurator's model_configs, so those rows can be priced.

The split is made here, from the rows' deployments alone, before any prediction is compared with them: a
deployment group (source, system, engine, model, precision, parallel split, ISL / OSL; every concurrency of a
sweep in one group) is held out when the first 8 hex digits of the SHA-256 of its key, as an integer, are
below 40 % of 2**32. `heldout.txt` lists the upstream ids of the held-out rows (silicon_sample.csv's `id`, the
InferenceX file name). Nothing is fitted or decided on those rows; docs/accuracy.md ("main's twin against the
pinned closed-loop results") reports both parts.
"""

import argparse
import csv
import io
import subprocess
import sys
from pathlib import Path

from servelab.calibrate.closed_loop_split import HELD_OUT_SHARE, held_out, ix_key, silicon_key

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "closed_loop"
IX_DIR = "experimental/token_position_decode_slo/minimax-m2.5"
IX_SCRIPTS = ("serve_minimax_tep8_sbatch.sh", "bmk_minimax_sbatch.sh")
SILICON = "aic-core/src/aiconfigurator_core/systems/silicon_sample.csv"
CONFIG = "aic-core/src/aiconfigurator_core/model_configs/MiniMaxAI--MiniMax-M2.5_config.json"
# the checkpoints `servelab calibrate engines` maps to an embedded model (calibrate/rows.py): their H200
# aggregated rows are its fitting data, so they are neither copied nor held out
CALIBRATION_MODELS = frozenset(
    {
        "deepseek-ai/deepseek-r1",
        "deepseek-ai/deepseek-v3",
        "meta-llama/llama-3.1-70b",
        "meta-llama/llama-3.1-8b-instruct",
        "nvidia/llama-3.1-8b-instruct-fp8",
        "openai/gpt-oss-120b",
        "qwen/qwen3-235b-a22b-fp8",
        "qwen/qwen3-32b",
    }
)


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def keep_silicon(row: dict) -> bool:
    calibration = (
        row["system"] == "h200_sxm"
        and row["mode"] == "agg"
        and row["model_path"].strip().lower() in CALIBRATION_MODELS
    )
    return not calibration


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inferencex", type=Path, required=True, help="an InferenceX checkout or git directory")
    ap.add_argument("--aiconfigurator", type=Path, required=True, help="an AIConfigurator checkout")
    args = ap.parse_args(argv)
    ix_commit = git(args.inferencex, "rev-parse", "HEAD").decode().strip()
    aic_commit = git(args.aiconfigurator, "rev-parse", "HEAD").decode().strip()
    heldout: list[str] = []

    ix_out = OUT / "inferencex"
    (ix_out / "results").mkdir(parents=True, exist_ok=True)
    names = git(args.inferencex, "ls-tree", "--name-only", "HEAD", f"{IX_DIR}/results/").decode().split()
    for path in sorted(names):
        name = path.rsplit("/", 1)[1]
        (ix_out / "results" / name).write_bytes(git(args.inferencex, "show", f"HEAD:{path}"))
        if held_out(ix_key(name)):
            heldout.append(name)
    for script in IX_SCRIPTS:
        (ix_out / script).write_bytes(git(args.inferencex, "show", f"HEAD:{IX_DIR}/{script}"))
    (ix_out / "LICENSE").write_bytes(git(args.inferencex, "show", "HEAD:LICENSE"))

    aic_out = OUT / "aiconfigurator"
    aic_out.mkdir(parents=True, exist_ok=True)
    text = git(args.aiconfigurator, "show", f"HEAD:{SILICON}").decode()
    reader = csv.DictReader(io.StringIO(text))
    rows = [row for row in reader if keep_silicon(row)]
    with open(aic_out / "silicon_sample_rows.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=reader.fieldnames or [])
        writer.writeheader()
        writer.writerows(rows)
    heldout += [row["id"] for row in rows if held_out(silicon_key(row))]
    (aic_out / "minimax-m2.5").mkdir(exist_ok=True)
    (aic_out / "minimax-m2.5" / "config.json").write_bytes(git(args.aiconfigurator, "show", f"HEAD:{CONFIG}"))
    (aic_out / "LICENSE").write_bytes(git(args.aiconfigurator, "show", "HEAD:LICENSE"))

    (OUT / "heldout.txt").write_text(
        "# Held-out rows of the closed-loop benchmark data (scripts/refresh_closed_loop.py): upstream ids.\n"
        f"# Rule: deployment groups whose key's SHA-256 starts below {HELD_OUT_SHARE:.0%} of 2**32.\n"
        + "".join(f"{i}\n" for i in sorted(heldout))
    )
    (OUT / "UPSTREAM.md").write_text(
        "# Public closed-loop benchmark results (pinned)\n\n"
        "Copied unchanged by\n\n"
        "    python scripts/refresh_closed_loop.py --inferencex PATH --aiconfigurator PATH\n\n"
        "(its docstring says what is copied and why, and the split rule):\n\n"
        f"- inferencex/: https://github.com/SemiAnalysisAI/InferenceX at commit {ix_commit} (Apache-2.0,\n"
        f"  inferencex/LICENSE): {IX_DIR}/results/*.json and {', '.join(IX_SCRIPTS)}.\n"
        f"- aiconfigurator/: https://github.com/ai-dynamo/aiconfigurator at commit {aic_commit}\n"
        f"  (Apache-2.0, aiconfigurator/LICENSE): the rows of {SILICON}\n"
        "  that servelab's calibration does not read,\n"
        f"  unchanged, and {CONFIG} as minimax-m2.5/config.json.\n"
        "- heldout.txt: the upstream ids of the held-out rows, chosen by the rule above before any\n"
        "  prediction was compared with them.\n"
    )
    print(
        f"pinned {len(names)} InferenceX results of {ix_commit[:12]} and {len(rows)} silicon rows of "
        f"{aic_commit[:12]}; {len(heldout)} held out, into {OUT}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
