"""Settings for the whole test session."""

import pytest

from servelab.cachedir import ENV_DIR


@pytest.fixture(scope="session", autouse=True)
def table_cache_of_the_session(tmp_path_factory):
    """Read tables are cached in the session's temporary directory, not the user's cache (the variable is
    inherited by the CLI processes tests start)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_DIR, str(tmp_path_factory.mktemp("servelab-cache")))
        yield
