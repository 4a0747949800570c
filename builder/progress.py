"""Progress lines for a person, on stderr: one place, silenced by the global `-q`/`--quiet`.

Results (tables, `--json` documents) go to stdout and errors to stderr whatever `-q` says; only
the lines that tell a person what long work is doing go through here.
"""

from __future__ import annotations

import sys

_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet  # noqa: PLW0603 - one process, one command line
    _quiet = quiet


def showing() -> bool:
    """Whether progress is shown (not under `-q`)."""
    return not _quiet


def say(message: str) -> None:
    if not _quiet:
        sys.stderr.write(f"{message}\n")
        sys.stderr.flush()
