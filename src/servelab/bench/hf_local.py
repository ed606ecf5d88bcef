"""`--dataset-name hf` without a network: rows of a local dataset -> (prompt, reference answer) pairs.

Readable forms: a JSON file (a list of rows), JSONL (one row per line), Parquet (needs pyarrow), or a folder
written by `datasets`' save_to_disk (needs the `datasets` package). A row gives its prompt in the first of
PROMPT_COLUMNS it has, or as the first user turn of `conversations` (ShareGPT: from/value) or `messages`
(OpenAI: role/content); its reference answer (for the default output length) likewise."""

from __future__ import annotations

import json
from pathlib import Path

from servelab.errors import ServelabError

PROMPT_COLUMNS = ("prompt", "question", "instruction", "problem", "input", "text")
ANSWER_COLUMNS = ("completion", "response", "output", "answer", "solution")
USER_ROLES = ("user", "human")


def read_rows(path: Path, split: str | None) -> list[dict]:
    """Every row of the local dataset at `path` (`split` picks one of a saved DatasetDict)."""
    where = f"--dataset-path {path}"
    if path.is_dir():
        return _saved_dataset(path, split)
    try:
        text = path.read_text(encoding="utf-8") if path.suffix != ".parquet" else ""
    except OSError as e:
        raise ServelabError(f"{where}: {e.strerror}") from None
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq  # noqa: PLC0415 (optional extra, large)
        except ImportError:
            raise ServelabError(f"{where}: reading Parquet needs pyarrow (pip install pyarrow)") from None
        return pq.read_table(path).to_pylist()
    if path.suffix == ".jsonl":
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    raise ServelabError(f"{where}:{n}: not a JSON object") from None
        return rows
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        raise ServelabError(f"{where}: not JSON ({e})") from None
    if not isinstance(rows, list):
        raise ServelabError(f"{where}: expected a JSON list of rows (or JSONL, Parquet, a datasets folder)")
    return rows


def _saved_dataset(path: Path, split: str | None) -> list[dict]:
    try:
        import datasets  # noqa: PLC0415 (optional extra, not in the core install)
    except ImportError:
        raise ServelabError(
            f"--dataset-path {path}: a folder is read as a `datasets` save_to_disk folder, which needs the "
            "`datasets` package (pip install datasets); or give a JSON, JSONL or Parquet file"
        ) from None
    try:
        data = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as e:
        raise ServelabError(f"--dataset-path {path}: not a datasets save folder ({e})") from None
    if isinstance(data, datasets.DatasetDict):
        names = list(data)
        name = split or ("train" if "train" in names else names[0])
        if name not in data:
            raise ServelabError(f"--hf-split {name}: the dataset has {', '.join(names)}")
        data = data[name]
    return list(data)


def prompt_and_answer(row: object) -> tuple[str, str | None] | None:
    """(prompt, reference answer or None) of one row, or None when the row has no prompt."""
    if not isinstance(row, dict):
        return None
    turns = row.get("conversations") or row.get("messages")
    if isinstance(turns, list) and turns:
        return _from_turns(turns)
    prompt = next((row[c] for c in PROMPT_COLUMNS if isinstance(row.get(c), str) and row[c]), None)
    if prompt is None:
        return None
    answer = next((row[c] for c in ANSWER_COLUMNS if isinstance(row.get(c), str) and row[c]), None)
    return prompt, answer


def _from_turns(turns: list) -> tuple[str, str | None] | None:
    def role(t: dict) -> str:
        return str(t.get("role", t.get("from", ""))).lower()

    def text(t: dict) -> str:
        return str(t.get("content", t.get("value", "")))

    dicts = [t for t in turns if isinstance(t, dict)]
    first = next((k for k, t in enumerate(dicts) if role(t) in USER_ROLES), None)
    if first is None:
        return None
    reply = dicts[first + 1] if first + 1 < len(dicts) else None
    return text(dicts[first]), text(reply) if reply is not None else None
