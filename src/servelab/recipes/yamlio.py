"""YAML reading that refuses duplicate keys and bombs, and writing that keeps key order.

PyYAML silently keeps the last of two equal keys; a recipe or changelog with a duplicate key is almost always
a copy-paste mistake. Aliases let a 1 KB file stand for billions of nodes, and deep nesting exhausts Python's
recursion limit, so reading is bounded: file size, nesting depth, number of aliases and the node count with
every alias expanded (what pydantic validation will walk). The limits are ten times or more what InferenceX's
largest master file needs (323 KB, 21k nodes, depth 8, no aliases). Every recipe-side file is read through
`load_yaml`.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer

from servelab.errors import ServelabError

try:  # libyaml's scanner, parser and emitter, in PyYAML's wheels; a PyYAML built without it has only Python's
    from yaml.cyaml import CSafeDumper, CSafeLoader
except ImportError:
    CSafeDumper = CSafeLoader = None

MAX_BYTES = 8 * 1024 * 1024
MAX_DEPTH = 64
MAX_ALIASES = 1000
MAX_NODES = 500_000


class _Limit(Exception):
    pass


def _too_large() -> _Limit:
    return _Limit(f"expands to more than {MAX_NODES} nodes (aliases repeat what they point at)")


class _Bounded:
    """Composing bounded in depth and aliases, and duplicate keys refused or noted: what both loaders add."""

    def _bound(self, duplicates: list[str] | None) -> None:
        self._depth = 0
        self._aliases = 0
        self.nodes = 0  # composed, aliases counted once each
        # None: a duplicate key is refused; a list: it is kept as PyYAML keeps it (the last wins), and noted
        self.duplicates = duplicates

    def compose_node(self, parent, index):
        self.nodes += 1
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Limit(f"more than {MAX_ALIASES} aliases")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Limit(f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            self._depth -= 1


class _StrictLoader(_Bounded, yaml.SafeLoader):
    """PyYAML's Python reader, scanner and parser."""

    def __init__(self, stream, duplicates: list[str] | None = None):
        yaml.SafeLoader.__init__(self, stream)
        self._bound(duplicates)


_LOADERS: list[type[Any]] = [_StrictLoader]  # the fastest first
if CSafeLoader is not None:

    class _FastStrictLoader(_Bounded, Composer, CSafeLoader):
        """libyaml's scanner and parser (a third of the Python parser's CPU on InferenceX's master files),
        with Python's composer before them, so the bounds and the duplicate keys are checked as above."""

        def __init__(self, stream, duplicates: list[str] | None = None):
            CSafeLoader.__init__(self, stream)
            Composer.__init__(self)
            self._bound(duplicates)

    _LOADERS.insert(0, _FastStrictLoader)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expanded(root: yaml.Node) -> None:
    """Count nodes with aliases expanded (each shared node once, times its uses), without recursion."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            on_path.discard(id(node))
            size[id(node)] = n = 1 + sum(size[id(c)] for c in _children(node))
            if n > MAX_NODES:
                raise _too_large()
            continue
        if id(node) in size:
            continue
        if id(node) in on_path:
            raise _Limit("an alias refers to a collection that contains it")
        on_path.add(id(node))
        stack.append((node, True))
        stack += [(c, False) for c in _children(node) if id(c) not in size]


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, Hashable):
            break  # construct_mapping below refuses it with the line number
        if key in seen:
            duplicate = _DuplicateKey(key, seen[key] + 1, key_node.start_mark.line + 1)
            if loader.duplicates is None:
                raise duplicate
            loader.duplicates.append(f"{duplicate}; the last one is used, as InferenceX's loader does")
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


class _DuplicateKey(Exception):
    def __init__(self, key: Any, first_line: int, line: int):
        super().__init__(f"duplicate key {key!r} on line {line} (first on line {first_line})")


for _loader in _LOADERS:
    _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str, source: str, duplicates: list[str] | None = None) -> Any:
    """Parse YAML text; `source` names the file in error messages. Given a `duplicates` list, a duplicate
    key is kept as InferenceX's own loader (yaml.safe_load) keeps it, the last one winning, and a line
    saying so is appended to the list; without one it is refused."""
    if len(text) > MAX_BYTES:
        raise ServelabError(f"{source}: {len(text)} characters; a YAML file may hold at most {MAX_BYTES}")
    *fast, python = _LOADERS
    # libyaml takes a tab as a separator where PyYAML's Python parser (InferenceX's loader) refuses it
    # ("a:\tb"); every other difference found is only in an error's words, so those are read again too
    if fast and "\t" not in text:
        try:
            return _load(fast[0], text, source, duplicates)
        except (ServelabError, UnicodeEncodeError):
            pass  # read again by Python's parser, whose words for what is wrong are those users have known
    return _load(python, text, source, duplicates)


def _load(loader_class: type, text: str, source: str, duplicates: list[str] | None) -> Any:
    loader = None
    try:
        found: list[str] | None = None if duplicates is None else []
        loader = loader_class(text, found)
        node = loader.get_single_node()
        if node is None:
            return None
        if loader._aliases:
            _check_expanded(node)
        elif loader.nodes > MAX_NODES:  # a tree without aliases expands to the nodes composed
            raise _too_large()
        data = loader.construct_document(node)
        if duplicates is not None and found:
            duplicates += [f"{source}: {line}" for line in found]
        return data
    except (_DuplicateKey, _Limit) as e:
        raise ServelabError(f"{source}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(e, "problem", None) or e).split())  # ReaderError's spans lines
        raise ServelabError(f"{source}:{where} is not valid YAML ({problem})") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_text(path) -> str:
    """A recipe-side file's text: one line naming the file when it is missing, too large or not UTF-8."""
    p = Path(path)
    if p.is_dir():
        raise ServelabError(f"{p}: is a directory, expected a file")
    if p.exists() and not p.is_file():
        raise ServelabError(f"{p}: not a regular file")  # a device or pipe may never end
    try:
        with p.open("rb") as f:
            data = f.read(MAX_BYTES + 1)  # /proc files report size 0, so the size is checked on reading
    except FileNotFoundError:
        raise ServelabError(f"{p}: file not found") from None
    except OSError as e:
        raise ServelabError(f"{p}: cannot read ({e.strerror or e})") from None
    if len(data) > MAX_BYTES:
        raise ServelabError(f"{p}: larger than {MAX_BYTES} bytes, the most a YAML file may hold")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ServelabError(f"{p}: not UTF-8 (byte {e.start})") from None


def read_yaml(path) -> Any:
    return load_yaml(read_text(path), str(path))


def _str_presenter(dumper: yaml.SafeDumper, data: str):
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(str, _str_presenter)
# (PyYAML's Python dumper, libyaml's twin of it or None)
_SAFE: tuple[type[Any], type[Any] | None] = (yaml.SafeDumper, CSafeDumper)
_SERVELAB: tuple[type[Any], type[Any] | None] = (_Dumper, None)
if CSafeDumper is not None:

    class _FastDumper(CSafeDumper):
        pass

    _FastDumper.add_representer(str, _str_presenter)
    _SERVELAB = (_Dumper, _FastDumper)

# The strings libyaml's emitter writes as PyYAML's Python emitter does, byte for byte (fuzzed, both styles
# below): printable ASCII on one line; a key also short. It writes others differently: characters past
# ASCII, escapes folded at the line width, an empty key or one of 100-odd characters, a lone scalar's `...`.
_PLAIN_ASCII = re.compile(r"[ -~]+")
_MAX_KEY = 64
_SCALARS = (int, float, bool, type(None))


def _libyaml_writes_alike(data: Any) -> bool:
    """Whether `data` is a mapping or list that libyaml's emitter writes as Python's: nested mappings and
    lists (none of them twice: PyYAML would anchor it) of numbers, booleans, nulls and such strings."""
    if type(data) not in (dict, list):
        return False
    seen: set[int] = set()
    stack = [data]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is str:
            if not _PLAIN_ASCII.fullmatch(node):
                return False
        elif kind is dict:
            if id(node) in seen:
                return False
            seen.add(id(node))
            for key in node:
                if type(key) is str:
                    if len(key) > _MAX_KEY or not _PLAIN_ASCII.fullmatch(key):
                        return False
                elif type(key) not in _SCALARS:
                    return False
            stack.extend(node.values())
        elif kind is list:
            if id(node) in seen:
                return False
            seen.add(id(node))
            stack.extend(node)
        elif kind not in _SCALARS:
            return False
    return True


def _dumper(dumpers: tuple[type[Any], type[Any] | None], data: Any) -> type[Any]:
    """The Python dumper, or libyaml's twin where it writes the same bytes (a quarter of the CPU a dump:
    every srt-slurm and TensorRT-LLM file of the pinned sweeps)."""
    python, fast = dumpers
    return fast if fast is not None and _libyaml_writes_alike(data) else python


def dump_yaml(data: Any) -> str:
    """YAML in the order given (no key sorting), block style, multi-line strings as literal blocks."""
    return yaml.dump(
        data,
        Dumper=_dumper(_SERVELAB, data),
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1000,
    )


def safe_dump(data: Any) -> str:
    """`yaml.safe_dump(data)`'s text, written by libyaml where that is the same."""
    return yaml.dump(data, Dumper=_dumper(_SAFE, data))


def safe_dump_all(documents: list[Any]) -> str:
    """`yaml.safe_dump_all(documents, sort_keys=False)`'s text, written by libyaml where that is the same
    (each document a mapping or list it writes alike)."""
    lone_scalar = any(type(d) not in (dict, list) for d in documents)  # libyaml ends it with `...`
    dumper = yaml.SafeDumper if lone_scalar else _dumper(_SAFE, documents)
    return yaml.dump_all(documents, Dumper=dumper, sort_keys=False)
