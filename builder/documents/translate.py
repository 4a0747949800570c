"""pydantic's validation errors in a person's words: one `Problem` each, by key path.

Every problem names where (a TOML-style key path such as `launch.profiles.teacher.argv[2]`, and
its line and column where the source text is given), what is wrong, what was expected (the
field's declared type or pattern meaning, the keys a table accepts) and what was found (its kind
and value, shortened; an unknown key close to a known one says which it may have meant). A
model's own checks raise `violation`s, already worded, through `raise_all`.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

from pydantic import BaseModel, RootModel, StringConstraints, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from repro_serving.builder.documents.positions import (
    Loc,
    json_positions,
    nearest,
    toml_positions,
)

Syntax = Literal["json", "toml"]
"""The language a document was written in: the words for what was found follow it."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document: `where` inside it (a key path, '' for the whole file),
    at `position` ('line L, column C', '' where the text does not give one)."""

    where: str
    what: str
    expected: str
    found: str
    position: str = ""

    @property
    def place(self) -> str:
        """`where` and `position` together: 'key a.b (line 3, column 1)'."""
        if self.where and self.position:
            return f"{self.where} ({self.position})"
        return self.where or self.position

    def line(self) -> str:
        """The problem on one line: place, what, and both sides."""
        place = f"{self.place}: " if self.place else ""
        return f"{place}{self.what} (expected {self.expected}, found {self.found})"


_MEANINGS: dict[str, str] = {}


def meaning(pattern: str, meaning: str) -> StringConstraints:
    """A string constraint whose `meaning` error messages show instead of the regex."""
    _MEANINGS[pattern] = meaning
    return StringConstraints(pattern=pattern)


def violation(loc: Loc, what: str, expected: str, found: str) -> InitErrorDetails:
    """One broken invariant of a model's own check; `found` is already worded for a person."""
    context = {"what": what, "expected": expected, "found": found}
    error = PydanticCustomError("repro", "{what}", context)
    return InitErrorDetails(type=error, loc=loc, input=found)


def raise_all(title: str, violations: Sequence[InitErrorDetails]) -> None:
    """Every violation a check found, at once, as one ValidationError."""
    if violations:
        raise ValidationError.from_exception_data(title, list(violations))


def problems_of(
    error: ValidationError,
    model: type[BaseModel],
    *,
    syntax: Syntax = "json",
    text: str | None = None,
) -> list[Problem]:
    """Every problem of `error`, raised validating `model`; `text`, the source, places each."""
    details = _without_echoes(error.errors(include_url=False))
    locate: Callable[[Sequence[str | int]], str] = lambda loc: ""  # noqa: E731
    if text is not None:
        positions = (toml_positions if syntax == "toml" else json_positions)(text)
        locate = lambda loc: nearest(positions, loc)  # noqa: E731
    return [_problem(model, detail, syntax, locate) for detail in details]


def _without_echoes(details: Sequence[Any]) -> list[Any]:
    """Drop a length error that only echoes its own items' errors (a failed item is not counted)."""
    locs = [tuple(detail["loc"]) for detail in details]
    return [
        detail
        for detail, loc in zip(details, locs, strict=True)
        if detail["type"] != "too_short"
        or not any(len(other) > len(loc) and other[: len(loc)] == loc for other in locs)
    ]


_BARE_KEY: Final = re.compile(r"^[A-Za-z0-9_-]+$")


def key_path(loc: Sequence[str | int]) -> str:
    """A TOML-style key path: `launch.profiles.teacher.argv[2]`, `model[0].files."a b"`."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            key = part if _BARE_KEY.match(part) else json.dumps(part, ensure_ascii=False)
            text += f".{key}" if text else key
    return text


def _problem(
    root: type[BaseModel], detail: Any, syntax: Syntax, locate: Callable[[Loc], str]
) -> Problem:
    loc: Loc = tuple(detail["loc"])
    kind: str = detail["type"]
    is_key = bool(loc) and loc[-1] == "[key]"
    if is_key:
        loc = loc[:-1]
    where = f"key {key_path(loc)}" if loc else "top level"
    position = locate(loc)
    annotation = _annotation_at(root, loc, key=is_key)
    ctx: dict[str, Any] = detail.get("ctx") or {}
    if kind == "extra_forbidden":
        expected = _known_keys(root, loc[:-1])
        found = f"key {key_path(loc[-1:])}{_did_you_mean(root, loc)}"
        return Problem(where, "unknown key", expected, found, position)
    if kind == "missing":
        expected = _expected_from(annotation, detail, syntax)
        return Problem(where, "missing key", expected, "nothing", position)
    if kind == "repro":
        return Problem(where, str(ctx["what"]), str(ctx["expected"]), str(ctx["found"]), position)
    found = shown(detail["input"], syntax) if "input" in detail else "nothing"
    if kind == "value_error":  # a validator's own words say what is wrong
        what = str(detail["msg"]).removeprefix("Value error, ")
        expected = _meaning(annotation) or "a value the check accepts"
        return Problem(where, what, expected, found, position)
    what = "wrong type" if kind.endswith("_type") else "invalid value"
    if is_key:
        what = "invalid key"
    return Problem(where, what, _expected_from(annotation, detail, syntax), found, position)


def _expected_from(annotation: Any, detail: Any, syntax: Syntax) -> str:
    kind: str = detail["type"]
    if kind.endswith("_type") or kind in {"missing", "literal_error", "string_pattern_mismatch"}:
        described = _describe(annotation, syntax)
        if described is not None:
            return described
    ctx: dict[str, Any] = detail.get("ctx") or {}
    if kind in _LENGTHS:
        bound, unit = _LENGTHS[kind]
        count = ctx[f"{bound}_length"]
        return f"{'at least' if bound == 'min' else 'at most'} {count} {unit}{'s' * (count != 1)}"
    message: str = detail["msg"]
    return message.removeprefix("Input should be ")


_LENGTHS: Final = {
    "too_short": ("min", "item"),
    "too_long": ("max", "item"),
    "string_too_short": ("min", "character"),
    "string_too_long": ("max", "character"),
}


def _strip(annotation: Any) -> tuple[Any, list[Any]]:
    """The type under Annotated, Optional and RootModel, with the Annotated metadata met on the
    way."""
    metadata: list[Any] = []
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation, *more = get_args(annotation)
            metadata += more
        elif origin in (Union, UnionType):
            members = [a for a in get_args(annotation) if a is not NoneType]
            if len(members) != 1:
                return annotation, metadata
            annotation = members[0]
        elif isinstance(annotation, type) and issubclass(annotation, RootModel):
            annotation = annotation.model_fields["root"].rebuild_annotation()
        else:
            return annotation, metadata


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _field_annotation(model: type[BaseModel], key: str) -> Any | None:
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return field.rebuild_annotation()
    return None


_SEQUENCES: Final = (tuple, list, Sequence)


def _annotation_at(root: type[BaseModel], loc: Sequence[str | int], *, key: bool = False) -> Any:
    """The declared type at `loc` below `root` (of a dict key when `key`), or None if unknown."""
    annotation: Any = root
    for index, part in enumerate(loc):
        bare, _ = _strip(annotation)
        origin = get_origin(bare)
        if _is_model(bare) and isinstance(part, str):
            annotation = _field_annotation(bare, part)
        elif origin in _SEQUENCES and isinstance(part, int):
            annotation = get_args(bare)[0]
        elif origin is dict:
            last_key = key and index == len(loc) - 1
            annotation = get_args(bare)[0 if last_key else 1]
        else:
            return None
        if annotation is None:
            return None
    return annotation


def _meaning(annotation: Any) -> str | None:
    """What the pattern of a string constraint means (`meaning`), if it has one."""
    _, metadata = _strip(annotation)
    for item in metadata:
        pattern = getattr(item, "pattern", None)
        if isinstance(pattern, str) and pattern in _MEANINGS:
            return _MEANINGS[pattern]
    return None


def _describe(annotation: Any, syntax: Syntax) -> str | None:
    described = _meaning(annotation)
    if described is not None:
        return described
    bare, _ = _strip(annotation)
    origin = get_origin(bare)
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(a) for a in get_args(bare))
    simple = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
    if bare in simple:
        return simple[bare]
    if origin in _SEQUENCES:
        return "an array"
    if origin is dict or _is_model(bare):
        return "a table" if syntax == "toml" else "an object"
    return None


def _known_key_names(root: type[BaseModel], loc: Sequence[str | int]) -> list[str] | None:
    """The keys the table at `loc` accepts; None where it is not a table of known keys."""
    model, _ = _strip(_annotation_at(root, loc))
    if not _is_model(model):
        return None
    return [field.alias or name for name, field in model.model_fields.items()]


def _known_keys(root: type[BaseModel], loc: Sequence[str | int]) -> str:
    keys = _known_key_names(root, loc)
    return "no such key" if keys is None else "one of the keys " + ", ".join(keys)


def _did_you_mean(root: type[BaseModel], loc: Sequence[str | int]) -> str:
    """` (did you mean K?)` for an unknown key close to a known one (difflib's ratio >= 0.6)."""
    keys = _known_key_names(root, loc[:-1]) or []
    close = difflib.get_close_matches(str(loc[-1]), keys, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


_SHOWN_LENGTH: Final = 80


def _inline(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key_path([k])} = {_inline(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_inline(item) for item in value) + "]"
    return str(value)


def shown(value: object, syntax: Syntax = "toml") -> str:
    """What was found, for a person: its kind in `syntax`'s words and its value, shortened."""
    kinds = {bool: "a boolean", str: "a string", int: "an integer", float: "a number"}
    kinds |= {list: "an array", tuple: "an array"}
    if syntax == "toml":
        kinds[dict] = "a table"
        text = _inline(value)
    else:
        kinds |= {dict: "an object", NoneType: "null"}
        text = json.dumps(value, ensure_ascii=False, default=str)
    kind = kinds.get(type(value), "a value")
    if len(text) > _SHOWN_LENGTH:
        text = text[: _SHOWN_LENGTH - 1] + "…"
    return kind if value is None and syntax == "json" else f"{kind} {text}"
