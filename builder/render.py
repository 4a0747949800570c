"""Output for people and machines: rich tables on stdout, and versioned JSON.

Every `--json` document is an object whose first key is `"version": 1`; the CLI alone writes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from repro_serving.builder.drift import Drift

JSON_VERSION = 1


PIPE_WIDTH = 160
"""Columns of a report written to a file or a pipe, where no terminal says how wide."""


def console() -> Console:
    """A console on stdout; no colour codes, and a fixed wide layout, off a terminal."""
    width = None if sys.stdout.isatty() else PIPE_WIDTH
    return Console(file=sys.stdout, highlight=False, soft_wrap=True, width=width)


def json_document(payload: Mapping[str, Any]) -> str:
    """The canonical `--json` text: `version` first, then the payload, sorted, UTF-8."""
    return json.dumps(
        {"version": JSON_VERSION, **payload}, indent=2, sort_keys=False, ensure_ascii=False
    )


def write_json(payload: Mapping[str, Any]) -> None:
    sys.stdout.write(json_document(payload) + "\n")


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Table:
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
