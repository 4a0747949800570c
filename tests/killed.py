"""A restore killed part way: the tests of every restore step check what a SIGKILL after any
progress message leaves behind."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable


def killed_at(restore: Callable[[Callable[[str], None]], object], step: int) -> None:
    """`restore(progress)` in a forked child that SIGKILLs itself right after progress message
    `step`; returns once the child is dead, having checked that the kill is what ended it."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            seen = 0

            def kill_at(_message: str) -> None:
                nonlocal seen
                seen += 1
                if seen == step:
                    os.kill(os.getpid(), signal.SIGKILL)

            restore(kill_at)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
