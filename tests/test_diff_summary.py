"""`repro diff` says what differs by section before any detail, and `--section` filters.

The locks compared are real: the Laguna record's lock as `repro build` seals it from the
manifest and the record's evidence, and the same lock with chosen facts changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from repro_serving.builder.build import build
from repro_serving.builder.cli import main
from repro_serving.builder.lock import Lock
from repro_serving.builder.report.differences import (
    ABSENT,
    SECTIONS,
    compare,
    flatten,
    section_of,
    summarise,
)
from repro_serving.builder.sealing import bundle
from repro_serving.builder.sealing.keys import SigningKey

MANIFEST = REPO_ROOT / "manifests" / "laguna-102tps.toml"
KEY = SigningKey.from_path(REPO_ROOT / "keys" / "example.key")


@pytest.fixture(scope="module")
def lock_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Laguna lock, sealed from the manifest by `repro build` (no server: imported)."""
    root = tmp_path_factory.mktemp("laguna")
    return build(MANIFEST, KEY, root, root / "work").sealed.path / bundle.LOCK


@pytest.fixture(scope="module")
def changed_file(lock_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same lock with one package pinned at another version, one package more, and the
    host's kernel another: two python facts, one host fact."""
    lock = Lock.from_bytes(lock_file.read_bytes(), where=str(lock_file))
    document = lock.model_dump(mode="json", by_alias=True)
    document["python"]["packages"] |= {"torch": "2.12.1+xpu", "numpy": "2.4.6"}
    document["host"]["facts"]["kernel"] = "7.0.1-generic"
    changed = Lock.model_validate(document)
    path = tmp_path_factory.mktemp("changed") / "lock.json"
    path.write_bytes(changed.to_bytes())
    return path


def test_every_field_of_a_lock_belongs_to_a_named_section() -> None:
    fields = [field.alias or name for name, field in Lock.model_fields.items()]
    assert {section_of(name) for name in fields} <= set(SECTIONS)


@pytest.mark.parametrize(
    ("key", "section"),
    [
        ("native.roles.worker[{site}/torch/lib/libc10.so].sha256", "native"),
        ("models[target].files.config.json", "models"),
        ("python.packages.torch", "python"),
        ("host.facts.kernel", "host"),
        ("record.verdicts.spec_decode", "gates"),
        ("record.markers.graph-captured.Worker_TP0_EP0", "gates"),
        ("record.spec_decode_accepted_per_position", "oracle"),
        ("oracle.throughput.conventional_median", "oracle"),
        ("schema", "bundle"),
        ("gates.throughput.status", "gates"),
        ("someday.new", "someday"),
    ],
)
def test_a_key_path_falls_in_the_section_of_its_field(key: str, section: str) -> None:
    assert section_of(key) == section


def test_the_summary_counts_changed_and_one_sided_facts_per_section_in_order() -> None:
    left = {"python.packages.a": "1", "python.packages.b": "2", "host.facts.kernel": "6", "x": 1}
    right = {"python.packages.a": "2", "host.facts.kernel": None, "native.roles.w[l]": "h"}
    counts = {c.section: c for c in summarise(compare(left, right))}
    assert [c for c in counts][: len(SECTIONS)] == list(SECTIONS)
    assert (counts["python"].changed, counts["python"].only_a, counts["python"].only_b) == (1, 1, 0)
    assert (counts["host"].changed, counts["host"].total) == (1, 1), "null is a stated fact"
    assert (counts["native"].only_b, counts["native"].total) == (1, 1)
    assert counts["x"].only_a == 1, "a field no section names is a section of its own"
    assert all(counts[s].total == 0 for s in ("bundle", "models", "sources", "launch", "gates"))


def test_a_lock_compared_with_itself_differs_nowhere(lock_file: Path) -> None:
    facts = flatten(Lock.from_bytes(lock_file.read_bytes(), where=str(lock_file)))
    assert compare(facts, dict(facts)) == []
    assert all(c.total == 0 for c in summarise([], SECTIONS))
    assert ABSENT not in facts.values()


def test_diff_prints_the_summary_by_section_before_the_details(
    lock_file: Path, changed_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["diff", str(lock_file), str(changed_file)])
    out = capsys.readouterr().out
    assert code == 1
    summary = out.index("differences by section")
    details = out.index("3 difference(s)")
    assert summary < details
    rows = _summary_rows(out[summary:details])
    assert rows["python"] == ["2", "1", "0", "1"]
    assert rows["host"] == ["1", "1", "0", "0"]
    assert set(rows) == set(SECTIONS)
    assert all(rows[s][0] == "same" for s in SECTIONS if s not in ("python", "host"))
    assert "python.packages.numpy" in out[details:] and "host.facts.kernel" in out[details:]


def test_section_filters_the_details_the_summary_and_the_exit_code(
    lock_file: Path, changed_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["diff", str(lock_file), str(changed_file), "--section", "python"])
    out = capsys.readouterr().out
    assert code == 1
    assert set(_summary_rows(out)) == {"python"}
    assert "2 difference(s)" in out and "host.facts.kernel" not in out

    code = main(["diff", str(lock_file), str(changed_file), "--section", "native"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.strip().endswith("pin the same facts in native")


def test_section_filters_the_json_document_too(
    lock_file: Path, changed_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["diff", str(lock_file), str(changed_file), "--section", "host", "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [d["key"] for d in document["differences"]] == ["host.facts.kernel"]


def test_an_unknown_section_is_refused_as_usage(
    lock_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diff", str(lock_file), str(lock_file), "--section", "hosts"]) == 2
    assert "invalid choice: 'hosts'" in capsys.readouterr().err


def _summary_rows(text: str) -> dict[str, list[str]]:
    """The summary table's rows by section: differ, values differ, only in A, only in B."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 5 and cells[0] in SECTIONS:
            rows[cells[0]] = cells[1:]
    return rows
