"""The byte forms a bundle is made of: canonical JSON, SHA256SUMS, and the path rule."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from conftest import REPO_ROOT
from hypothesis import given
from hypothesis import strategies as st

from repro_serving.builder.build import evidence_files
from repro_serving.builder.canonical import (
    SAFE_INTEGER,
    canonical_json,
    parse_canonical,
    parse_json,
)
from repro_serving.builder.documents.bundle import OpenedBundle
from repro_serving.builder.errors import BadInput
from repro_serving.builder.sealing.bundle import (
    EVIDENCE_DIR,
    parse_sha256sums,
    path_problem,
    render_sha256sums,
)

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-SAFE_INTEGER, max_value=SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


def test_canonical_json_sorts_keys_writes_no_whitespace_and_ends_with_one_lf() -> None:
    value = {"b": [1, 2.5, None], "a": {"é": "température"}, "A": True}
    assert canonical_json(value) == (
        '{"A":true,"a":{"é":"température"},"b":[1,2.5,null]}\n'.encode()
    )


def test_canonical_json_keeps_the_mandatory_escapes_only() -> None:
    assert canonical_json(['"\\\n\t\x00', "\u2028"]) == b'["\\"\\\\\\n\\t\\u0000","\xe2\x80\xa8"]\n'


@given(JSON_VALUES)
def test_canonical_json_reads_back_as_the_same_value(value: object) -> None:
    assert parse_canonical(canonical_json(value), where="v") == value


def test_json_has_no_word_for_nan() -> None:
    with pytest.raises(BadInput, match=r"^a document cannot be written as canonical JSON$"):
        canonical_json({"rate": math.nan})


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b'{"a":1,"a":2}\n', "a JSON document does not parse"),
        (b'{"a": 1}\n', "a JSON document is not in canonical form"),
        (b'{"b":1,"a":2}\n', "a JSON document is not in canonical form"),
        (b'{"a":1}', "a JSON document is not in canonical form"),
        (b'{"a":"\\u00e9"}\n', "a JSON document is not in canonical form"),
        (b'{"a":"\xff"}\n', "a JSON document is not UTF-8"),
    ],
    ids=["duplicate-key", "space", "unsorted", "no-final-lf", "escaped-non-ascii", "not-utf8"],
)
def test_reading_refuses_what_writing_never_produces(data: bytes, what: str) -> None:
    with pytest.raises(BadInput) as refused:
        parse_canonical(data, where="lock.json")
    assert (refused.value.what, refused.value.where) == (what, "lock.json")


def test_a_duplicate_key_is_named() -> None:
    with pytest.raises(BadInput) as refused:
        parse_json(b'{"a":1,"a":2}', where="x")
    assert refused.value.found == "duplicate key 'a'"


def test_sha256sums_is_one_line_per_path_sorted_with_two_spaces() -> None:
    digests = {"oracle/b": "b" * 64, "SHA": "c" * 64, "evidence/a": "a" * 64}
    text = render_sha256sums(digests)
    assert text == (f"{'c' * 64}  SHA\n{'a' * 64}  evidence/a\n{'b' * 64}  oracle/b\n").encode()
    assert parse_sha256sums(text, where="SHA256SUMS") == digests


@pytest.mark.parametrize(
    ("data", "what", "where"),
    [
        (b"a" * 64 + b" lock.json\n", "a line of SHA256SUMS is malformed", "SHA256SUMS:1"),
        (b"A" * 64 + b"  lock.json\n", "a line of SHA256SUMS is malformed", "SHA256SUMS:1"),
        (
            b"a" * 64 + b"  ../lock.json\n",
            "a line of SHA256SUMS names a path no bundle can hold",
            "SHA256SUMS:1",
        ),
        (
            b"a" * 64 + b"  b\n" + b"a" * 64 + b"  b\n",
            "SHA256SUMS names a path twice",
            "SHA256SUMS:2",
        ),
        (
            b"a" * 64 + b"  b\n" + b"a" * 64 + b"  a\n",
            "SHA256SUMS is not sorted by path",
            "SHA256SUMS",
        ),
        (b"a" * 64 + b"  b", "SHA256SUMS does not end with a line feed", "SHA256SUMS"),
        (
            b"a" * 64 + b"  b\r\n",
            "a line of SHA256SUMS names a path no bundle can hold",
            "SHA256SUMS:1",
        ),
    ],
    ids=["one-space", "upper-hex", "escaping", "twice", "unsorted", "no-final-lf", "crlf"],
)
def test_a_malformed_sha256sums_is_refused_at_its_line(data: bytes, what: str, where: str) -> None:
    with pytest.raises(BadInput) as refused:
        parse_sha256sums(data, where="SHA256SUMS")
    assert (refused.value.what, refused.value.where) == (what, where)


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("evidence/server.log", None),
        ("evidence/température.json", None),
        ("", "an empty path"),
        ("/etc/passwd", "an absolute path"),
        ("evidence/../../x", "a '..' part, which escapes the bundle"),
        ("evidence//x", "an empty or '.' part"),
        ("./x", "an empty or '.' part"),
        ("a\\b", "a backslash"),
        ("a\nb", "a control character U+000A"),
        ("bad-\udcff", "bytes that are not UTF-8"),
    ],
)
def test_the_path_rule(path: str, problem: str | None) -> None:
    assert path_problem(path) == problem


@pytest.mark.parametrize("name", ["tiny-cpu", "tiny-cpu-2node"])
def test_a_build_seals_exactly_the_evidence_verify_expects(name: str, tmp_path: Path) -> None:
    """The committed live bundles' evidence/ read as the run directory it was sealed from: the
    build's selection is every file of it, no more; one file gone refuses the seal by name."""
    sealed = OpenedBundle.read(REPO_ROOT / "repro" / name, REPO_ROOT / "manifests")
    run_dir = sealed.path / EVIDENCE_DIR
    files = evidence_files(run_dir, sealed.manifest, replayed=False)
    on_disk = {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}
    assert set(files) == on_disk
    assert all(path == run_dir / relative for relative, path in files.items())

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "start-1" / "audit" / "drifts.json").unlink()
    with pytest.raises(BadInput) as refused:
        evidence_files(copy, sealed.manifest, replayed=False)
    assert refused.value.found == "1 missing: start-1/audit/drifts.json"
    # a replay also seals its own record of the bundle it replayed
    with pytest.raises(BadInput, match="lacks evidence") as replayed:
        evidence_files(run_dir, sealed.manifest, replayed=True)
    assert replayed.value.found == "1 missing: replay.json"
