"""What a refusal prints: `refusal` catches one and gives its diagnostics, `diagnostic` writes
the text expected of it, its labels aligned as the command line shows them; `refused` gives
the error itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from repro_serving.builder.errors import ReproError

E = TypeVar("E", bound=ReproError)


def refused(kind: type[E], call: Callable[..., object], *args: object) -> E:
    """The `kind` error that `call(*args)` must raise."""
    with pytest.raises(kind) as raised:
        call(*args)
    return raised.value


def refusal(kind: type[ReproError], call: Callable[..., object], *args: object) -> str:
    """The diagnostics of the `kind` error that `call(*args)` must raise."""
    return refused(kind, call, *args).diagnostics()


def diagnostic(
    error: str,
    where: object,
    *,
    expected: str | None = None,
    found: str | None = None,
    hint: str | None = None,
) -> str:
    lines = [f"error: {error}", f"  where:    {where}"]
    if expected is not None:
        lines.append(f"  expected: {expected}")
    if found is not None:
        lines.append(f"  found:    {found}")
    if hint is not None:
        lines.append(f"  hint:     {hint}")
    return "\n".join(lines)
