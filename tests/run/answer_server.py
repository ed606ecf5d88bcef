"""An OpenAI-compatible server for the eval stages' tests that knows the answers, in a thread of the test
process.

`AnswerServer(correct=True, ...)` answers right, `correct=False` answers wrong:
- GSM8K (completions or chat): it finds the last "Question: ..." of the prompt in the GSM8K file it was given
  and answers "#### N" with the file's answer (wrong: N + 1).
- BFCL (chat completions with tools): it finds the case whose user turns match the conversation so far among
  the cases it was given (bfcl-eval's question and possible_answer records) and calls the ground-truth
  functions of the current turn, with the first allowed value of every argument; after the tools' results it
  ends the turn with text. Wrong: text and no function call.
- A benchmark's streamed completions (`stream: true`, as `servelab bench` sends them): `max_tokens` tokens
  of filler as server-sent events, then the usage and [DONE], so one server takes a whole `servelab run`.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MODEL = "answer-model"


def gsm8k_answers(path: Path) -> dict[str, int]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            out[rec["question"].strip()] = int(rec["answer"].split("####")[-1].strip().replace(",", ""))
    return out


def _last_question(prompt: str) -> str:
    return prompt.rsplit("Question:", 1)[-1].split("\nAnswer:", 1)[0].strip()


def _first_allowed(values: list) -> tuple[bool, object]:
    """(present, value) of a possible_answer argument: "" among the values means it may be left out."""
    chosen = [v for v in values if v != ""]
    return (True, chosen[0]) if chosen else (False, None)


def _single_turn_calls(ground_truth: list[dict]) -> list[tuple[str, dict]]:
    calls = []
    for call in ground_truth:
        ((name, params),) = call.items()
        args = {k: v for k, (present, v) in ((k, _first_allowed(vs)) for k, vs in params.items()) if present}
        calls.append((name, args))
    return calls


def _multi_turn_calls(turn: list[str]) -> list[tuple[str, dict]]:
    """'mv(source="a", destination="b")' -> ("mv", {"source": "a", ...}); positional values keyed by
    position."""
    calls = []
    for text in turn:
        node = ast.parse(text, mode="eval").body
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), text
        args: dict = {i: ast.literal_eval(v) for i, v in enumerate(node.args)}
        args |= {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
        calls.append((node.func.id, args))
    return calls


def _named(args: dict, params: list[str]) -> dict:
    """Positional values named after the tool's parameters, in the order its schema lists them."""
    return {params[k] if isinstance(k, int) else k: v for k, v in args.items()}


def _tool_name(name: str, tools: dict) -> str:
    """The tool name the client sent for a ground-truth function (OpenAI names cannot hold dots)."""
    return name if name in tools else re.sub(r"\.", "_", name)


class BfclCase:
    def __init__(self, entry: dict, answer: dict) -> None:
        self.id = entry["id"]
        self.multi_turn = self.id.startswith("multi_turn")
        # the user text of each turn; None where bfcl-eval adds its own message (a turn that adds functions)
        self.turns = [turn[-1]["content"] if turn else None for turn in entry["question"]]
        self.ground_truth = answer["ground_truth"]

    def matches(self, user_texts: list[str]) -> bool:
        if len(user_texts) > len(self.turns):
            return False
        return all(t is None or t == u for t, u in zip(self.turns, user_texts, strict=False))


def load_bfcl_cases(data_dir: Path, ids: set[str]) -> list[BfclCase]:
    """The cases with these ids from bfcl-eval's data folder (questions and possible answers)."""
    cases = []
    for question_file in sorted(data_dir.glob("BFCL_v4_*.json")):
        answer_file = data_dir / "possible_answer" / question_file.name
        if not answer_file.exists():
            continue
        answers = {a["id"]: a for a in map(json.loads, answer_file.read_text().splitlines()) if a}
        for line in question_file.read_text().splitlines():
            entry = json.loads(line)
            if entry["id"] in ids:
                cases.append(BfclCase(entry, answers[entry["id"]]))
    return cases


def bfcl_data_dir(python: Path) -> Path:
    """bfcl-eval's data folder in the BFCL environment of this python."""
    found = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('bfcl_eval').origin)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(found.stdout.strip()).parent / "data"


class AnswerServer:
    def __init__(self, correct: bool, gsm8k: Path | None = None, bfcl_cases: list[BfclCase] = ()) -> None:
        self.correct = correct
        self.gsm8k = gsm8k_answers(gsm8k) if gsm8k else {}
        self.bfcl_cases = list(bfcl_cases)
        self.requests = 0
        self.on_request = None  # called with each request's headers (GET and POST)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> AnswerServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- answers
    def gsm8k_text(self, prompt: str) -> str:
        question = _last_question(prompt)
        if question not in self.gsm8k:
            return "I do not know that question."
        n = self.gsm8k[question] + (0 if self.correct else 1)
        return f" Working it out step by step.\n#### {n}"

    def chat(self, body: dict) -> dict:
        messages = body["messages"]
        tools = {
            t["function"]["name"]: list(t["function"]["parameters"].get("properties", {}))
            for t in body.get("tools", [])
        }
        user_texts = [m["content"] for m in messages if m["role"] == "user"]
        if not tools:  # GSM8K through chat completions
            return {"role": "assistant", "content": self.gsm8k_text(user_texts[-1])}
        calls = self.bfcl_calls(messages, user_texts, tools) if self.correct else []
        if not calls:
            return {"role": "assistant", "content": "Nothing to call."}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{self.requests}_{i}",
                    "type": "function",
                    "function": {"name": _tool_name(name, tools), "arguments": json.dumps(args)},
                }
                for i, (name, args) in enumerate(calls)
            ],
        }

    def bfcl_calls(self, messages: list[dict], user_texts: list[str], tools: dict) -> list[tuple[str, dict]]:
        if messages[-1]["role"] != "user":
            return []  # the tools answered: the turn is over
        # Cases can share their turns (multi_turn_miss_func_0 is multi_turn_base_0 with a function held back):
        # the case asked is one whose calls of this turn the client offers as tools.
        for case in self.bfcl_cases:
            if case.matches(user_texts):
                if not case.multi_turn:
                    calls = _single_turn_calls(case.ground_truth)
                else:
                    calls = _multi_turn_calls(case.ground_truth[len(user_texts) - 1])
                if all(_tool_name(name, tools) in tools for name, _ in calls):
                    return [(name, _named(args, tools[_tool_name(name, tools)])) for name, args in calls]
        return []

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet test output
                pass

            def _stream(self, body: dict) -> None:
                """A close-delimited SSE response of `max_tokens` one-token chunks, the usage, [DONE]."""
                n = body.get("max_tokens") or 16
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                base = {"id": f"r{server.requests}", "object": "text_completion", "model": MODEL}
                for i in range(n):
                    finish = "length" if i == n - 1 else None
                    choice = {"index": 0, "text": " tok", "finish_reason": finish}
                    self.wfile.write(f"data: {json.dumps(base | {'choices': [choice]})}\n\n".encode())
                usage = {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n}
                self.wfile.write(f"data: {json.dumps(base | {'choices': [], 'usage': usage})}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

            def _send(self, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if server.on_request:
                    server.on_request(dict(self.headers))
                self._send({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests += 1
                if server.on_request:
                    server.on_request(dict(self.headers))
                usage = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
                base = {"id": f"r{server.requests}", "model": MODEL, "created": 0, "usage": usage}
                if body.get("stream"):
                    self._stream(body)
                elif self.path.endswith("/chat/completions"):
                    message = server.chat(body)
                    choice = {"index": 0, "message": message, "finish_reason": "stop"}
                    self._send(base | {"object": "chat.completion", "choices": [choice]})
                else:
                    prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
                    choices = [
                        {"index": i, "text": server.gsm8k_text(p), "finish_reason": "stop"}
                        for i, p in enumerate(prompts)
                    ]
                    self._send(base | {"object": "text_completion", "choices": choices})

        return Handler
