"""Where the residual rows behind a prediction band lie (predict/bands.py), and whether a prediction lies
among them: the system they were measured on, the model families, and the range of their concurrency and
nominal prompt and output lengths. A band claims its coverage only for a prediction among its rows; outside
them (another GPU, a family the engine's rows lack, a load or a length beyond theirs), the closed-loop
development points showed the bands holding far less than they claimed (docs/accuracy.md section 7, "Bands
per engine, and out of distribution")."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from servelab.specs.families import family_of

SPANS = ("concurrency", "isl", "osl")  # a prediction's numbers that must lie within the rows' range


class Placed(Protocol):
    """A residual row, as far as its place goes."""

    @property
    def system(self) -> str: ...
    @property
    def family(self) -> str: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def isl(self) -> int: ...
    @property
    def osl(self) -> int: ...


@dataclass(frozen=True)
class Asked:
    """What a prediction is of, to place it against the residual rows: the system, the model's family, the
    concurrency per replica and the nominal prompt and output lengths."""

    system: str
    family: str
    concurrency: int
    isl: int
    osl: int

    @classmethod
    def of(cls, model: str, system: str, concurrency: int, isl: int, osl: int) -> "Asked":
        return cls(system, family_of(model), concurrency, isl, osl)


@dataclass(frozen=True)
class Domain:
    """Where the residual rows behind a band lie: a prediction outside them is of something they did not
    measure, and its band claims nothing."""

    systems: tuple[str, ...]
    families: tuple[str, ...]
    concurrency: tuple[int, int]
    isl: tuple[int, int]
    osl: tuple[int, int]

    @classmethod
    def of(cls, rows: Sequence[Placed]) -> "Domain":
        def span(name: str) -> tuple[int, int]:
            values = [getattr(r, name) for r in rows]
            return min(values), max(values)

        return cls(
            tuple(sorted({r.system for r in rows})),
            tuple(sorted({r.family for r in rows})),
            span("concurrency"),
            span("isl"),
            span("osl"),
        )

    def outside(self, asked: Asked) -> list[str]:
        """Why a prediction lies outside the rows (none: inside)."""
        why = []
        if asked.system not in self.systems:
            why.append(f"system {asked.system}, the rows' {', '.join(self.systems)}")
        if asked.family not in self.families:
            why.append(f"model family {asked.family}, the rows' {', '.join(self.families)}")
        for name in SPANS:
            value, (low, high) = getattr(asked, name), getattr(self, name)
            if not low <= value <= high:
                why.append(f"{name} {value}, the rows' {low}-{high}")
        return why

    def as_dict(self) -> dict:
        return {"systems": list(self.systems), "families": list(self.families)} | {
            name: list(getattr(self, name)) for name in SPANS
        }
