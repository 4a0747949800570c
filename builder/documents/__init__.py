"""Sealed JSON documents read back into the typed model that wrote them, validated whole.

One reader for every typed evidence file: the bytes are validated against the model that wrote
them, and a document that does not follow it is one `InvalidDocument` (`documents.invalid`)
listing every problem, never a `KeyError` or `TypeError` further down.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ValidationError

from repro_serving.builder.documents.invalid import InvalidDocument, Model, validated
from repro_serving.builder.documents.translate import problems_of
from repro_serving.builder.readers import EVIDENCE_LIMIT, read_bytes


def parse_document(model: type[Model], data: bytes, *, where: str, what: str) -> Model:
    """JSON `data` as a `model` (strictly: no type coercion), or InvalidDocument naming `what`
    and every problem by key path, line and column."""
    refusal = f"{what} does not follow its format"
    return validated(
        model, data, source=where, title=refusal, what=refusal, expected=model.__name__
    )


def validate_document(
    model: type[Model], document: object, *, where: str, what: str, refusal: str | None = None
) -> Model:
    """An already parsed document (canonical JSON, TOML) as a `model`, or InvalidDocument
    (`refusal`, by default "<what> does not follow its format") listing every problem by key
    path."""
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
) -> InvalidDocument:
    """One InvalidDocument listing every problem pydantic found validating `model`."""
    refusal = refusal or f"{what} does not follow its format"
    problems = problems_of(error, model)
    return InvalidDocument(where, problems, title=refusal, what=refusal, expected=model.__name__)


def read_sealed(path: Path, *, what: str, limit: int = EVIDENCE_LIMIT) -> bytes:
    """A file of a bundle: a regular file, never followed through a symlink, at most `limit`."""
    return read_bytes(path, limit=limit, what=what, follow_symlinks=False)


def read_document(model: type[Model], path: Path, *, what: str) -> Model:
    """A sealed evidence file read (`read_sealed`) into its `model`."""
    return parse_document(model, read_sealed(path, what=what), where=str(path), what=what)
