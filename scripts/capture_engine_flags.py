"""Capture the flags each engine release accepts, from the engine's own argument parser, into
src/servelab/engines/<engine>/releases/<version>.json (a development tool: the product only reads the files).

    python scripts/capture_engine_flags.py refresh vllm 0.25.0 --python /tmp/cap/venv/bin/python
    python scripts/capture_engine_flags.py refresh sglang 0.5.14 --python /tmp/cap/venv/bin/python \
        --path /tmp/cap/over/tf581

`refresh` downloads the engine's wheel with pip (`--no-deps`), unpacks it under --work, and runs this script's
`dump` step with --python, the unpacked wheel (and each --path) first on its PYTHONPATH: `dump` imports the
engine, builds the parser its server command builds and prints what every action accepts as JSON; `refresh`
writes it with its provenance (the wheel's name and sha256, the method). No GPU is needed, but the engine must
import: --python is a throwaway venv with a CPU torch (`pip install torch==2.13.0`) and the pure-Python
packages the engine's argument module imports (vLLM 0.25: transformers, pydantic, fastapi, openai, msgspec,
cbor2, pybase64, openai-harmony...; SGLang 0.5.x: also orjson, triton, IPython, dill, and the transformers and
tokenizers releases it pins, given with --path so they shadow the venv's).

What is captured, per flag: its canonical name (underscores as hyphens), its other spellings, whether it
takes a value ("none", "one", "optional" or "many" values; "one" is left out), its choices where the parser
has them, and whether the engine marks it deprecated. For vLLM's JSON-valued `--*-config` flags, the keys
their config class accepts (vLLM's config dataclasses forbid other keys), one level of nesting written
`outer.inner`. TensorRT-LLM's wheels live on NVIDIA's own index (PyPI serves a stub that downloads from it),
so it is not captured here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENGINES_DIR = REPO / "src" / "servelab" / "engines"
PIP_NAMES = {"vllm": "vllm", "sglang": "sglang"}


# ---- the dump step: runs inside the engine's environment ------------------------------------------------


def _hyphenated(option: str) -> str:
    return "--" + option[2:].replace("_", "-") if option.startswith("--") else option


def _value_kind(action) -> str:
    nargs = action.nargs
    if nargs == 0:
        return "none"
    if nargs in (None, 1):
        return "one"
    if nargs == "?":
        return "optional"
    return "many"


def walk(parser: argparse.ArgumentParser) -> dict:
    """Every optional action of a parser: canonical name -> what it accepts."""
    flags = {}
    # the strings argparse matches, hidden ones included (vLLM 0.34 keeps `--no-enable-x` out of
    # action.option_strings but registered with the parser)
    registered: dict[int, list[str]] = {}
    for option, owner in parser._option_string_actions.items():
        registered.setdefault(id(owner), []).append(option)
    deprecated: set = getattr(
        parser, "_deprecated", set()
    )  # vLLM's FlexibleArgumentParser before Python 3.13
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        options = sorted({_hyphenated(o) for o in registered.get(id(action), action.option_strings)})
        own = "--" + action.dest.replace("_", "-")
        longs = [o for o in options if o.startswith("--") and not o.startswith("--no-")]
        name = own if own in options else (longs or options)[0]
        entry: dict = {}
        aliases = sorted({o for o in options if o != name})
        if aliases:
            entry["aliases"] = aliases
        kind = _value_kind(action)
        if kind != "one":
            entry["value"] = kind
        if action.choices is not None:
            entry["choices"] = [str(c) for c in action.choices]
        if (
            "Deprecated" in type(action).__name__
            or action in deprecated
            or getattr(action, "deprecated", False)
        ):
            entry["deprecated"] = getattr(action, "new_flag", None) or True
        flags[name] = entry
    return dict(sorted(flags.items()))


def _dataclass_of(tp):
    """The dataclass a field's type names, looking through Optional/Union; None otherwise."""
    import dataclasses  # noqa: PLC0415  # runs in the engine's environment
    import typing  # noqa: PLC0415

    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return tp
    for arg in typing.get_args(tp):
        found = _dataclass_of(arg)
        if found is not None:
            return found
    return None


def config_keys(cls) -> list[str]:
    """The keys a vLLM config dataclass accepts (init fields), and one level of nested dataclass keys."""
    import dataclasses  # noqa: PLC0415
    import typing  # noqa: PLC0415

    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # a forward reference the engine resolves lazily: fall back to the raw annotations
        hints = {}
    keys = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        keys.append(f.name)
        inner = _dataclass_of(hints.get(f.name, f.type))
        if inner is not None and inner is not cls:
            keys += [f"{f.name}.{g.name}" for g in dataclasses.fields(inner) if g.init]
    return sorted(keys)


def dump_vllm() -> dict:
    import vllm.config as vconfig  # noqa: PLC0415
    import vllm.platforms as platforms  # noqa: PLC0415
    from vllm.platforms.cpu import CpuPlatform  # noqa: PLC0415

    # No GPU here; which flags `vllm serve` accepts does not depend on the platform, only defaults do.
    platforms._current_platform = CpuPlatform()
    from vllm.entrypoints.cli.serve import ServeSubcommand  # noqa: PLC0415

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415
    except ImportError:
        from vllm.utils import FlexibleArgumentParser  # noqa: PLC0415

    top = FlexibleArgumentParser(prog="vllm")
    parser = ServeSubcommand().subparser_init(top.add_subparsers())
    flags = walk(parser)
    classes = {name.lower(): getattr(vconfig, name) for name in dir(vconfig) if name.endswith("Config")}
    keys = {}
    for action in parser._actions:
        cls = classes.get(action.dest.replace("_", "").lower()) if action.dest.endswith("_config") else None
        if cls is not None and _dataclass_of(cls) is not None:
            keys["--" + action.dest.replace("_", "-")] = config_keys(cls)
    return {
        # FlexibleArgumentParser folds underscores into hyphens and expands `--x-config.key value`
        "parser": {"underscores": True, "abbreviations": bool(parser.allow_abbrev), "dotted_configs": True},
        "flags": flags,
        "config_keys": dict(sorted(keys.items())),
        "command": "vllm serve MODEL (ServeSubcommand.subparser_init on a FlexibleArgumentParser)",
    }


def dump_sglang() -> dict:
    from sglang.srt.server_args import ServerArgs  # noqa: PLC0415

    # what prepare_server_args builds for `python -m sglang.launch_server` and `sglang serve`
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    try:
        parser.parse_args(["--model-path", "m", "--mem_fraction_static", "0.5"])
        underscores = True
    except SystemExit:
        underscores = False
    return {
        "parser": {
            "underscores": underscores,
            "abbreviations": bool(parser.allow_abbrev),
            "dotted_configs": False,
        },
        "flags": walk(parser),
        "config_keys": {},
        "command": "python -m sglang.launch_server (ServerArgs.add_cli_args on argparse.ArgumentParser)",
    }


DUMPS = {"vllm": dump_vllm, "sglang": dump_sglang}


# ---- the refresh step: runs here ------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _wheel(engine: str, version: str, python: str, work: Path) -> Path:
    wheels = work / "whl"
    wheels.mkdir(parents=True, exist_ok=True)
    dist = PIP_NAMES[engine]
    found = sorted(wheels.glob(f"{dist}-{version}-*.whl"))
    if not found:
        cmd = [python, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), f"{dist}=={version}"]
        subprocess.run(cmd, check=True)
        found = sorted(wheels.glob(f"{dist}-{version}-*.whl"))
    if not found:
        sys.exit(f"no wheel of {dist}=={version} in {wheels}")
    return found[0]


def compact(data: dict) -> str:
    """JSON with one flag (and one config flag) a line: small, and a release's diff reads flag by flag."""
    out = ["{"]
    items = list(data.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key in ("flags", "config_keys") and value:
            out.append(f"  {json.dumps(key)}: {{")
            inner = list(value.items())
            for j, (k, v) in enumerate(inner):
                sep = "," if j < len(inner) - 1 else ""
                out.append(f"    {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}{sep}")
            out.append("  }" + comma)
        else:
            out.append(f"  {json.dumps(key)}: {json.dumps(value, separators=(', ', ': '))}{comma}")
    out.append("}")
    return "\n".join(out) + "\n"


def refresh(engine: str, version: str, python: str, work: Path, paths: list[str]) -> Path:
    wheel = _wheel(engine, version, python, work)
    site = work / "site" / f"{engine}-{version}"
    if not site.is_dir():
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), *paths]))
    proc = subprocess.run(
        [python, __file__, "dump", engine], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"dump of {engine} {version} failed:\n{proc.stderr[-3000:]}")
    dumped = json.loads(proc.stdout.strip().splitlines()[-1])
    versions = subprocess.run(
        [python, "-c", "import sys, torch; print(sys.version.split()[0], torch.__version__)"],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    data = {
        "engine": engine,
        "version": version,
        "provenance": {
            "method": f"parser walked: {dumped.pop('command')}; imported from the wheel on CPU",
            "wheel": wheel.name,
            "sha256": _sha256(wheel),
            "python": versions[0] if versions else None,
            "torch": versions[1] if len(versions) > 1 else None,
            "tool": "scripts/capture_engine_flags.py",
        },
        **dumped,
    }
    dest = ENGINES_DIR / engine / "releases" / f"{version}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(compact(data))
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="print the parser's flags as JSON (run inside the engine's environment)")
    d.add_argument("engine", choices=sorted(DUMPS))
    r = sub.add_parser("refresh", help="download, dump and write one release's file")
    r.add_argument("engine", choices=sorted(DUMPS))
    r.add_argument("versions", nargs="+")
    r.add_argument("--python", required=True, help="the throwaway venv's python the engine imports in")
    r.add_argument("--work", type=Path, default=Path("/tmp/capture-engine-flags"))
    r.add_argument("--path", action="append", default=[], help="put first on PYTHONPATH (pinned deps)")
    args = ap.parse_args()
    if args.cmd == "dump":
        print(json.dumps(DUMPS[args.engine]()))
        return
    for version in args.versions:
        print(refresh(args.engine, version, args.python, args.work, args.path))


if __name__ == "__main__":
    main()
