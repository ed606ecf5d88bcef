"""InferenceX's client options in `servelab bench`: the chat framing of random prompts (`--use-chat-template`,
`--dsv4`), its length rule (`--random-range-rule inferencex`), `--tokenizer-mode`, and the refusals."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest

from servelab.bench.chat_template import DSV4_ASSISTANT, DSV4_BOS, DSV4_THINK, DSV4_USER
from servelab.bench.config import BenchConfig
from servelab.bench.datasets import build_dataset
from servelab.bench.tokenizer import LocalTokenizer
from servelab.cli.main import main
from servelab.errors import ServelabError
from servelab.traffic.lengths import sample_lengths

# a Llama-like template: the special tokens come from tokenizer_config.json, as transformers passes them
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@pytest.fixture
def chat_tokenizer(tmp_path, tiny_tokenizer):
    """The tiny tokenizer with a chat template in its tokenizer_config.json."""
    d = tmp_path / "chat-tok"
    d.mkdir()
    shutil.copy(tiny_tokenizer / "tokenizer.json", d / "tokenizer.json")
    config = {
        "chat_template": TEMPLATE,
        "bos_token": "<s>",
        "eos_token": {"content": "</s>", "special": True},
    }
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return d


def cfg(**kw) -> BenchConfig:
    base = dict(model="m", num_prompts=12, random_input_len=40, random_output_len=8)
    return BenchConfig(**(base | kw))


def test_chat_template_frames_every_prompt_and_takes_its_tokens_off_the_length(chat_tokenizer):
    tok = LocalTokenizer(str(chat_tokenizer))
    c = cfg(tokenizer=str(chat_tokenizer), use_chat_template=True)
    items = build_dataset(c, tok).items
    template_tokens = tok.count("<s><|user|>\na</s>\n<|assistant|>\n") - 1
    assert template_tokens > 5  # the test means something only if the template costs tokens
    for item in items:
        assert item.prompt.startswith("<s><|user|>\n") and item.prompt.endswith("</s>\n<|assistant|>\n")
        assert item.prompt_len == tok.count(item.prompt)
        # the body is the set length less the template's tokens, so the framed prompt is about the set length
        assert abs(item.prompt_len - 40) <= 2, item.prompt_len


def test_dsv4_frames_as_deepseek_v4_thinking_and_implies_the_chat_template(chat_tokenizer):
    tok = LocalTokenizer(str(chat_tokenizer))
    # DeepSeek-V4's special tokens are bytes to this tiny vocabulary: a length that leaves room for them
    c = cfg(tokenizer=str(chat_tokenizer), dsv4=True, random_input_len=200)
    assert c.use_chat_template  # as InferenceX's run_benchmark_serving turns it on
    for item in build_dataset(c, tok).items:
        assert item.prompt.startswith(DSV4_BOS + DSV4_USER)
        assert item.prompt.endswith(DSV4_ASSISTANT + DSV4_THINK)
        assert item.prompt_len == tok.count(item.prompt)


def test_the_chat_template_takes_the_model_as_tokenizer_as_inferencex_does():
    assert cfg(use_chat_template=True).tokenizer == "m"
    assert cfg(use_chat_template=True, tokenizer="t").tokenizer == "t"
    assert cfg().tokenizer is None  # without the template nothing changes


def test_a_tokenizer_without_a_chat_template_is_one_line(tiny_tokenizer):
    tok = LocalTokenizer(str(tiny_tokenizer))
    with pytest.raises(ServelabError) as e:
        build_dataset(cfg(tokenizer=str(tiny_tokenizer), use_chat_template=True), tok)
    assert "\n" not in str(e.value) and "no chat template" in str(e.value)


def test_the_chat_template_without_any_tokenizer_is_one_line():
    c = BenchConfig(num_prompts=2, use_chat_template=True)  # no --model: asked from the server later
    with pytest.raises(ServelabError) as e:
        build_dataset(c, None)
    assert "--use-chat-template needs the model's tokenizer" in str(e.value)


def test_inferencex_rule_draws_lengths_up_to_the_set_ones():
    rng = np.random.default_rng(0)
    ins, outs = sample_lengths(rng, 5000, 1000, 100, 0.8, rule="inferencex")
    assert ins.min() == 800 and ins.max() == 1000  # [int(L r), L], both ends reached
    assert outs.min() == 80 and outs.max() == 100
    ins, _ = sample_lengths(np.random.default_rng(0), 5000, 1000, 100, 0.8)
    assert ins.min() in (199, 200) and ins.max() == 1800  # vLLM's [floor(L(1 - r)), ceil(L(1 + r))]
    ins, outs = sample_lengths(np.random.default_rng(0), 10, 1000, 100, 1.0, rule="inferencex")
    assert set(ins.tolist()) == {1000} and set(outs.tolist()) == {100}  # r = 1: exactly L


def cli(monkeypatch, capsys, *args: str) -> tuple[int | str | None, str]:
    monkeypatch.setattr(sys, "argv", ["servelab", "bench", "--model", "m", "--num-prompts", "2", *args])
    with pytest.raises(SystemExit) as e:
        main()
    return e.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    "args,says",
    [
        (("--tokenizer-mode", "mistral"), "tokenizer mode mistral is not supported: vLLM's mistral_common"),
        (("--tokenizer-mode", "slow"), "tokenizer mode slow is not supported"),
        (("--tokenizer-mode", "nope"), "is not one of auto, deepseek_v4"),
        (("--random-range-ratio", "1"), "must be below 1 by the vllm rule"),
        (("--random-range-rule", "other"), "--random-range-rule"),
        (("--dsv4", "--dataset-name", "prefix"), "apply to the random dataset"),
    ],
)
def test_refusals_are_one_line(monkeypatch, capsys, args, says):
    code, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and says in err and err.count("\n") == 1, err
