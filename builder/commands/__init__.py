"""One module per subcommand, each with `configure_parser(parser)` and `execute(args) -> int`.

Subcommands are discovered from this package, so adding a command is adding a module. Listing
them imports none: a command's one-line summary is the first line of its module's docstring,
read from the source; only the command being run is imported (`load`).
"""

from __future__ import annotations

import ast
import importlib
import io
import pkgutil
import tokenize
from pathlib import Path
from types import ModuleType


def names() -> list[str]:
    """Every subcommand's name, sorted, without importing any of them."""
    found = pkgutil.iter_modules(__path__)
    return sorted(info.name for info in found if not info.name.startswith("_"))


def summary(name: str) -> str:
    """The first line of the command module's docstring, read without importing it."""
    source = (Path(__path__[0]) / f"{name}.py").read_text(encoding="utf-8")
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in skipped:
            continue
        if token.type != tokenize.STRING:
            break  # the module starts with code: it has no docstring
        lines = str(ast.literal_eval(token.string)).strip().splitlines()
        return lines[0] if lines else ""
    return ""


def load(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")
