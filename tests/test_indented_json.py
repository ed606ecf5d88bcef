"""servelab.indented_json writes json.dumps(value, indent=2)'s bytes, or its error, for any value."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.indented_json import dumps_indented

# What the C encoder is handed in place of a nested container: data holding its text must still come out right
PLACEHOLDER = "\x00servelab-nested\x00"
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and the infinities included
    st.text(),
    st.sampled_from([PLACEHOLDER, '"' + PLACEHOLDER, "", "[", "{}", "\n", "é", "\U0001f600"]),
)
keys = st.one_of(st.text(), st.integers(), st.floats(), st.booleans(), st.none(), st.just(PLACEHOLDER))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(keys, inner, max_size=5),
    ),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(values)
def test_the_same_text_as_the_standard_encoder(value):
    assert dumps_indented(value) == json.dumps(value, indent=2)


def test_a_sweep_shaped_value_is_written_alike():
    job = {
        "config-key": "dsr1-fp8-h200-vllm",
        "conc": 64,
        "spec": None,
        "ratio": 0.8,
        "launch": {"argv": ["vllm", "serve", "m"], "env": {}, "files": {"a.yaml": "x: 1\n"}},
        "benches": [{"max_concurrency": 4, "tags": []}, {"max_concurrency": 8, "tags": ["a"]}],
        "agents": {"queue": "q"},
    }
    assert dumps_indented([job, job, [], {}]) == json.dumps([job, job, [], {}], indent=2)


def test_deeper_than_its_encoders_is_still_the_standard_text():
    value: list = []
    for _ in range(100):
        value = [value, 1]
    assert dumps_indented(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize(
    "value",
    [{"a": [1, object()]}, {(1, 2): 3}, [{"k": {1, 2}}]],
    ids=["an-object", "a-tuple-key", "a-set"],
)
def test_what_the_standard_encoder_refuses_is_refused_alike(value):
    with pytest.raises(TypeError) as expected:
        json.dumps(value, indent=2)
    with pytest.raises(TypeError) as got:
        dumps_indented(value)
    assert str(got.value) == str(expected.value)


def test_a_cycle_is_refused_alike():
    value: list = [1]
    value.append({"again": value})
    with pytest.raises(ValueError, match="Circular reference detected"):
        dumps_indented(value)
