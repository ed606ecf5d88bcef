"""An engine's command-line grammar, as data, and the one parse and render that walk it.

A `Grammar` holds what an engine's server command is (the program words, where the model goes), its one alias
table, its switches (flags that never take a value) and valued flags, and the table that maps its flags, and
for TensorRT-LLM the keys of its options file, to `ServerSettings` fields, in the order servelab writes them.
Each engine's package (servelab/engines/<engine>/grammar.py) holds one instance, with the two rules that
are code rather than data: how a recipe arm's layout becomes the engine's parallel flags (`layout`) and how
those flags become servelab's `Parallel` (`parallel`). Nothing here names an engine's flag.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Container, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePath
from typing import Any, Literal

from pydantic import ValidationError

from servelab.engines import argv as tokens_
from servelab.engines.argv import Arg
from servelab.engines.names import Engine
from servelab.engines.settings import ServerSettings
from servelab.errors import ServelabError
from servelab.specs import Parallel

Kind = Literal["int", "float", "str", "json", "dotted", "prefixed", "switch", "toggle"]
CONVERT: dict[str, type] = {"int": int, "float": float, "str": str}
PYTHON = "python"


@dataclass(frozen=True)
class Flag:
    """How one ServerSettings field is written on the command line.

    int / float / str: `SPELLING VALUE`; json: a JSON object (`--x '{"a": 1}'`, also read key by key as
    vLLM's `--x.a 1`); dotted: a mapping written key by key (`--x.a=1`), read from JSON too; prefixed: a
    mapping whose keys are flags (`--speculative-` + `num_steps` -> `--speculative-num-steps 3`); switch:
    True when present, False as `off` if the engine has one; toggle: True as SPELLING, False as `off` (with
    `off_value` when turning it off takes a value, as SGLang's `--chunked-prefill-size -1`), None as nothing.
    A value in `verbatim` is one the field cannot hold (vLLM's `--max-model-len auto`): kept as written."""

    field: str
    spelling: str | None
    kind: Kind
    off: str | None = None
    off_value: str | None = None
    verbatim: frozenset[str] = frozenset()
    written: bool = True  # False: read only (the field is written elsewhere, e.g. in the options file)


@dataclass(frozen=True)
class OptionKey:
    """A ServerSettings field held in the engine's options file (TensorRT-LLM's extra_llm_api_options YAML),
    by key path. `written`: servelab writes the field there; otherwise it writes the flag and only reads the
    key, which the engine lets win over the flag."""

    field: str
    path: tuple[str, ...]
    written: bool = True


@dataclass(frozen=True)
class ServerCommand:
    """A rendered server command: argv, and the options file's content when the engine takes one (the
    caller writes it, as YAML, under `Grammar.options_file`)."""

    argv: list[str]
    options: dict[str, Any] | None = None


def merge_options(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Nested merge of option mappings; `extra` wins, and base's keys keep their order."""
    out = dict(base)
    for k, v in extra.items():
        old = out.get(k)
        out[k] = merge_options(old, v) if isinstance(v, Mapping) and isinstance(old, Mapping) else v
    return out


def value_flags(table: Iterable[Flag], aliases: Mapping[str, str]) -> frozenset[str]:
    """The canonical names of a table's flags that take a value (for `valued`)."""
    return frozenset(
        tokens_.canonical(f.spelling, aliases)
        for f in table
        if f.spelling is not None and f.kind in ("int", "float", "str", "json", "dotted")
    )


def json_arg(value: Any) -> str:
    """A JSON value as one argv token: keys sorted, no spaces, so the launch's fingerprint is stable."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def scalar(text: str) -> Any:
    """A value written on a command line as vLLM reads a dotted key: JSON where it parses, True / False as
    Python writes them, else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {"True": True, "False": False}.get(text, text)


@lru_cache(maxsize=4096)  # argv's words are matched against each program at each position: millions of calls
def _word(token: str) -> str:
    """A program word as matched: its file name; every python (python, python3, python3.12) as one."""
    name = PurePath(token).name
    return PYTHON if name.startswith(PYTHON) else name


@dataclass(frozen=True)
class Grammar:
    """One engine's command line: see the module docstring."""

    engine: Engine
    command: tuple[str, ...]  # what servelab writes before the model
    programs: tuple[tuple[str, ...], ...]  # every command recognised, longest first
    model_positional: bool  # the model is the first positional word after the program
    model_flag: str | None  # the flag that names the model (written when it is not positional)
    aliases: Mapping[str, str]
    switches: Container[str]
    valued: Container[str]
    table: tuple[Flag, ...]
    options_flag: str | None = None
    options_file: str | None = None
    option_keys: tuple[OptionKey, ...] = ()

    # ---- tokens -------------------------------------------------------------------------------------

    def canonical(self, token: str) -> str:
        return tokens_.canonical(token, self.aliases)

    def args(self, tokens: Iterable[str]) -> list[Arg]:
        """The flags and positional words of server arguments (no program words), in this engine's grammar."""
        return tokens_.parse(tokens, aliases=self.aliases, switches=self.switches, valued=self.valued)

    def program_at(self, argv: list[str]) -> tuple[int, int] | None:
        """(start, length) of the first of this engine's programs in argv (after `mpirun -n 1`, `env A=1`...),
        or None."""
        words = [_word(t) for t in argv]
        programs = [tuple(_word(w) for w in program) for program in self.programs]
        for start in range(len(argv)):
            for program in programs:
                end = start + len(program)
                if tuple(words[start:end]) == program:
                    return start, len(program)
        return None

    def split(self, argv: list[str]) -> tuple[list[str], list[str]]:
        """(the words up to and including the program, the server arguments); bare arguments when argv names
        no program of this engine."""
        at = self.program_at(argv)
        if at is None:
            return [], list(argv)
        end = at[0] + at[1]
        return list(argv[:end]), list(argv[end:])

    def merged(self, argv: list[str], extra: Iterable[str]) -> list[str]:
        """argv plus the flags of `extra` it does not already set (by canonical name, aliases folded)."""
        head, rest = self.split(argv)
        return head + tokens_.render(tokens_.merged(self.args(rest), self.args(extra)))

    def without(self, argv: list[str], names: Iterable[str]) -> list[str]:
        """argv less the flags named (any spelling), each with its value."""
        head, rest = self.split(argv)
        drop = {self.canonical(n) for n in names}
        return head + tokens_.render(tokens_.without(self.args(rest), drop))

    def options_path(self, argv: list[str]) -> str | None:
        """The options file a command names (TensorRT-LLM's `--extra_llm_api_options` / `--config`)."""
        if self.options_flag is None:
            return None
        want = self.canonical(self.options_flag)
        found = [a.value for a in self.args(self.split(argv)[1]) if a.name == want]
        return found[-1] if found else None

    # ---- parse --------------------------------------------------------------------------------------

    def parse(
        self,
        argv: list[str],
        options: Mapping[str, Any] | None = None,
        fields: Collection[str] | None = None,
    ) -> ServerSettings:
        """The settings of a server command of this engine; `options` is the content of the options file it
        names (TensorRT-LLM), whose keys win over the flags as they do in the engine."""
        if self.program_at(argv) is None:
            raise ServelabError(f"not a {self.engine} server command ({' '.join(self.command)} ...)")
        return self.parse_args(self.split(argv)[1], options, fields)

    def parse_args(
        self,
        args: Iterable[str],
        options: Mapping[str, Any] | None = None,
        fields: Collection[str] | None = None,
    ) -> ServerSettings:
        """The settings of server arguments (the argv past the program words). With `fields`, only those
        fields are read; flags of the others stay verbatim in extra_args, in order."""
        values: dict[str, Any] = {}
        extra: list[str] = []
        wanted = (lambda name: True) if fields is None else (lambda name: name in fields)
        model_flag = self.canonical(self.model_flag) if self.model_flag else None
        options_flag = self.canonical(self.options_flag) if self.options_flag else None
        index = self._index()
        for a in self.args(args):
            if a.name is None:
                if self.model_positional and "model" not in values and wanted("model"):
                    values["model"] = a.value
                else:
                    extra += a.tokens
            elif a.name == model_flag and wanted("model"):
                values["model"] = self._value(a)
            elif a.name == options_flag:
                continue  # its content arrives as `options`
            elif not self._read(a, values, index, wanted):
                extra += a.tokens
        engine_options: dict[str, Any] = {}
        if options:
            engine_options = self._read_options(values, options, wanted)
        try:
            return ServerSettings(**values, engine_options=engine_options, extra_args=extra)
        except ValidationError as e:
            raise ServelabError.from_validation(e, f"{self.engine} server command") from None

    def _index(self) -> dict[str, list[tuple[Flag, str]]]:
        """Canonical flag name -> (flag, role: on / off / value) of every table entry written so."""
        out: dict[str, list[tuple[Flag, str]]] = {}
        for f in self.table:
            if f.spelling is not None and f.kind != "prefixed":
                role = "on" if f.kind in ("switch", "toggle") else "value"
                out.setdefault(self.canonical(f.spelling), []).append((f, role))
            if f.off is not None:
                out.setdefault(self.canonical(f.off), []).insert(0, (f, "off"))
        return out

    def _value(self, a: Arg) -> str:
        if a.value is None:
            raise ServelabError(f"{a.tokens[0]} needs a value ({self.engine} server command)")
        return a.value

    def _read(self, a: Arg, values: dict[str, Any], index: dict, wanted) -> bool:
        """Set the field a flag writes; False when no field of the table (or none wanted) takes it."""
        assert a.name is not None
        name, dot, key = a.name.partition(".")
        for f, role in index.get(name, []):
            if not wanted(f.field) or (dot and f.kind not in ("json", "dotted")):
                continue
            if role == "off":
                if f.off_value is not None and a.value != f.off_value:
                    continue
                if f.off_value is None and a.value is not None:
                    return False
                values[f.field] = False
                return True
            if role == "on":
                if a.value is not None:
                    return False  # a switch written with a value is not one servelab can read
                values[f.field] = True
                return True
            text = self._value(a)
            if text in f.verbatim:
                return False
            values[f.field] = self._convert(f, a, text, key, values.get(f.field))
            return True
        for f in self.table:
            if f.kind == "prefixed" and f.spelling and wanted(f.field):
                prefix = self.canonical(f.spelling)
                if a.name.startswith(prefix) and len(a.name) > len(prefix):
                    key = a.name[len(prefix) :].replace("-", "_")
                    values.setdefault(f.field, {})[key] = True if a.value is None else scalar(a.value)
                    return True
        return False

    def _convert(self, f: Flag, a: Arg, text: str, key: str, old: Any) -> Any:
        try:
            if f.kind in ("json", "dotted"):
                if key:  # --config.a.b value: one key of the mapping
                    out = dict(old or {})
                    *path, leaf = key.split(".")
                    node = out
                    for part in path:
                        node[part] = dict(node.get(part) or {})
                        node = node[part]
                    node[leaf] = scalar(text)
                    return out
                parsed = json.loads(text)
                if not isinstance(parsed, dict):
                    raise ValueError("expected a JSON object")
                return parsed
            return CONVERT[f.kind](text)
        except (ValueError, json.JSONDecodeError) as e:
            raise ServelabError(f"{a.tokens[0]} {text!r}: bad value ({e})") from None

    def _read_options(self, values: dict[str, Any], options: Mapping[str, Any], wanted) -> dict[str, Any]:
        """Lift the typed keys out of the options file (they win over the flags); the rest, as written."""
        rest = _copy(options)
        for k in self.option_keys:
            if not wanted(k.field):
                continue
            found, value = _pop(rest, k.path)
            if found:
                values[k.field] = value
        return rest

    # ---- render -------------------------------------------------------------------------------------

    def render(self, s: ServerSettings) -> ServerCommand:
        """The server command of the settings, fields in the table's order, extra_args last. Refuses a field
        this engine has no flag for, rather than dropping it."""
        self._refuse_unsupported(s)
        if s.model is None:
            raise ServelabError(f"a {self.engine} server command needs a model", field="model")
        argv = [*self.command]
        argv += [s.model] if self.model_positional or not self.model_flag else [self.model_flag, s.model]
        written: dict[str, str] = {}
        for f in self.table:
            tokens = self._write(f, getattr(s, f.field)) if f.written else []
            if tokens:
                flag = self.canonical(tokens[0].split("=", 1)[0]).partition(".")[0]
                if flag in written and written[flag] != f.field:
                    raise ServelabError(
                        f"{written[flag]} and {f.field} are one flag ({tokens[0]}) in {self.engine}; set one",
                        field=f.field,
                    )
                written[flag] = f.field
                argv += tokens
        options = None
        if self.options_flag and self.options_file:
            options = merge_options(s.engine_options, self.options_of(s))
            argv += [self.options_flag, self.options_file]
        return ServerCommand(argv + list(s.extra_args), options)

    def _write(self, f: Flag, value: Any) -> list[str]:
        if value is None or (value is False and f.kind == "switch"):
            return []
        if f.kind == "toggle":
            flag, extra = (f.spelling, None) if value else (f.off, f.off_value)
            if flag is None:
                raise ServelabError(
                    f"{self.engine} has no flag to set {f.field} {value} (leave it None for its default)",
                    field=f.field,
                )
            return [flag] + ([extra] if extra is not None else [])
        assert f.spelling is not None
        if f.kind == "switch":
            return [f.spelling]
        if f.kind == "json":
            return [f.spelling, json_arg(value)]
        if f.kind == "dotted":
            return [f"{f.spelling}.{k}={_text(v)}" for k, v in value.items()]
        if f.kind == "prefixed":
            out: list[str] = []
            for k, v in value.items():
                flag = f.spelling + k.replace("_", "-")
                out += [flag] if v is True and self.canonical(flag) in self.switches else [flag, _text(v)]
            return out
        return [f.spelling, str(value)]

    def options_of(self, s: ServerSettings) -> dict[str, Any]:
        """The options-file keys the settings' typed fields write, in the order of `option_keys`."""
        out: dict[str, Any] = {}
        for k in self.option_keys:
            value = getattr(s, k.field)
            default = ServerSettings.model_fields[k.field].default
            if not k.written or value is None or (value is False and default is False):
                continue
            node = out
            for part in k.path[:-1]:
                node = node.setdefault(part, {})
            node[k.path[-1]] = value
        return out

    def with_options(self, s: ServerSettings, options: Mapping[str, Any]) -> ServerSettings:
        """The settings with `options` as the options file, whole and in its order, and the typed fields
        servelab writes there read from it (so rendering writes `options` unchanged)."""
        values = {}
        for k in self.option_keys:
            found, value = _pop(_copy(options), k.path)
            if k.written and found:
                values[k.field] = value
        return s.model_copy(update={**values, "engine_options": dict(options)})

    def _refuse_unsupported(self, s: ServerSettings) -> None:
        said = {f.field for f in self.table} | {k.field for k in self.option_keys}
        said |= {"model", "extra_args"} | ({"engine_options"} if self.options_flag else set())
        for name, info in ServerSettings.model_fields.items():
            value = getattr(s, name)
            if name not in said and value not in (None, False, {}, []) and value != info.default:
                raise ServelabError(f"{self.engine} has no flag for {name}", field=name)

    # ---- parallel layout (engine rules; each engine's grammar defines them) ------------------------------

    def layout(self, tp: int, ep: int, pp: int, dp_attn: bool, dcp: int = 1, pcp: int = 1) -> dict[str, Any]:
        """The ServerSettings parallel fields of a servelab layout (tp GPUs per stage, ep, pp, attention
        DP, context parallel sizes); ServelabError where the engine cannot express it."""
        raise NotImplementedError

    def parallel(self, s: ServerSettings, is_moe: bool) -> Parallel:
        """servelab's Parallel of a command's settings (tp = GPUs per pipeline stage); ValueError where the
        command is not one deployment."""
        raise NotImplementedError


def _text(value: Any) -> str:
    """A value written into a flag: scalars as Python writes them (vLLM reads `True`), the rest as JSON."""
    return json_arg(value) if isinstance(value, (dict, list)) else str(value)


def _copy(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _copy(v) if isinstance(v, Mapping) else v for k, v in options.items()}


def _pop(options: dict[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    """Remove a key path from nested options (and the mappings it empties); (found, value)."""
    node = options
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            return False, None
        node = child
    if path[-1] not in node:
        return False, None
    value = node.pop(path[-1])
    for depth in range(len(path) - 1, 0, -1):
        parent = options
        for part in path[: depth - 1]:
            parent = parent[part]
        if parent[path[depth - 1]] == {}:
            del parent[path[depth - 1]]
    return True, value
