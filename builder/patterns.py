r"""The regular expressions a manifest declares, and the one engine that compiles and runs them.

This module owns "a pattern a manifest declares": `[oracle.gates] forbidden_log_patterns` and a
log marker's `pattern` and `rank_pattern` (a kernel set's `[[markers]]` are log markers too).
`builder.documents.manifest` compiles each one here when the manifest is read, so a pattern that
could not run later is refused by `repro check` with its key path; `launch.gates` searches every
log line with the `Pattern` compiled here. repro's own fixed regexes are nobody's input and
stay on `re`.

A sealed bundle's manifest says what its signer wrote, and the example signing key is public,
so a declared pattern is hostile input. Python's backtracking `re` takes time exponential in the
line for a pattern such as `^(a+)+$`: 27 `a` and a `!` take 11.5 s, each further `a` doubles it.
RE2 (google-re2) takes time linear in the line, and refuses at compile time what it cannot run
so: backreferences (`\1`), lookaround (`(?=`, `(?!`, `(?<=`, `(?<!`), atomic groups, possessive
repetitions, conditionals.

RE2's options, each decided:

- `max_mem` 8 MiB, RE2's own default made explicit: the budget of one compiled pattern, its
  program and its DFA cache together. RE2 refuses a pattern whose program does not fit; a search
  whose DFA outgrows the budget goes on in RE2's NFA, still linear but up to 1000 times slower
  per byte, so the budget is not cut below the default. google-re2 keeps the last 128 compiled
  patterns in its own cache: at most 1 GiB, for patterns and logs made to fill every DFA.
- `log_errors` off: RE2 would print each refused pattern to stderr; the refusal is a `BadInput`.
- every other option RE2's default: UTF-8; Perl syntax (`\d`, `\b`, `(?i)`, `*?`); leftmost-first
  matching, so the match and its groups are the ones a backtracking engine picks and a
  `rank_pattern` captures the label `re` captured; `.` not matching a newline; case sensitive
  unless the pattern says `(?i)`.

Linear is not free: in RE2's NFA a search costs about 10 ns per byte per live instruction, so a
pattern's program is capped at `MAX_PROGRAM_SIZE` instructions (the largest of the repository's
manifests and kernel sets has 182). The worst patterns found within the cap take about 1 s over a
51 KB log made for them (the Laguna record's log is 51 KB); the record's own, about 1 ms each.

What a pattern author meets, against `re`: `\d`, `\w`, `\s` and `\b` are ASCII (Unicode under
`re`); `\Z` is spelled `\z`; no `(?x)`, `\u` or `\N{...}` (`\x{...}` instead); `$` is the end of
the line only (`re` also matches before a final newline, which a log line never has:
`launch.gates.log_lines` splits on it). Lines are searched one at a time, so `^` and `$` are the
line's bounds under both.

Lines are text, decoded by the log's reader (a record's files strictly as UTF-8, a live run's log
with U+FFFD for bytes that are not UTF-8); here a line is encoded to UTF-8 for RE2, a lone
surrogate (which no reader produces) read as U+FFFD the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

import re2  # type: ignore[import-untyped]

from repro_serving.builder.errors import BadInput

SYNTAX: Final = "a regular expression RE2 accepts: no backreferences, no lookaround"
MAX_MEM: Final = 8 << 20
"""RE2's memory budget for one compiled pattern, in bytes: its program and its DFA cache."""
MAX_PROGRAM_SIZE: Final = 2_000
"""The most RE2 instructions one pattern may compile to; bounds a search's cost per byte."""
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_MEM
    options.log_errors = False
    return options


_OPTIONS: Final[Any] = _options()


@dataclass(frozen=True, slots=True)
class Match:
    """Where a pattern matched one line: the matched text and each capture group's text, None
    for a group that took no part in the match."""

    text: str
    groups: tuple[str | None, ...]

    def group(self, index: int = 0) -> str | None:
        """Group `index` as `re.Match.group` numbers them: 0 the whole match, 1 the first."""
        return self.text if index == 0 else self.groups[index - 1]


@dataclass(frozen=True, slots=True)
class Pattern:
    """A declared regular expression compiled by RE2."""

    source: str
    groups: int
    """The number of capture groups."""
    program_size: int
    """RE2 instructions of the compiled program (at most `MAX_PROGRAM_SIZE`)."""
    _compiled: Any = field(repr=False, compare=False)

    def search(self, line: str) -> Match | None:
        """The leftmost match anywhere in `line`, or None; linear in the line's length."""
        found = self._compiled.search(_utf8(line))
        if found is None:
            return None
        groups = tuple(None if text is None else _text(text) for text in found.groups())
        return Match(_text(found.group(0)), groups)


def _utf8(line: str) -> bytes:
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", line).encode("utf-8")


def _text(matched: bytes) -> str:
    # only `\C` (one byte) can end a match inside a character
    return matched.decode("utf-8", errors="replace")


def _reason(error: Exception) -> str:
    """RE2's own words, which google-re2 raises as bytes."""
    only = error.args[0] if len(error.args) == 1 else None
    return only.decode("utf-8", errors="replace") if isinstance(only, bytes) else str(error)


def compile_pattern(pattern: str, *, where: str) -> Pattern:
    """`pattern` compiled by RE2 with this module's options.

    Raises BadInput naming `where`, the pattern and RE2's reason for a pattern RE2 refuses
    (backreferences and lookaround among them), and for one whose program is larger than
    `MAX_PROGRAM_SIZE`.
    """
    try:
        compiled = re2.compile(pattern, _OPTIONS)
    except (re2.error, UnicodeEncodeError) as error:
        expected = f"{SYNTAX}; RE2: {_reason(error)}"
        raise BadInput(
            "invalid regular expression", where=where, expected=expected, found=repr(pattern)
        ) from None
    size: int = compiled.programsize
    if size > MAX_PROGRAM_SIZE:
        raise BadInput(
            "regular expression too large",
            where=where,
            expected=f"a regular expression of at most {MAX_PROGRAM_SIZE} RE2 instructions",
            found=f"{size} instructions in {pattern!r}",
        )
    return Pattern(source=pattern, groups=compiled.groups, program_size=size, _compiled=compiled)
