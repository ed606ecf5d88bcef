"""The calibration document (`calibration_format` 2) as a model: what `servelab calibrate engines` writes
(predict/data/calibrated.json is the shipped one) and reads back.

The file is `json.dumps(document.dump(), indent=1)` plus a newline: the fields below are its keys in their
order, so the same fit writes the same bytes as when the document was a nested dict. Optional parts are left
out, not written as null, where the dict left them out (an engine's proposed terms, its parameter set);
`aiconfigurator_same_rows` is null when AIConfigurator was not asked.

predict/engines.py reads the part it prices with (`engines.*.params`) through its own lenient model;
this one is the whole document, for the tools that read what a calibration measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.userfiles import check_regular

FORMAT = 2  # 1: the first shipped file (a single `source`, no `calibration_format` key)


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ErrorSummary(_Part):
    """Relative errors |pred / measured - 1| of a set of rows (none: n 0, no median)."""

    n: int
    median: float | None
    p90: float | None


class Errors(_Part):
    ttft: ErrorSummary
    tpot: ErrorSummary


class FamilyErrors(Errors):
    """A model family's errors with the family left out of the fit, and the rows the fit saw."""

    trained_on: int


class SourceRecord(_Part):
    """One source of measured rows: what it is, its hash, and what of it was used."""

    kind: str
    path: str
    sha256: str
    rows_read: int
    rows_used: int
    rows_skipped: dict[str, int]
    inferencex_runs: dict[str, int] = Field(description="rows used by their tie to an InferenceX run")


class Settings(_Part):
    system: str
    mode: str
    tables: str
    prompts_per_concurrency: int
    length_spread: float
    # silicon rows without a recipe replayed as their client sent them (calibrate.clients); older files: no
    as_sent: bool = False
    aic_mixed_chunk: bool = False
    loss: str
    cross_validation: str

    @model_serializer(mode="wrap")
    def _replay_only_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The replay's switches are written only when on, so a file made without them (every file before
        them) writes back byte for byte."""
        out = handler(self)
        for name in ("as_sent", "aic_mixed_chunk"):
            if not out.get(name):
                out.pop(name, None)
        return out


class Provenance(_Part):
    """Who made the calibration, from what, and how."""

    servelab_version: str
    git_sha: str | None
    servelab_state: str
    date: str
    command: str
    sources: list[SourceRecord]
    settings: Settings

    def line(self, rows: int) -> str:
        """One line for figures priced with this calibration to cite."""
        kinds = ", ".join(f"{s.kind} ({s.rows_used} rows, sha256 {s.sha256[:12]})" for s in self.sources)
        return (
            f"{self.servelab_state}; {self.command} fit on {rows} {self.settings.system} rows of "
            f"{kinds}, {self.date[:10]}"
        )


class RecipeCounts(_Part):
    """An engine's rows replayed with their InferenceX recipe's settings, and those at the defaults."""

    with_recipe: int = 0
    engine_defaults: int = 0


class EngineFit(_Part):
    """An engine's fitted parameters (the terms EngineProfile lacks apart), the parameter set they are with
    every set's cross-validated score, and the rows and model families they were fitted on."""

    params: dict[str, float]
    proposed_terms: dict[str, float] | None = None
    param_set: str | None = None
    set_scores: dict[str, float] | None = None
    rows: int
    families: list[str]
    models: list[str]

    @model_serializer(mode="wrap")
    def _leave_out_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        return {k: v for k, v in out.items() if v is not None or k not in _OPTIONAL_FIT}


_OPTIONAL_FIT = frozenset({"proposed_terms", "param_set", "set_scores"})


class Verdict(_Part):
    """Whether an engine's fit was kept: its chosen set's cross-validated score against the defaults'."""

    defaults_score: float
    param_set: str
    cv_score: float
    set_scores: dict[str, float]
    kept: bool


class AicComparison(_Part):
    """AIConfigurator's errors next to servelab's cross-validated ones, on the rows it answered."""

    answered: int
    how: dict[str, int]
    failures: dict[str, int]
    aiconfigurator: Errors
    servelab_cv: Errors


class DefaultsVsWritten(_Part):
    """Errors per engine and engine/family: at the documented defaults, and as the file prices them."""

    defaults: dict[str, Errors]
    as_written: dict[str, Errors] = Field(alias="as written")


class CalibrationDocument(_Part):
    calibration_format: int = FORMAT
    provenance_line: str = Field(alias="_provenance")
    provenance: Provenance
    rows_used: int
    rows_skipped: dict[str, int]
    recipe_settings: dict[Engine, RecipeCounts]
    errors: dict[str, Errors]
    cv_by_family: dict[str, FamilyErrors]
    param_sets: dict[str, list[str]]
    cv_by_family_by_set: dict[str, dict[str, FamilyErrors]]
    aiconfigurator_same_rows: AicComparison | None
    engines: dict[Engine, EngineFit] = Field(description="the fits kept (predict prices with these)")
    verdicts: dict[Engine, Verdict]
    defaults_vs_written: DefaultsVsWritten
    fitted_not_kept: dict[Engine, EngineFit]

    def dump(self) -> dict[str, Any]:
        """The document as its file holds it."""
        return self.model_dump(by_alias=True)

    def text(self) -> str:
        return json.dumps(self.dump(), indent=1) + "\n"

    def write(self, path: Path) -> None:
        path.write_text(self.text())

    @classmethod
    def read(cls, path: Path) -> CalibrationDocument:
        """A calibration file written by `servelab calibrate engines`; one line naming the file and the field
        otherwise."""
        where = f"calibration file {path}"
        check_regular(path, "calibration")  # a FIFO would be waited on forever
        try:
            data = json.loads(path.read_text())
        except OSError as e:
            raise ServelabError(f"{where}: cannot read ({e.strerror})", field="calibration") from None
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise ServelabError(f"{where}: not JSON ({e})", field="calibration") from None
        if isinstance(data, dict) and data.get("calibration_format") != FORMAT:
            raise ServelabError(
                f"{where}: calibration_format {data.get('calibration_format')}; this reads {FORMAT}",
                field="calibration",
            )
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ServelabError.from_validation(e, where) from None
