"""The IR JSON reader fuzzed: whatever the text holds, from_json returns a Function or raises one
of our typed errors (SerializationError), never another exception."""
import json

from hypothesis import example, given, settings
from hypothesis import strategies as st

from paddle_ngraph.errors import SerializationError
from paddle_ngraph.ir import Function, from_json, to_json

from test_function import small_function

VALID = to_json(small_function())
DOC = json.loads(VALID)
json_values = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=True) |
                           st.text(max_size=6), lambda inner: st.lists(inner, max_size=3) |
                           st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=5)


def read(text):
    try:
        assert isinstance(from_json(text), Function)
    except SerializationError:
        pass


def paths(value, prefix=()):
    """Every place in a JSON document: (path of keys and indices)."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, prefix + (i,))


PATHS = list(paths(DOC))[1:]


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_random_text(text):
    read(text)


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(0, len(VALID)), flip=st.integers(0, len(VALID)), char=st.characters())
def test_truncated_and_corrupted_documents(cut, flip, char):
    text = VALID[:cut]
    if text:
        i = flip % len(text)
        text = text[:i] + char + text[i + 1:]
    read(text)


@settings(max_examples=300, deadline=None)
@given(where=st.sampled_from(PATHS), value=json_values, delete=st.booleans())
@example(where=("nodes", 2, "outputs", 0, "shape", 0), value=float("inf"), delete=False)  # found in CI: int(inf)
def test_any_field_replaced_or_removed(where, value, delete):
    doc = json.loads(VALID)
    parent = doc
    for key in where[:-1]:
        parent = parent[key]
    if delete:
        del parent[where[-1]]
    else:
        parent[where[-1]] = value
    read(json.dumps(doc))
