"""The one way repro reads an input file, sealed or not, and the JSON and TOML in it.

This module owns how an input file is opened, how much of it is read, and the bounds every JSON
and TOML document must keep before any parser walks it:
- a file is opened without blocking (`O_NONBLOCK`: a FIFO opens at once instead of waiting for
  a writer), checked with `fstat` on the open descriptor and refused unless it is a regular
  file, so neither a FIFO nor a device (/dev/zero) nor a directory is ever read;
- a symlink is followed for a file named on the command line or in a manifest, never for a
  file inside a bundle (`follow_symlinks=False`: `O_NOFOLLOW`);
- a file larger than the limit of its kind is refused before a byte is read, and no more than
  limit + 1 bytes are ever read, so a file growing while read is refused too;
- a JSON document's nesting depth is measured by a scan of its brackets outside strings before
  `json.loads` runs, a TOML document's on the parsed value (its parser's own recursion is caught):
  no document can exhaust the stack; integers have at most `MAX_INT_DIGITS` digits, and NaN and
  the infinities are refused.

A file that does not exist, is not a regular file, is too large, or does not parse is `BadInput`
(the input must change); one that exists but cannot be read (permission, I/O) is
`NotObservable`. Streaming hashes of large files stay in `builder.hashing`.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import tomllib
from collections.abc import Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO, Final, cast

from repro_serving.builder.errors import BadInput, NotObservable, ReproError

KIB: Final = 1 << 10
MIB: Final = 1 << 20

MANIFEST_LIMIT: Final = 1 * MIB
"""A manifest is hand-written TOML: the largest committed one is 18 KiB."""
KERNEL_SET_LIMIT: Final = 1 * MIB
"""A kernel set is hand-written TOML like a manifest: the largest committed one is 3 KiB."""
SUITE_LIMIT: Final = 64 * MIB
"""An oracle suite carries its prompt texts: a long-context prompt of 128k tokens is about
0.5 MiB, so a hundred of them fit."""
LOCK_LIMIT: Final = 64 * MIB
"""The committed tiny-cpu lock, every ELF mapped by four processes, is 155 KiB; a stack of
dozens of processes stays within a few MiB."""
STATEMENT_LIMIT: Final = 64 * MIB
"""One subject of about 150 bytes per sealed file: room for some 400 000 files."""
ENVELOPE_LIMIT: Final = STATEMENT_LIMIT * 4 // 3 + 1 * MIB
"""The statement in base64 (4 bytes per 3), and the signatures beside it."""
SHA256SUMS_LIMIT: Final = 64 * MIB
"""One line of about 100 bytes per sealed file, as many files as a statement can hold."""
KEY_LIMIT: Final = 64 * KIB
"""A PEM Ed25519 key is under 200 bytes; the slack is for comments, never for a log or a device
named by mistake."""
EVIDENCE_LIMIT: Final = 256 * MIB
"""An evidence file (server log, bench rows, audit snapshot, metrics) is read whole into memory:
a day of debug logging fits."""
ENVIRONMENT_FILE_LIMIT: Final = 64 * MIB
"""A file of an installed environment or model cache (pyvenv.cfg, METADATA, RECORD,
direct_url.json, a hub ref): torch's RECORD, the largest, is 1.4 MiB."""
REGISTRY_ENTRY_LIMIT: Final = 64 * KIB
"""An entry of the server registry: four short fields repro wrote itself."""

MAX_DEPTH: Final = 64
"""Nested objects, arrays and tables: the deepest committed document nests 12 levels; 64 keeps
every parser and every recursive walk of repro far from Python's recursion limit."""
MAX_INT_DIGITS: Final = 300
"""Digits of an integer: a sha256 as a number has 78, a byte count 20; Python refuses to convert
integers beyond 4300 digits at all, and converting one costs time quadratic in its length."""

_READ_CHUNK: Final = 1 * MIB


class NoSuchFile(BadInput):
    """The file does not exist (or a part of its path is not a directory)."""


class NotParsed(BadInput):
    """A JSON or TOML document that does not parse: `message` in the parser's words, `position`
    as 'line L, column C', 'end of file' or '' where the parser does not say."""

    def __init__(self, kind: str, message: str, *, where: str, position: str) -> None:
        super().__init__(
            f"a {kind} document does not parse",
            where=f"{where}, {position}" if position else where,
            expected=f"valid {kind}",
            found=message,
        )
        self.message = message
        self.position = position


def describe_mode(mode: int) -> str:
    """What kind of file a mode is, in words."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((words for test, words in kinds if test(mode)), f"a file of mode {mode:o}")


# --- files ---------------------------------------------------------------------------------------


def open_regular(path: Path | str, *, what: str, follow_symlinks: bool = True) -> BinaryIO:
    """`path` open for reading, once its descriptor is known to be a regular file.

    For files read as a stream (an ELF file of a GiB); the caller closes it. `what` names the
    file in errors ('the manifest file')."""
    name = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        descriptor = os.open(name, flags)
    except OSError as error:
        raise _open_refused(name, what, error, follow_symlinks=follow_symlinks) from error
    except ValueError as error:  # a NUL byte: no file has such a name
        raise BadInput(f"{what} has a name no file can have", where=repr(name)) from error
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(name, what, describe_mode(mode))
        os.set_blocking(descriptor, True)  # only the open had to not wait: a file system may care
        return cast(BinaryIO, os.fdopen(descriptor, "rb"))
    except BaseException:
        os.close(descriptor)
        raise


def read_bytes(path: Path | str, *, limit: int, what: str, follow_symlinks: bool = True) -> bytes:
    """Every byte of the regular file `path`, refused above `limit` bytes before any is read."""
    name = os.fspath(path)
    with open_regular(name, what=what, follow_symlinks=follow_symlinks) as stream:
        try:
            size = os.fstat(stream.fileno()).st_size
            if size > limit:
                raise _too_large(name, what, limit, f"{size} bytes")
            chunks: list[bytes] = []
            total = 0
            while total <= limit and (chunk := stream.read(min(_READ_CHUNK, limit + 1 - total))):
                chunks.append(chunk)
                total += len(chunk)
        except OSError as error:
            raise NotObservable(
                f"cannot read {what}", where=name, found=error.strerror or type(error).__name__
            ) from error
    if total > limit:
        raise _too_large(name, what, limit, f"more than {limit} bytes: it grew while read")
    return b"".join(chunks)


def read_needed(
    path: Path | str,
    *,
    limit: int,
    what: str,
    missing: str,
    expected: str,
    refusal: type[ReproError] = BadInput,
    hint: str | None = None,
) -> bytes:
    """`read_bytes` of a file the caller needs: its absence is refused in the caller's words,
    `refusal(missing, expected=expected, hint=hint)` with the reader's `found`; every other
    refusal as `read_bytes` raises it."""
    try:
        return read_bytes(path, limit=limit, what=what)
    except NoSuchFile as error:
        raise refusal(
            missing, where=os.fspath(path), expected=expected, found=error.found, hint=hint
        ) from error


def read_json(path: Path | str, *, limit: int, what: str, follow_symlinks: bool = True) -> Any:
    """The value of the JSON file `path`, read and parsed within the bounds above."""
    data = read_bytes(path, limit=limit, what=what, follow_symlinks=follow_symlinks)
    return parse_json(data, where=os.fspath(path))


def read_toml(
    path: Path | str, *, limit: int, what: str, follow_symlinks: bool = True
) -> dict[str, Any]:
    """The tables of the TOML file `path`, read and parsed within the bounds above."""
    name = os.fspath(path)
    data = read_bytes(name, limit=limit, what=what, follow_symlinks=follow_symlinks)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadInput(
            "a TOML document is not UTF-8",
            where=name,
            found=f"byte {error.start}: {data[error.start : error.start + 1]!r}",
        ) from error
    return parse_toml(text, where=name)


def _open_refused(name: str, what: str, error: OSError, *, follow_symlinks: bool) -> ReproError:
    found = error.strerror or type(error).__name__
    if error.errno in (errno.ENOENT, errno.ENOTDIR):
        return NoSuchFile(f"{what} does not exist", where=name, found=found)
    if error.errno == errno.ELOOP and not follow_symlinks:
        return _not_regular(name, what, "a symlink")
    if error.errno == errno.ENXIO:  # a socket cannot be opened at all
        return _not_regular(name, what, _kind_of(name))
    if error.errno in (errno.ELOOP, errno.ENAMETOOLONG):
        return BadInput(f"{what} cannot be opened", where=name, found=found)
    return NotObservable(
        f"cannot read {what}",
        where=name,
        found=found,
        hint="check that the file is readable by this user",
    )


def _kind_of(name: str) -> str:
    try:
        return describe_mode(os.lstat(name).st_mode)
    except OSError:
        return "a file that cannot be opened"


def _not_regular(name: str, what: str, kind: str) -> BadInput:
    return BadInput(
        f"{what} is not a regular file", where=name, expected="a regular file", found=kind
    )


def _too_large(name: str, what: str, limit: int, found: str) -> BadInput:
    return BadInput(
        f"{what} is too large", where=name, expected=f"at most {limit} bytes", found=found
    )


# --- JSON ----------------------------------------------------------------------------------------

# A string runs to its closing quote, or to the end of the input when it has none: every quote
# outside a string then starts a match, so the scan stays linear on any input.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKET = bytes(byte for byte in range(256) if byte not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth(data: bytes) -> int:
    """How deep the objects and arrays of a JSON text nest (0 for a scalar), without parsing it.

    UTF-8 never encodes a character beyond ASCII with an ASCII byte, so scanning the bytes finds
    the same brackets as scanning the text."""
    brackets = _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKET)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


class _OutOfRange(ValueError):
    """A number JSON can spell and repro does not read."""

    def __init__(self, expected: str, found: str) -> None:
        super().__init__(found)
        self.expected = expected
        self.found = found


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _OutOfRange(
            f"integers of at most {MAX_INT_DIGITS} digits", f"an integer of {digits} digits"
        )
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _OutOfRange("a finite number", f"{text[:40]}, which is {value}")
    return value


def _no_constant(text: str) -> float:
    raise _OutOfRange("a finite number (JSON has no NaN or Infinity)", text)


def _refuse_duplicates(pairs: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):  # rare: only then is the key looked for
        keys = [key for key, _ in pairs]
        twice = next(key for index, key in enumerate(keys) if key in keys[:index])
        raise ValueError(f"duplicate key {twice!r}")
    return result


def refuse_duplicate_keys(data: bytes | str, *, where: str) -> None:
    """`BadInput` naming `where` and the key when an object of the JSON document `data` (one a
    model already parsed: its depth is bounded) states a key twice."""
    try:
        json.loads(data, object_pairs_hook=_refuse_duplicates)
    except ValueError as error:
        raise BadInput("a JSON document does not parse", where=where, found=str(error)) from None


def parse_json(data: bytes | str, *, where: str) -> Any:
    """The value of a JSON document (UTF-8 bytes, or text), each key of an object once, nested at
    most `MAX_DEPTH` deep, its numbers finite and its integers of at most `MAX_INT_DIGITS`
    digits; `BadInput` naming `where` otherwise."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    depth = json_depth(raw)
    if depth > MAX_DEPTH:
        raise _too_deep(where, f"{depth} levels")
    try:
        text = data if isinstance(data, str) else data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadInput(
            "a JSON document is not UTF-8",
            where=where,
            found=f"byte {error.start}: {raw[error.start : error.start + 1]!r}",
        ) from error
    try:
        return json.loads(
            text,
            object_pairs_hook=_refuse_duplicates,
            parse_int=_bounded_int,
            parse_float=_finite_float,
            parse_constant=_no_constant,
        )
    except json.JSONDecodeError as error:
        position = f"line {error.lineno}, column {error.colno}"
        raise NotParsed("JSON", error.msg, where=where, position=position) from error
    except _OutOfRange as error:
        raise _number_refused(where, error.expected, error.found) from error
    except ValueError as error:  # a duplicate key
        raise BadInput("a JSON document does not parse", where=where, found=str(error)) from error


def _too_deep(where: str, found: str) -> BadInput:
    return BadInput(
        "a document nests too deep",
        where=where,
        expected=f"at most {MAX_DEPTH} levels of nested objects, arrays or tables",
        found=found,
    )


# --- TOML ----------------------------------------------------------------------------------------

_TOML_POSITION = re.compile(
    r"^(?P<msg>.*?)\s*\(at (?:line (?P<line>\d+), column (?P<col>\d+)|(?P<end>end of document))\)$"
)
_INT_BOUND: Final = 10**MAX_INT_DIGITS


def parse_toml(text: str, *, where: str) -> dict[str, Any]:
    """The tables of a TOML document, nested at most `MAX_DEPTH` deep, its floats finite and its
    integers of at most `MAX_INT_DIGITS` digits; `BadInput` naming `where` otherwise."""
    try:
        document = tomllib.loads(text, parse_float=_finite_float)
    except tomllib.TOMLDecodeError as error:
        match = _TOML_POSITION.match(str(error))
        if match is None:
            raise NotParsed("TOML", str(error), where=where, position="") from error
        position = "end of file" if match["end"] else f"line {match['line']}, column {match['col']}"
        raise NotParsed("TOML", match["msg"], where=where, position=position) from error
    except RecursionError as error:  # inline arrays and tables: tomllib recurses into each
        raise _too_deep(where, "more levels than the parser can follow") from error
    except _OutOfRange as error:
        raise _number_refused(where, error.expected, error.found) from error
    except ValueError as error:  # an integer beyond Python's limit of 4300 digits
        expected = f"integers of at most {MAX_INT_DIGITS} digits"
        raise _number_refused(where, expected, str(error).split(";")[0]) from error
    check_bounds(document, where=where)
    return document


def check_bounds(value: object, *, where: str) -> None:
    """Refuse a parsed document nested deeper than `MAX_DEPTH`, or holding an integer of more
    than `MAX_INT_DIGITS` digits; iterative, so any depth is measured without recursion."""
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise _too_deep(where, f"more than {MAX_DEPTH} levels")
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) >= _INT_BOUND:
            expected = f"integers of at most {MAX_INT_DIGITS} digits"
            raise _number_refused(where, expected, f"an integer of {len(str(item))} digits")


def _number_refused(where: str, expected: str, found: str) -> BadInput:
    return BadInput(
        "a document holds a number repro does not read", where=where, expected=expected, found=found
    )
