"""The GSM8K stage through the real lm-eval against a server that answers right and one that answers wrong;
the questions come from a small local file in the hub's format (no network)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from answer_server import MODEL, AnswerServer

from servelab.errors import ServelabError
from servelab.recipes.workload import WlModelArgs, WlTask
from servelab.run import gsm8k
from servelab.run.gsm8k import lm_eval_model_args, metrics_from_results, run_gsm8k
from servelab.run.stage import StageFailed, Target

pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install '.[evals]')")

QUESTIONS = [
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", "3 + 4 = <<3+4=7>>7\n#### 7"),
    ("A box holds 12 pens. How many pens are in 3 boxes?", "12 * 3 = <<12*3=36>>36\n#### 36"),
    ("Sara reads 15 pages a day. How many pages does she read in a week?", "15 * 7 = 105\n#### 105"),
    ("A ticket costs $8. How much do 5 tickets cost?", "8 * 5 = 40\n#### 40"),
    ("Ann had 50 stickers and gave away 18. How many are left?", "50 - 18 = 32\n#### 32"),
    ("A farm has 1,200 hens and sells 200. How many hens remain?", "1200 - 200 = 1000\n#### 1,000"),
]
# lm-eval's defaults would load a Hugging Face tokenizer (hub access): send text, as the workloads do
NO_TOKENIZER = {"tokenized_requests": False, "tokenizer_backend": None}


@pytest.fixture
def gsm8k_file(tmp_path: Path) -> Path:
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in QUESTIONS))
    return path


def task(num_fewshot: int = 2, **args) -> WlTask:
    return WlTask(name="gsm8k", num_fewshot=num_fewshot, model_args=WlModelArgs(**(NO_TOKENIZER | args)))


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_right_answers_score_one(gsm8k_file, tmp_path, chat):
    with AnswerServer(correct=True, gsm8k=gsm8k_file) as server:
        out = run_gsm8k(
            Target(server.url, MODEL), task(num_concurrent=2), None, tmp_path / "out", gsm8k_file, chat=chat
        )
    assert out.metrics["exact_match"] == 1.0
    assert out.metrics["exact_match_flexible"] == 1.0
    assert out.metrics["num_questions"] == len(QUESTIONS)
    assert out.metrics["exact_match_stderr"] == 0.0  # every question right: no spread
    assert server.requests == len(QUESTIONS)
    results = json.loads((tmp_path / "out" / gsm8k.RESULTS_FILE).read_text())
    assert results["results"]["gsm8k"]["exact_match,strict-match"] == 1.0
    samples = [json.loads(s) for s in (tmp_path / "out" / gsm8k.SAMPLES_FILE).read_text().splitlines()]
    assert {s["doc_id"] for s in samples} == set(range(len(QUESTIONS)))  # one record per question and filter
    assert set(out.artifacts) == {
        tmp_path / "out" / gsm8k.RESULTS_FILE,
        tmp_path / "out" / gsm8k.SAMPLES_FILE,
    }


def test_wrong_answers_score_zero(gsm8k_file, tmp_path):
    with AnswerServer(correct=False, gsm8k=gsm8k_file) as server:
        out = run_gsm8k(Target(server.url, MODEL), task(), None, tmp_path / "out", gsm8k_file)
    assert out.metrics["exact_match"] == 0.0
    assert out.metrics["exact_match_flexible"] == 0.0


@pytest.mark.slow  # 1.1 s of CPU a case: an answer server and a whole gsm8k run
def test_few_shot_examples_never_include_the_question_asked(gsm8k_file, tmp_path):
    with AnswerServer(correct=True, gsm8k=gsm8k_file) as server:
        run_gsm8k(Target(server.url, MODEL), task(num_fewshot=3), None, tmp_path / "out", gsm8k_file)
    for line in (tmp_path / "out" / gsm8k.SAMPLES_FILE).read_text().splitlines():
        sample = json.loads(line)
        prompt = sample["arguments"][0][0]
        question = sample["doc"]["question"]
        assert prompt.count("Question:") == 4  # three examples and the question
        assert prompt.count(question) == 1


def test_task_model_args_win_over_the_workload_defaults():
    defaults = WlModelArgs(num_concurrent=8, timeout=600, tokenized_requests=False, tokenizer_backend=None)
    t = WlTask(name="gsm8k", num_fewshot=5, model_args=WlModelArgs(num_concurrent=64, max_gen_toks=512))
    args = lm_eval_model_args(Target("http://h:8000/", "m", tokenizer="tok/dir"), t, defaults)
    assert args == {
        "model": "m",
        "base_url": "http://h:8000/v1/completions",
        "tokenizer": "tok/dir",
        "num_concurrent": 64,
        "timeout": 600,
        "tokenized_requests": False,
        "tokenizer_backend": None,
        "max_gen_toks": 512,
    }
    chat_args = lm_eval_model_args(Target("http://h:8000", "m"), t, None, chat=True)
    assert chat_args["base_url"] == "http://h:8000/v1/chat/completions"


def test_metric_names_from_lm_eval_results():
    block = {
        "alias": "gsm8k",
        "exact_match,strict-match": 0.75,
        "exact_match_stderr,strict-match": 0.01,
        "exact_match,flexible-extract": 0.8,
        "exact_match_stderr,flexible-extract": "N/A",
    }
    assert metrics_from_results(block) == {
        "exact_match": 0.75,
        "exact_match_stderr": 0.01,
        "exact_match_flexible": 0.8,
    }


def test_api_key_reaches_the_server_but_not_the_results(gsm8k_file, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    seen = []
    with AnswerServer(correct=True, gsm8k=gsm8k_file) as server:
        server.on_request = seen.append
        run_gsm8k(
            Target(server.url, MODEL, api_key="sk-secret-123"), task(), None, tmp_path / "o", gsm8k_file
        )
    assert seen and all(h.get("Authorization") == "Bearer sk-secret-123" for h in seen)
    for path in (tmp_path / "o").iterdir():
        assert "sk-secret-123" not in path.read_text()
    assert "OPENAI_API_KEY" not in os.environ


def test_server_down_is_a_stage_failure(gsm8k_file, tmp_path):
    t = task(timeout=2)
    with pytest.raises(StageFailed, match="gsm8k: lm-eval failed"):
        run_gsm8k(Target("http://127.0.0.1:9", MODEL), t, None, tmp_path / "out", gsm8k_file)


def test_missing_dataset_file_is_bad_input(tmp_path):
    with pytest.raises(ServelabError, match="no such file") as e:
        run_gsm8k(
            Target("http://127.0.0.1:9", MODEL), task(), None, tmp_path / "out", tmp_path / "none.jsonl"
        )
    assert e.value.field == "gsm8k_path"


def test_lm_eval_missing_says_how_to_install(monkeypatch, tmp_path, gsm8k_file):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # import lm_eval raises ImportError
    with pytest.raises(StageFailed, match=r"pip install '.*\[evals\]'"):
        run_gsm8k(Target("http://127.0.0.1:9", MODEL), task(), None, tmp_path / "out", gsm8k_file)


def test_a_task_lm_eval_does_not_have_is_bad_input(tmp_path):
    class NoTasks:  # a TaskManager that knows no task, so the test need not index lm-eval's ~10k tasks
        task_index: dict = {}

        def __init__(self, **_) -> None:
            pass

    with pytest.raises(ServelabError, match="'gsm9k' is not an lm-eval task") as e:
        gsm8k._task_index(WlTask(name="gsm9k"), tmp_path, NoTasks)
    assert e.value.field == "task"


def test_a_task_name_is_answered_as_lm_evals_index_answers_it(tmp_path):
    """A name written in no file of the task tree is refused without indexing the tree (lm-eval's full index
    takes 12-20 s); every other name gets the index's answer: a task in a folder of its name, a task in a
    folder of another name, one named in an included template, a group, tags, a name that is only part of
    another. Checked against lm-eval's own index of the same tree."""
    from lm_eval.tasks import TaskManager  # noqa: PLC0415 (skipped above without lm-eval)

    tree = tmp_path / "tasks"
    files = {
        "alpha/alpha.yaml": "task: alpha\ndataset_path: x\ntag: family_tag\n",
        "other/beta.yaml": "include: _template_yaml\ntask: beta\n",
        "other/_template_yaml": "dataset_path: x\ntag: from_template\n",
        "other/templated.yaml": "include: _named_yaml\ndataset_path: x\n",
        "other/_named_yaml": "task: templated\n",
        "gamma/_gamma.yaml": "group: gamma\ntask:\n  - alpha\n  - beta\n",
    }
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    full_index = TaskManager(include_defaults=False, include_path=str(tree)).task_index
    indexed_whole_tree = []

    def task_manager(include_defaults: bool = True, include_path: str | None = None):
        if include_path is None:
            indexed_whole_tree.append(True)
        return TaskManager(include_defaults=False, include_path=include_path or str(tree))

    names = ["alpha", "beta", "templated", "gamma", "family_tag", "from_template", "alph", "delta"]
    for name in names:
        entry = full_index.get(name)
        known = entry is not None and entry.yaml_path is not None
        indexed_whole_tree.clear()
        try:
            gsm8k._task_index(WlTask(name=name), tree, task_manager)
            answer = True
        except ServelabError as e:
            assert e.message == f"{name!r} is not an lm-eval task with a task file"
            answer = False
        assert answer == known, name
        if name == "delta":
            assert not indexed_whole_tree  # written nowhere: refused before any index
    assert [n for n in names if (e := full_index.get(n)) and e.yaml_path] == [
        "alpha",
        "beta",
        "templated",
        "gamma",
    ]
