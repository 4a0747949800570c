"""What differs between two locks, bundles or sealed run directories.

Each side is a `lock.json` or a directory holding one (a bundle, or a run sealed by `repro
launch`). Every fact is compared by its key path (`native.roles.worker[{site}/torch/lib/…]`),
so a moved library, a changed hash or a new package each show as one line. The output leads
with what a performance engineer compares first (`builder.report.headline`: the decode rate
and its change in %, rows, tokens, speculative acceptance, where each ran, and how many prompts
give the same tokens on both sides), then the count of differing facts by section, then every
fact. Exit 0 when the two are the same, 1 when they differ.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import (
    ConfigDict,
    JsonValue,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from rich.table import Table

from repro_serving.builder.documents.lock import Lock
from repro_serving.builder.errors import ExitCode
from repro_serving.builder.readers import LOCK_LIMIT, read_needed
from repro_serving.builder.render import Output, Report, console, table, write_report
from repro_serving.builder.report import headline
from repro_serving.builder.report.differences import (
    ABSENT,
    SECTIONS,
    compare,
    flatten,
    in_sections,
    summarise,
)
from repro_serving.builder.sealing import bundle


class Difference(Output):
    """One fact that differs, by its key path: `a` or `b` is absent where that side does not
    state the fact (a null is a fact stated as null)."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=False)

    key: str
    a: JsonValue = None
    b: JsonValue = None

    @model_serializer(mode="wrap")
    def _stated_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        document: dict[str, Any] = handler(self)
        return {key: value for key, value in document.items() if key in self.model_fields_set}

    @classmethod
    def of(cls, key: str, a: object, b: object) -> Difference:
        sides = {side: value for side, value in (("a", a), ("b", b)) if value is not ABSENT}
        return cls.model_validate({"key": key, **sides})


class HeadlineFigure(Output):
    """A headline figure on both sides (null where a side does not state it), with its change
    in percent where both are numbers."""

    figure: str
    unit: str
    a: float | int | str | None
    b: float | int | str | None
    change_percent: float | None


class ExactnessOutput(Output):
    """Of the prompts both sides answered (when both ran one suite), how many alike."""

    suite_a: str
    suite_b: str
    compared: int
    same_token_ids: int
    same_text: int
    only_a: int
    only_b: int


class DiffOutput(Report):
    """`repro diff --json` (`ok`: the two pin the same facts)."""

    a: str
    b: str
    figures: tuple[HeadlineFigure, ...]
    exactness: ExactnessOutput
    differences: tuple[Difference, ...]


REPORT = DiffOutput
"""The document `--json` prints (its schema: `repro schema diff`)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", type=Path, metavar="A", help="lock.json, bundle or run directory")
    parser.add_argument("b", type=Path, metavar="B", help="lock.json, bundle or run directory")
    parser.add_argument("--json", action="store_true", help="machine-readable differences")
    parser.add_argument(
        "--section",
        action="append",
        choices=SECTIONS,
        help="only the facts of this section (repeatable); the exit code follows them",
    )


def execute(args: argparse.Namespace) -> int:
    lock_a, lock_b = _lock(args.a), _lock(args.b)
    differences = compare(flatten(lock_a), flatten(lock_b))
    if args.section:
        differences = in_sections(differences, args.section)
    figures = headline.figures(lock_a, lock_b)
    exactness = headline.exactness(lock_a, lock_b)
    if args.json:
        write_report(
            DiffOutput(
                ok=not differences,
                a=str(args.a),
                b=str(args.b),
                figures=tuple(
                    HeadlineFigure(figure=f.name, unit=f.unit, a=f.a, b=f.b,
                                   change_percent=f.change_percent)
                    for f in figures
                ),
                exactness=ExactnessOutput(
                    suite_a=exactness.suites[0], suite_b=exactness.suites[1],
                    compared=exactness.compared, same_token_ids=exactness.same_token_ids,
                    same_text=exactness.same_text, only_a=exactness.only_a,
                    only_b=exactness.only_b,
                ),
                differences=tuple(Difference.of(k, a, b) for k, a, b in differences),
            )
        )  # fmt: skip
    elif differences:
        console().print(_headline(figures, args))
        console().print(exactness.sentence())
        console().print(_summary(differences, args))
        console().print(
            table(f"{len(differences)} difference(s)", ("fact", str(args.a), str(args.b)),
                  ((k, _show(a), _show(b)) for k, a, b in differences))
        )  # fmt: skip
    else:
        shown = f" in {', '.join(args.section)}" if args.section else ""
        console().print(f"same: {args.a} and {args.b} pin the same facts{shown}")
    return int(ExitCode.CHECK_FAILED if differences else ExitCode.PASS)


def _headline(figures: list[headline.Figure], args: argparse.Namespace) -> Table:
    """The figures a performance engineer compares first, each with its change."""
    return table(
        "performance and exactness",
        ("figure", str(args.a), str(args.b), "change"),
        (
            (f"{f.name} ({f.unit})" if f.unit else f.name, headline.shown(f.a),
             headline.shown(f.b), headline.shown_change(f))
            for f in figures
        ),
    )  # fmt: skip


def _summary(differences: list[tuple[str, Any, Any]], args: argparse.Namespace) -> Table:
    """Per section, before any detail: how many facts differ, and how many only one side has."""
    counts = summarise(differences, args.section or SECTIONS)
    return table(
        "differences by section",
        ("section", "differ", "values differ", f"only in {args.a}", f"only in {args.b}"),
        ((c.section, c.total or "same", c.changed, c.only_a, c.only_b) for c in counts),
    )


def _lock(path: Path) -> Lock:
    file = path / bundle.LOCK if path.is_dir() else path
    data = read_needed(
        file,
        limit=LOCK_LIMIT,
        what="a lock",
        missing="no lock to compare",
        expected="a lock.json, or a bundle or run directory holding one",
    )
    return Lock.from_bytes(data, where=str(file))


def _show(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    return "null" if value is None else str(value)
