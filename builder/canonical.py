"""Canonical JSON: the one byte form of every JSON document repro seals or signs.

The bytes of a value are its RFC 8785 serialization (the JSON Canonicalization Scheme, JCS),
exactly, followed by one line feed:
- an object's keys sorted by their UTF-16 code units (RFC 8785 section 3.2.3), each key once;
- no whitespace between tokens: `,` and `:` as separators, no indentation;
- strings in UTF-8, every character as itself except JSON's mandatory escapes: `\\"`, `\\\\`,
  `\\b`, `\\f`, `\\n`, `\\r`, `\\t`, and `\\u00xx` (lowercase hex) for the other control
  characters below U+0020 (section 3.2.2.2); a lone surrogate has no UTF-8 form and is refused;
- numbers as ECMAScript writes an IEEE 754 double (section 3.2.2.3, ECMA-262 Number::toString):
  the shortest digits that read back as the same double, in plain decimal from 1e-6 up to
  1e21 and in exponent form (`1e-7`, `1e+21`) beyond, with no `.0` on an integral value and
  `0` for negative zero; an integer outside the doubles' exact range, beyond +-(2**53 - 1), has
  no such form and is refused, as are NaN and the infinities;
- after the JCS bytes, exactly one line feed, so that line tools read a sealed document as one
  line; strip it and any RFC 8785 implementation gives the same bytes (a test holds repro to
  the `rfc8785` package over real locks, statements and generated values).

Reading refuses what writing never produces: a duplicate key, bytes that are not UTF-8, and any
text that is not the canonical form of its own value (`1.0` for `1`, `1e2` for `100`, an escaped
`\\u00e9`, keys out of order, a missing final line feed); it parses with
`builder.readers.parse_json`, so a document nested too deep or holding an integer too long is
refused before it is parsed.
"""

from __future__ import annotations

import json.encoder
import math
from typing import Any, Final

from repro_serving.builder.errors import BadInput
from repro_serving.builder.readers import parse_json

SAFE_INTEGER: Final = 2**53 - 1
"""The largest integer an IEEE 754 double holds exactly, and so the largest JCS writes."""

_encode_string = json.encoder.encode_basestring
"""JSON's mandatory escapes and no other, as RFC 8785 asks (the C encoder where CPython has it)."""


class _NoCanonicalForm(ValueError):
    """A value RFC 8785 cannot write."""


def canonical_json(value: object) -> bytes:
    """The canonical bytes of `value` (dicts, lists, tuples, str, int, float, bool, None)."""
    return _canonical(value, wide=None)


def _canonical(value: object, *, wide: list[int] | None) -> bytes:
    """`wide`: where each integer beyond the doubles' exact range is listed as it is written
    as its double; None: such an integer is refused."""
    parts: list[str] = []
    try:
        _write(value, parts, wide)
        return ("".join(parts) + "\n").encode("utf-8")
    except (_NoCanonicalForm, UnicodeEncodeError) as error:
        found = "a lone surrogate" if isinstance(error, UnicodeEncodeError) else str(error)
        raise BadInput(
            "a document cannot be written as canonical JSON",
            found=found,
            hint="only objects with string keys, arrays, strings of Unicode scalar values, "
            f"finite numbers (integers within +-{SAFE_INTEGER}), booleans and null have a "
            "canonical form",
        ) from error


def parse_canonical(data: bytes, *, where: str) -> Any:
    """Like `readers.parse_json`; the bytes must also be exactly the canonical form of the value."""
    value = parse_json(data, where=where)
    try:
        # JSON numbers are doubles: an integer literal beyond 2**53 - 1 reads as the double
        # nearest it, canonical only if written as that double is
        wide: list[int] = []
        canonical = _canonical(value, wide=wide)
    except BadInput as error:
        raise _not_canonical(where, error.found or error.what) from error
    if canonical != data:
        raise _not_canonical(where, "other bytes for the same value")
    return _as_doubles(value) if wide else value


def _as_doubles(value: Any) -> Any:
    """`value` with each integer beyond the doubles' exact range as the double it denotes."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not -SAFE_INTEGER <= value <= SAFE_INTEGER:
        return float(value)
    if isinstance(value, dict):
        return {key: _as_doubles(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_doubles(item) for item in value]
    return value


def _not_canonical(where: str, found: str) -> BadInput:
    return BadInput(
        "a JSON document is not in canonical form",
        where=where,
        expected="RFC 8785 (sorted keys, no insignificant whitespace, UTF-8, shortest numbers), "
        "one final line feed",
        found=found,
    )


def _write(value: object, parts: list[str], wide: list[int] | None) -> None:
    if value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, str):
        parts.append(_encode_string(value))
    elif isinstance(value, int):
        parts.append(_integer(value, wide))
    elif isinstance(value, float):
        parts.append(_number(value))
    elif isinstance(value, dict):
        _write_object(value, parts, wide)
    elif isinstance(value, list | tuple):
        parts.append("[")
        for index, item in enumerate(value):
            if index:
                parts.append(",")
            _write(item, parts, wide)
        parts.append("]")
    else:
        raise _NoCanonicalForm(f"a value of type {type(value).__name__}")


def _write_object(value: dict[Any, Any], parts: list[str], wide: list[int] | None) -> None:
    keys = list(value)
    for key in keys:
        if not isinstance(key, str):
            raise _NoCanonicalForm(f"an object key of type {type(key).__name__}")
    parts.append("{")
    for index, key in enumerate(sorted(keys, key=_utf16)):
        if index:
            parts.append(",")
        parts.append(_encode_string(key))
        parts.append(":")
        _write(value[key], parts, wide)
    parts.append("}")


def _utf16(key: str) -> bytes:
    """The sort key of RFC 8785: the string's UTF-16 code units, big-endian so that bytes
    compare as the units do (it differs from code point order for U+E000..U+FFFF against
    characters beyond U+FFFF)."""
    return key.encode("utf-16-be")


def _integer(value: int, wide: list[int] | None) -> str:
    """An integer as the double it is; one beyond the doubles' exact range has no canonical
    form to write, and one read (`wide` is a list) is written as the double nearest it."""
    if -SAFE_INTEGER <= value <= SAFE_INTEGER:
        return str(value)
    if wide is None:
        raise _NoCanonicalForm(f"an integer beyond +-{SAFE_INTEGER}: {value}")
    wide.append(value)
    try:
        return _number(float(value))
    except OverflowError as error:
        raise _NoCanonicalForm(f"an integer beyond every double: {value}") from error


def _number(value: float) -> str:
    """ECMAScript's Number::toString of a double, from Python's shortest round-trip digits
    (`repr`), which are the digits ECMAScript chooses."""
    if not math.isfinite(value):
        raise _NoCanonicalForm(f"the number {value}")
    if value == 0:
        return "0"  # and negative zero too
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    # value = 0.<digits> x 10**point: `point` is where the decimal point stands in the digits;
    # in 0.00ddd each zero after the point moves it one place left
    leading_zeros = len(fraction) - len(fraction.lstrip("0"))
    point = len(whole) if whole.strip("0") else -leading_zeros
    point += int(exponent or "0")
    digits = (whole + fraction).strip("0")
    count = len(digits)
    if count <= point <= 21:
        text = digits + "0" * (point - count)
    elif 0 < point <= 21:
        text = f"{digits[:point]}.{digits[point:]}"
    elif -6 < point <= 0:
        text = "0." + "0" * -point + digits
    else:
        power = point - 1
        shown = digits if count == 1 else f"{digits[0]}.{digits[1:]}"
        text = f"{shown}e{'+' if power >= 0 else '-'}{abs(power)}"
    return sign + text
