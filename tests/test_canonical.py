"""Canonical JSON is RFC 8785 (JCS) plus one final line feed: held byte for byte to the `rfc8785`
package (an independent implementation) over the documents repro seals and generated values,
to the RFC's own number vectors, and read back only in that form."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from repro_serving.builder.canonical import SAFE_INTEGER, canonical_json, parse_canonical
from repro_serving.builder.errors import BadInput

REPO = Path(__file__).resolve().parent.parent
SEALED_DOCUMENTS = sorted(
    path
    for bundle in ("tiny-cpu", "laguna-102tps")
    for path in (REPO / "repro" / bundle).rglob("*.json")
    if "/tools/" not in str(path)
)

# RFC 8785 appendix B: IEEE 754 doubles (hex) and how ECMAScript writes them.
NUMBER_VECTORS = {
    "0000000000000000": "0",
    "8000000000000000": "0",
    "0000000000000001": "5e-324",
    "8000000000000001": "-5e-324",
    "7fefffffffffffff": "1.7976931348623157e+308",
    "ffefffffffffffff": "-1.7976931348623157e+308",
    "4340000000000000": "9007199254740992",
    "c340000000000000": "-9007199254740992",
    "4430000000000000": "295147905179352830000",
    "44b52d02c7e14af5": "9.999999999999997e+22",
    "44b52d02c7e14af6": "1e+23",
    "44b52d02c7e14af7": "1.0000000000000001e+23",
    "444b1ae4d6e2ef4e": "999999999999999700000",
    "444b1ae4d6e2ef4f": "999999999999999900000",
    "444b1ae4d6e2ef50": "1e+21",
    "3eb0c6f7a0b5ed8c": "9.999999999999997e-7",
    "3eb0c6f7a0b5ed8d": "0.000001",
    "41b3de4355555553": "333333333.3333332",
    "41b3de4355555554": "333333333.33333325",
    "41b3de4355555555": "333333333.3333333",
    "41b3de4355555556": "333333333.3333334",
    "41b3de4355555557": "333333333.33333343",
    "becbf647612f3696": "-0.0000033333333333333333",
    "43143ff3c1cb0959": "1424953923781206.2",
}

KEYS = st.text(
    alphabet=st.characters(codec="utf-8") | st.sampled_from("\ue000\uffff\U0001f600\U00010000"),
    max_size=6,
)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-SAFE_INTEGER, max_value=SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8")),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=30,
)


def jcs(value: object) -> bytes:
    """The independent implementation's bytes, with repro's final line feed."""
    return rfc8785.dumps(value) + b"\n"  # type: ignore[arg-type]


@pytest.mark.parametrize("path", SEALED_DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_json_document_of_the_committed_bundles_is_written_as_rfc8785_writes_it(
    path: Path,
) -> None:
    value = json.loads(path.read_bytes())
    assert canonical_json(value) == jcs(value)


def test_the_committed_bundles_hold_floats_so_the_number_form_matters() -> None:
    def floats(value: object) -> int:
        if isinstance(value, float):
            return 1
        if isinstance(value, dict):
            return sum(floats(v) for v in value.values())
        if isinstance(value, list):
            return sum(floats(v) for v in value)
        return 0

    assert sum(floats(json.loads(p.read_bytes())) for p in SEALED_DOCUMENTS) > 0


@given(JSON_VALUES)
def test_any_json_value_is_written_as_rfc8785_writes_it_and_reads_back(value: object) -> None:
    data = canonical_json(value)
    assert data == jcs(value)
    assert parse_canonical(data, where="v") == value


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_any_double_is_written_as_rfc8785_writes_it(value: float) -> None:
    assert canonical_json(value) == jcs(value)


@pytest.mark.parametrize(("bits", "text"), NUMBER_VECTORS.items())
def test_the_rfcs_number_vectors(bits: str, text: str) -> None:
    (value,) = struct.unpack(">d", bytes.fromhex(bits))
    assert canonical_json(value) == f"{text}\n".encode()


def test_keys_sort_by_utf16_code_units_not_by_code_points() -> None:
    """U+1F600 is the surrogates D83D DE00 in UTF-16, before U+E000; by code point it is after."""
    value = {"\ue000": 1, "\U0001f600": 2, "a": 3}
    assert canonical_json(value) == '{"a":3,"\U0001f600":2,"\ue000":1}\n'.encode()


@pytest.mark.parametrize(
    ("value", "found"),
    [
        (SAFE_INTEGER + 1, f"an integer beyond +-{SAFE_INTEGER}: {SAFE_INTEGER + 1}"),
        ("\ud800", "a lone surrogate"),
        ({1: "a"}, "an object key of type int"),
    ],
    ids=["integer-beyond-doubles", "lone-surrogate", "integer-key"],
)
def test_what_rfc8785_cannot_write_is_refused_saying_what(value: object, found: str) -> None:
    with pytest.raises(BadInput) as refused:
        canonical_json(value)
    assert refused.value.what == "a document cannot be written as canonical JSON"
    assert refused.value.found == found


@pytest.mark.parametrize(
    "data",
    [b"1.0\n", b"1e2\n", b"-0\n", b"0.10\n", b"1E-7\n", b"9007199254740993\n", b'"\\ud800"\n'],
    ids=[
        "integral-float",
        "exponent",
        "negative-zero",
        "trailing-zero",
        "upper-e",
        "inexact",
        "surrogate",
    ],
)
def test_reading_refuses_any_other_spelling_of_a_value(data: bytes) -> None:
    with pytest.raises(BadInput) as refused:
        parse_canonical(data, where="lock.json")
    assert (refused.value.what, refused.value.where) == (
        "a JSON document is not in canonical form",
        "lock.json",
    )


def test_an_integer_literal_beyond_the_doubles_reads_as_the_double_it_is() -> None:
    assert parse_canonical(b"9007199254740992\n", where="v") == 2.0**53
    assert isinstance(parse_canonical(b"[295147905179352830000]\n", where="v")[0], float)
