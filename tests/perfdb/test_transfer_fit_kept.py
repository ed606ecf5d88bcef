"""A PerfDB keeps the transfer fit of each source system and family it carried answers with: what it kept is
what reading the source's transfer file gives, and keys carried afterwards are priced as a fresh PerfDB
prices them."""

from servelab.perfdb import keys
from servelab.perfdb.db import PerfDB, TableStack
from servelab.perfdb.transfer import read_transfer
from servelab.specs import load_system


def test_kept_fits_are_the_transfer_files_and_change_no_answer():
    b200 = load_system("b200_sxm")
    asked = [keys.Gemm(m, n, 7168) for m in (1, 33, 512, 4000) for n in (1536, 4608, 24576)]
    asked += [keys.AttentionDecode(b, 4096 + b, 64, 8, 128) for b in (1, 17, 128)]
    db = PerfDB(b200)
    first = [db.query(k) for k in asked]
    assert db._fits, "nothing was carried from another system: the test asks the wrong keys"
    for (source_name, family), fit in db._fits.items():
        source = next(s for s in db._transfer_sources() if s.system.name == source_name)
        root = next(
            (t.root for t in (source.tables, source.torch_tables) if isinstance(t, TableStack) and t.root),
            None,
        )
        assert root is not None
        assert fit == read_transfer(root / "transfer.json").find(source_name, b200.name, db.backend, family)
    # a second PerfDB, asked in the reverse order (its fits kept in another order), answers the same
    other = PerfDB(b200)
    assert [other.query(k) for k in reversed(asked)][::-1] == first
