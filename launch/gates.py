"""The gates of a run: each one a pure function from evidence to a `Verdict` with its numbers.

This module owns what each gate of the manifest's `[oracle.gates]` means and `GATES`, the one
table of every kind of gate: what `judge` judges a run by, in its order. A gate does no I/O and
no retries; the same function judges a live run and a historical record's files.

`judge` returns a verdict for every kind of gate, in a fixed order: a gate the manifest disables
is `n/a` and says so; a gate it enables whose evidence is absent fails and names what is missing,
so a configured gate is never skipped in silence. The optional kinds (engine facts of
`/metrics` info gauges, the rate of further fresh starts, a kernel set's runtime markers, stalls
and latency bounds) give a verdict for each one declared and none otherwise: a record sealed
before such a gate existed is judged as it was.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from repro_serving.builder.documents.evidence import (
    MetricsDelta,
    OracleRow,
    RunEvidence,
    Teacher,
    Verdict,
    VerdictStatus,
)
from repro_serving.builder.documents.manifest import (
    FreshStartThroughputGate,
    Gates,
    LatencyGate,
    Load,
    LogMarker,
    MetricsInfoGate,
    Oracle,
    SpecDecodeGate,
    StallGate,
    ThroughputGate,
)
from repro_serving.builder.documents.rundir import LOG_FILE, METRICS_AFTER, METRICS_BEFORE
from repro_serving.builder.drift import Drift
from repro_serving.builder.errors import BadInput
from repro_serving.launch import gatetext
from repro_serving.launch.latency import Distribution, Latency, LoadFigures, latency, stalls
from repro_serving.launch.metrics import delta, samples
from repro_serving.launch.throughput import (
    HISTORICAL_LABEL,
    Throughput,
    UnmeasurableRow,
    measure,
)

SURVIVAL_RATIO_MAX: Final = 0.5
"""Default bound on last/first of the per-position acceptance curve; see `survival_problem`."""
STALE_DRAFTS: Final = "verifier accepting stale drafts"
_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")
_SHOWN_LINE: Final = 160
_NO_RANK: Final = "(no rank)"


def _verdict(gate: str, passed: bool, summary: str, **details: object) -> Verdict:
    status = VerdictStatus.PASS if passed else VerdictStatus.FAIL
    return Verdict(gate=gate, status=status, summary=summary, details=details)


def _not_applicable(gate: str, summary: str) -> Verdict:
    return Verdict(gate=gate, status=VerdictStatus.NOT_APPLICABLE, summary=summary)


def _unmeasurable(gate: str, error: UnmeasurableRow) -> Verdict:
    """A failed rate gate: what could not be measured, with each side of the refusal."""
    sides = {
        "where": error.where,
        "expected": error.expected,
        "found": error.found,
        "hint": error.hint,
    }
    return _verdict(gate, False, error.what, **{k: v for k, v in sides.items() if v is not None})


def _missing(gate: str, what: str) -> Verdict:
    return _verdict(gate, False, f"no {what} in the run's evidence", missing=what)


def _lines(count: int) -> str:
    return "1 line" if count == 1 else f"{count} lines"


def _number(value: float) -> str:
    """A counter for a person: 1609, not 1609.0."""
    return str(int(value)) if value.is_integer() else repr(value)


# --- token ids and texts ----------------------------------------------------------------------


def first_difference(expected: Sequence[int], found: Sequence[int]) -> int | None:
    """The first index where two token id sequences differ (the shorter one's length when one
    is a prefix of the other), or None when they are equal."""
    for index, (a, b) in enumerate(zip(expected, found, strict=False)):
        if a != b:
            return index
    return None if len(expected) == len(found) else min(len(expected), len(found))


def _token_at(ids: Sequence[int], index: int) -> str:
    return str(ids[index]) if index < len(ids) else "end"


def _compare_ids(
    reference: Sequence[tuple[str, Sequence[int]]],
    candidate: Sequence[tuple[str, Sequence[int]]],
    names: tuple[str, str],
) -> tuple[int, list[str], dict[str, object]]:
    """Rows of `candidate` equal to `reference` by prompt id: the count, each problem worded,
    and the first differing index of every row."""
    found = dict(candidate)
    problems = _repeated((p for p, _ in reference), names[0])
    problems += _repeated((p for p, _ in candidate), names[1])
    first_diffs: dict[str, int | None] = {}
    for prompt_id, expected in reference:
        if prompt_id not in found:
            problems.append(f"row {prompt_id} is missing from {names[1]}")
            continue
        index = first_difference(expected, found[prompt_id])
        first_diffs[prompt_id] = index
        if index is not None:
            shown = f"{names[0]} {_token_at(expected, index)}, {names[1]} "
            shown += _token_at(found[prompt_id], index)
            problems.append(f"row {prompt_id} differs at token {index}: {shown}")
    known = {prompt_id for prompt_id, _ in reference}
    problems += [f"row {p} is not in {names[0]}" for p, _ in candidate if p not in known]
    exact = sum(index is None for index in first_diffs.values())
    return exact, problems, {"first_difference": first_diffs}


def _repeated(prompt_ids: Iterable[str], where: str) -> list[str]:
    """A row given twice would hide behind its twin: each repeated prompt id is a problem."""
    counts = Counter(prompt_ids)
    return [f"row {p} appears {counts[p]} times in {where}" for p in counts if counts[p] > 1]


def _with_problems(head: str, problems: Sequence[str]) -> str:
    if not problems:
        return head
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{head}; {problems[0]}{more}"


def exact_token_ids(rows: Sequence[OracleRow], teacher: Teacher) -> Verdict:
    """Every row's token ids equal the teacher's row of the same prompt id."""
    reference = [(row.prompt_id, row.token_ids) for row in teacher.rows]
    candidate = [(row.prompt_id, row.token_ids) for row in rows]
    exact, problems, details = _compare_ids(reference, candidate, ("teacher", "run"))
    head = f"{exact}/{len(reference)} rows equal the teacher's token ids"
    passed = not problems and exact == len(reference) > 0
    return _verdict("exact_token_ids", passed, _with_problems(head, problems), **details)


def text_sha256(rows: Sequence[OracleRow], teacher: Teacher) -> Verdict:
    """Every row's output text hashes to the teacher's sha256 of the same prompt id."""
    found = {row.prompt_id: row.text_sha256 for row in rows}
    problems = _repeated((row.prompt_id for row in teacher.rows), "teacher")
    problems += _repeated((row.prompt_id for row in rows), "run")
    for row in teacher.rows:
        got = found.get(row.prompt_id)
        if got is None:
            problems.append(f"row {row.prompt_id} is missing from run")
        elif got != row.text_sha256:
            problems.append(
                f"row {row.prompt_id}: teacher {row.text_sha256[:12]}…, run {got[:12]}…"
            )
    expected = {row.prompt_id: row.text_sha256 for row in teacher.rows}
    problems += [f"row {p} is not in teacher" for p in found if p not in expected]
    equal = sum(found.get(p) == sha256 for p, sha256 in expected.items())
    head = f"{equal}/{len(expected)} rows match the teacher's text sha256"
    summary = _with_problems(head, problems)
    passed = not problems and bool(expected)
    return _verdict("text_sha256", passed, summary, run=found, teacher=expected)


def fresh_start_reproduces(
    first: Sequence[OracleRow], again: Sequence[OracleRow], start: int
) -> Verdict:
    """Fresh start number `start` (2, 3, …) reproduces the first start's token ids exactly."""
    names = ("start 1", f"start {start}")
    reference = [(row.prompt_id, row.token_ids) for row in first]
    candidate = [(row.prompt_id, row.token_ids) for row in again]
    exact, problems, details = _compare_ids(reference, candidate, names)
    head = f"start {start}: {exact}/{len(reference)} rows reproduce start 1's token ids"
    passed = not problems and exact == len(reference) > 0
    return _verdict("fresh_starts", passed, _with_problems(head, problems), start=start, **details)


# --- no prefix reuse ----------------------------------------------------------------------------


def cached_tokens_zero(rows: Sequence[OracleRow]) -> Verdict:
    """`usage.prompt_tokens_details.cached_tokens` is reported and 0 on every row."""
    problems = [
        f"row {row.prompt_id}: "
        + ("not reported" if row.cached_tokens is None else str(row.cached_tokens))
        for row in rows
        if row.cached_tokens != 0
    ]
    zero = len(rows) - len(problems)
    head = f"cached_tokens is 0 on {zero}/{len(rows)} rows"
    cached = {row.prompt_id: row.cached_tokens for row in rows}
    passed = bool(rows) and not problems
    return _verdict("cached_tokens_zero", passed, _with_problems(head, problems), cached=cached)


def prefix_cache_hit_delta_zero(metrics: MetricsDelta) -> Verdict:
    """The prefix cache served no token during the suite: its hit counter did not move."""
    gate = "prefix_cache_hit_delta_zero"
    hits = metrics.prefix_cache_hits
    if hits is None:
        return _verdict(gate, False, "prefix-cache hits not reported by /metrics", hits=None)
    summary = f"prefix-cache hits rose by {_number(hits)} during the suite"
    if hits != 0:
        summary += ", expected 0"
    return _verdict(gate, hits == 0, summary, hits=hits, queries=metrics.prefix_cache_queries)


# --- the server log -----------------------------------------------------------------------------


def log_lines(text: str) -> list[str]:
    """The log's lines; a carriage return ends a line too (progress bars rewrite theirs)."""
    lines = _LINE_BREAK.split(text)
    return lines[:-1] if lines[-1] == "" else lines


def _shown(line: str) -> str:
    return line if len(line) <= _SHOWN_LINE else line[: _SHOWN_LINE - 1] + "…"


def marker_counts(marker: LogMarker, lines: Iterable[str]) -> Counter[str]:
    """Lines matching the marker, by rank label (`(no rank)` for a line without one), or all
    under the marker's name when it counts over the whole log. Both patterns run on RE2
    (`builder.patterns`): linear in each line, whatever the manifest declares."""
    from repro_serving.builder.patterns import compile_pattern  # RE2, for a manifest with markers

    where = f"log marker {marker.name}"
    pattern = compile_pattern(marker.pattern, where=f"{where}: pattern")
    ranks = None
    if marker.rank_pattern is not None:
        ranks = compile_pattern(marker.rank_pattern, where=f"{where}: rank_pattern")
    counts: Counter[str] = Counter()
    for line in lines:
        if pattern.search(line) is None:
            continue
        if ranks is None:
            counts[marker.name] += 1
        else:
            rank = ranks.search(line)
            label = None if rank is None else rank.group(1)
            counts[_NO_RANK if label is None else label] += 1
    return counts


def log_marker(marker: LogMarker, log_text: str) -> Verdict:
    """The marker's lines number exactly `count` in the log, or exactly `per_rank[rank]` on
    each rank; a rank the manifest does not list must have none."""
    gate = f"log_marker:{marker.name}"
    counts = marker_counts(marker, log_lines(log_text))
    if marker.count is not None:
        found = counts[marker.name]
        summary = f"{marker.name}: {_lines(found)}, expected {marker.count}"
        return _verdict(gate, found == marker.count, summary, found=found, expected=marker.count)
    expected = dict(marker.per_rank)
    ranks = sorted(set(expected) | set(counts))
    wrong = [rank for rank in ranks if counts[rank] != expected.get(rank, 0)]
    if wrong:
        summary = f"{marker.name}: " + "; ".join(
            f"{rank} has {_lines(counts[rank])}, expected {expected.get(rank, 0)}" for rank in wrong
        )
    else:
        shown = ", ".join(f"{rank}={expected[rank]}" for rank in sorted(expected))
        summary = f"{marker.name}: exact on {len(expected)} ranks ({shown})"
    return _verdict(
        gate, not wrong, summary, found={r: counts[r] for r in ranks}, expected=expected
    )


def forbidden_log_patterns(patterns: Sequence[str], log_text: str) -> Verdict:
    """No log line matches any forbidden pattern (a fallback path ran); the patterns run on RE2
    (`builder.patterns`), linear in each line."""
    from repro_serving.builder.patterns import compile_pattern  # RE2, where patterns are given

    lines = log_lines(log_text)
    hits: dict[str, list[str]] = {}
    for index, pattern in enumerate(patterns):
        compiled = compile_pattern(pattern, where=f"forbidden_log_patterns[{index}]")
        matching = [line for line in lines if compiled.search(line) is not None]
        if matching:
            hits[pattern] = matching
    if not hits:
        summary = f"none of {len(patterns)} forbidden patterns in {_lines(len(lines))} of log"
        return _verdict("forbidden_log_patterns", True, summary, patterns=list(patterns))
    problems = [
        f"forbidden {pattern!r} matches {_lines(len(found))}, first: {_shown(found[0])}"
        for pattern, found in hits.items()
    ]
    summary = problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
    counts = {pattern: len(found) for pattern, found in hits.items()}
    return _verdict("forbidden_log_patterns", False, summary, matches=counts)


# --- speculative decoding -----------------------------------------------------------------------


def survival_problem(curve: Sequence[float], ratio_max: float = SURVIVAL_RATIO_MAX) -> str | None:
    """Why the per-position acceptance curve does not decay, or None when it does.

    `curve[k]` counts the draft tokens accepted at draft position k over the suite. The curve
    decays when (1) it has at least two positions and curve[0] > 0; (2) it never rises,
    curve[k+1] <= curve[k]: a verifier accepts position k+1 only after accepting k, so a rise
    means drafts were accepted past a rejection; and (3) curve[-1] / curve[0] <= `ratio_max`.

    The Laguna record's curve over depth 11 is 1171, 847, 631, 497, 397, 328, 248, 204, 172,
    140, 112: each position keeps 72-85% of the previous one and last/first is 0.0956. A curve
    whose last position keeps half or more of the first (the default bound 0.5) would need an
    average conditional acceptance of 0.5 ** (1/10) = 0.933 per position at depth 11, where the
    record has 0.79; a flat curve, every draft surviving to its last token, is what a graph
    replay that rubber-stamped stale drafts produced (198 tok/s, 0/13 exact).
    """
    if len(curve) < 2:
        return f"a curve of {len(curve)} positions cannot show decay"
    if curve[0] <= 0:
        return "no draft token accepted at position 0"
    rises = [k for k in range(len(curve) - 1) if curve[k + 1] > curve[k]]
    if rises:
        k = rises[0]
        rise = f"{_number(curve[k])} → {_number(curve[k + 1])}"
        return f"survival rises from position {k} to {k + 1} ({rise}): {STALE_DRAFTS}"
    ratio = curve[-1] / curve[0]
    if ratio > ratio_max:
        shown = f"{_number(curve[0])} … {_number(curve[-1])}"
        return f"survival {shown} does not decay (last/first {ratio:.4f} > {ratio_max}): " + (
            STALE_DRAFTS
        )
    return None


def _acceptance_problems(gate: SpecDecodeGate, metrics: MetricsDelta) -> list[str]:
    accepted, draft_tokens = metrics.spec_decode_accepted, metrics.spec_decode_draft_tokens
    if accepted is None or draft_tokens is None:
        return ["accepted or draft tokens not reported by /metrics"]
    if draft_tokens == 0:
        return ["no draft tokens during the suite"]
    rate = accepted / draft_tokens
    if gate.acceptance_min <= rate <= gate.acceptance_max:
        return []
    bounds = f"[{gate.acceptance_min}, {gate.acceptance_max}]"
    return [f"acceptance {rate:.4f} outside {bounds}"]


def _curve_problems(gate: SpecDecodeGate, metrics: MetricsDelta, ratio_max: float) -> list[str]:
    curve = metrics.spec_decode_accepted_per_position
    problems: list[str] = []
    if gate.positions is not None and len(curve) != gate.positions:
        problems.append(f"{len(curve)} per-position counters, expected {gate.positions}")
    accepted = metrics.spec_decode_accepted
    if curve and accepted is not None and sum(curve) != accepted:
        problems.append(
            f"per-position counts sum to {_number(sum(curve))}, accepted is {_number(accepted)}"
        )
    if gate.survival_must_decay:
        problem = survival_problem(curve, ratio_max)
        problems += [] if problem is None else [problem]
    return problems


def spec_decode(
    gate: SpecDecodeGate, metrics: MetricsDelta, ratio_max: float = SURVIVAL_RATIO_MAX
) -> Verdict:
    """Acceptance (accepted / draft tokens) within the declared bounds, the declared number of
    draft positions, per-position counts that add up to the accepted tokens, and a survival
    curve that decays (`survival_problem`)."""
    problems = _acceptance_problems(gate, metrics) + _curve_problems(gate, metrics, ratio_max)
    curve = metrics.spec_decode_accepted_per_position
    accepted, draft_tokens = metrics.spec_decode_accepted, metrics.spec_decode_draft_tokens
    details: dict[str, object] = {
        "drafts": metrics.spec_decode_drafts,
        "draft_tokens": draft_tokens,
        "accepted": accepted,
        "accepted_per_position": list(curve),
        "survival_ratio_max": ratio_max,
    }
    if problems:
        return _verdict("spec_decode", False, "; ".join(problems), **details)
    assert accepted is not None and draft_tokens is not None  # no problem means both reported
    rate = accepted / draft_tokens
    summary = (
        f"acceptance {_number(accepted)}/{_number(draft_tokens)} = {rate:.4f} within "
        f"[{gate.acceptance_min}, {gate.acceptance_max}]"
    )
    if gate.survival_must_decay:
        ratio = curve[-1] / curve[0]
        summary += (
            f"; survival {_number(curve[0])} … {_number(curve[-1])} decays "
            f"(last/first {ratio:.4f} <= {ratio_max})"
        )
    return _verdict("spec_decode", True, summary, acceptance=rate, **details)


# --- throughput ---------------------------------------------------------------------------------


def throughput(gate: ThroughputGate, rows: Sequence[OracleRow], sealed: float) -> Verdict:
    """The conventional median rate over `gate.tokens` tokens reaches `gate.floor` times the sealed
    record's conventional median, and `gate.floor_tok_s` where declared; every prompt's own rate
    reaches `gate.prompt_floor` times the sealed median where declared; the historical N/span
    median is recorded, never gated."""
    try:
        measured = measure(rows, gate.tokens)
    except UnmeasurableRow as error:
        return _unmeasurable("throughput", error)
    floor_rate = gate.floor * sealed
    median = measured.conventional_median
    passed = median >= floor_rate
    relation = ">=" if passed else "<"
    summary = (
        f"conventional median {median:.2f} tok/s over {gate.tokens} tokens {relation} floor "
        f"{floor_rate:.2f} ({gate.floor} of sealed {sealed:.2f}){measured.summary_of_bounds}"
    )
    details: dict[str, object] = {
        "tokens": gate.tokens,
        "conventional_median_tok_s": median,
        "sealed_conventional_tok_s": sealed,
        "floor": gate.floor,
        "floor_rate_tok_s": floor_rate,
        **_per_row(measured),
    }
    if gate.floor_tok_s is not None:
        reached = median >= gate.floor_tok_s
        passed = passed and reached
        summary += f"; {'>=' if reached else '<'} absolute floor {gate.floor_tok_s:g} tok/s"
        details["floor_tok_s"] = gate.floor_tok_s
    if gate.prompt_floor is not None:
        prompt_rate = gate.prompt_floor * sealed
        slow = {r.prompt_id: r.conventional for r in measured.rows if r.conventional < prompt_rate}
        passed = passed and not slow
        summary += (
            f"; every prompt >= {prompt_rate:.2f} ({gate.prompt_floor} of sealed)"
            if not slow
            else f"; {len(slow)} of {len(measured.rows)} prompt(s) below {prompt_rate:.2f} "
            f"({gate.prompt_floor} of sealed): "
            + ", ".join(f"{prompt} {rate:.2f} tok/s" for prompt, rate in slow.items())
        )
        details["prompt_floor"] = gate.prompt_floor
        details["prompt_floor_rate_tok_s"] = prompt_rate
        details["prompts_below_tok_s"] = slow
    if gate.record_historical:
        summary += f"; historical N/span median {measured.historical_median:.2f} (not gated)"
        details["historical"] = {
            "label": HISTORICAL_LABEL,
            "median_tok_s": measured.historical_median,
        }
    return _verdict("throughput", passed, summary, **details)


def fresh_start_throughput(
    gate: FreshStartThroughputGate,
    tokens: int,
    first: Sequence[OracleRow],
    again: Sequence[OracleRow],
    start: int,
) -> Verdict:
    """Fresh start number `start` reproduces the first start's rate: the conventional medians
    over `tokens` tokens differ by at most `gate.relative_tolerance` of the first one's."""
    name = "fresh_start_throughput"
    try:
        measured_first, measured_again = measure(first, tokens), measure(again, tokens)
    except UnmeasurableRow as error:
        return _unmeasurable(name, error)
    reference = measured_first.conventional_median
    found = measured_again.conventional_median
    deviation = abs(found - reference) / reference
    passed = deviation <= gate.relative_tolerance
    relation = "<=" if passed else ">"
    summary = (
        f"start {start} {found:.2f} tok/s vs start 1 {reference:.2f} tok/s over {tokens} "
        f"tokens: deviation {deviation:.4f} {relation} {gate.relative_tolerance}"
        + "".join(
            f" (start {number}{measured.summary_of_bounds})"
            for number, measured in ((1, measured_first), (start, measured_again))
            if measured.lower_bounds
        )
    )
    return _verdict(
        name,
        passed,
        summary,
        start=start,
        first_conventional_tok_s=reference,
        conventional_tok_s=found,
        deviation=deviation,
        relative_tolerance=gate.relative_tolerance,
    )


# --- latency, from the client's token times -------------------------------------------------


def _starts(evidence: RunEvidence) -> list[tuple[int, Sequence[OracleRow]]]:
    """Every start's rows by its number; none without start 1's."""
    if evidence.rows is None:
        return []
    later = [(n + 2, rows) for n, rows in enumerate(evidence.later_starts)]
    return [(1, evidence.rows), *later]


def stall(gate: StallGate, starts: Sequence[tuple[int, Sequence[OracleRow]]]) -> Verdict:
    """No start's answer pauses longer than `gate.factor` x its row's median inter-token
    latency and `gate.min_ms` (`launch.latency.stalls`); each stall named by start, prompt and
    token."""
    found = [
        (start, s) for start, rows in starts for s in stalls(rows, gate.factor, gate.min_ms / 1e3)
    ]
    bound = f"no gap above {gate.factor:g} x its row's median ITL and {gate.min_ms:g} ms"
    summary = (
        f"{bound}, in {len(starts)} start(s)"
        if not found
        else f"{len(found)} stall(s): "
        + "; ".join(f"start {start} {s.shown()}" for start, s in found)
        + f" (expected {bound})"
    )
    return _verdict(
        "stall",
        not found,
        summary,
        factor=gate.factor,
        min_ms=gate.min_ms,
        stalls=[
            {"start": start, "prompt_id": s.prompt_id, "token": s.token, "gap_s": s.seconds,
             "median_itl_s": s.median_s}
            for start, s in found
        ],
    )  # fmt: skip


Bound = tuple[str, str, float | None]
"""(figure, quantile, bound in ms): `("itl", "p99", 500.0)`; no bound where None."""


def latency_limits(gate: LatencyGate | Load) -> list[Bound]:
    """The latency bounds a latency gate or a load declares, each by its figure and quantile."""
    return [
        ("ttft", "p99", gate.ttft_p99_max_ms),
        ("itl", "p99", gate.itl_p99_max_ms),
        ("tpot", "p50", gate.tpot_p50_max_ms),
    ]


def _bound_problems(
    start: int, measured: Latency, bounds: Sequence[Bound]
) -> tuple[list[str], list[str]]:
    """Start `start`'s latency against each declared bound: what breaks one (a figure above
    it, or none measured) and what holds."""
    problems, held = [], []
    for name, quantile, limit in bounds:
        if limit is None:
            continue
        figure: Distribution | None = getattr(measured, name)
        value = None if figure is None else getattr(figure, quantile)
        text = f"start {start} {name.upper()} {quantile}"
        if value is None:
            problems.append(f"{text}: no {name.upper()} measured (expected <= {limit:g} ms)")
        elif value * 1e3 > limit:
            problems.append(f"{text} {value * 1e3:.1f} ms > {limit:g} ms")
        else:
            held.append(f"{text} {value * 1e3:.1f} ms <= {limit:g} ms")
    return problems, held


def _limits(bounds: Sequence[Bound]) -> dict[str, float]:
    """The declared bounds as a verdict's details name them: `itl_p99_max_ms`."""
    return {f"{n}_{q}_max_ms": v for n, q, v in bounds if v is not None}


def latency_bounds(gate: LatencyGate, starts: Sequence[tuple[int, Sequence[OracleRow]]]) -> Verdict:
    """Every start's TTFT and ITL p99 and TPOT p50 within the gate's bounds (`launch.latency`)."""
    bounds = latency_limits(gate)
    problems, shown, details = [], [], {}
    for start, rows in starts:
        measured = latency(rows)
        details[f"start-{start}"] = {
            name: None if figure is None else figure.as_details()
            for name, figure in (
                ("ttft", measured.ttft), ("itl", measured.itl), ("tpot", measured.tpot)
            )
        }  # fmt: skip
        broken, held = _bound_problems(start, measured, bounds)
        problems += broken
        shown += held
    summary = "; ".join(problems) if problems else "; ".join(shown)
    return _verdict("latency", not problems, summary, **_limits(bounds), measured=details)


# --- load shapes ---------------------------------------------------------------------------------

LOAD_GATE: Final = "load"


def load_gate(name: str) -> str:
    return f"{LOAD_GATE}:{name}"


def load_verdict(load: Load, starts: Sequence[tuple[int, Sequence[OracleRow]]]) -> Verdict:
    """What every start's rows under `load` measure (`launch.latency.LoadFigures`), held to
    the load's bounds: its aggregate floor and latency bounds in every start, and each further
    start's aggregate rate within `spread_max` of start 1's."""
    gate = load_gate(load.name)
    if not starts:
        return _missing(gate, f"rows of load {load.name} in start 1")
    bounds = latency_limits(load)
    problems: list[str] = []
    shown: list[str] = []
    measured: dict[str, object] = {}
    rates: dict[int, float | None] = {}
    for start, rows in starts:
        figures = LoadFigures.of(rows)
        measured[f"start-{start}"] = figures.as_details()
        rate = rates[start] = figures.aggregate_tok_s
        text = f"start {start}"
        if load.floor_tok_s is not None and (rate is None or rate < load.floor_tok_s):
            found = "no rate" if rate is None else f"{rate:.1f} tok/s"
            problems.append(f"{text} aggregate {found} < floor {load.floor_tok_s:g} tok/s")
        problems += _bound_problems(start, figures.latency, bounds)[0]
        shown.append(
            f"{text}: {figures.requests} requests, "
            + ("no aggregate rate" if rate is None else f"{rate:.1f} tok/s aggregate")
            + _latency_text(figures.latency)
        )
    spread: dict[str, float | None] = {}
    first = rates.get(starts[0][0])
    for start, _ in starts[1:]:
        rate = rates[start]
        change = None if rate is None or not first else abs(rate - first) / first
        spread[f"start-{start}"] = change
        if load.spread_max is not None and (change is None or change > load.spread_max):
            found = "no rate" if change is None else f"{change:.1%}"
            problems.append(
                f"start {start} aggregate rate differs from start 1's by {found} "
                f"(expected at most {load.spread_max:.1%})"
            )
    declared = {
        key: value
        for key, value in (
            ("floor_tok_s", load.floor_tok_s),
            *_limits(bounds).items(),
            ("spread_max", load.spread_max),
        )
        if value is not None
    }
    shape: dict[str, object] = (
        {"concurrency": load.concurrency}
        if load.concurrency is not None
        else {"request_rate_per_s": load.request_rate}
    )
    summary = f"{load.shape}: " + ("; ".join(problems) if problems else "; ".join(shown))
    return _verdict(
        gate, not problems, summary, shape=shape, bounds=declared, measured=measured, spread=spread
    )


def _latency_text(figures: Latency) -> str:
    parts = [
        f"{name} {quantile} {getattr(figure, quantile) * 1e3:.1f} ms"
        for name, quantile, figure in (
            ("TTFT", "p99", figures.ttft),
            ("ITL", "p99", figures.itl),
        )
        if figure is not None
    ]
    return "".join(f", {part}" for part in parts)


# --- engine facts from /metrics -----------------------------------------------------------------


def metrics_info(gate: MetricsInfoGate, metrics_text: str) -> Verdict:
    """Every label set of the info gauge `gate.family` in the metrics text carries the gate's
    label values (one label set per engine); a family the server does not export fails."""
    name = f"metrics_info:{gate.family}"
    try:
        label_sets = samples(metrics_text, "metrics after the suite").get(gate.family, {})
    except BadInput as error:
        return _verdict(name, False, error.what, where=error.where, found=error.found)
    if not label_sets:
        return _missing(name, f"{gate.family} sample")
    problems = [
        f"{label} is {dict(labels).get(label, '(absent)')!r}, expected {value!r}"
        for labels in label_sets
        for label, value in gate.labels.items()
        if dict(labels).get(label) != value
    ]
    expected = ", ".join(f"{label}={value!r}" for label, value in gate.labels.items())
    if problems:
        return _verdict(name, False, f"{gate.family}: " + "; ".join(problems), expected=expected)
    summary = f"{gate.family} reports {expected} on {len(label_sets)} label set(s)"
    return _verdict(name, True, summary, labels=dict(gate.labels))


# --- the gates of a run: one table -------------------------------------------------------------

_DISABLED: Final = "disabled in oracle.gates"
TEACHER_GATES: Final = frozenset({"exact_token_ids", "text_sha256", "throughput"})
LIVE_AUDIT_GATE: Final = "live_audit"
SERVER_LOG_GATE: Final = "server_log"


@dataclass(frozen=True)
class Judging:
    """What a gate is judged with beside the manifest's gates and the evidence."""

    survival_ratio_max: float = SURVIVAL_RATIO_MAX
    kernel_markers: tuple[LogMarker, ...] = ()
    """The runtime markers of the manifest's kernel sets (`native.kernels.runtime_markers`)."""


@dataclass(frozen=True)
class GateKind:
    """One kind of gate: its name (a verdict's gate, or the part before `:`), what evidence it
    reads, how it judges, and how `repro check` (before a run) and `repro report` (after)
    describe it. `judge` is None for the gates a run gives each start (its live audit, its log),
    judged where each start is read (`audit_verdict`, `server_log_verdict`)."""

    name: str
    needs: str
    judge: Callable[[Gates, RunEvidence, Judging], list[Verdict]] | None
    plan: Callable[[Gates], gatetext.Plan]
    shown: Callable[[gatetext.Details, Gates, str], gatetext.Shown] | None
    """None: the verdict's summary is what it measured."""
    bound: str = gatetext.NONE
    """The bound a report shows when the evidence is missing."""
    measures: bool = False
    """Its verdict's details are performance figures (rates, latencies), each unit in its key:
    what `repro verify --json` gives a machine as numbers."""


def _with_teacher(
    name: str, gate: Callable[[Sequence[OracleRow], Teacher], Verdict]
) -> Callable[[Gates, RunEvidence, Judging], list[Verdict]]:
    def judged(gates: Gates, evidence: RunEvidence, _: Judging) -> list[Verdict]:
        if not getattr(gates, name):
            return [_not_applicable(name, _DISABLED)]
        if evidence.rows is None:
            return [_missing(name, "oracle rows")]
        if evidence.teacher is None:
            return [_missing(name, "teacher")]
        return [gate(evidence.rows, evidence.teacher)]

    return judged


def _cached_tokens_gate(gates: Gates, evidence: RunEvidence, _: Judging) -> list[Verdict]:
    if not gates.cached_tokens_zero:
        return [_not_applicable("cached_tokens_zero", _DISABLED)]
    if evidence.rows is None:
        return [_missing("cached_tokens_zero", "oracle rows")]
    return [cached_tokens_zero(evidence.rows)]


def _prefix_cache_gate(gates: Gates, evidence: RunEvidence, _: Judging) -> list[Verdict]:
    if not gates.prefix_cache_hit_delta_zero:
        return [_not_applicable("prefix_cache_hit_delta_zero", _DISABLED)]
    if evidence.metrics is None:
        return [_missing("prefix_cache_hit_delta_zero", "metrics diff")]
    return [prefix_cache_hit_delta_zero(evidence.metrics)]


def _metrics_info_gates(gates: Gates, evidence: RunEvidence, _: Judging) -> list[Verdict]:
    return [
        _missing(f"metrics_info:{gate.family}", "metrics text read after the suite")
        if evidence.metrics_after is None
        else metrics_info(gate, evidence.metrics_after)
        for gate in gates.metrics_info
    ]


def _log_marker_gates(gates: Gates, evidence: RunEvidence, _: Judging) -> list[Verdict]:
    log = evidence.server_log
    if not gates.log_markers:
        return [_not_applicable("log_markers", "no log markers declared")]
    return [
        _missing(f"log_marker:{m.name}", "server log") if log is None else log_marker(m, log)
        for m in gates.log_markers
    ]


def _kernel_marker_gates(gates: Gates, evidence: RunEvidence, judging: Judging) -> list[Verdict]:
    log = evidence.server_log
    verdicts = []
    for marker in judging.kernel_markers:
        verdict = _missing(f"log_marker:{marker.name}", "server log")
        verdict = verdict if log is None else log_marker(marker, log)
        verdicts.append(verdict.model_copy(update={"gate": f"kernel_marker:{marker.name}"}))
    return verdicts


def _forbidden_gate(gates: Gates, evidence: RunEvidence, _: Judging) -> list[Verdict]:
    name, patterns, log = (
        "forbidden_log_patterns",
        gates.forbidden_log_patterns,
        evidence.server_log,
    )
    if not patterns:
        return [_not_applicable(name, "no forbidden log patterns declared")]
    return [_missing(name, "server log") if log is None else forbidden_log_patterns(patterns, log)]


def _spec_decode_gate(gates: Gates, evidence: RunEvidence, judging: Judging) -> list[Verdict]:
    if gates.spec_decode is None:
        return [_not_applicable("spec_decode", "no spec_decode gate declared")]
    if evidence.metrics is None:
        return [_missing("spec_decode", "metrics diff")]
    return [spec_decode(gates.spec_decode, evidence.metrics, judging.survival_ratio_max)]


def _throughput_gate(gates: Gates, evidence: RunEvidence, _: Judging) -> list[Verdict]:
    if gates.throughput is None:
        return [_not_applicable("throughput", "no throughput gate declared")]
    if evidence.rows is None:
        return [_missing("throughput", "oracle rows")]
    if evidence.teacher is None or evidence.teacher.conventional_tok_s is None:
        return [_missing("throughput", "teacher conventional rate")]
    return [throughput(gates.throughput, evidence.rows, evidence.teacher.conventional_tok_s)]


def _fresh_start_gates(gates: Gates, evidence: RunEvidence, _: Judging) -> list[Verdict]:
    starts = max(gates.fresh_starts - 1, len(evidence.later_starts))
    if starts == 0:
        return [_not_applicable("fresh_starts", "one fresh start declared")]
    if evidence.rows is None:
        return [_missing("fresh_starts", "oracle rows of start 1")]
    verdicts: list[Verdict] = []
    for index in range(starts):
        start = index + 2
        if index < len(evidence.later_starts):
            again = evidence.later_starts[index]
            verdicts.append(fresh_start_reproduces(evidence.rows, again, start))
        else:
            verdicts.append(_missing("fresh_starts", f"oracle rows of start {start}"))
    return verdicts


def _fresh_start_throughput_gates(gates: Gates, evidence: RunEvidence, _: Judging) -> list[Verdict]:
    name = "fresh_start_throughput"
    gate, window = gates.fresh_start_throughput, gates.throughput
    if gate is None or window is None:  # the manifest requires the window with the gate
        return []
    if evidence.rows is None:
        return [_missing(name, "oracle rows of start 1")]
    verdicts: list[Verdict] = []
    for index in range(gates.fresh_starts - 1):
        start = index + 2
        if index < len(evidence.later_starts):
            again = evidence.later_starts[index]
            verdicts.append(
                fresh_start_throughput(gate, window.tokens, evidence.rows, again, start)
            )
        else:
            verdicts.append(_missing(name, f"oracle rows of start {start}"))
    return verdicts


def _stall_gate(gates: Gates, evidence: RunEvidence, _: Judging) -> list[Verdict]:
    if gates.stall is None:
        return []
    starts = _starts(evidence)
    return [stall(gates.stall, starts) if starts else _missing("stall", "oracle rows of start 1")]


def _latency_gate(gates: Gates, evidence: RunEvidence, _: Judging) -> list[Verdict]:
    if gates.latency is None:
        return []
    starts = _starts(evidence)
    if not starts:
        return [_missing("latency", "oracle rows of start 1")]
    return [latency_bounds(gates.latency, starts)]


def _load_gates(gates: Gates, evidence: RunEvidence, _: Judging) -> list[Verdict]:
    return [
        load_verdict(
            load, [(n + 1, rows) for n, rows in enumerate(evidence.loads.get(load.name, ()))]
        )
        for load in gates.loads
    ]


GATES: Final = (
    GateKind("exact_token_ids", "the rows and the teacher",
             _with_teacher("exact_token_ids", exact_token_ids), gatetext.exact_token_ids_plan,
             gatetext.equal_rows_shown, "every row, every token id"),
    GateKind("text_sha256", "the rows and the teacher", _with_teacher("text_sha256", text_sha256),
             gatetext.text_sha256_plan, gatetext.text_rows_shown, "every row's text sha256"),
    GateKind("cached_tokens_zero", "the rows", _cached_tokens_gate, gatetext.cached_tokens_plan,
             gatetext.cached_shown, "0 on every row"),
    GateKind("prefix_cache_hit_delta_zero", "the /metrics diff", _prefix_cache_gate,
             gatetext.prefix_cache_plan, gatetext.hits_shown, "0 hits during the suite"),
    GateKind("metrics_info", "the /metrics text after the suite", _metrics_info_gates,
             gatetext.metrics_info_plan, gatetext.metrics_info_shown),
    GateKind("log_marker", "the server log", _log_marker_gates, gatetext.log_marker_plan,
             gatetext.marker_shown),
    GateKind("kernel_marker", "the server log", _kernel_marker_gates, gatetext.kernel_marker_plan,
             gatetext.marker_shown),
    GateKind("forbidden_log_patterns", "the server log", _forbidden_gate, gatetext.forbidden_plan,
             gatetext.forbidden_shown),
    GateKind("spec_decode", "the /metrics diff", _spec_decode_gate, gatetext.spec_decode_plan,
             gatetext.spec_decode_shown, "the declared acceptance bounds"),
    GateKind("throughput", "the rows and the teacher's rate", _throughput_gate,
             gatetext.throughput_plan, gatetext.throughput_shown, "the floor", measures=True),
    GateKind("fresh_starts", "the rows of every start", _fresh_start_gates,
             gatetext.fresh_starts_plan, gatetext.fresh_start_shown,
             "start 1's token ids, every row"),
    GateKind("fresh_start_throughput", "the rows of every start", _fresh_start_throughput_gates,
             gatetext.fresh_rate_plan, gatetext.fresh_rate_shown, measures=True),
    GateKind("stall", "the client's token times of every start", _stall_gate,
             gatetext.stall_plan, gatetext.stall_shown, measures=True),
    GateKind("latency", "the client's token times of every start", _latency_gate,
             gatetext.latency_plan, gatetext.latency_shown, measures=True),
    GateKind(LOAD_GATE, "the client's send and token times of every start under each load",
             _load_gates, gatetext.load_plan, gatetext.load_shown, measures=True),
    GateKind(LIVE_AUDIT_GATE, "each start's live audit", None, gatetext.per_start_plan,
             gatetext.audit_shown),
    GateKind(SERVER_LOG_GATE, "each start's server log", None, gatetext.per_start_plan, None),
)  # fmt: skip
"""Every kind of gate, in the order `judge` gives their verdicts. A new gate is one entry here
and its judging function; `repro check`, `repro report` and `repro verify` read it from here."""

KINDS: Final = {kind.name: kind for kind in GATES}
"""A kind by its name: the part of a verdict's gate before `:` (`log_markers` is the `n/a` of
`log_marker`)."""


def kind_of(gate: str) -> GateKind | None:
    """The kind of the verdict named `gate` (`log_marker:ready`, `live_audit:start-2`)."""
    name = gate.partition(":")[0]
    return KINDS.get("log_marker" if name == "log_markers" else name)


def judge(
    gates: Gates,
    evidence: RunEvidence,
    *,
    survival_ratio_max: float = SURVIVAL_RATIO_MAX,
    kernel_markers: Sequence[LogMarker] = (),
) -> tuple[Verdict, ...]:
    """A verdict for every kind of gate of `GATES`, in its order; a run passes when every
    verdict `passed` (`n/a` for a gate the manifest does not enable). The optional kinds
    (`metrics_info`, `fresh_start_throughput`, kernel markers, stall, latency) give a verdict
    for each one declared and none otherwise. `kernel_markers` are the runtime markers of the
    manifest's kernel sets (`builder.native.kernels.runtime_markers`), judged as log markers
    and named `kernel_marker:<name>`."""
    judging = Judging(survival_ratio_max, tuple(kernel_markers))
    return tuple(
        verdict
        for kind in GATES
        if kind.judge is not None
        for verdict in kind.judge(gates, evidence, judging)
    )


def plan(gates: Gates) -> gatetext.Plan:
    """Each gate a run of `gates` will judge, named as its verdict will be, with what it checks."""
    return [line for kind in GATES for line in kind.plan(gates)]


class RunFiles(Protocol):
    """A run's evidence as written: its run directory while it runs (`documents.rundir`), the
    bundle that seals it afterwards (`documents.bundle`)."""

    def rows(self, start: int, load: str | None = None) -> tuple[OracleRow, ...]: ...

    def start_text(self, start: int, name: str) -> str | None: ...


def run_evidence(files: RunFiles, oracle: Oracle, teacher: Teacher | None) -> RunEvidence:
    """What the gates judge of a run, read from its evidence files alone: the run judges what
    it writes, and `repro verify` judges the sealed copy again through this same reader. Start
    1's rows, `/metrics` reads and log; each further start's rows; each load's rows per start."""
    starts = range(1, oracle.gates.fresh_starts + 1)
    before = files.start_text(1, METRICS_BEFORE)
    after = files.start_text(1, METRICS_AFTER)
    return RunEvidence(
        rows=files.rows(1),
        teacher=teacher,
        metrics=delta(before, after) if before is not None and after is not None else None,
        metrics_after=after,
        server_log=files.start_text(1, LOG_FILE),
        later_starts=tuple(files.rows(start) for start in starts[1:]),
        loads={
            load: tuple(files.rows(start, load) for start in starts) for load in oracle.load_names
        },
    )


def judge_run(
    gates: Gates, evidence: RunEvidence, *, kernel_markers: Sequence[LogMarker] = ()
) -> tuple[Verdict, ...]:
    """`judge` as a run records it: the teacher's gates `n/a` when the run captures the
    teacher (`evidence.teacher` None). The one function a run and `repro verify` judge by, so
    a sealed verdict is always recomputable; the live audit's verdicts follow it, one a start
    (`LIVE_AUDIT_GATE:start-N`)."""
    verdicts = judge(gates, evidence, kernel_markers=kernel_markers)
    if evidence.teacher is None:
        verdicts = tuple(_capturing(verdict, gates, evidence) for verdict in verdicts)
    return verdicts


def audit_gate(start: int, rank: int = 0) -> str:
    """The live audit's gate of a start, on rank `rank`'s node when a stack spans nodes."""
    return _per_start(LIVE_AUDIT_GATE, start, rank)


def _per_start(kind: str, start: int, rank: int) -> str:
    """The gate of `kind` a run gives one start (and rank): `live_audit:start-2:rank-1`."""
    return f"{kind}:start-{start}" + (f":rank-{rank}" if rank else "")


def audit_verdict(
    start: int, roles: Sequence[str], files: int, drifts: Sequence[Drift], *, rank: int = 0
) -> Verdict:
    """The verdict of one start's live audit (of one node's tree, for a stack across nodes):
    its processes by role, the distinct ELF files they map, and every drift it found (a run and
    `repro verify` alike)."""
    gate = audit_gate(start, rank)
    details: dict[str, object] = {"drifts": [d.model_dump(mode="json") for d in drifts]}
    if not drifts:
        shown = sorted(roles)
        summary = f"{len(shown)} processes ({', '.join(shown)}), {files} ELF files, no drift"
        return Verdict(gate=gate, status=VerdictStatus.PASS, summary=summary, details=details)
    first = drifts[0]
    summary = f"{len(drifts)} drift(s); first: {first.kind.value} {first.subject}"
    return Verdict(gate=gate, status=VerdictStatus.FAIL, summary=summary, details=details)


CRASH_MARKERS: Final = (
    # CPython and the kernel's signals, as faulthandler, the shell and torch's handlers write them
    "Traceback (most recent call last)",
    "Fatal Python error",
    "Illegal instruction",
    "SIGILL",
    "Segmentation fault",
    "SIGSEGV",
    "Bus error",
    "SIGBUS",
    "Aborted",
    "SIGABRT",
    "Floating point exception",
    "SIGFPE",
    "core dumped",
    "killed by signal",
    # memory exhausted: torch's `CUDA/XPU/CPU out of memory`, Python's MemoryError
    "out of memory",
    "MemoryError",
    # glibc's and libstdc++'s messages before they abort the process
    "terminate called after throwing",
    "terminate called without an active exception",
    "double free",
    "free(): ",
    "malloc(): ",
    "realloc(): ",
    "munmap_chunk(): ",
    "corrupted size vs. prev_size",
    "stack smashing detected",
    # vLLM: a worker, the executor or the engine core gone
    "died unexpectedly",
    "EngineDeadError",
    "encountered an issue",
    "encountered a fatal error",
    "EngineCore failed",
    "Engine core initialization failed",
    "Executor failed",
    "WorkerProc hit an exception",
    "WorkerProc failed",
    # vLLM's API server: a request's stream, or the loop reading the engine's outputs, failed
    "Error in chat completion stream generator",
    "Error in completion stream generator",
    "output_handler failed",
    # uvicorn: an exception escaped the application while answering a request
    "Exception in ASGI application",
)
"""What a process of the stack writes when it crashes: none may appear while the stack served
(a shutdown's own traceback, after teardown began, is not the run's). Case-sensitive, each as
its writer spells it: CPython's faulthandler (`Fatal Python error: Segmentation fault`, `Bus
error`, `Aborted`), the shell (`Aborted (core dumped)`), torch's and absl's signal handlers
(`*** SIGSEGV received`), torch's DataLoader (`killed by signal`), torch's allocators (`CUDA
out of memory`, `torch.OutOfMemoryError`), glibc's malloc checks (`free(): invalid pointer`,
`double free or corruption`) and stack protector, libstdc++'s `std::terminate`, vLLM 0.32
(`Worker proc VllmWorker-0 died unexpectedly, shutting down executor.`, `Engine core proc
EngineCore died unexpectedly, shutting down client.`, `EngineCore failed to start.`, `EngineCore
encountered a fatal error.`, `RuntimeError: Executor failed.`, `WorkerProc hit an exception.`,
`WorkerProc failed to start.`, `Error in chat completion stream generator.`, `AsyncLLM
output_handler failed.`) and uvicorn (`Exception in ASGI application`). vLLM's own lowercase
`abort` (a route, a shutdown mode) and its shutdown's `signal=SIGTERM` match none. A request
aborted while serving (`Aborted request`) is no complete answer either. Beside these, a line
whose message is a bare Python exception (`BARE_EXCEPTION`) and the shell's report of a process
it saw killed (`KILLED`) are crash lines too."""
LOG_HEADER: Final = re.compile(
    r"(?:\([A-Za-z_][A-Za-z0-9_.-]{0,100} pid=[0-9]{1,10}(?:, [^()\n]{0,200})?\) ?)?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)"
    r"(?::[ \t]+| [0-9]{2}-[0-9]{2} [0-9:.]{1,20} (?:\[[^\]\n]{0,200}\] )?))?"
)
"""What precedes a log line's message: vLLM's process prefix (`(APIServer pid=1) `, `(RayWorker
pid=2, ip=10.0.0.1) `), then its level, date and source (`ERROR 12-06 01:28:56 [core.py:1] `)
or uvicorn's level (`ERROR:    `)."""
BARE_EXCEPTION: Final = re.compile(
    r"(?:[A-Za-z_][A-Za-z0-9_]{0,100}\.){0,20}[A-Za-z_][A-Za-z0-9_]{0,100}(?:Error|Exception): "
)
"""A message that is a Python exception as its traceback's last line states it
(`RuntimeError: Expected all tensors to be on the same device`, `vllm.v1.engine.exceptions.
EngineDeadError: …`), logged with or without the traceback before it. A message that merely
quotes one (`… fd limit errors like OSError: [Errno 24] …`) does not begin with it: measured, no
line written while serving in a committed log has such a message."""
KILLED: Final = re.compile(r"(?:[^:\n]+: line [0-9]+: +[0-9]+ +)?Killed(?: .*)?")
"""The shell's report of a child killed by SIGKILL (the kernel's OOM killer's signal), the whole
line: `Killed`, or `bash: line 1: 12345 Killed    python …`."""


def crash_marker(line: str) -> str | None:
    """What in `line` says a process of the stack crashed (a `CRASH_MARKERS` entry, a bare
    exception's name, `Killed`); None when nothing does."""
    marker = next((marker for marker in CRASH_MARKERS if marker in line), None)
    if marker is not None:
        return marker
    header = LOG_HEADER.match(line)
    bare = BARE_EXCEPTION.match(line, header.end() if header is not None else 0)
    if bare is not None:
        return bare[0].rstrip(": ").rsplit(".", 1)[-1]
    return "Killed" if KILLED.fullmatch(line.strip()) is not None else None


def server_log_gate(start: int, rank: int = 0) -> str:
    """A start's server log's gate, on rank `rank`'s node when a stack spans nodes."""
    return _per_start(SERVER_LOG_GATE, start, rank)


ACCESS_LINE: Final = re.compile(
    r'"(?P<method>[A-Z]+) (?P<path>[^ "?]+)(?:\?[^ "]*)? HTTP/[0-9.]+" (?P<status>[0-9]{3})\b'
)
"""An access-log line (uvicorn's, as vLLM's API server logs every request it answered unless
its argv turns that off): `127.0.0.1:48008 - "POST /v1/chat/completions HTTP/1.1" 200 OK`."""
SUITE_ENDPOINTS: Final = ("/v1/chat/completions", "/v1/completions")
"""Where a suite's requests are posted (`builder.documents.manifest.ENDPOINTS`)."""


@dataclass(frozen=True)
class AccessLine:
    """One request of the access log: its line, method, path (without a query) and status."""

    line: int
    method: str
    path: str
    status: int


def access_lines(text: str) -> list[AccessLine]:
    """Every access-log line of `text`, numbered as the crash markers number its lines."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = ACCESS_LINE.search(line)
        if match is not None:
            found.append(AccessLine(number, match["method"], match["path"], int(match["status"])))
    return found


def server_log_verdict(
    start: int, log: bytes, served: int | None, *, answered: int = 0, rank: int = 0
) -> Verdict:
    """A start's log (one rank's): not empty, text, no crash in what the stack wrote before
    teardown began (`served` bytes, `teardown.json` log_bytes; the whole log when unknown), and
    where the server logs its requests, exactly the `answered` suite requests (POSTs to a
    completions endpoint) logged in that part, every one answered 2xx: repro posts each prompt
    once, with no retry and no warm-up, and nothing else posts there."""
    gate = server_log_gate(start, rank)
    if not log:
        return _verdict(gate, False, "the server wrote no log")
    written = log[: len(log) if served is None else served]
    if b"\0" in written:
        return _verdict(gate, False, "the log written while serving holds NUL bytes: not text")
    text = written.decode(errors="replace")
    found = [
        (number, marker)
        for number, line in enumerate(text.splitlines(), start=1)
        if (marker := crash_marker(line)) is not None
    ]
    if found:
        number, marker = found[0]
        summary = f"{len(found)} crash line(s) while serving; first: line {number} {marker!r}"
        return _verdict(gate, False, summary, lines=[n for n, _ in found[:20]])
    requests = access_lines(text)
    if requests or access_lines(log.decode(errors="replace")):  # the server logs its requests
        suite = [r for r in requests if r.method == "POST" and r.path in SUITE_ENDPOINTS]
        refused = [r for r in suite if not 200 <= r.status < 300]
        if refused:
            first = refused[0]
            summary = (
                f"{len(refused)} suite request(s) answered otherwise than 2xx while serving; "
                f"first: line {first.line} POST {first.path} {first.status}"
            )
            return _verdict(gate, False, summary, lines=[r.line for r in refused[:20]])
        logged = len(suite)
        if logged < answered:
            summary = (
                f"{logged} of {answered} suite requests logged before teardown began (byte "
                f"{len(written)}): the log says the stack still served after it"
            )
            return _verdict(gate, False, summary, logged=logged)
        if logged > answered:
            summary = (
                f"{logged} suite requests logged while serving, expected the {answered} "
                f"answered (one POST a row): the log says the stack answered requests the rows "
                f"do not hold; first: line {suite[0].line}"
            )
            return _verdict(gate, False, summary, logged=logged)
    summary = f"{len(text.splitlines())} lines written while serving, no crash"
    return _verdict(gate, True, summary, served_bytes=len(written))


def _capturing(verdict: Verdict, gates: Gates, evidence: RunEvidence) -> Verdict:
    if verdict.gate not in TEACHER_GATES or verdict.status is VerdictStatus.NOT_APPLICABLE:
        return verdict
    if verdict.gate == "throughput" and gates.throughput is not None and evidence.rows:
        return captured_throughput(gates.throughput, evidence.rows)
    summary = "no teacher given: this run captures the teacher"
    return Verdict(gate=verdict.gate, status=VerdictStatus.NOT_APPLICABLE, summary=summary)


def captured_throughput(gate: ThroughputGate, rows: Sequence[OracleRow]) -> Verdict:
    """The rate a run capturing the teacher seals for the floor to scale: measured, or the
    reason it cannot be (then nothing may be sealed from the run)."""
    try:
        measured = measure(rows, gate.tokens)
    except UnmeasurableRow as error:
        return _unmeasurable("throughput", error)
    summary = (
        f"captures the teacher's rate: conventional median {measured.conventional_median:.2f} "
        f"tok/s over {gate.tokens} tokens{measured.summary_of_bounds}"
    )
    return Verdict(
        gate="throughput",
        status=VerdictStatus.NOT_APPLICABLE,
        summary=summary,
        details={
            "tokens": gate.tokens,
            "conventional_median_tok_s": measured.conventional_median,
            **_per_row(measured),
        },
    )


def _per_row(measured: Throughput) -> dict[str, object]:
    """Each row's rate, and why those that are lower bounds are, for a verdict's details."""
    return {
        "rows_tok_s": {rate.prompt_id: rate.conventional for rate in measured.rows},
        "lower_bounds": measured.lower_bounds,
    }
