"""Tables of named cases as test parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest


def by_name(table: Mapping[str, tuple[Any, ...]]) -> list[Any]:
    """The rows of `table` as test parameters, in its order, each named by its key."""
    return [pytest.param(*row, id=name) for name, row in table.items()]
