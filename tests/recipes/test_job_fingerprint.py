"""Fingerprints cover the rendered launch, env, image digest, client argv and dataset; secrets by name."""

from servelab.recipes.filters import Filters
from servelab.recipes.fingerprint import job_fingerprint, public_env
from servelab.recipes.lock import compute_fingerprints, stale_keys
from servelab.recipes.recipe_store import open_store
from servelab.recipes.sweep import expand


def fps(store, key="dsv4f-fp8-b200-vllm"):
    return [j.fingerprint for j in expand(store, [key], Filters(no_evals=True))]


def edit(store_dir, old, new):
    p = store_dir / "recipes" / "b200.yaml"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))
    return open_store(store_dir)


def test_fingerprints_are_stable_and_distinct(shipped):
    a, b = fps(shipped), fps(shipped)
    assert a == b and len(set(a)) == len(a)
    assert all(f.startswith("sha256:") and len(f) == 71 for f in a)


def test_shipped_lock_is_current(shipped):
    assert stale_keys(shipped) == []


def test_every_input_changes_the_fingerprint(store_dir):
    base = fps(open_store(store_dir))
    cases = [
        ("max-num-seqs: 256", "max-num-seqs: 128"),  # an engine flag
        ("enable-prefix-caching: true", "enable-prefix-caching: true\n  env: {VLLM_FOO: '1'}"),  # env
        ("sha256:e1c1ff", "sha256:e1c1fe"),  # image digest
        ("7872f01b", "7872f01c"),  # model revision
    ]
    for old, new in cases:
        changed = fps(edit(store_dir, old, new))
        assert changed != base and all(x != y for x, y in zip(changed, base, strict=True)), old
        edit(store_dir, new, old)
    assert fps(open_store(store_dir)) == base


def test_client_and_dataset_change_the_fingerprint(store_dir):
    base = fps(open_store(store_dir))
    p = store_dir / "recipes" / "b200.yaml"
    text = p.read_text()
    marker = "dsv4f-fp8-b200-vllm:\n"
    p.write_text(text.replace(marker, marker + "  client: {random-range-ratio: 1.0}\n"))
    assert all(x != y for x, y in zip(fps(open_store(store_dir)), base, strict=True))


def test_secret_values_never_stored():
    assert public_env({"HF_TOKEN": "hf_secret", "MY_API_KEY": "k", "AWS_SECRET": "s", "CUDA_HOME": "/c"}) == {
        "AWS_SECRET": None,
        "CUDA_HOME": "/c",
        "HF_TOKEN": None,
        "MY_API_KEY": None,
    }

    class L:
        argv = ["vllm", "serve", "m"]
        files: dict = {}

        def __init__(self, env):
            self.env = env

    kw = dict(image="i", image_digest=None, client_argv=["c"], dataset={"name": "random"})
    assert job_fingerprint(launch=L({"HF_TOKEN": "a"}), **kw) == job_fingerprint(
        launch=L({"HF_TOKEN": "b"}), **kw
    )
    assert job_fingerprint(launch=L({}), secret_env=["HF_TOKEN"], **kw) != job_fingerprint(launch=L({}), **kw)


def test_lock_detects_a_changed_recipe(store_dir):
    store = edit(store_dir, "max-num-seqs: 256", "max-num-seqs: 128")
    assert stale_keys(store) == ["dsv4f-fp8-b200-vllm"]
    assert (
        compute_fingerprints(store)["dsv4-fp4-b200-vllm"]
        == open_store(store_dir).lock()["dsv4-fp4-b200-vllm"]
    )
