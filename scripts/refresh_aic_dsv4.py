"""Refresh the pinned copy of AIConfigurator's measured DeepSeek-V4 attention-module tables (vLLM's kernels on
H100, H200 and B200), which accuracy/dsv4_modules_vs_aic.py holds servelab's DeepSeek-V4 prices against.

    python scripts/refresh_aic_dsv4.py PATH

PATH is a git checkout (or a bare git directory) of github.com/ai-dynamo/aiconfigurator (Apache-2.0). Only
data files are copied: the Parquet tables under aic-core/src/aiconfigurator_core/systems/data/<system>/
sparse_attention/vllm/<version>/, unchanged, into tests/data/aiconfigurator/, with UPSTREAM.md naming the
commit. Nothing of AIConfigurator is imported or run.
"""

import argparse
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "aiconfigurator"
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm")
OPS = ("csa_context", "csa_generation", "hca_context", "hca_generation")
VERSION = "0.24.0"
SOURCE = "aic-core/src/aiconfigurator_core/systems/data/{system}/sparse_attention/vllm/{version}/{name}"


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", type=Path, help="an AIConfigurator checkout or bare git directory")
    args = ap.parse_args(argv)
    commit = git(args.repo, "rev-parse", "HEAD").decode().strip()
    for system in SYSTEMS:
        for op in OPS:
            name = f"dsv4_{op}_module_perf.parquet"
            data = git(args.repo, "show", f"HEAD:{SOURCE.format(system=system, version=VERSION, name=name)}")
            dest = OUT / system / "vllm" / VERSION / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
    (OUT / "LICENSE").write_bytes(git(args.repo, "show", "HEAD:LICENSE"))
    (OUT / "UPSTREAM.md").write_text(
        "# AIConfigurator's DeepSeek-V4 module tables (pinned)\n\n"
        f"Copied unchanged from https://github.com/ai-dynamo/aiconfigurator at commit {commit}\n"
        "(Apache-2.0, LICENSE beside this file) by `python scripts/refresh_aic_dsv4.py PATH`:\n"
        f"{SOURCE.format(system='<system>', version=VERSION, name='dsv4_<op>_module_perf.parquet')}\n"
        f"for {', '.join(SYSTEMS)}. AIConfigurator's collector timed vLLM {VERSION}'s DeepSeek-V4\n"
        "attention modules (FLASHMLA_SPARSE_DSV4) per layer: `num_heads` is the heads per rank, `tp_size`\n"
        "the split (native heads = num_heads x tp_size), `isl` the new tokens per sequence, `step` the\n"
        "cached tokens before them, `latency` milliseconds. servelab fits nothing on them:\n"
        "accuracy/dsv4_modules_vs_aic.py holds servelab's prices against them (docs/accuracy.md).\n"
    )
    print(f"pinned {len(SYSTEMS) * len(OPS)} tables of {commit[:12]} into {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
