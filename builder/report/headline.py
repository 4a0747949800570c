"""The figures two records are compared by first: how fast, how exact, and where each ran.

Pure, over two locks. A performance engineer comparing two records reads the decode rate and its
change before any moved library: `repro diff` and a report's comparison lead with these, then
list every other fact by section (`builder.report.differences`).

- **Rate**: the sealed median decode rate over the suite's prompts (tok/s, `(N-1)/span` per
  row), and the tokens it timed.
- **Output**: rows and completion tokens; for an imported record, the rows exact against its
  teacher and its speculative counters (the acceptance rate: accepted / drafted tokens; the mean
  accepted per draft).
- **Where**: the CPU model, the accelerators, the nodes, the vLLM and torch versions, and the
  code each side's host selected (`native.dispatch` variants).
- **Exactness between the two**: of the prompts both suites name (when both ran one suite), how
  many give the same token ids and the same text on both sides, by their sealed digests.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from repro_serving.builder.documents.lock import Lock

Value = float | int | str | None

_VLLM: Final = re.compile(r"vllm(-(cpu|cuda|rocm|xpu|tpu|hpu))?")


@dataclass(frozen=True)
class Figure:
    """One figure on both sides; `unit` is empty for a count or a name."""

    name: str
    unit: str
    a: Value
    b: Value

    @property
    def change_percent(self) -> float | None:
        """(b - a) / a in percent, for two numbers with a non-zero `a`; else None."""
        a, b = self.a, self.b
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a:
            return (b - a) / a * 100.0
        return None


@dataclass(frozen=True)
class Exactness:
    """The prompts both sides answered, and how many of them alike."""

    suites: tuple[str, str]
    compared: int
    same_token_ids: int
    same_text: int
    only_a: int
    only_b: int

    @property
    def comparable(self) -> bool:
        return self.suites[0] == self.suites[1]

    def sentence(self) -> str:
        if not self.comparable:
            return (
                f"exactness not compared: the two ran other suites ({self.suites[0]} and "
                f"{self.suites[1]})"
            )
        one_sided = (
            f"; {self.only_a} prompt(s) only in A, {self.only_b} only in B"
            if self.only_a or self.only_b
            else ""
        )
        return (
            f"exactness: {self.same_token_ids} of {self.compared} prompts give the same token "
            f"ids on both sides, {self.same_text} the same text (suite {self.suites[0]})"
            + one_sided
        )


def figures(a: Lock, b: Lock) -> list[Figure]:
    """Every headline figure either side states, in reading order; a figure neither side
    states is left out."""
    found = [Figure(name, unit, read(a), read(b)) for name, unit, read in _FIGURES]
    return [f for f in found if f.a is not None or f.b is not None]


def exactness(a: Lock, b: Lock) -> Exactness:
    ours = {row.prompt_id: row for row in a.oracle.rows}
    theirs = {row.prompt_id: row for row in b.oracle.rows}
    both = ours.keys() & theirs.keys()
    return Exactness(
        suites=(a.oracle.suite, b.oracle.suite),
        compared=len(both),
        same_token_ids=sum(ours[p].token_ids_sha256 == theirs[p].token_ids_sha256 for p in both),
        same_text=sum(ours[p].text_sha256 == theirs[p].text_sha256 for p in both),
        only_a=len(ours.keys() - both),
        only_b=len(theirs.keys() - both),
    )


def shown(value: Value) -> str:
    """A figure as a person reads it: rates and ratios to two decimals, absent as a dash."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return value


def shown_change(figure: Figure) -> str:
    if figure.a == figure.b:
        return "same"
    change = figure.change_percent
    return "differs" if change is None else f"{change:+.1f} %"


def _rate(lock: Lock) -> Value:
    throughput = lock.oracle.throughput
    return None if throughput is None else throughput.conventional_median


def _timed(lock: Lock) -> Value:
    throughput = lock.oracle.throughput
    return None if throughput is None else throughput.tokens


def _acceptance(lock: Lock) -> Value:
    record = lock.record
    if record is None or not record.spec_decode_draft_tokens:
        return None
    return 100.0 * (record.spec_decode_accepted or 0.0) / record.spec_decode_draft_tokens


def _accepted_per_draft(lock: Lock) -> Value:
    record = lock.record
    if record is None or not record.spec_decode_drafts:
        return None
    return (record.spec_decode_accepted or 0.0) / record.spec_decode_drafts


def _package(pattern: re.Pattern[str]) -> Callable[[Lock], Value]:
    def read(lock: Lock) -> Value:
        found = sorted(f"{n} {v}" for n, v in lock.python.packages.items() if pattern.fullmatch(n))
        return ", ".join(found) or None

    return read


def _accelerators(lock: Lock) -> Value:
    """The accelerators by the name a record gives them, else by PCI vendor:device, counted."""
    names = Counter(
        a.name or a.vendor_device or "unnamed" for a in lock.host.facts.accelerators or ()
    )
    return _joined([f"{count} x {name}" for name, count in sorted(names.items())])


def _vllm(lock: Lock) -> Value:
    """The vLLM distribution the lock pins, else the vLLM source tree it names, by commit."""
    return _package(_VLLM)(lock) or _joined(
        [f"{s.name} source {s.commit[:12]}" for s in lock.sources if _VLLM.fullmatch(s.name)]
    )


def _joined(values: Sequence[str]) -> Value:
    return ", ".join(values) or None


_FIGURES: Final[tuple[tuple[str, str, Callable[[Lock], Value]], ...]] = (
    ("decode rate, median of prompts", "tok/s", _rate),
    ("tokens timed", "", _timed),
    ("rows", "", lambda lock: len(lock.oracle.rows)),
    ("completion tokens", "", lambda lock: sum(r.completion_tokens for r in lock.oracle.rows)),
    (
        "rows exact against the teacher",
        "",
        lambda lock: None if lock.record is None else lock.record.exact_token_ids,
    ),
    ("spec-decode acceptance", "%", _acceptance),
    ("accepted per draft", "tokens", _accepted_per_draft),
    ("CPU", "", lambda lock: lock.host.facts.cpu_model or None),
    ("accelerators", "", _accelerators),
    ("nodes", "", lambda lock: len(lock.nodes) or 1),
    ("vLLM", "", _vllm),
    ("torch", "", _package(re.compile("torch"))),
    (
        "code selected",
        "",
        lambda lock: _joined([f"{d.name}={d.variant}" for d in lock.native.dispatch]),
    ),
)
"""(name, unit, reader) of every headline figure, in the order a table lists them."""
