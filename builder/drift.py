"""`Drift`: one disagreement between what must hold and what was observed.

A drift is data, never an exception: every checker returns a list of them, and the CLI turns
a non-empty list into exit code 1. Rendering lives in `builder.render`.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class DriftKind(StrEnum):
    UNEXPECTED_MAPPING = "unexpected-mapping"
    ORIGIN_DRIFT = "origin-drift"
    NOT_MAPPED = "not-mapped"
    UNRESOLVED = "unresolved"
    DELETED_MAPPING = "deleted-mapping"
    FORBIDDEN_ENV = "forbidden-env"
    UNREADABLE = "unreadable"
    PROCESS_ROLES = "process-roles"
    MODEL_FILE = "model-file"
    SIGNATURE = "signature"
    STATEMENT = "statement"
    FILE_DIGEST = "file-digest"
    MISSING_FILE = "missing-file"
    EXTRA_FILE = "extra-file"
    NOT_REGULAR_FILE = "not-regular-file"
    UNSAFE_PATH = "unsafe-path"
    CHECKSUMS = "checksums"


class Drift(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: DriftKind
    subject: str
    expected: str
    observed: str
    why: str
