"""Launch flags from the user's InferenceX checkout: a job whose launch script changed is derived from it.

servelab renders an InferenceX job's launch from its shipped launch profile (engines/profiles.py), captured
from the scripts of one upstream commit. When the sweep reads a checkout that holds upstream's benchmark
scripts (`--dir CHECKOUT/configs`, or ./configs), each single-node job's script is picked as InferenceX's
launchers pick it (capture/sandbox.py `script_for`) and compared, by sha256, with the script its profile was
captured from. The same script: the shipped profile, as always. Another one (edited, replaced by a
framework-tagged name, or a script for a key servelab has no profile for): the script is run for that job
under bash with stub servers (capture/), and the job's launch is the adapter's rendering plus what the script
added (capture/extras.py), with `launch-source: checkout <sha256>`. Captures are cached by script hash
(capture/cache.py), so a second sweep runs no bash.

A changed script that cannot be run for a job (it is gone from the checkout, it launches no server under the
stubs, it runs out of time, what it launches cannot be rendered) leaves the job on its shipped profile, with
`launch-derive-failed` saying why, and one warning per script.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from servelab.errors import ServelabError
from servelab.recipes.capture.cache import CaptureCache, digest, job_key
from servelab.recipes.capture.extras import launch_extras
from servelab.recipes.capture.sandbox import (
    AGENTIC_BASE_ENV,
    BASE_ENV,
    INERT_COMMANDS,
    SERVER_COMMANDS,
    SERVER_MODULES,
    SIDE_SERVICES,
    TEMPLATES,
    CaptureError,
    Sandbox,
    agentic_job_env,
    job_env,
    script_for,
    scripts_in,
    stub_sources,
)
from servelab.recipes.engines import engine_name
from servelab.recipes.engines.profiles import AGENTIC, Extras, profile_for, profiles_source, script_sha256

SHIPPED = "shipped profile"
ADAPTER = "servelab adapter (no launch profile)"


@dataclass(frozen=True)
class LaunchOrigin:
    """Where a job's launch comes from, when the checkout's script is not the one its flags were captured
    from. `extras`: what the checkout's script adds (None: it could not be derived, `failed` says why)."""

    script: str
    extras: Extras | None = None
    sha256: str | None = None
    failed: str | None = None
    fallback: str = SHIPPED
    change: dict | None = None

    @property
    def source(self) -> str:
        return f"checkout {self.sha256}" if self.extras is not None else self.fallback


def row_env(recipe, arm, row) -> dict[str, str]:
    """The environment InferenceX gives the launch script of a sweep job (`row`, a single-node MatrixRow)."""
    layout = {
        "model": recipe.model,
        "model_prefix": recipe.model_prefix,
        "precision": recipe.precision,
        "framework": recipe.framework,
        "image": recipe.image,
        "tp": arm.tp_,
        "pp": arm.pp_,
        "dcp": arm.dcp_size,
        "pcp": arm.pcp_size,
        "ep": arm.ep_,
        "dp_attn": arm.dp_attn_,
        "conc": row.conc,
        "spec": arm.spec_,
        "exp_name": row.exp_name,
    }
    if row.scenario_type == AGENTIC:  # no lengths; the KV offload settings
        return agentic_job_env(
            kv_offloading=row.kv_offloading or "none",
            kv_offload_backend=row.kv_offload_backend,
            total_cpu_dram_gb=row.total_cpu_dram_gb or 0,
            duration=row.duration or 0,
            **layout,
        )
    return job_env(isl=row.isl, osl=row.osl, max_model_len=row.max_model_len, **layout)


class CheckoutScripts:
    """The launch scripts of an InferenceX checkout's benchmarks/ directory, for one sweep: which jobs their
    launch is derived for, the captures (cached), and one warning or note per script."""

    def __init__(self, benchmarks: Path, cache: CaptureCache | None = None):
        self.benchmarks = Path(benchmarks)
        self.available = scripts_in(self.benchmarks)
        self.cache = cache or CaptureCache()
        self.warnings: dict[str, str] = {}
        self.notes: dict[str, str] = {}
        self._sha: dict[str, str] = {}
        self._runs: dict[str, dict[str, dict]] = {}
        self._context: str | None = None
        self._sandbox: Sandbox | None = None
        self._timed_out: dict[str, dict] = {}  # a script that ran out of time once is not run again

    def sha(self, script: str) -> str:
        if script not in self._sha:
            self._sha[script] = script_sha256((self.benchmarks / script).read_bytes())
        return self._sha[script]

    def origin(self, recipe, arm, row) -> LaunchOrigin | None:
        """How the job's launch follows the checkout: None when its script is the one the shipped profile was
        captured from (or the checkout has no script for it and servelab no profile)."""
        scenario = row.scenario_type
        profile = profile_for(recipe, arm, engine_name(recipe.framework), scenario)
        script = script_for(recipe, arm.spec_, self.available, scenario)
        change = None
        if profile is not None:
            if profile.script_sha256 is None:
                return None
            if script == profile.script and self.sha(script) == profile.script_sha256:
                return None
            change = {
                "script": f"benchmarks/{script or profile.script}",
                "captured-sha256": profile.script_sha256,
                "checkout-sha256": self.sha(script) if script else None,
            }
            if script is None:
                return self.failed(LaunchOrigin(profile.script, change=change), "not in the checkout")
        elif script is None:
            return None
        fallback = SHIPPED if profile is not None else ADAPTER
        origin = LaunchOrigin(script, sha256=self.sha(script), fallback=fallback, change=change)
        record = self._capture(script, recipe, arm, row)
        if "argv" not in record:
            why = "; ".join(record.get("refused") or []) or "it launched no server"
            return self.failed(origin, f"under servelab's stub servers it launched no server: {why}")
        try:
            extras = launch_extras(record, recipe, arm, row.max_model_len)  # None: an agentic job
        except (ServelabError, ValidationError, KeyError, ValueError) as e:
            return self.failed(origin, f"what it launched cannot be read: {e}")
        self.notes.setdefault(script, self._note(script, profile is not None))
        return LaunchOrigin(script, extras, origin.sha256, fallback=fallback, change=change)

    def failed(self, origin: LaunchOrigin, reason: str) -> LaunchOrigin:
        """`origin` left on its fallback launch because of `reason`, warned about once per script."""
        path = self.benchmarks / origin.script
        keeps = (
            f"the flags captured from {profiles_source()}, which may be stale"
            if origin.fallback == SHIPPED
            else "servelab's adapter flags alone, without what the script adds (an agentic job: no launch)"
        )
        self.warnings.setdefault(
            origin.script,
            f"{path}: servelab could not derive its jobs' launch from it ({reason}); they keep {keeps} "
            "(launch-derive-failed in each job)",
        )
        return LaunchOrigin(
            origin.script, None, origin.sha256, reason, fallback=origin.fallback, change=origin.change
        )

    def _note(self, script: str, profiled: bool) -> str:
        why = (
            f"differs from the script servelab's launch flags for it were captured from ({profiles_source()})"
            if profiled
            else "has no launch profile in servelab"
        )
        return f"{self.benchmarks / script} {why}: its jobs' launches are derived from it (launch-source)"

    def _capture(self, script: str, recipe, arm, row) -> dict:
        """What the script launches for this job: from the cache, else run in the sandbox (and cached)."""
        env = row_env(recipe, arm, row)
        key, sha = job_key(env), self.sha(script)
        runs = self._runs.get(script)
        if runs is None:
            runs = self._runs[script] = self.cache.load(sha, self.context)
        if key in runs:
            return runs[key]
        if script in self._timed_out:
            return self._timed_out[script]
        try:
            record = self._box().run(script, env)
        except CaptureError as e:
            return {"refused": [str(e)]}  # this machine's, not the script's: not cached
        except (OSError, UnicodeDecodeError) as e:
            return {"refused": [f"cannot be read: {e}"]}
        if record.get("timeout"):
            self._timed_out[script] = record
        else:
            runs[key] = record
            self.cache.save(sha, self.context, script, {key: record})
        return record

    @property
    def context(self) -> str:
        """What a capture depends on besides the script: servelab's stubs and sandbox, the chat templates."""
        if self._context is None:
            parts = [data for _, data in sorted(stub_sources().items())]
            setup = (
                BASE_ENV,
                AGENTIC_BASE_ENV,
                SERVER_COMMANDS,
                SERVER_MODULES,
                INERT_COMMANDS,
                SIDE_SERVICES,
            )
            parts.append(repr(setup).encode())
            templates = self.benchmarks / TEMPLATES
            for p in sorted(templates.rglob("*")) if templates.is_dir() else []:
                if p.is_file():
                    parts += [p.relative_to(templates).as_posix().encode(), p.read_bytes()]
            self._context = digest(*parts)
        return self._context

    def _box(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = Sandbox(self.benchmarks).__enter__()
        return self._sandbox

    def close(self) -> None:
        """Remove the sandbox (the captures stay in the cache)."""
        if self._sandbox is not None:
            self._sandbox.__exit__(None, None, None)
            self._sandbox = None
