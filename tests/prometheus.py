"""Changes of a Prometheus text exposition, as forged metrics need them."""

from __future__ import annotations

import re
from collections.abc import Callable

CREATED = r"(?:vllm:\S+|http_\S+)_created(?:\{[^}]*\})?|process_start_time_seconds"
"""The samples of every counter's creation time and of the process start."""


def revalued(metrics: str, series: str, value: Callable[[float], float]) -> str:
    """`metrics` with each sample whose name and labels match `series` (a regular expression)
    given `value` of the value it had."""
    return re.sub(
        rf"^({series}) (\S+)$",
        lambda m: f"{m[1]} {value(float(m[2]))!r}",
        metrics,
        flags=re.MULTILINE,
    )


def a_month_earlier(metrics: str) -> str:
    """The process start and every counter's creation 30 days earlier."""
    return revalued(metrics, CREATED, lambda seconds: seconds - 30 * 86400)
