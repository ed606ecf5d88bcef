"""accuracy/sglang_kv_share.py: SGLang's development points replayed with a smaller KV cache (its
mem_fraction_static): the six tp1 Qwen3-32B points on H100 wait longer for their first token, the smaller the
cache, because fewer of the 16 clients fit at once."""

import re

from tests.accuracy_python import ACCURACY, run_accuracy_python

SCRIPT = str(ACCURACY / "sglang_kv_share.py")
LINE = re.compile(r"^  h100_sxm tp1 (\d+/\d+) c16: TTFT +([\d.]+) s .*TPOT +([\d.]+) ms")


def blocks(out: str) -> list[dict[str, tuple[float, float]]]:
    """Per mem_fraction_static tried, in order: lengths -> (TTFT s, TPOT ms)."""
    found: list[dict[str, tuple[float, float]]] = []
    for line in out.splitlines():
        if line.startswith("mem_fraction_static"):
            found.append({})
        elif m := LINE.match(line):
            found[-1][m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return found


def test_a_smaller_kv_cache_makes_the_first_tokens_wait():
    default, smaller = blocks(run_accuracy_python([SCRIPT, "--shares", "0.785"]))
    assert set(default) == set(smaller) == {f"{i}/{o}" for i in (1024, 2048) for o in (128, 256, 512)}
    for lengths, (ttft, _) in default.items():
        assert smaller[lengths][0] > 2 * ttft, lengths


def test_a_share_out_of_range_is_one_line_and_exit_2():
    err = run_accuracy_python([SCRIPT, "--shares", "0.8,1.5"], returncode=2)
    assert err == "error: --shares: each must lie in (0, 1), got '0.8,1.5'\n"
