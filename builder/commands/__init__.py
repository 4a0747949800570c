"""One module per subcommand, each with `configure_parser(parser)` and `execute(args) -> int`."""

from __future__ import annotations

from types import ModuleType

COMMANDS: list[ModuleType] = []
