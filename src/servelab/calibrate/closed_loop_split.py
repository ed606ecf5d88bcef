"""The development / held-out splits of the pinned public closed-loop results, decided from each deployment
group's key alone before any prediction is compared with them. scripts/refresh_closed_loop.py
(tests/data/closed_loop) and scripts/refresh_closed_loop_fresh.py (tests/data/closed_loop_fresh) write the
heldout.txt files with these rules; the tests check the pinned files against them."""

import hashlib


def below(text: str, share: float) -> bool:
    """Whether the first 8 hex digits of the text's SHA-256, as an integer, fall below share * 2**32."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) < share * 2**32


# tests/data/closed_loop: InferenceX's MiniMax-M2.5 token-position sweeps and AIConfigurator's silicon rows
HELD_OUT_SHARE = 0.4
SPLIT_FIELDS = (
    "system",
    "mode",
    "backend",
    "model_path",
    "precision",
    "gemm_quant_mode",
    "moe_quant_mode",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
    "prefill_num_workers",
    "prefill_tp_size",
    "prefill_attention_dp_size",
    "prefill_moe_ep_size",
    "decode_num_workers",
    "decode_tp_size",
    "decode_attention_dp_size",
    "decode_moe_ep_size",
    "isl",
    "osl",
)


def held_out(key: str) -> bool:
    return below(key, HELD_OUT_SHARE)


def silicon_key(row: dict) -> str:
    source = row["silicon_data_source"].split(";")[0].strip()
    if source.startswith("source_file=/"):  # a path on someone's laptop: AIConfigurator's own runs
        source = "source_file=aiconfigurator-local"
    return "|".join([source, *(row.get(f, "").strip() for f in SPLIT_FIELDS)])


def ix_key(name: str) -> str:
    """minimax_m25_vllm_tep8_isl1024_osl128_conc4.json -> its sweep without the concurrency."""
    return "inferencex-token-position|" + name.rsplit("_conc", 1)[0]


# tests/data/closed_loop_fresh: its own salt, so this split is independent of the one above
FRESH_SALT = "servelab closed-loop fresh split 2026-12-06|"
FRESH_HELD_OUT_SHARE = 0.5
FRESH_GROUP_FIELDS = (
    "source",
    "mode",
    "system",
    "engine",
    "engine_version",
    "model",
    "precision",
    "tp",
    "ep",
    "dp_attention",
    "pp",
    "prefill_workers",
    "prefill_tp",
    "prefill_ep",
    "decode_workers",
    "decode_tp",
    "decode_ep",
    "isl",
    "osl",
)


def fresh_group_key(row: dict[str, str]) -> str:
    return "|".join(row[f] for f in FRESH_GROUP_FIELDS)


def fresh_held_out(row: dict[str, str]) -> bool:
    return below(FRESH_SALT + fresh_group_key(row), FRESH_HELD_OUT_SHARE)
