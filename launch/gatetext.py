"""How `repro check` and `repro report` describe each gate of `launch.gates.GATES`: what a
declared gate will check, before a run, and what a verdict measured against which bound, after.
Pure text from the manifest's `Gates` and a verdict's details."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from repro_serving.builder.documents.manifest import Gates, LogMarker

NONE: Final = "—"
"""What a table shows where there is nothing to show."""

Details = Mapping[str, object]
Plan = list[tuple[str, str]]
"""(the gate's name as its verdict names it, what it checks), one a gate that will run."""


@dataclass(frozen=True)
class Shown:
    measured: str
    bound: str


# --- before a run: what each declared gate checks -----------------------------------------------


def exact_token_ids_plan(gates: Gates) -> Plan:
    return (
        [("exact_token_ids", "every row's token ids equal the teacher's")]
        if gates.exact_token_ids
        else []
    )


def text_sha256_plan(gates: Gates) -> Plan:
    return (
        [("text_sha256", "every row's text sha256 equals the teacher's")]
        if gates.text_sha256
        else []
    )


def cached_tokens_plan(gates: Gates) -> Plan:
    return (
        [("cached_tokens_zero", "cached_tokens == 0 on every row")]
        if gates.cached_tokens_zero
        else []
    )


def prefix_cache_plan(gates: Gates) -> Plan:
    if not gates.prefix_cache_hit_delta_zero:
        return []
    return [("prefix_cache_hit_delta_zero", "prefix-cache hits after - before == 0")]


def metrics_info_plan(gates: Gates) -> Plan:
    return [
        (
            f"metrics_info:{info.family}",
            ", ".join(f"{label} = {value!r}" for label, value in info.labels.items()),
        )
        for info in gates.metrics_info
    ]


def log_marker_plan(gates: Gates) -> Plan:
    return [(f"log_marker:{m.name}", marker_check(m)) for m in gates.log_markers]


def marker_check(marker: LogMarker) -> str:
    """What a log marker (of the manifest or of a kernel set) checks of the server's log."""
    if marker.count is not None:
        return f"/{marker.pattern}/ exactly {marker.count} time(s)"
    counts = ", ".join(f"{rank}: {count}" for rank, count in marker.per_rank.items())
    return f"/{marker.pattern}/ per rank /{marker.rank_pattern}/ exactly {counts}"


def kernel_marker_plan(gates: Gates) -> Plan:
    """A kernel set's runtime markers: the manifest's gates do not name them (`repro check` lists
    them with the kernel sets)."""
    return []


def forbidden_plan(gates: Gates) -> Plan:
    return [
        ("forbidden_log_patterns", f"no line matches /{p}/") for p in gates.forbidden_log_patterns
    ]


def spec_decode_plan(gates: Gates) -> Plan:
    spec = gates.spec_decode
    if spec is None:
        return []
    text = f"accepted / draft tokens in [{spec.acceptance_min}, {spec.acceptance_max}]"
    if spec.positions is not None:
        text += f"; {spec.positions} positions"
    if spec.survival_must_decay:
        text += "; accepted per position decays"
    return [("spec_decode", text)]


def throughput_plan(gates: Gates) -> Plan:
    rate = gates.throughput
    if rate is None:
        return []
    text = f"median (N-1)/span, N = {rate.tokens}, >= {rate.floor} x the sealed rate"
    if rate.floor_tok_s is not None:
        text += f" and >= {rate.floor_tok_s:g} tok/s"
    if rate.prompt_floor is not None:
        text += f"; every prompt >= {rate.prompt_floor} x the sealed rate"
    if rate.record_historical:
        text += "; N/span recorded, labelled historical"
    return [("throughput", text)]


def fresh_starts_plan(gates: Gates) -> Plan:
    return [("fresh_starts", f"{gates.fresh_starts} fresh start(s) reproduce the token ids")]


def fresh_rate_plan(gates: Gates) -> Plan:
    if gates.fresh_start_throughput is None:
        return []
    tolerance = gates.fresh_start_throughput.relative_tolerance
    return [
        (
            "fresh_start_throughput",
            f"each further start's median (N-1)/span within {tolerance} of start 1's",
        )
    ]


def stall_plan(gates: Gates) -> Plan:
    stall = gates.stall
    if stall is None:
        return []
    text = f"no gap above {stall.factor:g} x its row's median ITL and {stall.min_ms:g} ms"
    return [("stall", text + ", in every start")]


def latency_plan(gates: Gates) -> Plan:
    if gates.latency is None:
        return []
    bounds = {
        "TTFT p99": gates.latency.ttft_p99_max_ms,
        "ITL p99": gates.latency.itl_p99_max_ms,
        "TPOT p50": gates.latency.tpot_p50_max_ms,
    }
    text = ", ".join(f"{name} <= {v:g} ms" for name, v in bounds.items() if v is not None)
    return [("latency", text + ", in every start")]


def load_plan(gates: Gates) -> Plan:
    plans = []
    for load in gates.loads:
        bounds = [
            f"{label} {value:g}{unit}"
            for label, value, unit in (
                ("aggregate >=", load.floor_tok_s, " tok/s"),
                ("TTFT p99 <=", load.ttft_p99_max_ms, " ms"),
                ("ITL p99 <=", load.itl_p99_max_ms, " ms"),
                ("TPOT p50 <=", load.tpot_p50_max_ms, " ms"),
                ("starts' aggregate within", load.spread_max, " of start 1's"),
            )
            if value is not None
        ]
        held = ", ".join(bounds) + ", in every start" if bounds else "measured, no bound"
        plans.append((f"load:{load.name}", f"the suite at {load.shape}: {held}"))
    return plans


def per_start_plan(gates: Gates) -> Plan:
    """The gates a run adds for each start (its live audit, its log): nothing to declare."""
    return []


# --- after a run: what a verdict measured, against which bound ------------------------------------


def _number(details: Details, key: str) -> float | None:
    value = details.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _mapping(details: Details, key: str) -> Mapping[str, object]:
    value = details.get(key)
    return value if isinstance(value, dict) else {}


def _count(value: float | None) -> str:
    return "not reported" if value is None else f"{value:g}"


def equal_rows_shown(details: Details, gates: Gates, name: str) -> Shown:
    firsts = _mapping(details, "first_difference")
    equal = sum(index is None for index in firsts.values())
    return Shown(f"{equal}/{len(firsts)} rows equal", "every row, every token id")


def text_rows_shown(details: Details, gates: Gates, name: str) -> Shown:
    run, teacher = _mapping(details, "run"), _mapping(details, "teacher")
    equal = sum(run.get(prompt) == digest for prompt, digest in teacher.items())
    return Shown(f"{equal}/{len(teacher)} rows equal", "every row's text sha256")


def cached_shown(details: Details, gates: Gates, name: str) -> Shown:
    cached = _mapping(details, "cached")
    zero = sum(value == 0 for value in cached.values())
    measured = f"0 on {zero}/{len(cached)} rows"
    numbers = [v for v in cached.values() if isinstance(v, int) and v != 0]
    if numbers:
        measured += f", up to {max(numbers)} cached"
    return Shown(measured, "0 on every row")


def hits_shown(details: Details, gates: Gates, name: str) -> Shown:
    return Shown(f"{_count(_number(details, 'hits'))} hits", "0 hits during the suite")


def marker_shown(details: Details, gates: Gates, name: str) -> Shown:
    return Shown(_counts(details.get("found")), "exactly " + _counts(details.get("expected")))


def _counts(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{rank} {count}" for rank, count in value.items()) or "none"
    return str(value)


def forbidden_shown(details: Details, gates: Gates, name: str) -> Shown:
    matches = _mapping(details, "matches")
    lines = sum(v for v in matches.values() if isinstance(v, int))
    bound = f"no line matches any of {len(gates.forbidden_log_patterns)} patterns"
    return Shown(f"{lines} matching lines", bound)


def spec_decode_shown(details: Details, gates: Gates, name: str) -> Shown:
    accepted, draft = _number(details, "accepted"), _number(details, "draft_tokens")
    measured = f"accepted {_count(accepted)}/{_count(draft)}"
    if accepted is not None and draft:
        measured += f" = {accepted / draft:.4f}"
    curve = details.get("accepted_per_position")
    ratio_max = _number(details, "survival_ratio_max")
    gate = gates.spec_decode
    bound = NONE if gate is None else f"[{gate.acceptance_min}, {gate.acceptance_max}]"
    if isinstance(curve, list) and len(curve) >= 2 and curve[0]:
        measured += f"; last/first {curve[-1] / curve[0]:.4f} over {len(curve)} positions"
    if gate is not None and gate.survival_must_decay and ratio_max is not None:
        bound += f"; decaying, last/first <= {ratio_max:g}"
    if gate is not None and gate.positions is not None:
        bound += f"; {gate.positions} positions"
    return Shown(measured, bound)


def throughput_shown(details: Details, gates: Gates, name: str) -> Shown:
    median, tokens = _number(details, "conventional_median_tok_s"), _number(details, "tokens")
    floor, floor_rate = _number(details, "floor"), _number(details, "floor_rate_tok_s")
    sealed = _number(details, "sealed_conventional_tok_s")
    if median is None or tokens is None or floor_rate is None:
        return Shown(NONE, NONE)
    bound = f">= {floor_rate:.2f} tok/s"
    if floor is not None and sealed is not None:
        bound += f" ({floor:g} of {sealed:.2f})"
    return Shown(f"{median:.2f} tok/s over {tokens:g} tokens", bound)


def fresh_start_shown(details: Details, gates: Gates, name: str) -> Shown:
    shown = equal_rows_shown(details, gates, name)
    start = _number(details, "start")
    prefix = "" if start is None else f"start {start:g}: "
    return Shown(prefix + shown.measured, "start 1's token ids, every row")


def fresh_rate_shown(details: Details, gates: Gates, name: str) -> Shown:
    found, first = (
        _number(details, "conventional_tok_s"),
        _number(details, "first_conventional_tok_s"),
    )
    deviation = _number(details, "deviation")
    tolerance = _number(details, "relative_tolerance")
    if found is None or first is None or deviation is None or tolerance is None:
        return Shown(NONE, NONE)
    measured = f"{found:.2f} vs {first:.2f} tok/s, deviation {deviation:.4f}"
    return Shown(measured, f"deviation <= {tolerance:g}")


def metrics_info_shown(details: Details, gates: Gates, name: str) -> Shown:
    declared = next((g for g in gates.metrics_info if g.family == name), None)
    bound = NONE if declared is None else ", ".join(f"{k}={v}" for k, v in declared.labels.items())
    labels = _mapping(details, "labels")
    measured = ", ".join(f"{k}={v}" for k, v in labels.items()) if labels else "other labels"
    return Shown(measured, bound)


def audit_shown(details: Details, gates: Gates, name: str) -> Shown:
    drifts = details.get("drifts")
    count = len(drifts) if isinstance(drifts, list) else 0
    return Shown(f"{count} drifts", "0 drifts: every mapping explained")


def stall_shown(details: Details, gates: Gates, name: str) -> Shown:
    found = details.get("stalls")
    count = len(found) if isinstance(found, list) else 0
    bound = NONE if gates.stall is None else f"no gap > {gates.stall.factor:g} x median ITL"
    return Shown(f"{count} stall(s)", bound)


def latency_shown(details: Details, gates: Gates, name: str) -> Shown:
    measured = _mapping(details, "measured")
    first = measured.get("start-1") if measured else None
    itl = first.get("itl") if isinstance(first, dict) else None
    p99 = itl.get("p99_s") if isinstance(itl, dict) else None
    shown = NONE if not isinstance(p99, (int, float)) else f"start 1 ITL p99 {p99 * 1e3:.1f} ms"
    return Shown(shown, "the declared bounds")


def load_shown(details: Details, gates: Gates, name: str) -> Shown:
    measured = _mapping(details, "measured")
    first = measured.get("start-1") if measured else None
    rate = first.get("aggregate_tok_s") if isinstance(first, dict) else None
    shown = NONE if not isinstance(rate, (int, float)) else f"start 1 {rate:.1f} tok/s aggregate"
    load = next((load for load in gates.loads if f"load:{load.name}" == name), None)
    bound = NONE if load is None or load.floor_tok_s is None else f">= {load.floor_tok_s:g} tok/s"
    return Shown(shown, bound)
