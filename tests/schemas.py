"""Every `--json` document a test reads, checked against the schema repro ships for it.

The check is an independent validator's (`jsonschema`, draft 2020-12), reading the files in
builder/schemas/ as an installed repro ships them: a document that drifts from its schema, or a
schema that drifts from its models (`tests/test_schemas.py`), fails here.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator

from repro_serving.builder.commands.schema import schema_file, schema_names
from repro_serving.builder.schemadoc import shipped


def _validator(name: str) -> Draft202012Validator:
    schema = json.loads(shipped(schema_file(name)))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def assert_valid(name: str, document: Any) -> Any:
    """`document` (parsed, or the text of one) if it follows the shipped schema `name` (a
    command, or `lock`); an AssertionError naming each place where it does not otherwise."""
    value = json.loads(document) if isinstance(document, str | bytes) else document
    errors = sorted(_validator(name).iter_errors(value), key=lambda e: list(e.absolute_path))
    assert not errors, f"not a valid {schema_file(name)} document: " + "; ".join(
        f"at {'/'.join(map(str, e.absolute_path)) or 'the top'}: {e.message[:300]}"
        for e in errors[:5]
    )
    return value


def assert_valid_error(document: Any) -> Any:
    """`document` if it is the error document every command's schema allows (the envelope
    alone): valid against each of them."""
    for name in schema_names():
        if name not in ("manifest", "lock"):
            assert_valid(name, document)
    return document
