"""Datasets -> BenchItems (vLLM's random, sharegpt, sonnet, hf, prefix_repetition, custom, spec_bench,
burstgpt and speed_bench, plus multiturn).

The generated datasets (random, prefix, multiturn, speed_bench) make each prompt as it is read (LazyItems):
a run of millions never holds its prompts. Their lengths and other per-request draws come first, as before
(a few bytes a request), then the prompts in order from the same random state, so a seed gives the prompts it
always gave, every time they are read. The datasets read from a file are lists, bounded by the file.

With a tokenizer, prompts have exact token lengths (vLLM's decode / re-encode / adjust loop). Without one,
prompts are made of common English words and each word is counted as one token: that is an approximation,
stated in the result file (`prompt_len_source`); the server's usage.prompt_tokens replaces it when sent.
"""

from __future__ import annotations

import copy
import csv
import json
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from servelab.bench.config import BenchConfig
from servelab.bench.hf_local import PROMPT_COLUMNS, prompt_and_answer, read_rows
from servelab.bench.tokenizer import LocalTokenizer
from servelab.errors import ServelabError
from servelab.traffic.lengths import sample_lengths
from servelab.userfiles import check_regular

# Words that are one token in common BPE vocabularies when preceded by a space (GPT-2, Llama, Qwen).
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "his",
    "her",
    "he",
    "she",
    "it",
    "an",
    "be",
    "are",
    "were",
    "this",
    "which",
    "or",
    "have",
    "has",
    "had",
    "not",
    "but",
    "all",
    "they",
    "their",
    "there",
    "one",
    "two",
    "new",
    "first",
    "more",
    "time",
    "year",
    "years",
    "people",
    "city",
    "state",
    "world",
    "after",
    "also",
    "other",
    "many",
    "most",
    "some",
    "only",
    "over",
    "such",
    "into",
    "would",
    "could",
    "about",
    "than",
    "then",
    "them",
    "these",
    "when",
    "where",
    "who",
    "will",
    "can",
    "may",
    "under",
    "while",
    "during",
    "each",
    "between",
    "both",
    "through",
    "before",
    "high",
    "long",
    "small",
    "great",
    "part",
    "place",
    "group",
    "number",
    "system",
    "water",
    "house",
    "music",
    "family",
    "school",
    "line",
    "game",
    "work",
    "life",
    "power",
    "river",
    "north",
    "south",
    "east",
    "west",
    "early",
    "late",
    "local",
    "public",
    "general",
    "second",
    "third",
    "major",
    "main",
    "following",
    "known",
    "found",
    "made",
    "called",
    "used",
    "became",
    "began",
    "left",
    "based",
    "held",
    "named",
    "including",
    "along",
    "around",
    "since",
    "series",
    "season",
    "team",
    "club",
    "party",
    "church",
    "court",
    "film",
    "album",
    "book",
    "war",
    "army",
    "government",
    "company",
    "country",
    "area",
    "land",
    "town",
    "village",
    "road",
    "station",
    "building",
    "church",
    "center",
    "form",
    "level",
    "period",
    "result",
    "side",
    "song",
]

APPROX_SOURCE = "approximate: 1 token per common English word (no tokenizer given)"
APPROX_WHITESPACE = "approximate: whitespace words (no tokenizer)"
SONNET_BASE_PROMPT = "Pick as many lines as you can from these poem lines:\n"  # vLLM's SonnetDataset


@dataclass
class BenchItem:
    """One request of the dataset (or the first turn of a conversation)."""

    index: int
    prompt: str
    prompt_len: int
    output_len: int
    turns: list[tuple[str, int, int]] = field(
        default_factory=list
    )  # later user turns: (text, len, output_len)


class LazyItems(Iterable[BenchItem]):
    """The items of a generated dataset, made one at a time as they are read; `len` is known up front and
    each reading starts again from the same state, so it gives the same items."""

    def __init__(self, count: int, make: Callable[[], Iterator[BenchItem]]) -> None:
        self.count = count
        self.make = make

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[BenchItem]:
        return self.make()


@dataclass
class Dataset:
    items: list[BenchItem] | LazyItems
    prompt_len_source: str


class _Words:
    """Deterministic word-based text when no tokenizer is given."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def text(self, n: int) -> str:
        idx = self.rng.integers(0, len(WORDS), size=n)
        return " " + " ".join([WORDS[i] for i in idx.tolist()]) if n > 0 else ""  # tolist: 4x faster


def _exact_text(
    tok: LocalTokenizer, ids: list[int], target: int, allowed: np.ndarray, rng
) -> tuple[str, int]:
    """vLLM's gen_prompt_decode_to_target_len (decode, re-encode, trim or pad, up to 10 tries); where that
    still misses (byte-level BPE pieces that do not round-trip), start again from fresh random tokens, up to
    5 times, so prompts hit the target exactly. The length returned is always the re-encoded count."""
    text, n = "", -1
    for _attempt in range(5):
        for _ in range(11):
            text = tok.decode(ids)
            ids = tok.encode(text)
            if len(ids) == target:
                return text, target
            if len(ids) > target:
                ids = ids[:target]
            else:
                ids = ids + allowed[rng.integers(0, len(allowed), size=target - len(ids))].tolist()
        n = len(tok.encode(text))
        ids = allowed[rng.integers(0, len(allowed), size=target)].tolist()
    return text, n


def _allowed(tok: LocalTokenizer) -> np.ndarray:
    return np.array(sorted(set(range(tok.vocab_size)) - tok.special_ids))


class _TextMaker:
    """Makes prompt text of a target length with the tokenizer (exact) or words (approximate)."""

    def __init__(
        self, tok: LocalTokenizer | None, rng: np.random.Generator, allowed: np.ndarray | None = None
    ) -> None:
        self.tok, self.rng = tok, rng
        self.allowed = allowed if allowed is not None or not tok else _allowed(tok)
        self.words = _Words(rng)

    def lazy(self, count: int, items: Callable[[_TextMaker], Iterator[BenchItem]]) -> LazyItems:
        """`items(maker)` made lazily: each reading gets a maker whose random state is this one's now."""
        state = copy.deepcopy(self.rng)
        return LazyItems(count, lambda: items(_TextMaker(self.tok, copy.deepcopy(state), self.allowed)))

    def random(self, n: int, offset: int | None = None) -> tuple[str, int]:
        if n <= 0:
            return "", 0
        allowed = self.allowed
        if self.tok is None or allowed is None:
            return self.words.text(n), n
        if offset is None:
            ids = allowed[self.rng.integers(0, len(allowed), size=n)].tolist()
        else:  # vLLM's reproducible inner sequence: (offset + index + arange) % vocab
            ids = allowed[(offset + np.arange(n)) % len(allowed)].tolist()
        return _exact_text(self.tok, ids, n, allowed, self.rng)

    def count(self, text: str) -> int:
        return self.tok.count(text) if self.tok else len(text.split())


def build_dataset(cfg: BenchConfig, tok: LocalTokenizer | None) -> Dataset:
    if cfg.dataset_path:
        check_regular(Path(cfg.dataset_path), "dataset_path")  # a FIFO would be waited on forever
    rng = np.random.default_rng(cfg.seed)
    maker = _TextMaker(tok, rng)
    source = f"tokenizer {tok.path} ({tok.kind}), exact" if tok else APPROX_SOURCE
    name = cfg.dataset_name
    items: list[BenchItem] | LazyItems
    if name == "random":
        items = _random(cfg, maker, rng, tok)
    elif name == "prefix":
        items = _prefix(cfg, maker)
    elif name == "multiturn":
        items = _multiturn(cfg, maker, rng)
    elif name == "sonnet":
        items = _sonnet(cfg, maker)
        source = f"tokenizer {tok.path} ({tok.kind}), raw text" if tok else APPROX_WHITESPACE
    elif name == "hf":
        items = _hf(cfg, maker)
        source = f"tokenizer {tok.path} ({tok.kind})" if tok else APPROX_WHITESPACE
    elif name == "speed_bench":
        items = _speed_bench(cfg, maker)
        source = f"tokenizer {tok.path} ({tok.kind})" if tok else APPROX_WHITESPACE
    elif name == "spec_bench":
        items = _spec_bench(cfg, maker)
        source = f"tokenizer {tok.path} ({tok.kind})" if tok else APPROX_WHITESPACE
    elif name == "burstgpt":
        items = _burstgpt(cfg, maker)
    elif name == "sharegpt":
        items = _sharegpt(cfg, maker)
        source = f"tokenizer {tok.path} ({tok.kind})" if tok else APPROX_WHITESPACE
    else:
        items = _custom(cfg, maker)
        source = f"tokenizer {tok.path} ({tok.kind})" if tok else APPROX_WHITESPACE
    return Dataset(items=items, prompt_len_source=source)


def _random(cfg: BenchConfig, maker: _TextMaker, rng, tok: LocalTokenizer | None) -> LazyItems:
    special = tok.num_special_to_add if tok else 0
    frame = None
    if cfg.use_chat_template:
        if tok is None:
            raise ServelabError(
                "--use-chat-template needs the model's tokenizer: --tokenizer, or --model naming a "
                "checkpoint in the local Hugging Face cache"
            )
        frame = tok.chat_framing(cfg.dsv4)
        # InferenceX's rule: the template's tokens (those around a one-token message) come off the length
        special = len(tok.encode(frame("a"))) - 1
    in_lens, out_lens = sample_lengths(
        rng,
        cfg.num_prompts,
        cfg.random_input_len,
        cfg.random_output_len,
        cfg.random_range_ratio,
        special,
        cfg.random_range_rule,
        cfg.random_output_range_ratio,
    )
    if cfg.random_prefix_len + int(in_lens.min()) < 1:
        raise ServelabError("--random-input-len is too small: a prompt would have no tokens")
    offsets = rng.integers(0, tok.vocab_size if tok else len(WORDS), size=cfg.num_prompts)
    prefix, prefix_len = maker.random(cfg.random_prefix_len)

    def items(m: _TextMaker) -> Iterator[BenchItem]:
        for i in range(cfg.num_prompts):
            body, body_len = m.random(int(in_lens[i]), offset=int(offsets[i]) + i)
            text = prefix + body if frame is None else frame(prefix + body)
            n = m.count(text) if tok else prefix_len + body_len
            yield BenchItem(i, text, n, int(out_lens[i]))

    return maker.lazy(cfg.num_prompts, items)


def _prefix(cfg: BenchConfig, maker: _TextMaker) -> LazyItems:
    """vLLM's prefix_repetition: num_prefixes shared prefixes, each followed by distinct suffixes."""
    k = cfg.prefix_repetition_num_prefixes
    if cfg.num_prompts < k:
        raise ServelabError(
            f"--num-prompts ({cfg.num_prompts}) must be >= --prefix-repetition-num-prefixes ({k})"
        )
    per = cfg.num_prompts // k

    def items(m: _TextMaker) -> Iterator[BenchItem]:
        index = 0
        for _ in range(k):
            prefix, _n = m.random(cfg.prefix_repetition_prefix_len)
            for _ in range(per):
                suffix, _m = m.random(cfg.prefix_repetition_suffix_len)
                text = prefix + suffix
                n = m.count(text) if m.tok else len(text.split())
                yield BenchItem(index, text, n, cfg.prefix_repetition_output_len)
                index += 1

    return maker.lazy(k * per, items)


def _multiturn(cfg: BenchConfig, maker: _TextMaker, rng) -> LazyItems:
    """Conversations of --multiturn-turns turns: a shared system prefix (--random-prefix-len) and a history
    that grows turn by turn (each later request carries every earlier user turn and the server's answers)."""
    prefix, _n = maker.random(cfg.random_prefix_len)
    in_lens, out_lens = sample_lengths(
        rng,
        cfg.num_prompts * cfg.multiturn_turns,
        cfg.random_input_len,
        cfg.random_output_len,
        cfg.random_range_ratio,
        0,
        cfg.random_range_rule,
        cfg.random_output_range_ratio,
    )

    def items(m: _TextMaker) -> Iterator[BenchItem]:
        for c in range(cfg.num_prompts):
            turns = []
            for t in range(cfg.multiturn_turns):
                k = c * cfg.multiturn_turns + t
                text, n = m.random(int(in_lens[k]))
                turns.append((text, n, int(out_lens[k])))
            first_text = prefix + turns[0][0]
            yield BenchItem(c, first_text, m.count(first_text), turns[0][2], turns=turns[1:])

    return maker.lazy(cfg.num_prompts, items)


def _sharegpt(cfg: BenchConfig, maker: _TextMaker) -> list[BenchItem]:
    """vLLM's ShareGPT sampling: first human turn as prompt, the first reply's length as output length;
    pairs with prompt < 4 or output < 4 tokens, prompt > 1024 or prompt+output > 2048 are skipped."""
    path = Path(cfg.dataset_path or "")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ServelabError(f"--dataset-path {path}: cannot read ShareGPT JSON ({e})") from None
    if not isinstance(data, list):
        raise ServelabError(f"--dataset-path {path}: expected a JSON list of conversations")
    convs = [
        d["conversations"] for d in data if isinstance(d, dict) and _usable_turns(d.get("conversations"))
    ]
    if not cfg.disable_shuffle:
        random.Random(cfg.seed).shuffle(convs)
    items: list[BenchItem] = []
    for conv in convs:
        if len(items) >= cfg.num_prompts:
            break
        prompt, reply = conv[0].get("value", ""), conv[1].get("value", "")
        p_len = maker.count(prompt)
        o_len = cfg.sharegpt_output_len or maker.count(reply)
        if cfg.sharegpt_output_len is None and (
            p_len < 4 or o_len < 4 or p_len > 1024 or p_len + o_len > 2048
        ):
            continue
        items.append(BenchItem(len(items), prompt, p_len, o_len))
    if not items:
        raise ServelabError(f"--dataset-path {path}: no usable ShareGPT conversations")
    return items


def _usable_turns(conv: object) -> bool:
    """A ShareGPT conversation whose first two turns carry text (others are skipped like short ones)."""
    return (
        isinstance(conv, list)
        and len(conv) >= 2
        and all(isinstance(t, dict) and isinstance(t.get("value", ""), str) for t in conv[:2])
    )


def _custom(cfg: BenchConfig, maker: _TextMaker) -> list[BenchItem]:
    """JSONL, one {"prompt": str, "output_len"?: int} per line (vLLM's custom dataset format), shuffled by the
    seed (not with --disable-shuffle) and drawn again up to --num-prompts (not with --no-oversample), as vLLM
    does."""
    path = Path(cfg.dataset_path or "")
    items: list[BenchItem] = []
    rows: list[tuple[str, int]] = []
    for n, row in _jsonl(path):
        prompt = row.get("prompt") if isinstance(row, dict) else None
        if not isinstance(row, dict) or not isinstance(prompt, str):
            raise ServelabError(f'--dataset-path {path}:{n}: expected {{"prompt": "...", "output_len": N}}')
        out_len = next((row[k] for k in ("output_len", "output_tokens") if row.get(k) is not None), None)
        if out_len is None and cfg.custom_output_len == -1:
            raise ServelabError(
                f"--dataset-path {path}:{n}: no output_tokens, which --custom-output-len -1 asks of every row"
            )
        out_len = cfg.custom_output_len if out_len is None else out_len
        if type(out_len) is not int or out_len < 1:
            raise ServelabError(
                f"--dataset-path {path}:{n}: output_len must be a positive integer, not {str(out_len)[:40]}"
            )
        rows.append((prompt, out_len))
    if not rows:
        raise ServelabError(f"--dataset-path {path}: no prompts")
    if not cfg.disable_shuffle:  # vLLM's custom dataset shuffles its rows by the seed
        random.Random(cfg.seed).shuffle(rows)
    frame = _client_template(cfg, maker.tok)
    for prompt, out_len in rows[: cfg.num_prompts]:
        text = frame(prompt) if frame else prompt
        items.append(BenchItem(len(items), text, maker.count(text), out_len))
    return _oversampled(cfg, items)


def _speed_bench(cfg: BenchConfig, maker: _TextMaker) -> LazyItems:
    """SPEED-Bench (nvidia/SPEED-Bench) as vLLM's SpeedBench reads it: DIR/SUBSET.jsonl as NeMo-Skills'
    speed-bench prepare.py writes it, one {"category": ..., "messages": [{"role", "content"}, ...]} per line;
    the prompt is the first message, rows kept by --speed-bench-category, shuffled by the seed, every request
    asking for --speed-bench-output-len tokens; fewer rows than prompts are drawn again (vLLM oversamples)."""
    path = Path(cfg.dataset_path or "") / f"{cfg.speed_bench_dataset_subset}.jsonl"
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise ServelabError(
            f"--dataset-path {path}: {e.strerror} (prepare it with NeMo-Skills' speed-bench prepare.py, "
            "which downloads nvidia/SPEED-Bench)"
        ) from None
    except UnicodeDecodeError:
        raise ServelabError(f"--dataset-path {path}: not UTF-8 text") from None
    prompts: list[str] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            first = row["messages"][0]["content"]
        except (json.JSONDecodeError, RecursionError, TypeError, KeyError, IndexError):
            raise ServelabError(
                f'--dataset-path {path}:{n}: expected {{"category": ..., "messages": [{{"content": "..."}}]}}'
            ) from None
        if not isinstance(first, str):
            raise ServelabError(f"--dataset-path {path}:{n}: the first message's content is not text")
        if cfg.speed_bench_category is None or row.get("category") == cfg.speed_bench_category:
            prompts.append(first)
    if not prompts:
        what = f" in category {cfg.speed_bench_category!r}" if cfg.speed_bench_category else ""
        raise ServelabError(f"--dataset-path {path}: no prompts{what}")
    if not cfg.disable_shuffle:
        random.Random(cfg.seed).shuffle(prompts)
    count = min(cfg.num_prompts, len(prompts)) if cfg.no_oversample else cfg.num_prompts

    def items(m: _TextMaker) -> Iterator[BenchItem]:
        for i in range(count):
            prompt = prompts[i % len(prompts)]
            yield BenchItem(i, prompt, m.count(prompt), cfg.speed_bench_output_len)

    return maker.lazy(count, items)


def _spec_bench(cfg: BenchConfig, maker: _TextMaker) -> list[BenchItem]:
    """Spec-Bench (hemingkx/Spec-Bench's question.jsonl) as vLLM's SpecBench reads it: one {"category": ...,
    "turns": [first, ...]} per line, the prompt the first turn, rows kept by --spec-bench-category, shuffled
    by the seed (not with --disable-shuffle), --spec-bench-output-len tokens each; drawn again up to
    --num-prompts unless --no-oversample, as vLLM's custom dataset does."""
    path = Path(cfg.dataset_path or "")
    prompts: list[str] = []
    for n, row in _jsonl(path):
        turns = row.get("turns") if isinstance(row, dict) else None
        if (
            not isinstance(row, dict)
            or not isinstance(turns, list)
            or not turns
            or not isinstance(turns[0], str)
        ):
            raise ServelabError(f'--dataset-path {path}:{n}: expected {{"category": ..., "turns": ["..."]}}')
        if cfg.spec_bench_category is None or row.get("category") == cfg.spec_bench_category:
            prompts.append(turns[0])
    if not prompts:
        what = f" in category {cfg.spec_bench_category!r}" if cfg.spec_bench_category else ""
        raise ServelabError(f"--dataset-path {path}: no prompts{what}")
    if not cfg.disable_shuffle:
        random.Random(cfg.seed).shuffle(prompts)
    frame = _client_template(cfg, maker.tok)
    items = []
    for i, p in enumerate(prompts[: cfg.num_prompts]):
        text = frame(p) if frame else p
        items.append(BenchItem(i, text, maker.count(text), cfg.spec_bench_output_len))
    return _oversampled(cfg, items)


TEMPLATE_PURPOSE = "the custom and spec_bench datasets (or give --skip-chat-template)"


def _client_template(cfg: BenchConfig, tok: LocalTokenizer | None) -> Callable[[str], str] | None:
    """vLLM's client-side chat template of the custom and spec_bench datasets: with a tokenizer and without
    --skip-chat-template, each prompt becomes one user turn in the tokenizer's template (with the generation
    prompt and --chat-template-kwargs), counted as sent."""
    if tok is None or cfg.skip_chat_template:
        return None
    return tok.chat_framing(False, cfg.chat_template_kwargs, TEMPLATE_PURPOSE)


def _jsonl(path: Path) -> Iterator[tuple[int, object]]:
    """(line number, value) of each non-blank line of a JSON Lines file; a bad line is one error naming it."""
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise ServelabError(f"--dataset-path {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ServelabError(f"--dataset-path {path}: not UTF-8 text") from None
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as e:
                raise ServelabError(f"--dataset-path {path}:{n}: not JSON ({e.msg})") from None
            except RecursionError:
                raise ServelabError(f"--dataset-path {path}:{n}: nested too deeply") from None


def _oversampled(cfg: BenchConfig, items: list[BenchItem]) -> list[BenchItem]:
    """vLLM's oversampling: fewer items than --num-prompts are topped up with items drawn again at random
    (seeded), unless --no-oversample."""
    if cfg.no_oversample or len(items) >= cfg.num_prompts:
        return items
    rng = random.Random(cfg.seed)
    extra = [rng.choice(items) for _ in range(cfg.num_prompts - len(items))]
    return items + [
        BenchItem(len(items) + k, it.prompt, it.prompt_len, it.output_len) for k, it in enumerate(extra)
    ]


BURSTGPT_MODEL = "GPT-4"  # vLLM keeps the GPT-4 rows of the trace


def _burstgpt(cfg: BenchConfig, maker: _TextMaker) -> LazyItems:
    """BurstGPT (HPMLL/BurstGPT's CSV) as vLLM reads it: the rows of model GPT-4 with a positive "Response
    tokens", --num-prompts of them drawn by the seed (with replacement when there are fewer); each request a
    synthetic prompt of the row's "Request tokens" (vLLM's token ids (i + j) mod vocab, exact with a
    tokenizer) asking for its "Response tokens"."""
    path = Path(cfg.dataset_path or "")
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise ServelabError(f"--dataset-path {path}: {e.strerror}") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise ServelabError(f"--dataset-path {path}: not a CSV file ({e})") from None
    pairs: list[tuple[int, int]] = []
    for n, row in enumerate(rows, 2):
        if row.get("Model") != BURSTGPT_MODEL:
            continue
        try:
            req, resp = int(float(row["Request tokens"])), int(float(row["Response tokens"]))
        except (KeyError, TypeError, ValueError):
            raise ServelabError(
                f'--dataset-path {path}:{n}: expected BurstGPT\'s columns "Model", "Request tokens", '
                '"Response tokens" with numbers'
            ) from None
        if resp > 0:
            pairs.append((max(1, req), resp))
    if not pairs:
        raise ServelabError(f"--dataset-path {path}: no {BURSTGPT_MODEL} rows with response tokens")
    rng = random.Random(cfg.seed)
    if cfg.num_prompts <= len(pairs):
        chosen = rng.sample(pairs, cfg.num_prompts)
    else:
        chosen = [rng.choice(pairs) for _ in range(cfg.num_prompts)]

    def items(m: _TextMaker) -> Iterator[BenchItem]:
        for i, (in_len, out_len) in enumerate(chosen):
            text, n = m.random(in_len, offset=i)
            yield BenchItem(i, text, n, out_len)

    return maker.lazy(len(chosen), items)


def _sonnet(cfg: BenchConfig, maker: _TextMaker) -> list[BenchItem]:
    """vLLM's sonnet dataset (SonnetDataset in vllm/benchmarks/datasets.py): a base prompt, then the file's
    first lines as a shared prefix and lines drawn at random; the line counts come from the average tokens
    per line; samples longer than --sonnet-input-len are drawn again. Lengths count the raw text: servelab
    applies no chat template (vLLM formats the prompt with the tokenizer's template for completions)."""
    path = Path(cfg.dataset_path or "")
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)  # as vLLM's readlines()
    except OSError as e:
        raise ServelabError(f"--dataset-path {path}: {e.strerror}") from None
    if not any(line.strip() for line in lines):
        raise ServelabError(f"--dataset-path {path}: no lines of text")
    avg_len = sum(maker.count(line) for line in lines) / len(lines)
    base_len = maker.count(SONNET_BASE_PROMPT)
    if cfg.sonnet_input_len <= base_len:
        raise ServelabError(f"--sonnet-input-len must be more than the base prompt's {base_len} tokens")
    num_input_lines = round((cfg.sonnet_input_len - base_len) / avg_len)
    num_prefix_lines = max(round((cfg.sonnet_prefix_len - base_len) / avg_len), 0)
    prefix = "".join(lines[:num_prefix_lines])
    rng = random.Random(cfg.seed)
    items: list[BenchItem] = []
    for _ in range(100 * cfg.num_prompts + 1000):  # vLLM draws until enough fit; a bound ends the hopeless
        prompt = (
            SONNET_BASE_PROMPT + prefix + "".join(rng.choices(lines, k=num_input_lines - num_prefix_lines))
        )
        n = maker.count(prompt)
        if n <= cfg.sonnet_input_len:
            items.append(BenchItem(len(items), prompt, n, cfg.sonnet_output_len))
            if len(items) == cfg.num_prompts:
                return items
    raise ServelabError(
        f"--dataset-path {path}: too few samples fit in --sonnet-input-len {cfg.sonnet_input_len} "
        f"(lines average {avg_len:.1f} tokens; lower --sonnet-prefix-len or raise the input length)"
    )


def _hf(cfg: BenchConfig, maker: _TextMaker) -> list[BenchItem]:
    """A local dataset (hf_local.py reads it): the first --num-prompts rows with a prompt, in file order;
    output length --hf-output-len, else the reference answer's length, else --custom-output-len."""
    path = Path(cfg.dataset_path or "")
    items: list[BenchItem] = []
    for row in read_rows(path, cfg.hf_split):
        pair = prompt_and_answer(row)
        if pair is None:
            continue
        prompt, answer = pair
        fallback = cfg.custom_output_len if cfg.custom_output_len > 0 else 256  # -1 is custom's own
        out_len = cfg.hf_output_len or (maker.count(answer) if answer else 0) or fallback
        items.append(BenchItem(len(items), prompt, maker.count(prompt), out_len))
        if len(items) >= cfg.num_prompts:
            break
    if not items:
        raise ServelabError(
            f"--dataset-path {path}: no row has a prompt (a column {'/'.join(PROMPT_COLUMNS)}, "
            "or conversations / messages)"
        )
    return items
