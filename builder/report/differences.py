"""What differs between two locks, fact by fact, and by section.

Every leaf of a lock is a fact named by its key path (`native.roles.worker[{site}/torch/lib/…]`);
two locks differ by the keys whose values differ, a key one side does not have being `ABSENT`
there (a null is a fact stated as null). Each key belongs to one section, so a person reads
"native: 240, python: 3" before any detail: `repro diff` prints that summary, and a report
compares its subject with a reference the same way. `record.verdicts` and `record.markers` of
an imported record are its gates; the rest of `record` is what its suite measured, with the
oracle.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any, Final

from repro_serving.builder.documents.lock import Lock
from repro_serving.builder.report.model import SectionCount

SECTIONS: Final = (
    "bundle", "host", "python", "models", "sources", "native", "launch", "oracle", "gates",
    "nodes",
)  # fmt: skip
"""Every section, in the order a summary lists them."""

_SECTION_OF_FIELD: Final = {
    "schema": "bundle",
    "bundle": "bundle",
    "host": "host",
    "python": "python",
    "models": "models",
    "sources": "sources",
    "native": "native",
    "launch": "launch",
    "oracle": "oracle",
    "record": "oracle",
    "gates": "gates",
    "nodes": "nodes",
}
"""A lock's top-level field (and `gates`, the verdicts a report adds) → its section."""
_GATES_OF_RECORD: Final = ("record.verdicts.", "record.markers.")
_HEAD: Final = re.compile(r"[.\[]")

ABSENT: Final = object()
"""A key path one side does not have, told apart from a fact stated as null."""

Difference = tuple[str, Any, Any]
"""A key path, its value on side A and on side B (`ABSENT` where that side lacks it)."""


def flatten(lock: Lock) -> dict[str, Any]:
    """Every leaf of the lock by key path; list entries that carry a path, role, name, prompt
    or PCI address are keyed by it (as `repro diff` keys them)."""
    return dict(_leaves("", lock.model_dump(mode="json", by_alias=True)))


def _leaves(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(f"{prefix}.{key}" if prefix else str(key), inner)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for index, inner in enumerate(value):
            label = inner.get("path") or inner.get("role") or inner.get("name")
            label = label or inner.get("prompt_id") or inner.get("address") or str(index)
            yield from _leaves(f"{prefix}[{label}]", inner)
    else:
        yield prefix, value


def compare(left: dict[str, Any], right: dict[str, Any]) -> list[Difference]:
    """The keys whose values differ, sorted, with both values (`ABSENT` where one lacks it)."""
    return [
        (key, left.get(key, ABSENT), right.get(key, ABSENT))
        for key in sorted(left.keys() | right.keys())
        if left.get(key, ABSENT) != right.get(key, ABSENT)
    ]


def section_of(key: str) -> str:
    """The section a key path belongs to: its top-level field's, `record`'s verdicts and
    markers under `gates`. A field no section names is a section of its own name."""
    if key.startswith(_GATES_OF_RECORD):
        return "gates"
    head = _HEAD.split(key, maxsplit=1)[0]
    return _SECTION_OF_FIELD.get(head, head)


def in_sections(differences: Iterable[Difference], sections: Iterable[str]) -> list[Difference]:
    wanted = set(sections)
    return [d for d in differences if section_of(d[0]) in wanted]


def summarise(
    differences: Iterable[Difference], sections: Iterable[str] = SECTIONS
) -> tuple[SectionCount, ...]:
    """A count per section, every one of `sections` in order (0 where the two agree), then any
    other section a difference falls in: values that differ, keys only on side A, only on B
    (the other side's value being `ABSENT`)."""
    counts: dict[str, list[int]] = {section: [0, 0, 0] for section in sections}
    for key, a, b in differences:
        column = 1 if b is ABSENT else 2 if a is ABSENT else 0
        counts.setdefault(section_of(key), [0, 0, 0])[column] += 1
    return tuple(
        SectionCount(section=name, changed=c, only_a=only_a, only_b=only_b)
        for name, (c, only_a, only_b) in counts.items()
    )
