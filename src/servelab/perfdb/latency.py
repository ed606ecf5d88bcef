"""OpLatency: one op's predicted time with its error band and where it came from."""

from typing import NamedTuple

# where an op's time came from, best evidence first: a table row, between rows, beyond rows, a torch row times
# a fitted torch-to-engine ratio, another system's answer carried over (perfdb.transfer), the roofline
SOURCES = ("measured", "interpolated", "extrapolated", "calibrated", "transferred", "roofline")


class OpLatency(NamedTuple):
    us: float
    low_us: float
    high_us: float
    source: str  # one of SOURCES
    note: str = ""  # e.g. the table it came from, or a fallback from another model's bucket

    def scaled(self, factor: float) -> "OpLatency":
        return OpLatency(
            self.us * factor, self.low_us * factor, self.high_us * factor, self.source, self.note
        )
