"""The JSON Schemas repro ships in builder/schemas/: how one is made from typed models, and how
a shipped one is read back.

Each schema is generated from the pydantic models that write and read the document it
describes (the lock, a command's `--json` report), draft 2020-12; a model that always writes
every field says so (`json_schema_serialization_defaults_required`) and its schema requires each,
a field with a default too, but not those it omits when empty (`OMITTED_WHEN_EMPTY`). Every
field is described by the docstring that follows its annotation (an attribute docstring, read
from the model's source here rather than at import: building the models stays as fast as it is).
The tests hold every shipped file equal to what its models produce.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
from importlib import resources
from pathlib import Path
from typing import Any, Final, get_args

from pydantic import BaseModel, TypeAdapter

SCHEMAS_DIR: Final = "schemas"
"""The folder of the shipped schemas, package data of `repro_serving.builder`."""
DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"


def schema_document(shape: Any, *, title: str) -> str:
    """The text of the JSON Schema of `shape` (a model, or a union of models), as shipped:
    sorted keys, two-space indentation, one final line feed."""
    schema: dict[str, Any] = TypeAdapter(shape).json_schema()
    models = _models(shape)
    definitions: dict[str, Any] = schema.get("$defs", {})
    described = list(definitions.items())
    if "properties" in schema and isinstance(shape, type):
        described.append((shape.__name__, schema))
    sources: dict[Path, ast.Module] = {}
    for name, definition in described:
        model = models.get(name)
        if model is None:
            continue  # an enum's or an alias's definition has no fields
        if model.model_config.get("json_schema_serialization_defaults_required"):
            optional = getattr(model, "OMITTED_WHEN_EMPTY", ())
            definition["required"] = [k for k in definition["properties"] if k not in optional]
        for owner in model.__mro__:  # the nearest docstring of a field wins, as in pydantic
            if not (isinstance(owner, type) and issubclass(owner, BaseModel)):
                continue
            for field, text in _attribute_docstrings(owner, sources).items():
                if field not in model.model_fields:
                    continue  # a class variable's docstring
                key = model.model_fields[field].alias or field
                definition["properties"][key].setdefault("description", text)
    document = {"$schema": DIALECT, **schema, "title": title}
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def shipped(name: str) -> str:
    """The text of the shipped schema file `name` (`lock.v1.json`)."""
    return resources.files("repro_serving.builder").joinpath(SCHEMAS_DIR, name).read_text("utf-8")


def shipped_names() -> list[str]:
    """Every shipped schema file, sorted."""
    folder = resources.files("repro_serving.builder").joinpath(SCHEMAS_DIR)
    return sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".json"))


def _models(shape: Any) -> dict[str, type[BaseModel]]:
    """Every model reachable from `shape` through its fields, by class name: the name pydantic
    gives its definition, unless two models share one, which is refused here (the schema
    would name them otherwise and their descriptions could not be placed)."""
    found: dict[str, type[BaseModel]] = {}
    pending = [shape]
    while pending:
        current = pending.pop()
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            pending.extend(get_args(current))  # a union, a tuple, a dict, Annotated
            continue
        known = found.get(current.__name__)
        if known is None:
            found[current.__name__] = current
            pending.extend(field.annotation for field in current.model_fields.values())
        elif known is not current:
            raise ValueError(
                f"two models named {current.__name__}: {known.__module__} and "
                f"{current.__module__}; rename one, a schema names its definitions by class"
            )
    return found


def _attribute_docstrings(
    model: type[BaseModel], sources: dict[Path, ast.Module]
) -> dict[str, str]:
    """Field name -> the string right after its annotation in `model`'s class body."""
    path = Path(inspect.getfile(model))
    if path not in sources:
        sources[path] = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(sources[path]):
        if isinstance(node, ast.ClassDef) and node.name == model.__name__:
            return _docstrings_of(node)
    return {}


def _docstrings_of(node: ast.ClassDef) -> dict[str, str]:
    found: dict[str, str] = {}
    for statement, following in itertools.pairwise(node.body):
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            continue
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            found[statement.target.id] = inspect.cleandoc(following.value.value)
    return found
