"""A program an observer runs to learn a fact (an interpreter, git, a dispatch probe): one that
cannot be started or does not finish in time leaves the fact unobservable, said the same way for
every observer."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

from repro_serving.builder.errors import NotObservable


def run_program(
    argv: Sequence[str],
    *,
    timeout: float,
    cannot: str,
    where: str,
    hint: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`argv` run to its end, its output captured as text, whatever its exit status (the caller
    judges it); `NotObservable` (`cannot`, at `where`) when it cannot be run or outlives
    `timeout` seconds."""
    try:
        return subprocess.run(
            list(argv),
            cwd=cwd,
            env=None if env is None else dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NotObservable(cannot, where=where, found=str(error), hint=hint) from error
