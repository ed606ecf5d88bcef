"""keys.json for call 5: the `cutlass_block_fp8` entry's plan (DeepSeek-V4-Flash's block-FP8 linear keys, then
-Pro's), ordered so that a call cut short still holds every Flash (n, k) at the token counts that matter
most (prefill-sized M first, then decode-sized), each key timed with vLLM's kernel and torch's in turn."""

import json
import sys

from servelab.collect.engines import catalogue

M_ORDER = (4096, 64, 16384, 1, 512, 8, 1024, 128, 16, 2048, 256, 32, 8192, 4, 2)
FLASH_NK = set()

keys = catalogue("vllm").entry("cutlass_block_fp8").plan()
from servelab.collect.engines.plans import RECIPE_PARALLELS, TOKENS, gemm_keys  # noqa: E402

flash = {(k.n, k.k) for k in gemm_keys(("sgl-project/DeepSeek-V4-Flash-FP8",), RECIPE_PARALLELS, TOKENS)}
keys.sort(key=lambda k: ((k.n, k.k) not in flash, M_ORDER.index(k.m), k.n, k.k))
json.dump([{f: getattr(k, f) for f in ("m", "n", "k", "dtype")} for k in keys], open(sys.argv[1], "w"))
print(len(keys), "keys;", sum((k.n, k.k) in flash for k in keys), "of V4-Flash")
