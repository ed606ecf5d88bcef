"""AIConfigurator's sample is installed into its own venv on first use; where that cannot happen (no network,
a broken venv) the answer is one line that says how to go on without it, never a pip traceback."""

import pytest

from servelab.calibrate import aic
from servelab.errors import ServelabError


def test_failed_install_is_one_line_naming_the_way_out(tmp_path):
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(
        "#!/bin/sh\necho 'ERROR: No matching distribution found (network unreachable)' >&2\nexit 1\n"
    )
    python.chmod(0o755)
    with pytest.raises(ServelabError) as err:
        aic.aic_csv(tmp_path / "venv")
    message = str(err.value)
    assert "\n" not in message
    assert "could not be installed" in message and "network unreachable" in message and "--csv" in message
