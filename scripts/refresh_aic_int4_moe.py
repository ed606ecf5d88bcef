"""Refresh the pinned rows of AIConfigurator's measured INT4 weight-only MoE tables at Kimi-K2.5's TP8 shape
(vLLM's and SGLang's kernels on H100, H200 and B200), which accuracy/int4_moe_vs_aic.py fits the fraction of
HBM peak those kernels read the experts at (perfdb/roofline.py INT4_EXPERTS_HBM_FRACTION).

    python scripts/refresh_aic_int4_moe.py PATH

PATH is a git checkout (or a bare git directory) of github.com/ai-dynamo/aiconfigurator (Apache-2.0). From
each aic-core/src/aiconfigurator_core/systems/data/<system>/moe/<framework>/<version>/moe_perf.parquet the
rows of moe_dtype int4_wo, hidden 7168, inter 2048, 384 experts, top-8, moe_tp 8, moe_ep 1 (Kimi-K2's experts
at TP8) are copied unchanged, every column, into one CSV. Nothing of AIConfigurator is imported or run.
"""

import argparse
import io
import subprocess
import sys
from pathlib import Path

import pandas as pd

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "aiconfigurator" / "int4_moe"
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm")
DATA = "aic-core/src/aiconfigurator_core/systems/data/"
SHAPE = {
    "moe_dtype": "int4_wo",
    "hidden_size": 7168,
    "inter_size": 2048,
    "num_experts": 384,
    "topk": 8,
    "moe_tp_size": 8,
    "moe_ep_size": 1,
}


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(repo), *args], check=True, capture_output=True).stdout


def git_dir(path: Path) -> Path:
    return path / ".git" if (path / ".git").exists() else path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("repo", type=Path, help="an AIConfigurator checkout or bare git directory")
    args = ap.parse_args(argv)
    repo = git_dir(args.repo)
    commit = git(repo, "rev-parse", "HEAD").decode().strip()
    names = git(repo, "ls-tree", "-r", "--name-only", "HEAD", DATA).decode().split()
    tables = [
        n for n in names if n.endswith("/moe_perf.parquet") and n.split("/")[-5] in SYSTEMS and "/moe/" in n
    ]
    frames = []
    for name in sorted(tables):
        rows = pd.read_parquet(io.BytesIO(git(repo, "show", f"HEAD:{name}")))
        for column, value in SHAPE.items():
            rows = rows[rows[column] == value]
        if len(rows):
            frames.append(rows.assign(system=name.split("/")[-5]))
    OUT.mkdir(parents=True, exist_ok=True)
    pd.concat(frames).to_csv(OUT / "kimi_k2_5_tp8.csv", index=False)
    (OUT / "UPSTREAM.md").write_text(
        "# AIConfigurator's INT4 weight-only MoE rows at Kimi-K2.5's TP8 shape (pinned)\n\n"
        f"Copied from https://github.com/ai-dynamo/aiconfigurator at commit {commit}\n"
        "(Apache-2.0, LICENSE one folder up) by `python scripts/refresh_aic_int4_moe.py PATH`: the rows of\n"
        f"{DATA}<system>/moe/<framework>/<version>/moe_perf.parquet\n"
        f"with {', '.join(f'{k} {v}' for k, v in SHAPE.items())},\n"
        f"for {', '.join(SYSTEMS)}, unchanged (a `system` column added). AIConfigurator's collector timed\n"
        "the engines' whole MoE layer (routing, the expert GEMMs, the top-k sum) in a CUDA graph; `latency`\n"
        "is milliseconds, `kernel_source` the kernel it ran. servelab fits only the fraction of HBM peak\n"
        "the weights are read at on them: accuracy/int4_moe_vs_aic.py (docs/accuracy.md).\n"
    )
    print(f"pinned {sum(len(f) for f in frames)} rows of {commit[:12]} into {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
