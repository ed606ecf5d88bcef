"""YAML reading that refuses duplicate keys, and writing that keeps key order.

PyYAML silently keeps the last of two equal keys; a recipe or changelog with a duplicate key is almost always
a copy-paste mistake, so every recipe-side file is read through `load_yaml`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from servelab.errors import ServelabError


class _StrictLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise _DuplicateKey(key, seen[key] + 1, key_node.start_mark.line + 1)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


class _DuplicateKey(Exception):
    def __init__(self, key: Any, first_line: int, line: int):
        super().__init__(f"duplicate key {key!r} on line {line} (first on line {first_line})")


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str, source: str) -> Any:
    """Parse YAML text; `source` names the file in error messages."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except _DuplicateKey as e:
        raise ServelabError(f"{source}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ServelabError(f"{source}:{where} is not valid YAML ({getattr(e, 'problem', e)})") from None


def read_yaml(path) -> Any:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ServelabError(f"{p}: file not found") from None
    except UnicodeDecodeError:
        raise ServelabError(f"{p}: not UTF-8") from None
    return load_yaml(text, str(p))


class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str):
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(data: Any) -> str:
    """YAML in the order given (no key sorting), block style, multi-line strings as literal blocks."""
    return yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1000
    )
