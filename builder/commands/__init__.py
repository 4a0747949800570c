"""One module per subcommand, each with `configure_parser(parser)` and `execute(args) -> int`.

Subcommands are discovered from this package, so adding a command is adding a module.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def _discover() -> list[ModuleType]:
    return [
        importlib.import_module(f"{__name__}.{info.name}")
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name)
        if not info.name.startswith("_")
    ]


COMMANDS: list[ModuleType] = _discover()
