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


LABELS = {"expected": "  expected: ", "found": "  found:    ", "hint": "  hint:     "}


def diagnostic(error: str, where: object, **fields: str) -> str:
    """The text of a refusal: `error`, `where`, then those of expected, found and hint given,
    in that order, each label aligned as printed."""
    assert set(fields) <= set(LABELS), fields
    given = [label + fields[name] for name, label in LABELS.items() if name in fields]
    return "\n".join([f"error: {error}", f"  where:    {where}", *given])
