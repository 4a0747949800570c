"""Explain how glibc's loader resolves each dependency of FILE, with the reason for each hit.

The emulation uses this host's loader (asked, not assumed), its /etc/ld.so.cache and, unless
--no-env, the LD_LIBRARY_PATH and LD_PRELOAD of the current environment. Exit 0 when every
dependency resolves, 1 when one is not found or would be refused, 2 for a bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from repro_serving.builder.native.elf import read_elf
from repro_serving.builder.native.ldcache import LdCache
from repro_serving.builder.native.loader import (
    Closure,
    LoaderConfig,
    Outcome,
    Resolution,
    dlopen_closure,
    executable_closure,
)
from repro_serving.builder.native.loaderhost import (
    HostFileSystem,
    RememberingFileSystem,
    host_config,
    read_cache,
)

_BRANCH, _LAST, _PIPE, _SPACE = "├── ", "└── ", "│   ", "    "


def __getattr__(name: str) -> Any:
    """`REPORT`, the document `--json` prints (its schema: `repro schema closure`), imported
    when asked for: a plain run of this command imports no pydantic."""
    if name == "REPORT":
        from repro_serving.builder.commands._closure_output import ClosureOutput

        return ClosureOutput
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="executable or shared object")
    parser.add_argument("--json", action="store_true", help="versioned JSON on stdout")
    parser.add_argument(
        "--no-env", action="store_true", help="ignore LD_LIBRARY_PATH and LD_PRELOAD of this shell"
    )
    parser.add_argument("--ld-library-path", metavar="PATH", help="use this LD_LIBRARY_PATH")
    parser.add_argument("--ld-preload", metavar="LIST", help="use this LD_PRELOAD")
    parser.add_argument(
        "--after",
        action="append",
        default=[],
        metavar="LOADED",
        help="resolve FILE as a dlopen in a process that has already loaded LOADED and its "
        "closure (repeatable, in load order), as a Python extension is imported after torch: "
        "a soname already loaded satisfies a need",
    )


def execute(args: argparse.Namespace) -> int:
    fs = RememberingFileSystem(HostFileSystem.here())  # every file is read once in a run
    for path in dict.fromkeys([*args.after, *args.files]):
        fs.remember(read_elf(path))  # a missing, unreadable or non-ELF file stops us here
    config = host_config(_environment(args), fs=fs)
    cache = read_cache()
    if args.after:
        closures = _after(args.after, args.files, config, cache, fs)
    else:
        closures = [
            (path, executable_closure(path, config=config, cache=cache, fs=fs))
            for path in args.files
        ]
    if args.json:
        # rich and pydantic: only when a document is asked
        from repro_serving.builder.commands._closure_output import ClosureOutput
        from repro_serving.builder.render import write_report

        write_report(ClosureOutput.of(closures))
    else:
        sys.stdout.write("".join(_tree(path, c) for path, c in closures))
    return 1 if any(c.failures for _, c in closures) else 0


def _after(
    loaded_first: list[str],
    files: list[str],
    config: LoaderConfig,
    cache: LdCache | None,
    fs: RememberingFileSystem,
) -> list[tuple[str, Closure]]:
    """The first LOADED starts the process; the others, then each FILE, are dlopened in turn."""
    start = executable_closure(loaded_first[0], config=config, cache=cache, fs=fs)
    loaded = list(start.order)
    caller = next(obj for obj in start.order if obj.executable)
    results: list[tuple[str, Closure]] = []
    for index, path in enumerate([*loaded_first[1:], *files]):
        closure = dlopen_closure(path, caller, loaded, config=config, cache=cache, fs=fs)
        loaded.extend(closure.order)
        if index >= len(loaded_first) - 1:
            results.append((path, closure))
    return results


def _environment(args: argparse.Namespace) -> dict[str, str]:
    env = {} if args.no_env else dict(os.environ)
    if args.ld_library_path is not None:
        env["LD_LIBRARY_PATH"] = args.ld_library_path
    if args.ld_preload is not None:
        env["LD_PRELOAD"] = args.ld_preload
    return env


def _tree(path: str, closure: Closure) -> str:
    children: dict[str, list[Resolution]] = {}
    for resolution in closure.resolutions:
        children.setdefault(resolution.requester, []).append(resolution)
    lines = [path]
    _branches(path, children, "", lines)
    return "\n".join(lines) + "\n"


def _branches(
    requester: str,
    children: dict[str, list[Resolution]],
    prefix: str,
    lines: list[str],
) -> None:
    entries = children.get(requester, [])
    for index, resolution in enumerate(entries):
        last = index == len(entries) - 1
        lines.append(prefix + (_LAST if last else _BRANCH) + _describe(resolution))
        inner = prefix + (_SPACE if last else _PIPE)
        if resolution.outcome is not Outcome.FOUND:
            lines.extend(
                f"{inner}    {number}. {c.path}  ({c.source}: {c.result})"
                for number, c in enumerate(resolution.searched, start=1)
            )
        elif resolution.newly_loaded and resolution.path is not None:
            _branches(resolution.path, children, inner, lines)


def _describe(resolution: Resolution) -> str:
    if resolution.outcome is Outcome.FOUND:
        return f"{resolution.need} => {resolution.path} [{resolution.reason}]"
    return f"{resolution.need} {resolution.outcome.value.upper()}: {resolution.reason}"
