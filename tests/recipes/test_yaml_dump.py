"""Writing YAML: libyaml's emitter where it writes PyYAML's Python emitter's bytes, the Python one elsewhere,
so `dump_yaml`, `safe_dump` and `safe_dump_all` give the text they always gave for any data."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.recipes import yamlio

# Strings libyaml writes otherwise than Python (past ASCII, multi-line, long, empty) mixed with plain ones
texts = st.one_of(
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40),
    st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=60, max_size=300),
    st.sampled_from(["", "yes", "null", "~", "1e3", "- x", "a: b", "#x", "'", '"', "a\nb", "é", "x" * 150]),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), texts)
keys = st.one_of(texts, st.integers(), st.booleans())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=30,
)


def python_dump_yaml(data) -> str:
    return yaml.dump(
        data, Dumper=yamlio._Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1000
    )


@settings(max_examples=150, deadline=None)
@given(values)
def test_the_text_is_the_python_emitters(data):
    assert yamlio.dump_yaml(data) == python_dump_yaml(data)
    assert yamlio.safe_dump(data) == yaml.safe_dump(data)


@settings(max_examples=80, deadline=None)
@given(st.lists(values, max_size=4))
def test_documents_are_the_python_emitters(documents):
    assert yamlio.safe_dump_all(documents) == yaml.safe_dump_all(documents, sort_keys=False)


@pytest.mark.skipif(yamlio.CSafeDumper is None, reason="this PyYAML was built without libyaml")
def test_a_launchs_options_are_written_by_libyaml():
    """Not every case falls back: the TensorRT-LLM and srt-slurm files of a sweep are what it is for."""
    options = {"max_batch_size": 256, "kv_cache_config": {"free_gpu_memory_fraction": 0.8}, "tp": [1, 2]}
    assert yamlio._dumper(yamlio._SAFE, options) is yamlio.CSafeDumper
    assert yamlio._dumper(yamlio._SERVELAB, options) is not yamlio._Dumper
    for outside in ({"k": "é"}, {"k": "a\nb"}, {"k": ""}, {"k" * 100: 1}):
        assert yamlio._dumper(yamlio._SAFE, outside) is yaml.SafeDumper
    shared = {"a": 1}
    assert yamlio._dumper(yamlio._SAFE, {"x": shared, "y": shared}) is yaml.SafeDumper  # anchored by PyYAML
    assert yamlio._dumper(yamlio._SAFE, "a lone scalar") is yaml.SafeDumper
