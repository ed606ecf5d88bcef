"""JobCache: a sweep through the cache gives the jobs a sweep without it gives, whatever the cache held.

The refs comparisons (scripts/refresh_inferencex_refs.py compare) sweep 25 snapshots of one repository
through one cache; here two pull requests of the corpus opened on the same day, and stores changed by hand.
"""

import copy
import gzip
import json
from pathlib import Path

import pytest

from servelab.recipes.ix_generator import generator_from_json
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import JobCache, expand

ROOT = Path(__file__).resolve().parents[2]
REFS = ROOT / "tests" / "data" / "inferencex_refs"
KEYS = ["minimaxm3-*", "glm5*"]  # a part of each sweep (about 180 jobs): quick


def ref_store(tmp_path: Path, short: str):
    """The pinned ref's store, as the refs comparison opens it (configs unzipped, its generator's facts)."""
    configs = tmp_path / short / "configs"
    configs.mkdir(parents=True)
    for f in (REFS / short / "configs").glob("*.gz"):
        (configs / f.name.removesuffix(".gz")).write_bytes(gzip.decompress(f.read_bytes()))
    store = open_store(configs)
    facts = REFS / short / "generator-facts.json"
    store.generator = generator_from_json(json.loads(facts.read_text())["facts"], str(facts))
    return store


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return ref_store(tmp_path_factory.mktemp("refs"), "225829c15")


def changed(store, key: str, recipe=None, runner=None):
    """Another store of the same files, with the recipe of `key` or the runner of its label replaced."""
    other = copy.copy(store)
    other.recipes = dict(store.recipes)
    other.recipes[key] = recipe or store.recipes[key]
    if runner is not None:
        other.runner_labels = copy.copy(store.runner_labels)
        other.runner_labels.runners = dict(store.runner_labels.runners, **{runner.label: runner})
    return other


def as_json(jobs, store) -> list[str]:
    """Each job's whole JSON, the store's own folder written as `configs` (each ref sits in its own)."""
    return [json.dumps(j.to_json()).replace(str(store.source.root), "configs") for j in jobs]


def test_a_sweep_through_the_cache_is_the_sweep(tmp_path, base):
    cache = JobCache()
    second = ref_store(tmp_path, "6404c1b4d")
    cached = [as_json(expand(base, KEYS, cache=cache), base)]
    hits_in_first = cache.hits
    cached.append(as_json(expand(second, KEYS, cache=cache), second))
    fresh = [as_json(expand(s, KEYS), s) for s in (base, second)]
    assert cached == fresh and len(fresh[1]) > 100
    # the second pull request changes few of these recipes: most of its jobs were built for the first
    assert cache.hits - hits_in_first > len(fresh[1]) / 2


def test_a_changed_recipe_or_runner_is_built_again(base):
    cache = JobCache()
    key = next(k for k in base.recipes if k.startswith("minimaxm3-") and not base.recipes[k].multinode)
    recipe = base.recipes[key]
    expand(base, [key], cache=cache)
    built = len(cache.jobs)

    image = changed(base, key, recipe.model_copy(update={"image": recipe.image + "-other"}))
    jobs = expand(image, [key], cache=cache)
    assert cache.hits == 0 and len(cache.jobs) == 2 * built
    assert as_json(jobs, image) == as_json(expand(image, [key]), image)
    assert all(recipe.image + "-other" in json.dumps(j.to_json()) for j in jobs)

    # the same values with one more field written (a renderer may read what was written): built again
    unset = next(n for n in type(recipe).model_fields if n not in recipe.model_fields_set)
    again = recipe.model_copy(update={unset: getattr(recipe, unset)})
    assert again.model_dump() == recipe.model_dump() and again.model_fields_set != recipe.model_fields_set
    expand(changed(base, key, again), [key], cache=cache)
    assert cache.hits == 0 and len(cache.jobs) == 3 * built

    # another queue for the recipe's runner label (build_job reads its queue and agents)
    runner = base.runner_labels.runners[recipe.runner]
    assert runner.node is not None
    queued = changed(
        base, key, runner=runner.model_copy(update={"node": runner.node.model_copy(update={"queue": "q2"})})
    )
    jobs = expand(queued, [key], cache=cache)
    assert cache.hits == 0 and len(cache.jobs) == 4 * built and {j.queue for j in jobs} == {"q2"}
    assert as_json(jobs, queued) == as_json(expand(queued, [key]), queued)

    # and another store of the same files takes every job from the cache
    expand(changed(base, key), [key], cache=cache)
    assert cache.hits == built


@pytest.mark.slow  # 1.5 s: a sweep of the pinned InferenceX checkout
def test_a_store_with_a_checkout_is_not_cached():
    """A checkout's launch scripts can change a job (checkout_launch.py); the key does not hold them."""
    cache = JobCache()
    store = open_store(ROOT / "tests" / "data" / "inferencex" / "configs")
    assert store.checkout is not None
    jobs = expand(store, ["dsr1-fp8-h200-*"], cache=cache)
    assert jobs and cache.jobs == {} and cache.hits == 0
