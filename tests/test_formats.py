"""Format tags: each typed document a bundle seals is tagged with its format in the statement,
and a bundle written by another repro is refused as such, before any document is read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bundle_assets import example_key, example_trust
from conftest import REPO_ROOT

from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.documents.formats import FORMATS, format_of, tag_problems, tags
from repro_serving.builder.sealing import dsse
from repro_serving.builder.sealing.bundle import SEAL_FILES
from repro_serving.builder.sealing.statement import Statement, statement_for
from repro_serving.builder.verify import verify

TINY = REPO_ROOT / "repro" / "tiny-cpu"
BUNDLES = sorted(p.parent for p in (REPO_ROOT / "repro").glob("*/statement.json"))
UNTYPED_SUFFIXES = (".log", ".prom", ".md", ".whl", ".py", ".txt")


def test_each_typed_document_has_one_format_and_raw_texts_none() -> None:
    assert format_of("evidence/start-2/rows.json") == format_of(
        "evidence/start-1/load-c4/rows.json"
    )
    assert format_of("evidence/start-1/audit/drifts.json").name == "repro.drifts"  # type: ignore[union-attr]
    assert format_of("evidence/start-1/rank-1/audit/worker.json").name == "repro.audit"  # type: ignore[union-attr]
    for untyped in (
        "evidence/start-1/server.log",
        "evidence/start-1/metrics-after.prom",
        "README.md",
    ):
        assert format_of(untyped) is None
    assert len({f.name for f in FORMATS}) == len(FORMATS)


def test_a_tag_of_another_version_names_which_repro_wrote_it() -> None:
    rows = "evidence/start-1/rows.json"
    current = tags([rows])[rows]
    name, version = current.rsplit("/v", 1)
    assert tag_problems({rows: current}) == []
    older = tag_problems({rows: f"{name}/v{int(version) - 1}"})
    assert older == [
        f"{rows}: {name}/v{int(version) - 1}: written by an older repro (this one reads {current})"
    ]
    newer = tag_problems({rows: f"{name}/v{int(version) + 1}"})
    assert "written by a newer repro" in newer[0]
    assert tag_problems({rows: "repro.audit/v1"}) == [
        f"{rows}: tagged 'repro.audit/v1', expected {current}"
    ]
    assert tag_problems({"README.md": "repro.rows/v2"}) == [
        "README.md: tagged 'repro.rows/v2', a file of no repro format"
    ]


def test_documents_without_tags_are_one_problem_naming_how_many() -> None:
    found = tag_problems({"lock.json": None, "evidence/run.json": None, "README.md": None})
    assert len(found) == 1
    assert found[0].startswith("every one of its typed documents carries no format tag")
    some = tag_problems({"lock.json": None, "evidence/run.json": "repro.run/v1"})
    assert some[0].startswith("1 of 2 of its typed documents")


def test_a_sealed_statement_tags_every_typed_document_and_reads_its_tags_back() -> None:
    digests = {
        "manifest.toml": "0" * 64,
        "evidence/start-1/rows.json": "1" * 64,
        "README.md": "2" * 64,
    }
    statement = statement_for("b", "manifests/b.toml", digests)
    read = Statement.from_json(statement.to_json(), where="statement.json")
    assert read.format_tags() == {
        "README.md": None,
        "evidence/start-1/rows.json": tags(["evidence/start-1/rows.json"])[
            "evidence/start-1/rows.json"
        ],
        "manifest.toml": tags(["manifest.toml"])["manifest.toml"],
    }


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_every_document_a_committed_bundle_seals_has_its_format_and_its_tag(bundle: Path) -> None:
    """A live record's evidence is repro's own; an imported record's is the record's files."""
    statement = Statement.from_json((bundle / "statement.json").read_bytes(), where=str(bundle))
    tagged = statement.format_tags()
    live = 'evidence = "live"' in (bundle / "manifest.toml").read_text()
    for path in tagged:
        if path.startswith(("tools/", "launch", "SHA256SUMS")) or path in SEAL_FILES:
            continue
        if path.startswith("evidence/") and not live:
            continue
        if not path.endswith(UNTYPED_SUFFIXES):
            assert format_of(path) is not None, f"{bundle.name}/{path} is sealed with no format"
    assert tag_problems(tagged) == []


def _retagged(tmp_path: Path, change: dict[str, str | None]) -> Path:
    """A copy of the tiny bundle whose statement gives the paths of `change` those tags (None:
    no tag), signed again with the example key (public: anyone can)."""
    copy = tmp_path / "tiny-cpu"
    shutil.copytree(TINY, copy, symlinks=True)
    statement = json.loads((copy / "statement.json").read_text())
    for subject in statement["subject"]:
        if subject["name"] in change:
            tag = change[subject["name"]]
            subject.pop("annotations", None)
            if tag is not None:
                subject["annotations"] = {"format": tag}
    data = canonical_json(statement)
    (copy / "statement.json").write_bytes(data)
    (copy / "statement.dsse.json").write_bytes(dsse.sign(data, example_key()).to_json())
    return copy


@pytest.mark.parametrize(
    ("tag", "named"),
    [
        ("repro.rows/v1", "written by an older repro (this one reads repro.rows/v2)"),
        ("repro.rows/v3", "written by a newer repro (this one reads repro.rows/v2)"),
        (None, "1 of "),
    ],
    ids=["older", "newer", "untagged"],
)
def test_verify_refuses_another_repros_bundle_by_name_before_reading_it(
    tmp_path: Path, tag: str | None, named: str
) -> None:
    rows = "evidence/start-1/rows.json"
    report = verify(_retagged(tmp_path, {rows: tag}), example_trust())
    assert not report.ok and report.findings == ()
    (check,) = report.checks
    assert check.claim == "format tags = the formats this repro reads"
    assert named in check.detail
    assert check.detail.endswith(
        "verify it with the repro it carries in tools/: ./launch --verify-only"
    )
