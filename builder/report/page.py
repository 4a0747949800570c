"""The report as one self-contained HTML page: the verdict first, then each section.

The page holds everything it shows: the style in a `<style>` element, each chart an SVG in a
`data:` URI, no script at all. Its Content-Security-Policy (`default-src 'none'; img-src
data:; style-src 'unsafe-inline'`) tells the browser to fetch nothing else, so opening it makes
no network request even if a value shown (a path, a summary) looked like an address: every
value is HTML-escaped text, never markup or a link. Each chart is an element of id
`chart-<id>` (its `<img>` inside), so a test finds where it is drawn.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from html import escape
from typing import Final

from repro_serving.builder.documents.evidence import VerdictStatus
from repro_serving.builder.report.charts import Chart
from repro_serving.builder.report.model import (
    Acceptance,
    Comparison,
    GateLine,
    LatencyLine,
    Native,
    PromptTiming,
    Report,
    Throughput,
    Verdict,
)

CONTENT_SECURITY_POLICY: Final = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
DIFFERENCES_SHOWN: Final = 400
"""Lines of one section's differences written out; the rest are counted."""
SHORT_CELL: Final = 12

STYLE: Final = """
body { font: 14px/1.45 "DejaVu Sans", system-ui, sans-serif; color: #1b2631; margin: 0;
       background: #f4f6f8; }
main { max-width: 1180px; margin: 0 auto; padding: 20px 24px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #d5dbe1; padding-bottom: 4px; }
p.subject { margin: 0 0 12px; color: #4a5560; }
section.card { background: #fff; border: 1px solid #d5dbe1; border-radius: 6px; padding: 12px 16px;
               margin: 10px 0; }
.verdict { display: flex; gap: 18px; align-items: center; }
.badge { font-size: 30px; font-weight: bold; padding: 6px 18px; border-radius: 6px; color: #fff; }
.badge.pass { background: #1e8449; } .badge.fail { background: #c0392b; }
.chips span { display: inline-block; background: #eef2f6; border-radius: 10px; padding: 1px 9px;
              margin: 2px 4px 2px 0; font-size: 12.5px; }
table { border-collapse: collapse; width: 100%; font-size: 12.5px; margin: 4px 0 14px; }
h3 { font-size: 14px; margin: 14px 0 4px; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #edf0f3;
         vertical-align: top; overflow-wrap: anywhere; }
td.short, th { white-space: nowrap; overflow-wrap: normal; }
th { background: #f7f9fb; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.fail td, li.fail { color: #a93226; } tr.fail { background: #fdf1ef; }
tr.drift { background: #fdf1ef; } tr.drift td { color: #a93226; }
.status { font-weight: 600; } .status.pass { color: #1e8449; } .status.fail { color: #c0392b; }
.status.na { color: #7f8c8d; }
figure { margin: 8px 0; } figure img { display: block; max-width: 100%; height: auto; }
figcaption { font-size: 12px; color: #4a5560; }
.note { color: #4a5560; font-size: 12.5px; }
.problem { color: #a93226; font-weight: 600; }
ul.failures { margin: 6px 0 0; padding-left: 20px; }
details summary { cursor: pointer; font-weight: 600; margin: 4px 0; }
code { font-size: 12px; }
footer { margin-top: 32px; font-size: 12px; color: #7f8c8d; }
"""


def render(report: Report, charts: Sequence[Chart]) -> str:
    """The page: the verdict, the gates, token arrival and rates, speculative decoding, the
    native truth, the differences from a reference, every claim; then what was unreadable."""
    by_id = {chart.id: chart for chart in charts}
    subject = report.subject
    kind = subject.kind.value if subject.kind is not None else "unverified directory"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>repro report: {_e(subject.name)}</title>",
        f"<style>{STYLE}</style></head><body><main>",
        f"<h1>repro report: {_e(subject.name)}</h1>",
        f'<p class="subject">{_e(kind)} at <code>{_e(subject.path)}</code>'
        + (f" &middot; {_e(subject.description)}" if subject.description else "")
        + "</p>",
        _verdict(report.verdict),
    ]
    if report.gates:
        parts.append(_gates(report.gates))
    if report.timings:
        parts.append(_timings(report.timings, report.throughput, by_id))
    if report.latency:
        parts.append(_latency(report.latency))
    if report.verdict.intact and report.subject.kind is not None:
        parts.append(_acceptance(report.acceptance, by_id))
    if report.native is not None:
        parts.append(_native(report.native, by_id))
    if report.comparison is not None:
        parts.append(_comparison(report.comparison, by_id))
    if report.verdict.claims:
        parts.append(_claims(report.verdict))
    if report.unreadable:
        items = "".join(f'<li class="fail"><pre>{_e(u)}</pre></li>' for u in report.unreadable)
        parts.append(f"<h2>Not shown</h2><section class='card'><ul>{items}</ul></section>")
    version = subject.repro_version or "unknown"
    parts.append(
        f"<footer>{_e(report.format)} &middot; sealed by repro {_e(version)} &middot; "
        "a self-contained page: no script, nothing fetched</footer></main></body></html>"
    )
    return "\n".join(parts) + "\n"


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _figure(chart: Chart | None) -> str:
    if chart is None:
        return ""
    data = base64.b64encode(chart.svg).decode("ascii")
    return (
        f'<figure id="chart-{_e(chart.id)}" class="chart">'
        f'<img src="data:image/svg+xml;base64,{data}" alt="{_e(chart.description)}">'
        f"<figcaption>{_e(chart.title)}: {_e(chart.description)}</figcaption></figure>"
    )


def _table(
    columns: Sequence[str], rows: Iterable[Sequence[str]], classes: Iterable[str] = ()
) -> str:
    """A table of escaped text; `classes` gives each row's class (none when exhausted)."""
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    marks = iter(classes)
    body = []
    for row in rows:
        mark = next(marks, "")
        cells = "".join(
            f'<td class="short">{_e(cell)}</td>' if _short(cell) else f"<td>{_e(cell)}</td>"
            for cell in row
        )
        body.append(f'<tr class="{mark}">{cells}</tr>' if mark else f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _short(cell: str) -> bool:
    """A word that must not wrap (`sealed`, `yes`, a count): short and without a space."""
    return len(cell) <= SHORT_CELL and " " not in cell


# --- sections -----------------------------------------------------------------------------------


def _verdict(verdict: Verdict) -> str:
    word = "PASS" if verdict.ok else "FAIL"
    classes = "".join(
        f"<span>{_e(cls)}: {count} claim{'s' if count != 1 else ''}</span>"
        for cls, count in verdict.classes.items()
    )
    signers = ", ".join(key[:16] for key in verdict.signers) or "nobody trusted"
    failures = ""
    if verdict.failures:
        items = "".join(f'<li class="fail">{_e(f)}</li>' for f in verdict.failures)
        failures = f'<ul class="failures">{items}</ul>'
    if not verdict.intact:
        failures += (
            '<p class="problem">The files are not those the signer sealed: nothing of their '
            "evidence is shown.</p>"
        )
    return (
        '<h2>Verdict</h2><section class="card" id="verdict"><div class="verdict">'
        f'<div class="badge {word.lower()}">{word}</div><div>'
        f"<div>signed by <code>{_e(signers)}</code></div>"
        f'<div class="chips">evidence classes: {classes or "<span>no claim recomputed</span>"}'
        f"</div></div></div>{failures}</section>"
    )


def _status(status: VerdictStatus) -> str:
    css = {"pass": "pass", "fail": "fail", "n/a": "na"}[status.value]
    return f'<span class="status {css}">{_e(status.value)}</span>'


def _gates(gates: Sequence[GateLine]) -> str:
    rows = []
    for gate in gates:
        css = ' class="fail"' if gate.status is VerdictStatus.FAIL else ""
        shown = gate.summary if gate.status is VerdictStatus.NOT_APPLICABLE else gate.measured
        rows.append(
            f"<tr{css}><td>{_e(gate.gate)}</td><td>{_status(gate.status)}</td>"
            f"<td>{_e(shown)}</td><td>{_e(gate.bound)}</td></tr>"
        )
    passed = sum(g.status is not VerdictStatus.FAIL for g in gates)
    return (
        f"<h2>Gates: {passed}/{len(gates)} pass or n/a</h2>"
        '<section class="card" id="gates"><table><thead><tr><th>gate</th><th>status</th>'
        "<th>measured</th><th>bound</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table><p class='note'>Every verdict recomputed from the sealed evidence by "
        "the function the run was judged with.</p></section>"
    )


def _latency(lines: Sequence[LatencyLine]) -> str:
    rows = (
        (line.start, line.figure, str(line.count), f"{line.p50_ms:.2f}", f"{line.p90_ms:.2f}",
         f"{line.p99_ms:.2f}", f"{line.max_ms:.2f}")
        for line in lines
    )  # fmt: skip
    return (
        '<h2>Latency</h2><section class="card" id="latency">'
        "<p>From the client's sealed token times: TTFT from sending the request to reading the "
        "first token; inter-token latency one per read that brought tokens; time per output "
        "token (t[last] - t[0]) / (N - 1) per prompt. Percentiles by linear interpolation.</p>"
        + _table(("start", "figure", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"), rows)
        + "</section>"
    )


def _timings(
    timings: Sequence[PromptTiming], throughput: Throughput | None, charts: dict[str, Chart]
) -> str:
    summary = ""
    if throughput is not None:
        summary = (
            "<p>Over the first "
            f"{throughput.tokens} streamed tokens of each prompt: conventional (N-1)/span median "
            f"<b>{throughput.conventional_median:.2f} tok/s</b>; historical N/span median "
            f"<b>{throughput.historical_median:.2f} tok/s</b> "
            f"({'recorded beside it, ' if throughput.record_historical else ''}never gated). "
            f"Floor <b>{throughput.floor_rate:.2f} tok/s</b> = {throughput.floor:g} of "
            f"{throughput.sealed_rate:.2f}"
            + ("" if throughput.gated else ", the rate a replay of this bundle must reach")
            + ".</p>"
        )
        if throughput.lower_bounds:
            named = "; ".join(f"{k}: {v}" for k, v in throughput.lower_bounds.items())
            summary += f"<p>Lower bounds, not arrivals, in the medians: {_e(named)}.</p>"
        if throughput.problem:
            summary += f'<p class="problem">{_e(throughput.problem)}</p>'
    bounded = throughput.lower_bounds if throughput is not None else {}
    rows = [
        (
            t.prompt_id,
            str(t.tokens),
            f"{t.ttft_s:.3f}",
            _rate(t.conventional, t.prompt_id in bounded),
            _rate(t.historical, t.prompt_id in bounded),
            _exact(t),
        )
        for t in timings
    ]
    marks = ["fail" if t.teacher_exact is False else "" for t in timings]
    table = _table(
        ("prompt", "tokens", "TTFT s", "(N-1)/span tok/s", "N/span tok/s", "token ids"),
        rows,
        marks,
    )
    return (
        '<h2>Token arrival, TTFT and rate</h2><section class="card" id="timings">'
        + summary
        + _figure(charts.get("timeline"))
        + _figure(charts.get("rates"))
        + table
        + "</section>"
    )


def _rate(rate: float | None, lower_bound: bool) -> str:
    if rate is None:
        return "—"
    return ("≥ " if lower_bound else "") + f"{rate:.2f}"


def _exact(timing: PromptTiming) -> str:
    if timing.teacher_exact is None:
        return "no teacher"
    if timing.teacher_exact:
        return "= teacher"
    return f"differs from the teacher at token {timing.first_difference}"


def _acceptance(acceptance: Acceptance | None, charts: dict[str, Chart]) -> str:
    head = '<h2>Speculative decoding</h2><section class="card" id="acceptance">'
    if acceptance is None:
        return head + "<p class='note'>No speculative-decoding counter in /metrics.</p></section>"
    curve = acceptance.per_position
    accepted, drafted = acceptance.accepted, acceptance.draft_tokens
    totals = f"accepted/draft tokens <b>{_g(accepted)}/{_g(drafted)}</b>"
    if accepted is not None and drafted:
        totals += f" = {accepted / drafted:.4f}"
    if acceptance.drafts is not None:
        totals += f" over {acceptance.drafts:g} drafts"
    if acceptance.bounds is not None:
        totals += f"; gate bounds [{acceptance.bounds[0]:g}, {acceptance.bounds[1]:g}]"
    if curve:
        totals += (
            f"; curve {curve[0]:g} … {curve[-1]:g} over {len(curve)} positions, flatness "
            f"threshold {acceptance.threshold:g} ({acceptance.ratio_max:g} of the first)"
        )
    rows = [[str(p), f"{v:g}", _kept(curve, p)] for p, v in enumerate(curve)]
    table = _table(("draft position", "accepted", "kept of the previous position"), rows)
    return head + f"<p>{totals}.</p>" + _figure(charts.get("acceptance")) + table + "</section>"


def _g(value: float | None) -> str:
    return "not reported" if value is None else f"{value:g}"


def _kept(curve: Sequence[float], position: int) -> str:
    if position == 0 or not curve[position - 1]:
        return "—"
    return f"{curve[position] / curve[position - 1]:.3f}"


def _native(native: Native, charts: dict[str, Chart]) -> str:
    parts = ['<h2>Native truth</h2><section class="card" id="native">']
    sets = ", ".join(native.kernel_sets) or "none"
    parts.append(f"<p>Evidence: <b>{_e(native.evidence)}</b>; kernel sets: {_e(sets)}.</p>")
    if not native.starts:
        parts.append(
            "<p class='note'>No live audit is sealed: the modules below are what the record "
            "declares, not what repro observed.</p>"
        )
    for problem in native.problems:
        parts.append(f'<p class="problem">{_e(problem)}</p>')
    parts.append(_figure(charts.get("native")))
    processes = [p for start in native.starts for p in start.processes]
    if processes:
        parts.append("<h3>Processes of each start, by the live audit</h3>")
        parts.append(
            _table(
                ("start", "pid", "ppid", "role", "name", "ELF objects", "by loader rule"),
                (
                    (
                        str(p.start), str(p.pid), str(p.ppid), p.role, p.name, str(p.objects),
                        p.error or ", ".join(f"{rule} {n}" for rule, n in p.rules.items()),
                    )
                    for p in processes
                ),
                ("drift" if p.drifted else "" for p in processes),
            )
        )  # fmt: skip
    drifts = [(start.start, d) for start in native.starts for d in start.drifts]
    if drifts:
        parts.append(f'<p class="problem">{len(drifts)} drift(s) in the live audit:</p>')
        parts.append(
            _table(
                ("start", "kind", "subject", "expected", "observed", "why"),
                ((str(s), d.kind, d.subject, d.expected, d.observed, d.why) for s, d in drifts),
                ("drift" for _ in drifts),
            )
        )
    elif native.starts:
        parts.append("<p>No drift: every mapping of every process explained by a loader rule.</p>")
    if native.dispatch:
        parts.append("<h3>Code the host selected</h3>")
        parts.append(
            _table(
                ("chosen", "kernel set", "variant", "deciding facts", "file", "= lock"),
                (
                    (
                        d.name, d.kernel_set, d.variant,
                        ", ".join(f"{k}={v}" for k, v in d.facts.items()),
                        d.path or "—", "yes" if d.as_locked else "NO",
                    )
                    for d in native.dispatch
                ),
                ("" if d.as_locked else "drift" for d in native.dispatch),
            )
        )  # fmt: skip
    if native.modules:
        parts.append("<h3>Extension modules</h3>")
        parts.append(_table(("extension module", "mapped from"), sorted(native.modules.items())))
    parts.append("</section>")
    return "".join(parts)


def _comparison(comparison: Comparison, charts: dict[str, Chart]) -> str:
    total = sum(s.total for s in comparison.sections)
    compared = f"{total} difference(s)" if comparison.reference_intact else "not compared"
    parts = [
        f"<h2>Against {_e(comparison.reference)}: {compared}</h2>",
        '<section class="card" id="comparison">',
    ]
    if not comparison.reference_ok:
        parts.append(
            '<p class="problem">The reference does not verify: '
            + _e("; ".join(comparison.reference_failures[:3]) or "see repro verify")
            + "</p>"
        )
    if not comparison.reference_intact:
        parts.append(
            "<p class='note'>Not compared: its signature or its files do not hold for the keys "
            "you trust (a bundle of another signer, or files changed since it was sealed), so "
            "nothing in it is known to be what a trusted signer sealed.</p>"
        )
        parts.append("</section>")
        return "".join(parts)
    if comparison.figures:
        parts.append(
            _table(
                ("figure", "here", "reference", "change"),
                ((f.figure, f.subject, f.reference, f.change) for f in comparison.figures),
                ("" if f.change == "same" else "drift" for f in comparison.figures),
            )
        )
    if comparison.exactness is not None:
        parts.append(f"<p>{_e(comparison.exactness)}</p>")
    parts.append(
        _table(
            ("section", "differ", "values differ", "only here", "only in the reference"),
            (
                (s.section, str(s.total), str(s.changed), str(s.only_a), str(s.only_b))
                for s in comparison.sections
            ),
            ("drift" if s.total else "" for s in comparison.sections),
        )
    )
    parts.append(_figure(charts.get("differences")))
    for section in comparison.sections:
        lines = [d for d in comparison.differences if d.section == section.section]
        if not lines:
            continue
        shown = lines[:DIFFERENCES_SHOWN]
        more = len(lines) - len(shown)
        rows = ((d.key, _absent(d.subject), _absent(d.reference)) for d in shown)
        parts.append(
            f"<details><summary>{_e(section.section)}: {len(lines)}</summary>"
            + _table(("fact", "here", "reference"), rows)
            + (f"<p class='note'>and {more} more</p>" if more else "")
            + "</details>"
        )
    parts.append("</section>")
    return "".join(parts)


def _absent(value: str | None) -> str:
    return "(absent)" if value is None else value


def _claims(verdict: Verdict) -> str:
    failed = sum(not c.ok for c in verdict.claims)
    held = "all hold" if not failed else f"{failed} do not hold"
    return (
        "<h2>Claims recomputed by repro verify</h2>"
        '<section class="card" id="claims">'
        f"<details{' open' if failed else ''}><summary>{len(verdict.claims)} claims, {held}"
        "</summary>"
        + _table(
            ("claim", "class", "value", "ok", "detail"),
            (
                (c.claim, c.evidence, c.value, "yes" if c.ok else "NO", c.detail)
                for c in verdict.claims
            ),
            ("" if c.ok else "fail" for c in verdict.claims),
        )
        + "</details></section>"
    )
