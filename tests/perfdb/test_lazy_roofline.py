"""A table set makes its roofline answer (and the note saying why no row held the key) only when a caller
takes it: lookups that discard rooflines (another system's tables carried over, kernel tables, the torch
tables scaled) ask with `roofline` off. The answers a caller takes are the same, whichever order they are
asked in."""

from servelab.perfdb import keys
from servelab.perfdb.db import PerfDB, TableStack
from servelab.perfdb.tables import load_tables
from servelab.specs import load_system

UNCOLLECTED = keys.Gemm(1000, 6144, 4096)  # an (n, k) the synthetic tables never collected: borrowed
NO_FAMILY_ROWS = keys.Comm(1 << 20, 3)  # no comm rows at 3 GPUs


def test_roofline_off_gives_none_where_the_roofline_would_answer(table_dir, h200):
    tables = load_tables(table_dir, h200)
    assert tables.lookup(UNCOLLECTED, borrow=False, roofline=False) is None
    assert tables.lookup(NO_FAMILY_ROWS, roofline=False) is None
    # a table answer is an answer either way
    measured = keys.Gemm(512, 4096, 4096)
    assert tables.lookup(measured, roofline=False) == tables.lookup(measured)
    assert tables.lookup(UNCOLLECTED, roofline=False).source == "interpolated"  # borrowed, allowed


def test_a_roofline_asked_for_later_is_the_one_made_at_once(table_dir, h200):
    lazy, eager = load_tables(table_dir, h200), load_tables(table_dir, h200)
    for key, borrow in ((UNCOLLECTED, False), (NO_FAMILY_ROWS, True)):
        assert lazy.lookup(key, borrow=borrow, roofline=False) is None
        later = lazy.lookup(key, borrow=borrow)
        at_once = eager.lookup(key, borrow=borrow)
        assert later.source == "roofline" and later == at_once
        assert "rows" in later.note  # the reason no row answered


def test_a_stack_keeps_the_first_sets_roofline_and_skips_the_rest(table_dir, h200):
    stack = TableStack([load_tables(table_dir, h200), load_tables(table_dir, h200)])
    found = stack.lookup(NO_FAMILY_ROWS)
    assert found.source == "roofline" and found == load_tables(table_dir, h200).lookup(NO_FAMILY_ROWS)
    assert stack.lookup(NO_FAMILY_ROWS, roofline=False) in (None, found)
    fresh = TableStack([load_tables(table_dir, h200)])
    assert fresh.lookup(NO_FAMILY_ROWS, roofline=False) is None


def test_the_default_tables_answer_as_before_whichever_key_comes_first():
    """Keys whose answers are carried from the H100, scaled from torch, or the roofline: a PerfDB asked them
    in one order answers each as one asked in the other order (memos filled with deferred rooflines or
    not)."""
    asked = [
        keys.Gemm(1001, 7168, 2048, "fp8_block"),
        keys.Moe(1001, 7168, 2048, 256, 8, 8, "fp8_block"),
        keys.Memory(1001 * 7168 * 4),
        keys.Comm(1 << 20, 8),
        keys.MlaDecode(8, 4096, 16, 128, "fp8"),
    ]
    system = load_system("h200_sxm")
    one, other = PerfDB(system, backend="vllm"), PerfDB(system, backend="vllm")
    first = [one.query(k) for k in asked]
    second = [other.query(k) for k in reversed(asked)][::-1]
    assert first == second
    assert {a.source for a in first} >= {"transferred", "roofline"}
