"""A recipe store: the directory (or the same directory at a git ref) holding recipes and their ledger.

<dir>/recipes/*.yaml          config keys -> recipes (servelab format; InferenceX master files are valid too)
<dir>/*-master.yaml           the same in InferenceX's configs/ layout (read when recipes/ is absent)
<dir>/runners.yaml            runner labels -> nodes, node kinds (runners.py)
<dir>/perf-changelog.yaml     the append-only performance changelog (changelog.py)
<dir>/fingerprints.lock       config key -> fingerprint of its full sweep, written by `servelab recipes lock`

An InferenceX checkout's configs/ is a store as it is: its master files (*-master.yaml) sit beside
runners.yaml instead of under recipes/, and its perf-changelog.yaml one level up (changelog.open_change).
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from servelab.errors import ServelabError, closest
from servelab.recipes.checkout_launch import CheckoutScripts
from servelab.recipes.inferencex import Notes, validate_entries
from servelab.recipes.ix_generator import TODAY, find_generator
from servelab.recipes.runners import RunnerLabels, parse_runners
from servelab.recipes.schema import Recipe
from servelab.recipes.yamlio import load_yaml, read_text

DATA_DIR = Path(__file__).parent / "data"
RECIPES = "recipes"
# InferenceX keeps its config keys in configs/<vendor>-master.yaml beside runners.yaml.
MASTER_SUFFIX = "-master.yaml"
RUNNERS = "runners.yaml"
CHANGELOG = "perf-changelog.yaml"
LOCK = "fingerprints.lock"
MASTER_SUFFIX = "-master.yaml"  # InferenceX's recipe files, e.g. configs/nvidia-master.yaml


@functools.cache
def shipped_runner_labels() -> RunnerLabels:
    """servelab's own runners.yaml (recipes/data), read strictly."""
    where = f"servelab's {RUNNERS}"
    return parse_runners(load_yaml(read_text(DATA_DIR / RUNNERS), where), where)


def resolve_dir(directory: Path | None = None) -> Path:
    """Where the recipes are: the given directory, else $SERVELAB_RECIPES_DIR, else ./configs when it holds a
    store (runners.yaml and recipes/, or InferenceX's *-master.yaml files), else the recipes shipped with
    servelab."""
    if directory is not None:
        return Path(directory)
    if os.environ.get("SERVELAB_RECIPES_DIR"):
        return Path(os.environ["SERVELAB_RECIPES_DIR"])
    local = Path("configs")
    if (local / RUNNERS).is_file() and ((local / RECIPES).is_dir() or any(local.glob(f"*{MASTER_SUFFIX}"))):
        return local
    return DATA_DIR


def _git(*args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise ServelabError("git is not installed; the changelog commands read files at git refs") from None


def git_toplevel() -> Path | None:
    """The top of the git checkout around the current directory, or None outside one."""
    r = _git("rev-parse", "--show-toplevel")
    return Path(r.stdout.decode().strip()) if r.returncode == 0 and r.stdout.strip() else None


# Where a checkout keeps its own store: InferenceX's configs/, and servelab's shipped recipes in its sources.
CHECKOUT_STORES = (Path("configs"), Path("src") / "servelab" / "recipes" / "data")


def checkout_dir(directory: Path | None = None) -> Path:
    """The store the changelog commands read: as every command finds it (resolve_dir), unless that is not
    committed in the checkout around the current directory (an installed servelab's own recipes) while the
    checkout keeps a store of its own (CHECKOUT_STORES, from its top, wherever in it the command runs): an
    InferenceX checkout's or a servelab checkout's, whose changelog is the one a change there edits."""
    root = resolve_dir(directory)
    if directory is not None or os.environ.get("SERVELAB_RECIPES_DIR") or committed(root):
        return root
    top = git_toplevel()
    if top is None:
        return root
    for rel in CHECKOUT_STORES:
        candidate = top / rel
        if (candidate / RUNNERS).is_file() and committed(candidate):
            return candidate
    return root


def committed(root: Path) -> bool:
    """Whether `root` holds files tracked by the git checkout around the current directory (an installed
    package's data, even in a virtual environment inside the checkout, is not)."""
    r = _git("ls-files", "--", str(root))
    return r.returncode == 0 and bool(r.stdout.strip())


def _join(rel: str, name: str) -> str:
    return name if rel == "." else f"{rel}/{name}"


def recipe_files(source) -> list[str]:
    """The recipe files of a store: recipes/*.yaml, else (InferenceX's configs/) the *-master.yaml files, in
    name order, which is the order InferenceX's own tools merge them in (amd before nvidia)."""
    return source.list_yaml(RECIPES) or [f for f in source.list_yaml(".") if f.endswith(MASTER_SUFFIX)]


class DirSource:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.label = str(self.root)

    def read(self, rel: str) -> str | None:
        p = self.root / rel
        return read_text(p) if p.is_file() else None

    def read_bytes(self, rel: str) -> bytes | None:
        p = self.root / rel
        return p.read_bytes() if p.is_file() else None

    def list_yaml(self, rel: str) -> list[str]:
        d = self.root / rel
        return sorted(_join(rel, p.name) for p in d.glob("*.y*ml")) if d.is_dir() else []


class GitSource:
    """The store as committed at `ref` in the git checkout around the current directory; `root` anywhere in
    that checkout (the command may run in a subdirectory of it)."""

    def __init__(self, ref: str, root: Path):
        self.ref = ref
        self._check_ref()
        self.top = git_toplevel() or Path.cwd()
        rel = os.path.relpath(Path(root).resolve(), self.top.resolve())
        if rel.startswith(".."):
            raise ServelabError(f"{root}: outside the git checkout {self.top}, whose files are read at refs")
        self.rel = Path(rel)
        self.label = f"{ref}:{rel}"

    def _check_ref(self) -> None:
        if not self.ref or self.ref.startswith("-") or not self.ref.isprintable():
            # git would read a leading '-' as an option (git show --output=FILE writes a file)
            raise ServelabError(f"git ref {self.ref!r}: expected a branch, tag or commit")
        if _git("rev-parse", "--git-dir").returncode != 0:
            raise ServelabError(
                f"{Path.cwd()} is not inside a git checkout; the changelog commands compare git refs"
            )
        r = _git("rev-parse", "--verify", "--quiet", f"{self.ref}^{{commit}}")
        if r.returncode != 0:
            raise ServelabError(f"git ref {self.ref!r} does not name a commit in this repository")

    def read_bytes(self, rel: str) -> bytes | None:
        r = _git("-C", str(self.top), "show", f"{self.ref}:./{(self.rel / rel).as_posix()}")
        return r.stdout if r.returncode == 0 else None

    def read(self, rel: str) -> str | None:
        data = self.read_bytes(rel)
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ServelabError(f"{self.label}/{rel}: not UTF-8") from None

    def list_yaml(self, rel: str) -> list[str]:
        r = _git(
            "-C", str(self.top), "ls-tree", "--name-only", self.ref, "--", f"{(self.rel / rel).as_posix()}/"
        )
        names = [Path(line).name for line in r.stdout.decode().splitlines()]
        return sorted(_join(rel, n) for n in names if n.endswith((".yaml", ".yml")))


def benchmarks_of(source) -> Path | None:
    """The benchmarks/ directory of the InferenceX checkout a configs/ directory belongs to (configs/ at its
    top, or .github/configs/ before mid-2026), or None."""
    root = getattr(source, "root", None)
    if root is None:
        return None
    for top in (root.parent, root.parent.parent):
        if (top / "benchmarks").is_dir():
            return top / "benchmarks"
    return None


def parse_recipe_file(data: object, source: str, notes: Notes | None = None) -> dict[str, Recipe]:
    """The recipes of a file; with `notes`, read tolerantly (inferencex.py: names and fields servelab does
    not know are kept as written and noted)."""
    return validate_entries(data, source, Recipe, "recipes", notes)


class RecipeStore:
    """The recipes and runners of a store. An InferenceX checkout's configs/ (master files, no recipes/) is
    read with InferenceX's own strictness, no more: names and fields servelab does not know are kept as
    written and duplicate YAML keys resolved as its loader does (the last wins), each said once in
    `notes`; servelab's own recipes/ and the shipped store are read strictly."""

    def __init__(self, source):
        self.source = source
        self.recipes: dict[str, Recipe] = {}
        self.files: dict[str, str] = {}
        # each key's top-level fields as written (a checkout's validator may forbid some: matrix.py)
        self.entry_keys: dict[str, list[str]] = {}
        files = recipe_files(source)
        self.notes: Notes | None = None if source.list_yaml(RECIPES) else Notes()
        duplicates: list[str] | None = None if self.notes is None else []
        for rel in files:
            where = f"{source.label}/{rel}"
            data = load_yaml(source.read(rel), where, duplicates)
            for key, recipe in parse_recipe_file(data, where, self.notes).items():
                if key in self.recipes:
                    raise ServelabError(f"{where}: config key {key} is also defined in {self.files[key]}")
                self.recipes[key] = recipe
                self.files[key] = where
                raw = next((v for k, v in data.items() if str(k) == key), None)
                self.entry_keys[key] = [str(k) for k in raw] if isinstance(raw, dict) else []
        runners_text = source.read(RUNNERS)
        if runners_text is None:
            raise ServelabError(
                f"{source.label}/{RUNNERS}: not found; a recipe store needs a runners registry"
            )
        where = f"{source.label}/{RUNNERS}"
        self.runner_labels = parse_runners(load_yaml(runners_text, where, duplicates), where, self.notes)
        if self.notes is not None:  # an InferenceX checkout: the labels upstream runs on beyond its file
            self.runner_labels.fill_from(shipped_runner_labels(), (r.runner for r in self.recipes.values()))
        if self.notes is not None and duplicates:
            for line in duplicates:
                self.notes.add(line)
        self.benchmarks = benchmarks_of(source) if self.notes is not None else None
        # what the checkout's own sweep generator prints (ix_generator.py); today's for any other store
        self.generator = find_generator(getattr(source, "root", None)) if self.notes is not None else TODAY

    @functools.cached_property
    def checkout(self) -> CheckoutScripts | None:
        """The launch scripts of the InferenceX checkout the store is the configs/ of (None for another
        store): the sweep derives a job's launch from its script when that is not the one the job's launch
        profile was captured from (checkout_launch.py)."""
        return None if self.benchmarks is None else CheckoutScripts(self.benchmarks)

    def get(self, key: str) -> Recipe:
        if key not in self.recipes:
            raise ServelabError(
                f"config key {key!r} is not in {self.source.label}" + closest(key, list(self.recipes))
            )
        return self.recipes[key]

    def lock(self) -> dict[str, str] | None:
        text = self.source.read(LOCK)
        if text is None:
            return None
        data = load_yaml(text, f"{self.source.label}/{LOCK}") or {}
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise ServelabError(
                f"{self.source.label}/{LOCK}: expected a mapping of config key -> fingerprint"
            )
        return {str(k): v for k, v in data.items()}


def open_store(directory: Path | None = None, ref: str | None = None) -> RecipeStore:
    root = resolve_dir(directory)
    if ref is None:
        if not root.is_dir():
            raise ServelabError(f"recipes dir {root} does not exist")
        return RecipeStore(DirSource(root))
    return RecipeStore(GitSource(ref, root))


def lock_text(fingerprints: dict[str, str]) -> str:
    lines = [
        "# config key -> fingerprint of its full sweep; written by `servelab recipes lock`.",
        "# A change here needs a perf-changelog.yaml entry (checked by `servelab changelog validate`).",
    ]
    lines += [f"{k}: {v}" for k, v in sorted(fingerprints.items())]
    return "\n".join(lines) + "\n"
