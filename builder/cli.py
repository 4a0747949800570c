"""The `repro` command line: arguments and exit codes only.

Each subcommand is a module of `builder.commands` with `configure_parser(parser)` and
`execute(args) -> int`; only the module of the command being run is imported (`repro --help`
imports none of them). This module catches `ReproError` once, prints its diagnostics and
returns its exit code, so no traceback reaches a user for a bad input; a usage error is a
`BadInput` like any other. Any other exception (a bug, RecursionError, MemoryError) is the last
guard's: one line `repro: internal error: <type>: <message>` and exit 4, the traceback only
under the global `-v`/`--verbose`. The global `-q`/`--quiet` silences progress lines
(`builder.progress`), never a result or an error; `--version` prints the distribution and its
labelled version. With `--json`, every error, of any exit code, is also a
document on stdout: `{"version": 1, "ok": false, "error": {what, where, expected, found,
exit_code}}`.

Run as the program (`main()` with no arguments: the `repro` script, `python -m repro_serving`),
the cyclic garbage collector is paused while the command's modules load (their objects live as
long as the process) and has nothing to walk at exit: its searches through the model classes,
while they are built and again at exit, cost `repro verify` about 60 ms of 400
(`bench/startup.py`). A caller that passes `argv` (a test, a long-lived process) keeps its
collector as it was.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import traceback
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from repro_serving import DISTRIBUTION
from repro_serving.builder import commands
from repro_serving.builder.errors import BadInput, ExitCode, ReproError
from repro_serving.builder.progress import set_quiet

_INTERNAL_MESSAGE_LIMIT = 300
"""Characters of an internal error's message shown: some exceptions carry a whole input."""


class UsageError(BadInput):
    """The command line does not parse: an unknown option, a missing argument."""


class _Parser(argparse.ArgumentParser):
    """argparse's usage errors as `UsageError`, after its usage line, instead of SystemExit."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise UsageError(message, hint=f"{self.prog} --help lists every argument")


def _add_globals(parser: argparse.ArgumentParser, default: object) -> None:
    """`-v` and `-q`, accepted before the command and after it (`default`: SUPPRESS after it,
    so that one given before is kept)."""
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="print the traceback of an internal error",
    )
    loudness.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default,
        help="no progress lines: only the result and errors",
    )


class _Version(argparse.Action):
    """`--version`: the distribution and the version of the repro that runs, labelled with the
    digest of its files (`builder.own.release`), read only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **_: object) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show program's version number and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from repro_serving.builder.own.release import repro_version

        try:
            print(f"{DISTRIBUTION} {repro_version()}")
        except ReproError:  # neither a checkout nor installed: its files cannot be named
            print(f"{DISTRIBUTION} (no version: its files cannot be named)")
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand's name and summary; `command`'s module alone is imported
    and configures its arguments (`None`: every command's, as documentation tools want)."""
    parser = _Parser(prog="repro", description="Seal, verify and replay LLM serving records.")
    parser.add_argument("--version", action=_Version)
    _add_globals(parser, False)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    names = commands.names()
    # the summaries are read from each module's source only where the commands are listed
    listing = command not in names
    for name in names:
        command_parser = sub.add_parser(name, help=commands.summary(name) if listing else None)
        if command is not None and name != command:
            continue
        module = commands.load(name)
        command_parser.description = module.__doc__
        module.configure_parser(command_parser)
        _add_globals(command_parser, argparse.SUPPRESS)
        command_parser.set_defaults(_module=module)
    return parser


def _command(options: Sequence[str]) -> str:
    """The subcommand named on the command line: its first argument that is not an option
    (the only options before it are the global ones); "" when there is none."""
    return next((argument for argument in options if not argument.startswith("-")), "")


def main(argv: Sequence[str] | None = None) -> int:
    program = argv is None
    if program:
        gc.disable()
    try:
        return _main(list(sys.argv[1:] if argv is None else argv), program=program)
    finally:
        if program:
            gc.freeze()  # the exit frees the process whole: no collection before it


def _main(arguments: list[str], *, program: bool) -> int:
    # what the command line asks for, before it is known to parse
    options = arguments[: arguments.index("--")] if "--" in arguments else arguments
    as_json = "--json" in options
    verbose = "-v" in options or "--verbose" in options
    try:
        try:
            args = build_parser(_command(options)).parse_args(arguments)
        except SystemExit as exit_:  # --help, printed by argparse
            return int(exit_.code or 0)
        finally:
            if program:  # what loaded stays loaded: no later collection walks it
                gc.freeze()
                gc.enable()
        as_json, verbose = bool(getattr(args, "json", False)), bool(args.verbose)
        set_quiet(bool(args.quiet))
        module: ModuleType = args._module
        return int(module.execute(args))
    except ReproError as error:
        sys.stderr.write(error.diagnostics() + "\n")
        sides = {"where": error.where, "expected": error.expected, "found": error.found}
        return _report(as_json, error.exit_code, error.what, **sides)
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return _report(as_json, ExitCode.INTERRUPTED, "interrupted")
    except BrokenPipeError:  # the reader closed stdout (`| head`): nothing more can be written
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.BROKEN_PIPE
    except Exception as error:  # the last guard: whatever escaped is a bug, not the user's
        if verbose:
            traceback.print_exc()
        found = _one_line(error)
        suffix = "" if verbose else " (run with -v for the traceback)"
        sys.stderr.write(f"repro: internal error: {found}{suffix}\n")
        return _report(as_json, ExitCode.INTERNAL, "internal error", found=found)


def _one_line(error: BaseException) -> str:
    message = " ".join(str(error).split())
    if len(message) > _INTERNAL_MESSAGE_LIMIT:
        message = message[:_INTERNAL_MESSAGE_LIMIT] + "..."
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _report(
    as_json: bool,
    code: ExitCode,
    what: str,
    *,
    where: str | None = None,
    expected: str | None = None,
    found: str | None = None,
) -> int:
    """`code`, after the error's document (`render.ErrorReport`) on stdout when `--json` was
    asked."""
    if as_json:
        # rich and pydantic: only when a document is asked
        from repro_serving.builder.render import ErrorReport, ReportError, write_report

        error = ReportError(
            what=what, where=where, expected=expected, found=found, exit_code=int(code)
        )
        write_report(ErrorReport(error=error))
    return int(code)


if __name__ == "__main__":
    raise SystemExit(main())
