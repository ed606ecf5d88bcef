"""Request lengths: one rule for the load generator's random dataset and for the simulator's requests.

The rule is `vllm bench serve`'s random dataset (vllm/benchmarks/datasets.py, RandomDataset): for a mean
length L and a range ratio r, input and output lengths are integers uniform in [floor(L(1 - r)),
ceil(L(1 + r))] (outputs at least 1), the n input lengths drawn first and then the n output lengths, from a
numpy Generator seeded by the seed. The load generator first subtracts from the input mean the special tokens
the tokenizer adds, as vLLM does; the simulator counts the tokens the engine sees, so it subtracts none.

InferenceX's client (its fork of vLLM's benchmark_serving.py, utils/bench_serving/) reads the same
--random-range-ratio by another rule: lengths uniform in [int(L r), L], at most the set length. `RangeRule`
names the two; the load generator and the twin take either, so a sweep job replays upstream's lengths.

The default spread differs by context, and these two constants are the only place that says so:
- `servelab bench` defaults to vLLM's --random-range-ratio, 0: every request has exactly the set lengths;
- the simulator defaults to 0.2: identical requests in a closed loop stay in lockstep, every wave prefilling
  together, which no real load does (a measured run sees real spread from sampling, EOS and client timing).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # annotations only: `servelab bench`'s flag defaults come from here, before numpy is needed
    import numpy as np

BENCH_RANGE_RATIO = 0.0
SIMULATOR_RANGE_RATIO = 0.2
# vllm: [floor(L(1 - r)), ceil(L(1 + r))]; inferencex: [int(L r), L] (InferenceX's `sample_uniform`)
RangeRule = Literal["vllm", "inferencex"]
RANGE_RULES: tuple[RangeRule, ...] = ("vllm", "inferencex")


def length_bounds(mean: int, ratio: float, minimum: int = 0, rule: RangeRule = "vllm") -> tuple[int, int]:
    """The inclusive range of one length: [floor(mean(1 - r)), ceil(mean(1 + r))] by vLLM's rule,
    [int(mean r), mean] by InferenceX's; each end at least `minimum`."""
    if rule == "inferencex":
        return max(minimum, int(mean * ratio)), max(minimum, mean)
    return max(minimum, math.floor(mean * (1 - ratio))), max(minimum, math.ceil(mean * (1 + ratio)))


def sample_lengths(
    rng: np.random.Generator,
    n: int,
    input_len: int,
    output_len: int,
    ratio: float,
    special: int = 0,
    rule: RangeRule = "vllm",
    out_ratio: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """n input lengths, then n output lengths, by vLLM's random-dataset rule or InferenceX's (see the module
    docstring); outputs are at least 1 token by either. `out_ratio`: the outputs' own ratio (vLLM's
    --random-range-ratio '{"input": r1, "output": r2}'); None: `ratio`."""
    in_lo, in_hi = length_bounds(max(0, input_len - special), ratio, rule=rule)
    out_r = ratio if out_ratio is None else out_ratio
    out_lo, out_hi = length_bounds(output_len, out_r, minimum=1, rule=rule)
    return rng.integers(in_lo, in_hi + 1, size=n), rng.integers(out_lo, out_hi + 1, size=n)


class LengthStream:
    """Lengths for requests made one at a time (the simulator's): blocks of `block` requests drawn by
    `sample_lengths` from `rng`. With `np.random.default_rng(seed)` the first block equals the lengths of a
    `servelab bench` random dataset of `block` prompts with the same seed (and no special tokens)."""

    def __init__(
        self, input_len: int, output_len: int, ratio: float, rng: np.random.Generator, block: int
    ) -> None:
        self.input_len, self.output_len, self.ratio, self.block = input_len, output_len, ratio, block
        self.rng = rng
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    def __getitem__(self, index: int) -> tuple[int, int]:
        """(input length, output length) of request `index`."""
        while index >= len(self.inputs):
            ins, outs = sample_lengths(self.rng, self.block, self.input_len, self.output_len, self.ratio)
            self.inputs += ins.tolist()
            self.outputs += outs.tolist()
        return self.inputs[index], self.outputs[index]
