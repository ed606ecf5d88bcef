"""Job fingerprints: sha256 over a canonical JSON of everything that decides what a benchmark measures.

Hashed: the rendered launch argv, environment (secret values never: only the names of secret variables),
config files written for the engine, image and image digest, the client argv and the dataset spec (one of each
per concurrency when a job runs several). Change any
flag and the fingerprint changes, which is what ties a recipe edit to a changelog entry.

The payload's shape is frozen (its key names included): a fingerprint must not move when only servelab's
job file changes shape, so the client is hashed as the `servelab bench` argv its typed spec renders, and the
dataset as the mapping the first job files held (`dataset_of`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from servelab.recipes.schema import is_secret_name


def public_env(env: dict[str, str]) -> dict[str, str | None]:
    """The environment as it may be stored: secret-looking names keep their name, never their value."""
    return {k: (None if is_secret_name(k) else v) for k, v in sorted(env.items())}


def dataset_of(bench) -> dict:
    """The dataset part of the fingerprint payload from a job's BenchSpec (the first job files' mapping)."""
    return {
        "name": bench.dataset_name,
        "input-len": bench.random_input_len,
        "output-len": bench.random_output_len,
        "range-ratio": bench.random_range_ratio,
        "num-prompts": bench.num_prompts,
    }


def canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def job_fingerprint(
    *,
    launch,
    deployment=None,
    image: str,
    image_digest: str | None,
    client_argv: list,
    dataset: dict | list,
    secret_env: Sequence[str] = (),
    row: dict | None = None,
) -> str:
    payload = {
        "launch": None
        if launch is None
        else {
            "argv": launch.argv,
            "env": public_env(launch.env),
            "files": launch.files,
        },
        "secret-env": sorted(secret_env),
        "image": image,
        "image-digest": image_digest,
        "client": client_argv,
        "dataset": dataset,
    }
    if deployment is not None:
        # every process's argv, env (secret values never) and port, per role and node, and the files
        payload["deployment"] = {
            **deployment.model_dump(exclude={"processes"}),
            "processes": [{**p.model_dump(), "env": public_env(p.env)} for p in deployment.processes],
        }
    if launch is None and deployment is None:
        # Disaggregated rows have no rendered launch yet; their topology row stands in for it.
        payload["row"] = row
    return "sha256:" + hashlib.sha256(canonical(payload).encode()).hexdigest()


def sweep_fingerprint(job_fingerprints: list[str]) -> str:
    """One fingerprint per config key: over the sorted fingerprints of its full, unfiltered sweep."""
    return "sha256:" + hashlib.sha256(canonical(sorted(job_fingerprints)).encode()).hexdigest()
