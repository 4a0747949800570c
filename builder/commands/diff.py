"""What differs between two locks, bundles or sealed run directories.

Each side is a `lock.json` or a directory holding one (a bundle, or a run sealed by `repro
launch`). Every fact is compared by its key path (`native.roles.worker[{site}/torch/lib/…]`),
so a moved library, a changed hash or a new package each show as one line. Exit 0 when the
two are the same, 1 when they differ.
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

from repro_serving.builder.errors import BadInput, ExitCode
from repro_serving.builder.lock import Lock
from repro_serving.builder.readers import LOCK_LIMIT, NoSuchFile, read_bytes
from repro_serving.builder.render import Output, Report, console, table, write_report
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


class DiffOutput(Report):
    """`repro diff --json` (`ok`: the two pin the same facts)."""

    a: str
    b: str
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
    differences = compare(flatten(_lock(args.a)), flatten(_lock(args.b)))
    if args.section:
        differences = in_sections(differences, args.section)
    if args.json:
        write_report(
            DiffOutput(ok=not differences, a=str(args.a), b=str(args.b),
                       differences=tuple(Difference.of(k, a, b) for k, a, b in differences))
        )  # fmt: skip
    elif differences:
        console().print(_summary(differences, args))
        console().print(
            table(f"{len(differences)} difference(s)", ("fact", str(args.a), str(args.b)),
                  ((k, _show(a), _show(b)) for k, a, b in differences))
        )  # fmt: skip
    else:
        shown = f" in {', '.join(args.section)}" if args.section else ""
        console().print(f"same: {args.a} and {args.b} pin the same facts{shown}")
    return int(ExitCode.CHECK_FAILED if differences else ExitCode.PASS)


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
    try:
        data = read_bytes(file, limit=LOCK_LIMIT, what="a lock")
    except NoSuchFile as error:
        raise BadInput(
            "no lock to compare",
            where=str(file),
            expected="a lock.json, or a bundle or run directory holding one",
            found=error.found,
        ) from error
    return Lock.from_bytes(data, where=str(file))


def _show(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    return "null" if value is None else str(value)
