"""One validation engine: every document read names every problem, with where, expected, found.

A sealed evidence file, a manifest, an oracle suite and a record file are refused the same way
(`documents.invalid.InvalidDocument`): each problem by key path, with its line and column where
the source text gives one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repro_serving.builder.documents import read_document, validate_document
from repro_serving.builder.documents.evidence import Teacher
from repro_serving.builder.documents.invalid import InvalidDocument
from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.documents.positions import json_positions, nearest, toml_positions
from repro_serving.builder.documents.translate import Problem
from repro_serving.builder.errors import ExitCode
from repro_serving.builder.recordfiles import read_bench

MINIMAL = Path(__file__).parent / "manifests" / "minimal.toml"


def _teacher(suite: object = "tiny", token: object = 1) -> dict[str, object]:
    row = {"prompt_id": "fox", "prompt_index": 0, "token_ids": [token, 2], "text_sha256": "0" * 64}
    return {"suite": suite, "rows": [row, dict(row, prompt_id="dog", token_ids=[1, 2])]}


def test_a_sealed_evidence_file_with_two_problems_names_both(tmp_path: Path) -> None:
    path = tmp_path / "teacher.json"
    path.write_text(json.dumps(_teacher(suite=7, token="1"), indent=2))
    with pytest.raises(InvalidDocument) as caught:
        read_document(Teacher, path, what="the teacher")
    refused = caught.value
    assert refused.exit_code == ExitCode.BAD_INPUT
    assert (refused.what, refused.where, refused.expected) == (
        "the teacher does not follow its format",
        str(path),
        "Teacher",
    )
    assert refused.problems == (
        Problem("key suite", "wrong type", "a string", "an integer 7", "line 2, column 3"),
        Problem(
            "key rows[0].token_ids[0]",
            "wrong type",
            "an integer",
            'a string "1"',
            "line 8, column 9",
        ),
    )
    assert refused.found == (
        "key suite (line 2, column 3): wrong type (expected a string, found an integer 7); "
        "key rows[0].token_ids[0] (line 8, column 9): wrong type "
        '(expected an integer, found a string "1")'
    )
    assert "  - key rows[0].token_ids[0] (line 8, column 9): wrong type\n" in refused.diagnostics()


def test_a_manifest_with_two_problems_names_both_with_positions() -> None:
    text = MINIMAL.read_text()
    assert 'evidence = "declared"' in text
    text = text.replace('evidence = "declared"', 'evidence = "measured"\ncolor = "blue"')
    lines = text.splitlines()
    evidence = lines.index('evidence = "measured"') + 1
    with pytest.raises(InvalidDocument) as caught:
        Manifest.from_toml(text, source="two.toml")
    refused = caught.value
    assert (refused.what, refused.where) == ("invalid manifest: 2 problems", "two.toml")
    assert [(p.place, p.what, p.found) for p in refused.problems] == [
        (
            f"key bundle.evidence (line {evidence}, column 1)",
            "invalid value",
            'a string "measured"',
        ),
        (
            f"key bundle.color (line {evidence + 1}, column 1)",
            "unknown key",
            "key color",
        ),
    ]
    message = refused.diagnostics()
    assert f"  - key bundle.evidence (line {evidence}, column 1): invalid value\n" in message
    assert f"  - key bundle.color (line {evidence + 1}, column 1): unknown key\n" in message
    assert (refused.found or "").count("(line ") == 2  # --json's `found` carries both


def test_validate_document_refuses_with_the_same_structured_error() -> None:
    document = json.loads(json.dumps(_teacher()))
    document["rows"][1].pop("token_ids")
    document["extra"] = 1
    with pytest.raises(InvalidDocument) as caught:
        validate_document(Teacher, document, where="t.json", what="the teacher")
    assert [(p.where, p.what) for p in caught.value.problems] == [
        ("key rows[1].token_ids", "missing key"),
        ("key extra", "unknown key"),
    ]
    assert all(p.position == "" for p in caught.value.problems)  # no source text, no position


def test_a_record_bench_with_two_problems_names_both() -> None:
    """`recordfiles` reported pydantic's first error alone."""
    refused = read_bench(b'{"run_identity": 7,\n "rows": {}}')
    assert isinstance(refused, str)
    assert refused.startswith("run/bench.json: expected the record's bench, found ")
    assert "key run_identity (line 1, column 2): wrong type" in refused
    assert (
        "key rows (line 2, column 2): wrong type (expected an array, found an object {})" in refused
    )
    assert "key output_sha256s: missing key (expected an array, found nothing)" in refused


def test_positions_follow_toml_tables_arrays_of_tables_and_skip_multiline_strings() -> None:
    text = "\n".join(
        [
            'schema = "x"',
            "[[model]]",
            'role = "target"',
            "[model.files]",
            '"a b" = "c"',
            "[[model]]",
            'notes = """',
            'role = "not a key"',
            '"""',
            'role = "draft"',
            "[launch.profiles.teacher]",
            "argv = [",
            '  "--port=1",',
            "]",
        ]
    )
    positions = toml_positions(text)
    assert nearest(positions, ("model", 0, "files", "a b")) == "line 5, column 1"
    assert nearest(positions, ("model", 1, "role")) == "line 10, column 1"
    assert nearest(positions, ("launch", "profiles", "teacher", "argv", 0)) == "line 12, column 1"
    assert nearest(positions, ("launch", "port")) == ""


def test_positions_of_json_keys_and_items() -> None:
    positions = json_positions('{"a": [1, {"b": "x"}],\n  "c": null}')
    assert nearest(positions, ("a", 1, "b")) == "line 1, column 12"
    assert nearest(positions, ("c",)) == "line 2, column 3"
    assert nearest(positions, ("a", 0, "missing")) == "line 1, column 8"
    assert json_positions('{"a": ') == {("a",): (1, 2)}  # what was placed before the fault
