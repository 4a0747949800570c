"""Where a key path lies in the text it was read from: line and column, for error messages.

Best effort and never an error: a document is parsed (and refused) by `builder.readers` and
pydantic; these scanners only point a person at the key a problem names, or at the nearest
enclosing key they could place. JSON is scanned exactly; TOML line by line (table headers,
arrays of tables and `key = value` lines; the keys of an inline table fall back to its own).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Final

Loc = tuple[str | int, ...]
Positions = Mapping[Loc, tuple[int, int]]
"""Key path -> (line, column), both counted from 1."""

_SPACE: Final = re.compile(r"[ \t\n\r]*")
_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SCALAR: Final = re.compile(r"[^,\]}\s]+")


def nearest(positions: Positions, loc: Sequence[str | int]) -> str:
    """'line L, column C' of `loc`, or of its nearest ancestor placed; '' where none is."""
    for end in range(len(loc), 0, -1):
        found = positions.get(tuple(loc[:end]))
        if found is not None:
            return f"line {found[0]}, column {found[1]}"
    return ""


def line_column(text: str, offset: int) -> tuple[int, int]:
    """The line and column (both from 1, in characters) of `offset` in `text`."""
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


class _JsonScan:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0
        self.matched = 0
        self.offsets: dict[Loc, int] = {}

    def match(self, pattern: re.Pattern[str]) -> re.Match[str]:
        found = pattern.match(self.text, self.at)
        if found is None:
            raise ValueError(f"no {pattern.pattern} at {self.at}")
        self.matched = found.end()
        return found

    def skip(self) -> None:
        self.at = self.match(_SPACE).end()

    def value(self, loc: Loc) -> None:
        self.skip()
        opening = self.text[self.at]
        if opening in "{[":
            self.at += 1
            self.skip()
            index = 0
            while self.text[self.at] not in "}]":
                if opening == "{":
                    name = json.loads(self.match(_STRING).group())
                    self.offsets[(*loc, name)] = self.at
                    self.at = self.matched
                    self.skip()
                    self.at += 1  # the colon
                    self.value((*loc, name))
                else:
                    self.skip()
                    self.offsets[(*loc, index)] = self.at
                    self.value((*loc, index))
                    index += 1
                self.skip()
                if self.text[self.at] == ",":
                    self.at += 1
                    self.skip()
            self.at += 1
        else:
            self.match(_STRING if opening == '"' else _SCALAR)
            self.at = self.matched


def json_positions(text: str) -> dict[Loc, tuple[int, int]]:
    """The position of every member's key and every array item in JSON `text`."""
    scan = _JsonScan(text)
    # Text pydantic refused as JSON: what was placed before the fault.
    with contextlib.suppress(IndexError, ValueError, RecursionError):
        scan.value(())
    return {loc: line_column(text, offset) for loc, offset in scan.offsets.items()}


_KEY_PART: Final = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_KEY: Final = re.compile(rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*")
_PART: Final = re.compile(_KEY_PART)
_HEADER: Final = re.compile(rf"^(?P<open>\[\[?)\s*(?P<key>{_KEY.pattern})\s*\]")
_ASSIGNMENT: Final = re.compile(rf"^(?P<key>{_KEY.pattern})\s*=")


def _parts(key: str) -> list[str]:
    parts = []
    for part in _PART.findall(key):
        if part.startswith('"'):
            parts.append(_basic_string(part))
        elif part.startswith("'"):
            parts.append(part[1:-1])
        else:
            parts.append(part)
    return parts


def _basic_string(quoted: str) -> str:
    """A TOML basic string's value; JSON's escapes are TOML's but for `\\U` and `\\e`, which
    are kept as written (a position, not a value, is wanted)."""
    try:
        value = json.loads(quoted, strict=False)  # strict=False: a raw tab is TOML's
    except ValueError:
        return quoted[1:-1]
    return value if isinstance(value, str) else quoted[1:-1]


class _TomlScan:
    def __init__(self) -> None:
        self.found: dict[Loc, tuple[int, int]] = {}
        self.arrays: dict[Loc, int] = {}  # an array of tables -> the index of its last table
        self.table: Loc = ()

    def resolve(self, parts: Sequence[str]) -> Loc:
        """A header's dotted key with the current index after each array of tables in it."""
        loc: Loc = ()
        for part in parts:
            loc = (*loc, part)
            if loc in self.arrays:
                loc = (*loc, self.arrays[loc])
        return loc

    def line(self, text: str, number: int) -> None:
        stripped = text.lstrip()
        column = len(text) - len(stripped) + 1
        header = _HEADER.match(stripped)
        if header is not None:
            parts = _parts(header["key"])
            if header["open"] == "[[":
                array = (*self.resolve(parts[:-1]), parts[-1])
                self.found.setdefault(array, (number, column))
                self.arrays[array] = self.arrays.get(array, -1) + 1
                self.table = (*array, self.arrays[array])
            else:
                self.table = self.resolve(parts)
            self.found.setdefault(self.table, (number, column))
            return
        assignment = _ASSIGNMENT.match(stripped)
        if assignment is not None:
            loc = (*self.table, *_parts(assignment["key"]))
            self.found.setdefault(loc, (number, column))


def toml_positions(text: str) -> dict[Loc, tuple[int, int]]:
    """The position of every table header and `key = value` line of TOML `text`; lines inside a
    multi-line string are skipped."""
    scan = _TomlScan()
    in_string = False
    for number, line in enumerate(text.splitlines(), start=1):
        if not in_string:
            scan.line(line, number)
        if (line.count('"""') + line.count("'''")) % 2:
            in_string = not in_string
    return scan.found
