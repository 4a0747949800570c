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
    DISPATCH = "dispatch"
    UNRESOLVED = "unresolved"
    DELETED_MAPPING = "deleted-mapping"
    FORBIDDEN_ENV = "forbidden-env"
    ENVIRONMENT = "environment"
    UNREADABLE = "unreadable"
    PROCESS_ROLES = "process-roles"
    MODEL_FILE = "model-file"
    HOST = "host"
    NOT_OBSERVABLE = "not-observable"
    GATE = "gate"
    CLAIM = "claim"
    MODEL_EXTRA_FILE = "model-extra-file"
    MODEL_BLOB = "model-blob"
    MODEL_REVISION = "model-revision"
    MODEL_DIRECTORY = "model-directory"
    SOURCE_TREE = "source-tree"
    SOURCE_COMMIT = "source-commit"
    SOURCE_DIRTY = "source-dirty"
    SOURCE_PATCH = "source-patch"
    PYTHON_INTERPRETER = "python-interpreter"
    PACKAGE_VERSION = "package-version"
    ARTIFACT = "artifact"
    EDITABLE_INSTALL = "editable-install"
    INSTALLED_FILE = "installed-file"
    UNOWNED_FILE = "unowned-file"
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


class Difference(BaseModel):
    """What differs from the record where the manifest allows it to: never a drift, never
    silent. A replay states each one in its verdict and seals it with its run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    subject: str
    """The fact, as the lock names it (`python.interpreter`)."""
    sealed: str
    here: str
    accepted_by: str
    """The manifest's words that allow it (`[python] interpreter = "3.11"`)."""
    consequence: str
    """What is judged otherwise because of it."""
