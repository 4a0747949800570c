"""vLLM's Prometheus counters, read before and after the suite and diffed into a `MetricsDelta`.

This module owns which counters a run is judged by and how a diff is taken, and the reading of
Prometheus text exposition (format 0.0.4, what vLLM's `/metrics` serves): `families` groups each
sample under the `# TYPE` family it follows, as `prometheus_client`'s parser does (the tests hold
the two equal on every sealed text), strictly: a line that is no comment and no
`name{label="value",...} value [timestamp]` sample is refused. It is repro's own because a
verify reads every sealed text and the reference parser took most of its time.

A counter's family name is the one vLLM registers (vLLM 0.32, `vllm/v1/metrics/loggers.py` and
`vllm/v1/spec_decode/metrics.py`); its value is the `<family>_total` sample of each label set.
The diff is taken per label set, then summed over the label sets (one per engine); the per-
position acceptance counters are summed per `position` label instead.

A diff is only meaningful between two reads of the same counters: a label set that goes
backwards, whose `<family>_created` timestamp changed (the counter was recreated), or that is
present in one read and not the other, raises `CounterReset`. Text that does not parse raises
`MetricsUnreadable` naming its source.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from repro_serving.builder.documents.evidence import MetricsDelta
from repro_serving.builder.errors import BadInput, ReproError

LabelSet = frozenset[tuple[str, str]]
Samples = Mapping[str, Mapping[LabelSet, float]]
"""Sample name (e.g. `vllm:generation_tokens_total`) to label set to value."""

SCALAR_COUNTERS: Final = {
    "prefix_cache_queries": "vllm:prefix_cache_queries",
    "prefix_cache_hits": "vllm:prefix_cache_hits",
    "generation_tokens": "vllm:generation_tokens",
    "spec_decode_drafts": "vllm:spec_decode_num_drafts",
    "spec_decode_draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "spec_decode_accepted": "vllm:spec_decode_num_accepted_tokens",
}
"""`MetricsDelta` field to the counter family it is the diff of."""
PER_POSITION_COUNTER: Final = "vllm:spec_decode_num_accepted_tokens_per_pos"
POSITION_LABEL: Final = "position"


class MetricsUnreadable(BadInput):
    """A `/metrics` text that is not Prometheus text exposition, or names a sample twice."""


class CounterReset(ReproError):
    """Two reads that are not of the same counters: one went backwards, was recreated, or a
    label set appeared or vanished between them. The suite's diff cannot be taken."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Family:
    """One metric family: its name (a counter's without `_total`), its type (`untyped` when
    no `# TYPE` line precedes it), its samples in order."""

    name: str
    type: str
    samples: tuple[Sample, ...]


TYPES: Final = ("counter", "gauge", "histogram", "gaugehistogram", "summary", "untyped", "info")
_SUFFIXES: Final = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "summary": ("_count", "_sum", "_created"),
    "info": ("_info",),
}
_NAME: Final = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL: Final = re.compile(
    r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*'
)
_VALUE: Final = re.compile(
    r"[ \t]+([+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[Ii]nf|NaN|nan))"
    r"(?:[ \t]+-?[0-9]+)?[ \t]*"
)
_ESCAPES: Final = re.compile(r"\\(.)")


def families(text: str, source: str) -> tuple[Family, ...]:
    """The metric families of `text` (parsed once per text: a verify reads each sealed
    `/metrics` text in several checks); `source` names the text in errors."""
    parsed = _parsed(text)
    if isinstance(parsed, str):
        raise MetricsUnreadable(
            "metrics text does not parse",
            where=source,
            expected="Prometheus text exposition",
            found=parsed,
        )
    return parsed


@functools.lru_cache(maxsize=32)
def _parsed(text: str) -> tuple[Family, ...] | str:
    """The families of `text`, or why it does not parse (which line, how)."""
    found: list[Family] = []
    name, kind, taken = "", "untyped", list[Sample]()

    def close() -> None:
        if taken:
            found.append(Family(name, kind, tuple(taken)))

    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        if line.startswith("#"):
            words = line.split(None, 3)
            if len(words) >= 3 and words[1] == "TYPE":
                if len(words) != 4 or words[3].strip() not in TYPES:
                    return f"line {number}: a # TYPE line naming no known type: {line[:80]!r}"
                close()
                kind = words[3].strip()
                name = words[2].removesuffix("_total") if kind == "counter" else words[2]
                taken = []
            continue
        sample = _sample(line)
        if sample is None:
            return f'line {number}: {line[:80]!r} is no sample name{{label="value",...}} value'

        if not _of(sample.name, name, kind):
            close()
            name, kind, taken = sample.name, "untyped", []
        taken.append(sample)
    close()
    return tuple(found)


def _sample(line: str) -> Sample | None:
    head = _NAME.match(line)
    if head is None:
        return None
    labels: dict[str, str] = {}
    at = head.end()
    if line.startswith("{", at):
        at += 1
        while not line.startswith("}", at):
            label = _LABEL.match(line, at)
            if label is None or label[1] in labels:
                return None
            labels[label[1]] = _ESCAPES.sub(_unescaped, label[2])
            at = label.end()
            if line.startswith(",", at):
                at += 1
            elif not line.startswith("}", at):
                return None
        at += 1
    value = _VALUE.fullmatch(line, at)
    return None if value is None else Sample(head[0], labels, float(value[1]))


def _unescaped(match: re.Match[str]) -> str:
    return {"n": "\n", "\\": "\\", '"': '"'}.get(match[1], "\\" + match[1])


def _of(sample: str, family: str, kind: str) -> bool:
    """Whether a sample of this name belongs to the family open before it."""
    if not family:
        return False
    return sample == family or any(sample == family + end for end in _SUFFIXES.get(kind, ()))


def samples(text: str, source: str) -> Samples:
    """Every sample of `text` by name and label set; `source` names the text in errors. Read
    once per text, as `families` is."""
    families(text, source)  # a text that does not parse, refused naming `source`
    found, twice = _samples(text)
    if twice is not None:
        name, labels = twice
        raise MetricsUnreadable(
            "a sample appears twice",
            where=f"{source}, {name}{_show_labels(labels)}",
            expected="each name and label set once",
            found="two values",
        )
    return found


@functools.lru_cache(maxsize=32)
def _samples(text: str) -> tuple[Samples, tuple[str, LabelSet] | None]:
    """The samples of a text `families` has read, or the first name and label set it gives
    twice."""
    found: dict[str, dict[LabelSet, float]] = {}
    for family in families(text, "a text already read"):
        for sample in family.samples:
            labels: LabelSet = frozenset(sample.labels.items())
            values = found.setdefault(sample.name, {})
            if labels in values:
                return {}, (sample.name, labels)
            values[labels] = sample.value
    return found, None


def counter_deltas(
    before: Samples, after: Samples, family: str, sources: tuple[str, str]
) -> dict[LabelSet, float] | None:
    """After minus before per label set of counter `family`; None when neither read has it."""
    total = f"{family}_total"
    old, new = before.get(total, {}), after.get(total, {})
    if not old and not new:
        return None
    if old.keys() != new.keys():
        _raise_label_sets_differ(total, old.keys(), new.keys(), sources)
    created = f"{family}_created"
    deltas: dict[LabelSet, float] = {}
    for labels, value in new.items():
        where = f"{total}{_show_labels(labels)}"
        if value < old[labels]:
            raise CounterReset(
                "a counter went backwards between the two reads",
                where=where,
                expected=f"at least {old[labels]!r} ({sources[0]})",
                found=f"{value!r} ({sources[1]})",
                hint="the server restarted or the counter was reset: run the suite again",
            )
        _check_same_creation(before, after, created, labels, sources)
        deltas[labels] = value - old[labels]
    return deltas


def delta(
    before_text: str,
    after_text: str,
    *,
    before_source: str = "metrics before the suite",
    after_source: str = "metrics after the suite",
) -> MetricsDelta:
    """The counters a run is judged by, after minus before, summed over engines."""
    sources = (before_source, after_source)
    before, after = samples(before_text, before_source), samples(after_text, after_source)
    scalars: dict[str, float | None] = {}
    for field, family in SCALAR_COUNTERS.items():
        deltas = counter_deltas(before, after, family, sources)
        scalars[field] = None if deltas is None else sum(deltas.values())
    per_position = counter_deltas(before, after, PER_POSITION_COUNTER, sources)
    return MetricsDelta(
        **scalars,
        spec_decode_accepted_per_position=_by_position(per_position or {}),
    )


def _by_position(deltas: Mapping[LabelSet, float]) -> tuple[float, ...]:
    """Deltas summed per `position` label, in position order 0, 1, …"""
    sums: dict[int, float] = defaultdict(float)
    for labels, value in deltas.items():
        sums[_position(labels)] += value
    if sorted(sums) != list(range(len(sums))):
        raise MetricsUnreadable(
            "draft positions are not contiguous",
            where=f"{PER_POSITION_COUNTER}_total",
            expected=f"positions 0..{len(sums) - 1}",
            found="positions " + ", ".join(str(p) for p in sorted(sums)),
        )
    return tuple(sums[position] for position in range(len(sums)))


def _position(labels: LabelSet) -> int:
    value = dict(labels).get(POSITION_LABEL)
    if value is None or not value.isdecimal():
        raise MetricsUnreadable(
            "a per-position counter without a numeric position",
            where=f"{PER_POSITION_COUNTER}_total{_show_labels(labels)}",
            expected=f'a label {POSITION_LABEL}="<n>"',
            found="none" if value is None else repr(value),
        )
    return int(value)


def _check_same_creation(
    before: Samples, after: Samples, created: str, labels: LabelSet, sources: tuple[str, str]
) -> None:
    old, new = before.get(created, {}).get(labels), after.get(created, {}).get(labels)
    if old is not None and new is not None and old != new:
        raise CounterReset(
            "a counter was recreated between the two reads",
            where=f"{created}{_show_labels(labels)}",
            expected=f"{old!r} ({sources[0]})",
            found=f"{new!r} ({sources[1]})",
            hint="the server restarted between the reads: run the suite again",
        )


def _raise_label_sets_differ(
    name: str,
    old: Iterable[LabelSet],
    new: Iterable[LabelSet],
    sources: tuple[str, str],
) -> None:
    shown_old = ", ".join(sorted(_show_labels(labels) for labels in old)) or "none"
    shown_new = ", ".join(sorted(_show_labels(labels) for labels in new)) or "none"
    raise CounterReset(
        "a counter's label sets differ between the two reads",
        where=name,
        expected=f"{shown_old} ({sources[0]})",
        found=f"{shown_new} ({sources[1]})",
        hint="the server restarted or changed its engines between the reads",
    )


def _show_labels(labels: LabelSet) -> str:
    return "{" + ",".join(f'{key}="{value}"' for key, value in sorted(labels)) + "}"
