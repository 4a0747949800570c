"""The role of a process of a serving stack, from its name and command line: pure, so that the
live audit and the judging of a sealed one read a role alike."""

from __future__ import annotations

import re
from collections.abc import Iterable

ROLE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("resource_tracker", re.compile(r"multiprocessing\.resource_tracker")),
    ("engine_core", re.compile(r"EngineCore")),
    ("worker", re.compile(r"Worker")),
    # a rank above 0 of a stack served across hosts: `vllm serve --headless` serves no API
    ("headless", re.compile(r"(^| )--headless( |$)")),
    ("api_server", re.compile(r"entrypoints\.openai\.api_server|entrypoints\.cli|APIServer")),
)


def classify_role(name: str, cmdline: Iterable[str]) -> str:
    """The role of a process of a serving stack, from its name and command line."""
    text = " ".join([name, *cmdline])
    for role, pattern in ROLE_PATTERNS:
        if pattern.search(text):
            return role
    return "other"
