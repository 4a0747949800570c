"""Canonical JSON: the one byte form of every JSON document repro seals or signs.

The rules, so that the same document always gives the same bytes and the same sha256:
- an object's keys sorted by Unicode code point (the order of their UTF-8 bytes), each key once;
- no whitespace between tokens: `,` and `:` as separators, no indentation;
- UTF-8 without a byte order mark; characters beyond ASCII written as themselves, not as `\\u`
  escapes (JSON's mandatory escapes, quote, backslash and control characters, are kept);
- numbers as Python writes them: integers in decimal, floats in their shortest round-trip form;
  NaN and the infinities are refused, JSON has no words for them;
- exactly one line feed at the end of the document, and no other line break outside strings.

Reading refuses what writing never produces: a duplicate key, bytes that are not UTF-8, and any
text that is not the canonical form of its own value; it parses with `builder.readers.parse_json`,
so a document nested too deep or holding an integer too long is refused before it is parsed.
"""

from __future__ import annotations

import json
from typing import Any

from repro_serving.builder.errors import BadInput
from repro_serving.builder.readers import parse_json


def canonical_json(value: object) -> bytes:
    """The canonical bytes of `value` (dicts, lists, tuples, str, int, float, bool, None)."""
    try:
        text = json.dumps(
            value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
    except (TypeError, ValueError) as error:
        raise BadInput(
            "a document cannot be written as canonical JSON",
            found=str(error),
            hint="only objects with string keys, arrays, strings, finite numbers, booleans "
            "and null have a canonical form",
        ) from error
    return (text + "\n").encode("utf-8")


def parse_canonical(data: bytes, *, where: str) -> Any:
    """Like `readers.parse_json`; the bytes must also be exactly the canonical form of the value."""
    value = parse_json(data, where=where)
    if canonical_json(value) != data:
        raise BadInput(
            "a JSON document is not in canonical form",
            where=where,
            expected="sorted keys, no insignificant whitespace, UTF-8, one final line feed",
            found="other bytes for the same value",
        )
    return value
