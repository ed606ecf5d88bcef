"""servelab.lazy_numpy: numpy imported on the first attribute read, then read as numpy's own namespace."""

import subprocess
import sys

LAZY = """
import sys
from servelab.lazy_numpy import np
before = "numpy" in sys.modules
zeros = np.zeros(3)
import numpy
print(before, type(zeros) is numpy.ndarray, np.random.default_rng is numpy.random.default_rng,
      "zeros" in vars(np), np.pi == numpy.pi)
"""


def test_numpy_is_imported_on_first_use_only():
    out = subprocess.run([sys.executable, "-c", LAZY], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True", "True", "True", "True"]
