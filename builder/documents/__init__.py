"""Sealed JSON documents read back into the typed model that wrote them, validated whole.

One reader for every typed evidence file: the bytes are validated against the model that wrote
them, and a document that does not follow it is one `BadInput` listing every problem by key path
(the first ten), never a `KeyError` or `TypeError` further down.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, TypeVar

from pydantic import BaseModel, ValidationError

from repro_serving.builder.errors import BadInput
from repro_serving.builder.readers import EVIDENCE_LIMIT, read_bytes

SHOWN_PROBLEMS: Final = 10

Model = TypeVar("Model", bound=BaseModel)


def parse_document(model: type[Model], data: bytes, *, where: str, what: str) -> Model:
    """JSON `data` as a `model` (strictly: no type coercion), or BadInput naming `what` and
    every problem by key path."""
    try:
        return model.model_validate_json(data, strict=True)
    except ValidationError as error:
        raise invalid(error, model, where=where, what=what) from error


def validate_document(
    model: type[Model], document: object, *, where: str, what: str, refusal: str | None = None
) -> Model:
    """An already parsed document (canonical JSON, TOML) as a `model`, or BadInput (`refusal`,
    by default "<what> does not follow its format") listing every problem by key path."""
    try:
        return model.model_validate(document)
    except ValidationError as error:
        raise invalid(error, model, where=where, what=what, refusal=refusal) from error


def invalid(
    error: ValidationError,
    model: type[BaseModel],
    *,
    where: str,
    what: str,
    refusal: str | None = None,
) -> BadInput:
    """One BadInput listing every problem pydantic found (the first ten, and how many more)."""
    problems = [
        f"{'.'.join(str(part) for part in e['loc']) or '(document)'}: {e['msg']}"
        + ("" if e["type"] == "missing" else f" (found {_shown(e.get('input'))})")
        for e in error.errors(include_url=False)
    ]
    shown = "; ".join(problems[:SHOWN_PROBLEMS])
    more = len(problems) - SHOWN_PROBLEMS
    return BadInput(
        refusal or f"{what} does not follow its format",
        where=where,
        expected=model.__name__,
        found=shown + (f"; and {more} more" if more > 0 else ""),
    )


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def read_sealed(path: Path, *, what: str, limit: int = EVIDENCE_LIMIT) -> bytes:
    """A file of a bundle: a regular file, never followed through a symlink, at most `limit`."""
    return read_bytes(path, limit=limit, what=what, follow_symlinks=False)


def read_document(model: type[Model], path: Path, *, what: str) -> Model:
    """A sealed evidence file read (`read_sealed`) into its `model`."""
    return parse_document(model, read_sealed(path, what=what), where=str(path), what=what)
