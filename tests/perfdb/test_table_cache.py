"""The cache of read perf tables: the same TableData as the strict reader gives, never a stale one, and
tables read as before where there is no cache."""

import shutil

import numpy as np
import pytest

from servelab import cachedir
from servelab.errors import ServelabError
from servelab.perfdb import table_cache
from servelab.perfdb.table_files import read_table
from servelab.perfdb.tables import data_root

SHIPPED = data_root() / "h200_sxm" / "torch" / "2.11.0"


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    where = tmp_path / "cache"
    monkeypatch.setenv(cachedir.ENV_DIR, str(where))
    return where / "tables"


def refuse_reads(monkeypatch):
    """Make the strict reader fail: what is read next must come from the cache."""

    def fail(path):
        raise AssertionError(f"{path} read from its file")

    monkeypatch.setattr(table_cache, "read_table", fail)


def assert_same(a, b):
    assert a.family is b.family and a.path == b.path
    for name in ("latency_us", "p10_us", "p90_us", "reps", "campaign"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert list(a.cols) == list(b.cols)
    for f in a.cols:
        assert a.cols[f].dtype == b.cols[f].dtype and np.array_equal(a.cols[f], b.cols[f]), f
    assert a.meta == b.meta and a.extra == b.extra
    assert (a.measured is None) == (b.measured is None)
    if a.measured is not None:
        assert a.measured.dtype == b.measured.dtype and np.array_equal(a.measured, b.measured)


@pytest.mark.parametrize("name", ["gemm", "comm", "moe"])  # comm carries the optional `measured` column
def test_a_table_read_again_comes_from_the_cache_unchanged(cache, tmp_path, monkeypatch, name):
    path = tmp_path / "t" / f"{name}.parquet"
    path.parent.mkdir()
    shutil.copy(SHIPPED / f"{name}.parquet", path)
    first = table_cache.cached_read(path)
    assert_same(first, read_table(path))
    assert len(list(cache.glob("*.npz"))) == 1
    refuse_reads(monkeypatch)
    assert_same(table_cache.cached_read(path), first)


def test_a_changed_table_is_read_anew(cache, tmp_path, monkeypatch):
    path = tmp_path / "gemm.parquet"
    shutil.copy(SHIPPED / "gemm.parquet", path)
    table_cache.cached_read(path)
    shutil.copy(data_root() / "h100_sxm" / "torch" / "2.11.0" / "gemm.parquet", path)  # same name
    got = table_cache.cached_read(path)
    assert_same(got, read_table(path))
    assert len(list(cache.glob("*.npz"))) == 2


def test_the_same_bytes_under_another_family_name_are_refused_as_the_reader_refuses_them(cache, tmp_path):
    shutil.copy(SHIPPED / "gemm.parquet", tmp_path / "gemm.parquet")
    table_cache.cached_read(tmp_path / "gemm.parquet")
    shutil.copy(SHIPPED / "gemm.parquet", tmp_path / "moe.parquet")
    with pytest.raises(ServelabError, match="family"):
        table_cache.cached_read(tmp_path / "moe.parquet")


def test_an_unreadable_cache_entry_is_replaced_from_the_table(cache, tmp_path):
    path = tmp_path / "gemm.parquet"
    shutil.copy(SHIPPED / "gemm.parquet", path)
    table_cache.cached_read(path)
    (entry,) = cache.glob("*.npz")
    entry.write_bytes(b"not a zip file")
    assert_same(table_cache.cached_read(path), read_table(path))
    assert entry.read_bytes().startswith(b"PK")  # written again, a zip file


def test_without_a_cache_dir_setting_the_tables_go_under_the_users_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cachedir.ENV_DIR, "")  # empty: as if unset
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = tmp_path / "gemm.parquet"
    shutil.copy(SHIPPED / "gemm.parquet", path)
    assert_same(table_cache.cached_read(path), read_table(path))
    assert len(list((tmp_path / "xdg" / "servelab" / "tables").glob("*.npz"))) == 1


def test_a_cache_dir_that_cannot_be_written_leaves_tables_read_from_their_files(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(cachedir.ENV_DIR, str(blocker / "below"))  # a directory under a file
    path = tmp_path / "gemm.parquet"
    shutil.copy(SHIPPED / "gemm.parquet", path)
    assert_same(table_cache.cached_read(path), read_table(path))
