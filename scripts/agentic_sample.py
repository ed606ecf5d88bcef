"""Pin a small agentic trace in InferenceX's format, written by InferenceX's own converter (a development
tool, run by scripts/refresh_upstream_data.py; run it from a servelab checkout):

    python scripts/agentic_sample.py pin --inferencex PATH

InferenceX publishes its agentic traces as Hugging Face datasets (semianalysisai/cc-traces-weka-*), built from
recorded Claude Code sessions by utils/agentic/datasets/proxy_to_weka.py; the repository itself holds no
trace. So the sample is made the way InferenceX makes its corpus: the proxy rows below (ours, small enough for
a CPU vLLM with a 4,096-token context) are run through that converter in the checkout, with this Python (it
needs only the standard library), and its output is concatenated one trace a line, as the datasets'
traces.jsonl is. No upstream code is copied. Written to tests/data/inferencex/agentic/traces.jsonl.

The sessions: `main-subagents` is a main agent of six turns whose prompt grows by two 64-token blocks a
turn, with a subagent it waits for (it ended before the next turn started) and one that runs in the
background; `compaction` is four turns whose last one drops the history for a summary (a shared system
prefix, then new blocks). Think times are the gaps between the rows' end and the next row's start.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEST = ROOT / "tests" / "data" / "inferencex" / "agentic"
CONVERTER = "utils/agentic/datasets/proxy_to_weka.py"
CLI = "2.1.150"  # a Claude Code release whose rows carry x-claude-code-agent-id (the converter's rule)


def _row(t: float, dur: float, blocks: list[str], tokens: int, out: int, **extra) -> dict:
    """One proxy row: a model call at t seconds into the session, `dur` seconds long, whose prompt hashed to
    `blocks` (64 tokens each; `tokens` of them counted, the last block partial)."""
    ms = int(round(t * 1000))
    row = {
        "timestamp": f"2026-06-01T00:{ms // 60000:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}Z",
        "t_sec": t,
        "model": "claude-sonnet-4-5",
        "input_tokens": 8,
        "output_tokens": out,
        "cache_read_input_tokens": max(0, tokens - 8),
        "cache_write_tokens": 0,
        "hash_ids": blocks,
        "hash_token_count": tokens,
        "duration_ms": int(round(dur * 1000)),
        "subagent_label": None,
        "agent_id": None,
        "thread_id": None,
        "cli_version": CLI,
        "is_streaming": True,
        "ttft_ms": int(round(dur * 300)),
    }
    row.update(extra)
    return row


def _ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{k:022x}" for k in range(n)]


def sessions() -> dict[str, list[dict]]:
    system = _ids("aa", 4)  # the main agent's system prompt: four blocks
    turns = _ids("bb", 12)  # each turn adds the last answer's block and the new user block
    sub_a, sub_b = _ids("cc", 3), _ids("dd", 2)
    main = []
    starts = [0.0, 1.0, 1.8, 3.0, 3.9, 6.0]
    durs = [0.4, 0.5, 0.3, 0.4, 0.3, 0.2]
    for k, (t, d) in enumerate(zip(starts, durs, strict=True)):
        blocks = system + turns[: 2 * k + 1]
        main.append(_row(t, d, blocks, 64 * len(blocks) - 20, 24 - 2 * k))
    agent = {"subagent_label": "General Agent", "agent_id": "agent-0000aaaa"}
    waited = [
        _row(2.2, 0.3, system[:2] + sub_a[:2], 240, 20, **agent),
        _row(2.6, 0.3, system[:2] + sub_a, 300, 20, **agent),
    ]
    background = [
        _row(3.5, 2.0, system[:2] + sub_b, 250, 30, subagent_label="Explore", agent_id="agent-bbbb")
    ]
    short = _ids("ee", 3)
    compaction = [
        _row(0.0, 0.3, short + _ids("f0", 1), 240, 16),
        _row(0.8, 0.3, short + _ids("f0", 3), 370, 16),
        _row(1.5, 0.3, short + _ids("f0", 5), 500, 16),
        _row(2.2, 0.3, short + _ids("f9", 2), 300, 16),  # the history replaced by a summary
    ]
    return {"main-subagents": main + waited + background, "compaction": compaction}


def pin(inferencex: Path) -> list[str]:
    """Run the checkout's converter on the sessions; write the traces one a line. Returns what changed."""
    converter = inferencex / CONVERTER
    if not converter.is_file():
        raise SystemExit(f"{converter}: not found (give a checkout of SemiAnalysisAI/InferenceX)")
    with tempfile.TemporaryDirectory() as tmp:
        proxy, weka = Path(tmp) / "proxy", Path(tmp) / "weka"
        proxy.mkdir()
        for name, rows in sessions().items():
            (proxy / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        subprocess.run(
            [sys.executable, CONVERTER, "-i", str(proxy), "-o", str(weka)],
            cwd=inferencex,
            check=True,
            capture_output=True,
            text=True,
        )
        lines = [
            json.dumps(json.loads(p.read_text()), separators=(",", ":")) for p in sorted(weka.glob("*.json"))
        ]
    DEST.mkdir(parents=True, exist_ok=True)
    target = DEST / "traces.jsonl"
    text = "".join(line + "\n" for line in lines)
    changed = not target.exists() or target.read_text() != text
    target.write_text(text)
    return [f"inferencex/agentic/traces.jsonl ({len(lines)} traces)"] if changed else []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pin", help="write tests/data/inferencex/agentic/traces.jsonl")
    p.add_argument("--inferencex", type=Path, required=True, help="checkout of SemiAnalysisAI/InferenceX")
    args = parser.parse_args()
    print("\n".join(pin(args.inferencex.resolve())) or "no changes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
