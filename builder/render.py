"""Output for people and machines: rich tables on stdout, and versioned JSON reports.

Every `--json` document is a `Report`: an object whose first key is `"version": 1`, then `ok`
(the command passed: exit code 0) and `error` (what stopped it, or null), then the body of the
command's own report (`builder.commands.<command>.REPORT`); an error is the envelope alone,
`ErrorReport`. Each report's JSON Schema is shipped in builder/schemas/. The CLI alone writes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from repro_serving.builder.drift import Drift
from repro_serving.builder.errors import ReproError

if TYPE_CHECKING:  # rich is loaded where a table or a console is made: a one-line verdict
    from rich.console import Console  # (`repro verify`'s PASS) starts without it
    from rich.table import Table

JSON_VERSION: Final = 1


class Output(BaseModel):
    """A part of a `--json` document: frozen, no key but its fields, and every field written,
    so its schema requires each (a field with a default too)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )


class ReportError(Output):
    """What stopped a command: the sides of its refusal, and the exit code it returned."""

    what: str
    where: str | None
    expected: str | None
    found: str | None
    exit_code: Literal[1, 2, 3, 4, 130]
    """1 a check failed, 2 bad input, 3 not observable, 4 an internal error, 130 interrupted."""

    @classmethod
    def of(cls, error: ReproError) -> ReportError:
        return cls(
            what=error.what,
            where=error.where,
            expected=error.expected,
            found=error.found,
            exit_code=int(error.exit_code),
        )


class Report(Output):
    """The envelope of every `--json` document; each command's report adds its body."""

    version: Literal[1] = JSON_VERSION
    ok: bool
    """Whether the command passed: its exit code is 0."""
    error: ReportError | None = None
    """What stopped the command before it could finish (null when nothing did): bad input,
    something that could not be observed, an interrupt, a run whose server did not start."""


class ErrorReport(Report):
    """The document of a command stopped by an error: the envelope, and no body."""

    ok: Literal[False] = False
    error: ReportError


def write_report(report: Report) -> None:
    """`report` on stdout: its fields in their order (`version` first), indented, UTF-8."""
    document = report.model_dump(mode="json", by_alias=True)
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


PIPE_WIDTH = 160
"""Columns of a report written to a file or a pipe, where no terminal says how wide."""


def console() -> Console:
    """A console on stdout; no colour codes, and a fixed wide layout, off a terminal. A reader
    that closes the pipe early (`| head`) ends the command as a closed stdout does anywhere
    else: a `BrokenPipeError` for the command line (`cli`), not rich's own exit 1."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    width = None if sys.stdout.isatty() else PIPE_WIDTH
    return _Console(file=sys.stdout, highlight=False, soft_wrap=True, width=width)


def json_document(payload: Mapping[str, Any]) -> str:
    """The canonical `--json` text: `version` first, then the payload, sorted, UTF-8."""
    return json.dumps(
        {"version": JSON_VERSION, **payload}, indent=2, sort_keys=False, ensure_ascii=False
    )


def write_json(payload: Mapping[str, Any]) -> None:
    sys.stdout.write(json_document(payload) + "\n")


def say(line: str) -> None:
    """One line of plain text on stdout, as it is (no markup read into it)."""
    sys.stdout.write(line + "\n")


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Table:
    from rich.table import Table
    from rich.text import Text

    result = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        result.add_column(column, overflow="fold")
    for row in rows:
        # Text, not markup: a path or a claim like `models[target]` is shown as it is.
        result.add_row(*(Text(str(cell)) for cell in row))
    return result


def drift_table(drifts: Sequence[Drift], title: str = "drift") -> Table:
    return table(
        f"{title}: {len(drifts)}",
        ("kind", "subject", "expected", "observed", "why"),
        ((d.kind.value, d.subject, d.expected, d.observed, d.why) for d in drifts),
    )
