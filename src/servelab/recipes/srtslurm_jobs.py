"""Which srt-slurm recipe and revision an InferenceX multinode job runs, and its Deployment (srtslurm.py).

InferenceX's launchers pick the srt-slurm revision per runner, framework, model, precision and scenario, and
the recipe is CONFIG_FILE of the job's additional-settings. What each launcher picks was recorded by running
the launchers of the pinned InferenceX commit under stubs (scripts/srtslurm_capture.py resolve, index):
data/srtslurm/index.json, one entry per choice, saying the revision, the model path the launcher's
srtslurm.yaml gives the recipe's model alias, and where the recipe is read from: InferenceX's own
benchmarks/multi_node/srt-slurm-recipes (read from the sweep's checkout, beside its configs/) or srt-slurm's
repository (pinned under data/srtslurm/recipes/<revision>/), and for an override file the variant CONFIG_FILE
selects after its `:` (`selector`); the recipe is read as the launcher's own sed leaves it (LAUNCHER_EDITS). A
choice servelab has no copy of (a fork of srt-slurm, a recipe the launcher edits otherwise) keeps a precise
not-renderable reason.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path

from servelab.errors import ServelabError
from servelab.recipes.engines.base import Deployment
from servelab.recipes.matrix import arm_settings
from servelab.recipes.srtslurm import read_recipe, render

IX_RECIPES = "multi_node/srt-slurm-recipes"
AGENTIC = "agentic-coding"
# A launcher's own `sed -i '/^ANCHOR/a\\LINE'` on the recipe before srtctl reads it: (anchor, line added after
# each line starting with it). launch_h100-dgxc-slurm.sh raises SGLang's torch-distributed store timeout.
LAUNCHER_EDITS: dict[str, tuple[tuple[str, str], ...]] = {
    "launch_h100-dgxc-slurm.sh": (("      watchdog-timeout:", "      dist-timeout: 1800"),),
}


@cache
def index() -> dict[str, dict]:
    return json.loads((resources.files("servelab.recipes") / "data/srtslurm/index.json").read_text())


def launcher_edit(text: str, launcher: str | None) -> str:
    """The recipe text as the launcher's own sed leaves it (LAUNCHER_EDITS); unchanged for other launchers."""
    for anchor, line in LAUNCHER_EDITS.get(launcher or "", ()):
        out: list[str] = []
        for have in text.splitlines(keepends=True):
            out.append(have)
            if have.startswith(anchor):
                out.append(line + "\n")
        text = "".join(out)
    return text


def choice_key(row: dict, config: str) -> str:
    """What a launcher's choice of revision depends on (the key of index.json)."""
    scenario = "agentic" if row.get("scenario-type") == AGENTIC else "fixed"
    parts = [row["runner"], row["framework"], row["model-prefix"], row["precision"], scenario]
    return "|".join([*parts, str(row.get("spec-decoding")), config])


def deployment_for(row: dict, benchmarks: Path | None) -> tuple[Deployment | None, str | None, str | None]:
    """(deployment, why not, where its recipe was read from) for a row whose arms name a CONFIG_FILE;
    (None, None, None) for any other row. `benchmarks`: the checkout's benchmarks/ directory, if any."""
    config = arm_settings(row).get("CONFIG_FILE")
    if not config:
        return None, None, None
    entry = index().get(choice_key(row, config))
    if entry is None:
        return (
            None,
            "srt-slurm: servelab has no record of the revision the launcher runs this recipe with",
            None,
        )
    if "unavailable" in entry:
        return None, f"srt-slurm: {entry['unavailable']}", None
    revision = entry["revision"]
    if "inferencex" in entry:
        rel = f"{IX_RECIPES}/{entry['inferencex']}"
        path = None if benchmarks is None else benchmarks / rel
        if path is None or not path.is_file():
            where = "no InferenceX checkout" if benchmarks is None else f"{benchmarks}/{rel} is missing"
            return None, f"srt-slurm recipe {rel}: {where}", None
        text, source = path.read_text(), f"checkout benchmarks/{rel}"
    else:
        pinned = (
            resources.files("servelab.recipes")
            / f"data/srtslurm/recipes/{revision[:12]}/{entry['srt-slurm']}"
        )
        text, source = pinned.read_text(), f"srt-slurm's {entry['srt-slurm']} (pinned)"
    text = launcher_edit(text, entry.get("launcher"))
    if "selector" in entry:  # the variant of an override file (CONFIG_FILE's `path:selector`)
        source += f" variant {entry['selector']}"
    synthetic = None
    if arm_settings(row).get("SYNTHETIC_ACCEPTANCE", "").strip().lower() == "true":
        length = arm_settings(row).get("SYNTHETIC_ACCEPTANCE_LENGTH", "").strip()
        if not length:
            why = "SYNTHETIC_ACCEPTANCE without its length (a reference-table lookup) is not rendered yet"
            return None, f"srt-slurm: {why}", None
        try:
            synthetic = float(length)
        except ValueError:
            return None, f"srt-slurm: SYNTHETIC_ACCEPTANCE_LENGTH {length!r} is not a number", None
    try:
        recipe = read_recipe(text, source, synthetic, entry.get("selector"))
        deployment = render(recipe, source, entry["model-path"], revision)
    except ServelabError as e:
        return None, f"srt-slurm: {e}", source
    return deployment, None, f"srt-slurm {revision[:12]}: {source}"
