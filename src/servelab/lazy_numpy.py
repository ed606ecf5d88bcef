"""numpy, imported when first used: `from servelab.lazy_numpy import np` (under `if not TYPE_CHECKING`, with
`import numpy as np` for the type checker) gives a module whose first attribute read imports numpy and copies
its namespace in, so that every later read is a plain module lookup, as fast as numpy's own.

Why: importing numpy costs a fresh process about 0.13 s of CPU, and a `servelab plan` whose prices and
simulations were kept by an earlier process (servelab.perfdb.price_cache, servelab.predict.serving.kept)
calls none of it: a quarter of that plan's time went to the import. The modules on a plan's import path that
use numpy only to read tables, fit ratios or draw random numbers take it from here."""

import importlib
from types import ModuleType
from typing import Any


class _Lazy(ModuleType):
    def __getattr__(self, name: str) -> Any:  # only names not yet in this module's namespace come here
        real = importlib.import_module("numpy")
        self.__dict__.update(vars(real))
        return getattr(real, name)  # a submodule numpy makes on demand (numpy.random) too


np = _Lazy("numpy")
