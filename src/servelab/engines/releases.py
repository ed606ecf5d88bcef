"""Which flags each captured engine release accepts, and the check of a server launch against them.

Each engine package pins, per release, what its server command's own argument parser accepts
(`<engine>/releases/<version>.json`, written by scripts/capture_engine_flags.py from the engine's
wheel): every flag with its other spellings, whether it takes a value, its choices, and the keys of its
JSON-valued config flags. `check_launch` reads a server argv with those and names what the release would
refuse at start-up: an unknown (misspelt) flag, a flag the release removed or does not have yet, a flag
without its value or a switch given one, a value outside its choices, an unknown key in a JSON config flag
or an options file.

Which release an image runs (`resolve`):
- a captured release: problems are errors;
- a release between two captured ones: checked against the one below, a flag of the one above accepted too
  (a flag rarely comes and goes between neighbours); problems are errors;
- `latest` or no tag: the newest captured release, problems are errors (refresh the data with each release);
- anything else (a newer or older release than those captured, a nightly or custom build): the newest
  (or oldest) captured release, and problems are warnings, since that build may accept flags no capture has.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.engines.argv import Arg, canonical, is_flag_token, parse
from servelab.engines.command import engine_of_argv, grammar_of
from servelab.engines.names import Engine, engine_of
from servelab.engines.version import Version, version_of
from servelab.errors import ServelabError, closest

BOOLEAN_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0"}


class FlagSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    aliases: list[str] = Field(default_factory=list)
    value: Literal["none", "one", "optional", "many"] = "one"
    choices: list[str] | None = None
    deprecated: bool | str = False  # True, or the flag to use instead


class ParserTraits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    underscores: bool  # `--max_num_seqs` reads as `--max-num-seqs`
    abbreviations: bool  # argparse's allow_abbrev: a unique prefix of a flag is that flag
    dotted_configs: bool  # vLLM's `--attention_config.key value`


class Provenance(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str
    wheel: str | None = None
    sha256: str | None = None
    python: str | None = None
    torch: str | None = None
    tool: str


class Release(BaseModel):
    """What one engine release's server command accepts (one pinned data file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: Engine
    version: str
    provenance: Provenance
    parser: ParserTraits
    flags: dict[str, FlagSpec]
    config_keys: dict[str, list[str]] = Field(
        default_factory=dict, description="JSON-valued flag -> the keys its config accepts, nested as a.b"
    )
    options_flags: list[str] = Field(
        default_factory=list, description="flags whose value names an options file (TensorRT-LLM's YAML)"
    )
    options_keys: list[str] = Field(
        default_factory=list, description="the options file's keys, nested as a.b"
    )

    @property
    def label(self) -> str:
        return f"{self.engine.value} {self.version}"

    def spellings(self) -> dict[str, str]:
        """Every name and alias -> the flag's canonical name."""
        out = {name: name for name in self.flags}
        for name, spec in self.flags.items():
            out.update((a, name) for a in spec.aliases)
        return out


@cache
def releases(engine: Engine) -> tuple[Release, ...]:
    """The captured releases of an engine, oldest first (none: the engine has no captured data)."""
    folder = resources.files("servelab.engines") / engine.value / "releases"
    if not folder.is_dir():
        return ()
    out = []
    for entry in folder.iterdir():
        if not entry.name.endswith(".json"):
            continue
        try:
            out.append(Release.model_validate(json.loads(entry.read_text())))
        except (ValueError, ValidationError) as e:
            raise ServelabError(f"{engine.value}/releases/{entry.name}: not a release file ({e})") from None
    return tuple(sorted(out, key=lambda r: Version(r.version)))


@dataclass(frozen=True)
class Resolved:
    """The captured release a launch is checked against, whether its problems are errors, and why."""

    release: Release
    strict: bool
    note: str | None = None
    also: Release | None = None  # the captured release above an uncaptured one in between


def resolve(catalog: Sequence[Release], image_or_version: str | None) -> Resolved | None:
    """The release to check against (the rule in the module's docstring); None with no captured release."""
    if not catalog:
        return None
    newest, oldest = catalog[-1], catalog[0]
    version = version_of(image_or_version)
    name = newest.engine.value
    if version == "latest":
        return Resolved(
            newest,
            True,
            f"{image_or_version or 'no image'}: checked as {newest.label}, the newest captured release",
        )
    if version is None:
        return Resolved(
            newest,
            False,
            f"{image_or_version} names no release: checked against {newest.label} (the newest captured); "
            "problems are warnings",
        )
    key = Version(version)
    for r in catalog:
        if Version(r.version) == key:
            return Resolved(r, True)
    if key > Version(newest.version) or key < Version(oldest.version):
        near = newest if key > Version(newest.version) else oldest
        return Resolved(
            near,
            False,
            f"{name} {version} is not captured: checked against {near.label}; problems are warnings",
        )
    below = max((r for r in catalog if Version(r.version) < key), key=lambda r: Version(r.version))
    above = min((r for r in catalog if Version(r.version) > key), key=lambda r: Version(r.version))
    return Resolved(
        below,
        True,
        f"{name} {version} is not captured: checked against {below.version} and {above.version}",
        above,
    )


@dataclass(frozen=True)
class Problem:
    flag: str
    message: str  # one line naming the flag and the release
    error: bool


@dataclass
class LaunchCheck:
    """What a launch's release would refuse (errors) or may refuse (warnings), and which release it read."""

    release: str | None
    note: str | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return [p.message for p in self.problems if p.error]

    @property
    def warnings(self) -> list[str]:
        return [p.message for p in self.problems if not p.error]


def engine_of_command(argv: Sequence[str]) -> Engine | None:
    """The engine a server command starts; None when it is no engine's program (a stand-in)."""
    try:
        return engine_of_argv(list(argv))
    except ServelabError:
        return None


class _Checker:
    def __init__(self, resolved: Resolved, catalog: Sequence[Release]) -> None:
        self.r = resolved.release
        self.also = resolved.also
        self.strict = resolved.strict
        self.catalog = catalog
        self.names = self.r.spellings()
        self.problems: list[Problem] = []

    def add(self, flag: str, message: str) -> None:
        self.problems.append(Problem(flag, message, self.strict))

    def known(self, name: str) -> str | None:
        """The canonical flag a spelling names in the release (or its captured neighbour above)."""
        if name in self.names:
            return self.names[name]
        if self.also is not None:
            return self.also.spellings().get(name)
        return None

    def abbreviated(self, name: str) -> str | None:
        if not (self.r.parser.abbreviations and name.startswith("--")):
            return None
        hits = {flag for spelling, flag in self.names.items() if spelling.startswith(name)}
        return hits.pop() if len(hits) == 1 else None

    def elsewhere(self, has: Callable[[Release], bool]) -> str | None:
        """Where the captured releases around this one say a name went: removed after the last older
        release that has it, or new in the first newer one; None when no captured release has it."""
        key = Version(self.r.version)
        older = [r for r in self.catalog if Version(r.version) < key and has(r)]
        if older:
            return f"removed from {self.r.label} (last in {older[-1].version})"
        newer = [r for r in self.catalog if Version(r.version) > key and has(r)]
        return f"not in {self.r.label} (first in {newer[0].version})" if newer else None

    def unknown(self, name: str, written: str) -> None:
        where = self.elsewhere(lambda r: name in r.spellings())
        if where:
            self.add(name, f"{written}: {where}")
        else:
            self.add(name, f"{written}: unknown flag for {self.r.label}{closest(name, list(self.names))}")

    def config(self, flag: str, keys: list[str], path: str, value: Any, written: str) -> None:
        """Check a config value's keys (and one level of nested keys) against the release's."""
        if not isinstance(value, dict):
            return
        known = set(keys)
        for k, v in value.items():
            key = f"{path}.{k}" if path else str(k)
            if key not in known:
                where = self.elsewhere(partial(_has_key, flag=flag, key=key))
                if where:
                    self.add(flag, f"{written}: key {key!r} {where}")
                    continue
                level = (
                    sorted({x.split(".")[0] for x in known})
                    if not path
                    else [x.split(".", 1)[1] for x in known if x.startswith(path + ".")]
                )
                self.add(flag, f"{written}: unknown key {key!r} for {self.r.label}{closest(str(k), level)}")
            elif not path and isinstance(v, dict) and any(x.startswith(key + ".") for x in known):
                self.config(flag, keys, key, v, written)

    def value(self, arg: Arg, flag: str, spec: FlagSpec, written: str) -> None:
        if spec.value == "none" and arg.value is not None:
            self.add(flag, f"{written}: a switch in {self.r.label}; it takes no value (got {arg.value!r})")
        elif spec.value in ("one", "many") and arg.value is None:
            self.add(flag, f"{written}: needs a value in {self.r.label}")
        elif spec.choices is not None and arg.value is not None and arg.value not in spec.choices:
            hint = closest(arg.value, spec.choices) or (
                f" (one of {', '.join(spec.choices)})" if len(spec.choices) <= 8 else ""
            )
            self.add(flag, f"{written} {arg.value}: not a choice of {self.r.label}{hint}")
        if spec.deprecated:
            instead = f"; use {spec.deprecated}" if isinstance(spec.deprecated, str) else ""
            self.problems.append(Problem(flag, f"{written}: deprecated in {self.r.label}{instead}", False))

    def options(self, flag: str, arg: Arg, files: Mapping[str, Any], written: str) -> None:
        doc = files.get(arg.value or "")
        if doc is None:
            doc = next((v for k, v in files.items() if arg.value and k.endswith("/" + arg.value)), None)
        if isinstance(doc, str):
            try:
                doc = json.loads(doc)
            except ValueError:
                return  # a YAML text: the caller passes it parsed
        self.config(flag, self.r.options_keys, "", doc, f"{written} {arg.value}")


def check_launch(
    engine: Engine | str,
    version: str | None,
    argv: Sequence[str],
    files: Mapping[str, Any] | None = None,
    *,
    catalog: Sequence[Release] | None = None,
) -> LaunchCheck:
    """What the release an image (or version string) names would refuse of a server argv. `files` maps the
    paths of files the argv names (TensorRT-LLM's options YAML) to their parsed content. `catalog` stands
    in for the engine's captured releases (tests)."""
    eng = engine if isinstance(engine, Engine) else engine_of(engine)
    cat = tuple(sorted(catalog, key=lambda r: Version(r.version))) if catalog is not None else releases(eng)
    resolved = resolve(cat, version)
    if resolved is None:
        return LaunchCheck(None, f"{eng.value}: no captured release; flags not checked")
    ck = _Checker(resolved, cat)
    r = resolved.release
    spellings = r.spellings() | (resolved.also.spellings() if resolved.also else {})
    specs = {**(resolved.also.flags if resolved.also else {}), **r.flags}
    tokens = grammar_of(eng).split(list(argv))[1]
    dotted = {canonical(t) for t in tokens if is_flag_token(t) and "." in t.split("=", 1)[0]}
    switches = {s for s, f in spellings.items() if specs[f].value == "none"}
    # argparse leaves a flag-like next token alone (`--max-model-len --enforce-eager` lacks a value); vLLM's
    # dotted config flags take the next token whatever it is
    args = parse(tokens, switches=switches, valued=dotted)
    pending: tuple[str, str] | None = (
        None  # a switch just read (name, as written): the next word may be a value
    )
    for arg in args:
        if arg.name is None:
            # a word after a switch may be a positional argument (vLLM's and trtllm-serve's model), but a
            # boolean word there is a value the switch does not take (`--trust-remote-code true`)
            if pending is not None and str(arg.value).lower() in BOOLEAN_WORDS:
                name, written = pending
                ck.add(
                    spellings[name],
                    f"{written}: a switch in {r.label}; it takes no value (got {arg.value!r})",
                )
            pending = None
            continue
        pending = (arg.name, arg.tokens[0]) if arg.name in switches and arg.value is None else None
        written = arg.tokens[0].split("=", 1)[0]
        head, dot, key = arg.name.partition(".")
        if not r.parser.underscores and "_" in written.split(".", 1)[0]:
            ck.add(head, f"{written}: {r.label} does not read underscores in flag names (write {head})")
            continue
        found = ck.known(head) or ck.abbreviated(head)
        if found is None:
            ck.unknown(head, written)
            continue
        flag = found
        if dot:
            keys = r.config_keys.get(flag)
            if not r.parser.dotted_configs or keys is None:
                ck.add(flag, f"{written}: {r.label} has no dotted keys for {flag}")
            else:
                ck.config(flag, keys, "", _nested(key, arg.value), written)
            continue
        ck.value(arg, flag, specs[flag], written)
        if flag in r.config_keys and arg.value and arg.value.lstrip().startswith("{"):
            try:
                ck.config(flag, r.config_keys[flag], "", json.loads(arg.value), written)
            except ValueError:
                ck.add(flag, f"{written}: not JSON ({arg.value[:40]!r})")
        if flag in r.options_flags and files is not None:
            ck.options(flag, arg, files, written)
    return LaunchCheck(r.label, resolved.note, ck.problems)


def _has_key(release: Release, flag: str, key: str) -> bool:
    """Whether a config flag (or the options file, for an options flag) takes a key in a release."""
    keys = release.options_keys if flag in release.options_flags else release.config_keys.get(flag, [])
    return key in keys


def _nested(dotted_key: str, value: str | None) -> dict:
    """`a.b` -> {"a": {"b": value}}: a dotted flag's key as the dict vLLM builds from it."""
    out: Any = value
    for part in reversed(dotted_key.split(".")):
        out = {part: out}
    return out
