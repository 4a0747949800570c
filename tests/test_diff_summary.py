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
from repro_serving.builder.documents.lock import Lock
from repro_serving.builder.report import headline
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


def _committed(name: str) -> Lock:
    path = REPO_ROOT / "repro" / name / bundle.LOCK
    return Lock.from_bytes(path.read_bytes(), where=str(path))


def test_diff_leads_with_the_rate_and_its_change(capsys: pytest.CaptureFixture[str]) -> None:
    """The two committed tiny bundles: the decode rate, both values and the change in %, within
    the first 15 lines, before the sections and every fact."""
    a, b = (REPO_ROOT / "repro" / n for n in ("tiny-cpu", "tiny-cpu-2node"))
    code = main(["diff", str(a), str(b)])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    rate_a, rate_b = (_committed(n).oracle.throughput for n in ("tiny-cpu", "tiny-cpu-2node"))
    assert rate_a is not None and rate_b is not None
    change = (rate_b.conventional_median - rate_a.conventional_median) / rate_a.conventional_median
    rate_line = next(i for i, line in enumerate(lines) if "decode rate" in line)
    assert rate_line < 15
    cells = [c.strip() for c in lines[rate_line].strip("│ ").split("│")]
    assert cells == [
        "decode rate, median of prompts (tok/s)",
        f"{rate_a.conventional_median:,.2f}",
        f"{rate_b.conventional_median:,.2f}",
        f"{change * 100:+.1f} %",
    ]
    exactness = next(line for line in lines if line.startswith("exactness"))
    assert "5 of 5 prompts give the same token ids" in exactness
    assert rate_line < lines.index("differences by section")


def test_diff_json_states_the_figures_as_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = (str(REPO_ROOT / "repro" / n) for n in ("tiny-cpu", "laguna-102tps"))
    main(["diff", a, b, "--json"])
    document = json.loads(capsys.readouterr().out)
    figures = {f["figure"]: f for f in document["figures"]}
    rate = figures["decode rate, median of prompts"]
    assert rate["unit"] == "tok/s"
    assert isinstance(rate["a"], float) and isinstance(rate["b"], float)
    assert rate["change_percent"] == pytest.approx((rate["b"] - rate["a"]) / rate["a"] * 100)
    laguna = _committed("laguna-102tps").record
    assert laguna is not None and laguna.spec_decode_draft_tokens
    assert figures["spec-decode acceptance"]["a"] is None
    assert figures["spec-decode acceptance"]["b"] == pytest.approx(
        100 * (laguna.spec_decode_accepted or 0) / laguna.spec_decode_draft_tokens
    )
    assert document["exactness"]["compared"] == 0  # two suites: nothing to compare


def test_exactness_counts_the_prompts_that_differ_and_those_one_side_lacks() -> None:
    lock = _committed("tiny-cpu")
    rows = list(lock.oracle.rows)
    rows[1] = rows[1].model_copy(update={"token_ids_sha256": "00" * 32})
    other = lock.model_copy(update={"oracle": lock.oracle.model_copy(update={"rows": rows[:4]})})
    found = headline.exactness(lock, other)
    assert (found.compared, found.same_token_ids, found.same_text) == (4, 3, 4)
    assert (found.only_a, found.only_b) == (1, 0)
    assert "3 of 4 prompts" in found.sentence() and "1 prompt(s) only in A" in found.sentence()


@pytest.mark.parametrize(
    ("a", "b", "change", "shown"),
    [
        (100.0, 80.0, -20.0, "-20.0 %"),
        (3, 3, 0.0, "same"),
        (0, 5, None, "differs"),
        (None, 5.0, None, "differs"),
        ("x", "y", None, "differs"),
    ],
)
def test_a_figure_changes_by_percent_only_between_two_numbers(
    a: headline.Value, b: headline.Value, change: float | None, shown: str
) -> None:
    figure = headline.Figure("f", "", a, b)
    assert figure.change_percent == (None if change is None else pytest.approx(change))
    assert headline.shown_change(figure) == shown
