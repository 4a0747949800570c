"""The `repro` command line: arguments and exit codes only.

Each subcommand is a module of `builder.commands` with `configure_parser(parser)` and
`execute(args) -> int`. This module catches `ReproError` once, prints its diagnostics and
returns its exit code, so no traceback reaches a user for a bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from builder.commands import COMMANDS
from builder.errors import ExitCode, ReproError


class _Parser(argparse.ArgumentParser):
    """argparse exits with 2 on usage errors already; keep its message, drop its traceback."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(ExitCode.BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="repro", description="Seal, verify and replay LLM serving records.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in COMMANDS:
        name = module.__name__.rsplit(".", 1)[-1]
        summary = (module.__doc__ or "").strip().splitlines()[0]
        command_parser = sub.add_parser(name, help=summary, description=module.__doc__)
        module.configure_parser(command_parser)
        command_parser.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    module: ModuleType = args._module
    try:
        return int(module.execute(args))
    except ReproError as error:
        sys.stderr.write(error.diagnostics() + "\n")
        return int(error.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return int(ExitCode.CHECK_FAILED)


if __name__ == "__main__":
    raise SystemExit(main())
