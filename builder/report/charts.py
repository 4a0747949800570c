"""The report's charts, drawn by matplotlib from the report model, as SVG and PNG bytes.

matplotlib because its SVG is a static file that needs nothing to show it: no script, no
font, no network (every glyph is written as a path), and it is deterministic when told so (a
fixed `svg.hashsalt`, no date in the metadata), so the same report gives the same bytes. It is
imported only here, and only when a report is drawn: no other command pays for it. Figures are
made with `matplotlib.figure.Figure`, never pyplot, so nothing is global but the style, which is
set for the drawing alone (`rc_context`).

Each chart is a pure function of one section of the model; a section the report lacks has no
chart.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from repro_serving.builder.report.model import (
    Acceptance,
    Comparison,
    Native,
    PromptTiming,
    Report,
    Throughput,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

STYLE: Final[dict[RcKeyType, Any]] = {
    "svg.hashsalt": "repro-report",
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.titlesize": 9.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#e4e4e4",
    "grid.linewidth": 0.6,
    "legend.frameon": False,
    "figure.dpi": 100.0,
    "savefig.dpi": 110.0,
}
"""The one style of every chart; `svg.hashsalt` makes the SVG ids the same on every run."""
SERIES_COLOURS: Final = ("#1f5fa8", "#e07b00", "#2a9d5b", "#8e44ad", "#c0392b")
REFERENCE_COLOUR: Final = "#8a8a8a"
FLOOR_COLOUR: Final = "#c0392b"
MEDIAN_COLOUR: Final = "#1b2631"
RULE_COLOURS: Final = {
    "executable": "#1b2631",
    "startup": "#1f5fa8",
    "preload": "#8e44ad",
    "dependency": "#2a9d5b",
    "dlopen": "#e07b00",
}
OTHER_RULE_COLOURS: Final = ("#16a085", "#d35400", "#7f8c8d", "#f1c40f", "#2c3e50")
PANEL_COLUMNS: Final = 4
WIDTH_IN: Final = 11.0


@dataclass(frozen=True)
class Chart:
    """One drawn chart: its id in the page (`chart-<id>`), what it shows, and its images."""

    id: str
    title: str
    description: str
    """What the chart shows, for a reader who cannot see it (the image's alt text)."""
    svg: bytes
    png: bytes | None


def draw(report: Report, *, png: bool = False) -> tuple[Chart, ...]:
    """Every chart the report's sections allow, in page order; with `png`, a PNG of each too."""
    import matplotlib

    plans: list[tuple[str, str, str, Callable[[], Figure]]] = []
    if report.timings:
        timings = report.timings
        plans.append(
            (
                "timeline",
                "Token arrival per prompt",
                f"tokens streamed against seconds since the request, {len(timings)} prompts, "
                "each stream a line",
                lambda: timeline_figure(timings, report.throughput),
            )
        )
        plans.append(
            (
                "rates",
                "Rate and TTFT per prompt",
                "each prompt's conventional rate over the window against the floor and the "
                "medians, and its time to first token",
                lambda: rates_figure(timings, report.throughput),
            )
        )
    if report.acceptance is not None and report.acceptance.per_position:
        accepted = report.acceptance
        plans.append(
            (
                "acceptance",
                "Acceptance per draft position",
                "draft tokens accepted at each draft position, with the flatness threshold",
                lambda: acceptance_figure(accepted),
            )
        )
    if report.native is not None and report.native.starts:
        native = report.native
        plans.append(
            (
                "native",
                "ELF objects per loader rule",
                "ELF objects each process role mapped, by the loader rule that explains them",
                lambda: native_figure(native),
            )
        )
    if report.comparison is not None and report.comparison.differences:
        compared = report.comparison
        plans.append(
            (
                "differences",
                "Differences by section",
                f"facts that differ from {compared.reference}, by section",
                lambda: differences_figure(compared),
            )
        )
    charts = []
    with matplotlib.rc_context(STYLE):
        for chart_id, title, description, make in plans:
            figure = make()
            charts.append(
                Chart(
                    id=chart_id,
                    title=title,
                    description=description,
                    svg=_save(figure, "svg"),
                    png=_save(figure, "png") if png else None,
                )
            )
    return tuple(charts)


def _save(figure: Figure, fmt: str) -> bytes:
    """The figure's bytes, with no date or tool version in them: the same figure, the same
    bytes."""
    metadata: dict[str, str | None] = (
        {"Date": None, "Creator": None} if fmt == "svg" else {"Software": None}
    )
    buffer = io.BytesIO()
    figure.savefig(buffer, format=fmt, metadata=metadata, facecolor="white")
    return buffer.getvalue()


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


# --- token arrival ------------------------------------------------------------------------------


def timeline_figure(timings: Sequence[PromptTiming], throughput: Throughput | None) -> Figure:
    """One panel per prompt: each stream's tokens against their arrival offsets, the
    throughput window of the first stream shaded, the teacher's verdict in the title."""
    columns = min(PANEL_COLUMNS, len(timings))
    rows = math.ceil(len(timings) / columns)
    figure = _figure(WIDTH_IN, 0.6 + 2.5 * rows)
    panels = figure.subplots(rows, columns, squeeze=False)
    labels = _series_labels(timings)
    window = None if throughput is None else throughput.tokens
    for index, timing in enumerate(timings):
        axes = panels[index // columns][index % columns]
        for series in timing.series:
            colour, style = labels[series.label]
            axes.plot(
                series.offsets_s,
                range(1, len(series.offsets_s) + 1),
                color=colour,
                linestyle=style,
                linewidth=1.2,
                drawstyle="steps-post",
                label=series.label,
            )
        first = timing.series[0] if timing.series else None
        if first is not None and window is not None and len(first.offsets_s) >= window:
            axes.axvspan(first.offsets_s[0], first.offsets_s[window - 1], color="#dfe9f5", lw=0)
        axes.set_title(_panel_title(timing), loc="left", fontsize=8.5)
        axes.set_xlabel("seconds since the request")
        axes.set_ylabel("tokens")
    for index in range(len(timings), rows * columns):
        panels[index // columns][index % columns].set_visible(False)
    handles, names = panels[0][0].get_legend_handles_labels()
    if window is not None:
        from matplotlib.patches import Patch

        handles.append(Patch(color="#dfe9f5"))
        names.append(f"throughput window: tokens 1-{window} of the first stream")
    figure.legend(handles, names, loc="outside lower center", ncols=min(len(names), 4))
    return figure


def _series_labels(timings: Sequence[PromptTiming]) -> dict[str, tuple[str, str]]:
    """Each stream's colour and line style: the subject's starts in colour, a reference's in
    grey and dashed."""
    labels: dict[str, tuple[str, str]] = {}
    for timing in timings:
        for series in timing.series:
            if series.label not in labels:
                labels[series.label] = ("", "")
    subject = [label for label in labels if label.startswith(("start ", "record "))]
    shown: dict[str, tuple[str, str]] = {}
    for index, label in enumerate(subject):
        shown[label] = (SERIES_COLOURS[index % len(SERIES_COLOURS)], "-")
    for label in labels:
        shown.setdefault(label, (REFERENCE_COLOUR, "--"))
    return shown


def _panel_title(timing: PromptTiming) -> str:
    """The prompt, then its rate and whether it reproduced the teacher, on a second line."""
    facts = [f"TTFT {timing.ttft_s:.2f} s"]
    if timing.conventional is not None:
        facts.append(f"{timing.conventional:.1f} tok/s")
    if timing.teacher_exact is True:
        facts.append("= teacher")
    elif timing.teacher_exact is False:
        facts.append(f"differs at token {timing.first_difference}")
    return f"{timing.prompt_id}\n{', '.join(facts)}"


# --- rates --------------------------------------------------------------------------------------


def rates_figure(timings: Sequence[PromptTiming], throughput: Throughput | None) -> Figure:
    """Left: each prompt's conventional rate (bars) and historical rate (diamonds) against the
    floor and both medians; right: each prompt's time to first token."""
    height = 1.4 + 0.28 * len(timings)
    figure = _figure(WIDTH_IN, height)
    rates_axes, ttft_axes = figure.subplots(1, 2, width_ratios=(3, 2), sharey=True)
    positions = range(len(timings))
    names = [t.prompt_id for t in timings]
    if throughput is not None:
        _rate_bars(rates_axes, timings, throughput)
    else:
        rates_axes.text(0.5, 0.5, "no throughput window declared", ha="center", va="center")
    rates_axes.set_yticks(list(positions), names)
    rates_axes.invert_yaxis()
    ttft_axes.barh(list(positions), [t.ttft_s for t in timings], color="#7f8c8d", height=0.6)
    ttft_axes.set_xlabel("time to first token, s")
    ttft_axes.set_title("TTFT", loc="left")
    return figure


def _rate_bars(axes: Axes, timings: Sequence[PromptTiming], throughput: Throughput) -> None:
    positions = list(range(len(timings)))
    conventional = [t.conventional or 0.0 for t in timings]
    historical = [t.historical or 0.0 for t in timings]
    axes.barh(
        positions, conventional, color=SERIES_COLOURS[0], height=0.6, label="(N-1)/span per prompt"
    )
    axes.scatter(historical, positions, marker="D", s=14, color="#555555", zorder=3, label="N/span")
    floor_label = (
        f"floor {throughput.floor_rate:.2f} = {throughput.floor:g} x {throughput.sealed_rate:.2f}"
    )
    if not throughput.gated:
        floor_label += " (what a replay must reach)"
    axes.axvline(throughput.floor_rate, color=FLOOR_COLOUR, linestyle="--", label=floor_label)
    axes.axvline(
        throughput.conventional_median,
        color=MEDIAN_COLOUR,
        label=f"conventional median {throughput.conventional_median:.2f}",
    )
    axes.axvline(
        throughput.historical_median,
        color=MEDIAN_COLOUR,
        linestyle=":",
        label=f"historical N/span median {throughput.historical_median:.2f} (never gated)",
    )
    axes.set_xlabel(f"tok/s over the first {throughput.tokens} tokens")
    axes.set_title("Rate per prompt against the floor", loc="left")
    axes.legend(loc="lower left", bbox_to_anchor=(0.0, 1.06), ncols=2, fontsize=8)


# --- speculative decoding -----------------------------------------------------------------------


def acceptance_figure(acceptance: Acceptance) -> Figure:
    """Accepted draft tokens per position (the decaying curve), each bar labelled, the
    flatness threshold drawn: the last position must stay at or below it."""
    figure = _figure(WIDTH_IN * 0.75, 3.6)
    axes = figure.subplots()
    curve = acceptance.per_position
    positions = list(range(len(curve)))
    last_too_high = len(curve) >= 2 and curve[-1] > acceptance.threshold
    colours = [SERIES_COLOURS[0]] * len(curve)
    if last_too_high:
        colours[-1] = FLOOR_COLOUR
    bars = axes.bar(positions, curve, color=colours, width=0.7)
    axes.bar_label(bars, labels=[f"{v:g}" for v in curve], padding=2, fontsize=8)
    axes.axhline(
        acceptance.threshold,
        color=FLOOR_COLOUR,
        linestyle="--",
        label=(
            f"flatness threshold {acceptance.threshold:g}: the last position keeps at most "
            f"{acceptance.ratio_max:g} of the first"
        ),
    )
    axes.set_xticks(positions, [str(p) for p in positions])
    axes.set_xlabel("draft position")
    axes.set_ylabel("accepted draft tokens")
    axes.set_title(_acceptance_title(acceptance), loc="left")
    axes.legend(loc="upper right")
    return figure


def _acceptance_title(acceptance: Acceptance) -> str:
    accepted, drafted = acceptance.accepted, acceptance.draft_tokens
    if accepted is None or not drafted:
        return "accepted draft tokens per position"
    title = f"accepted {accepted:g} / draft tokens {drafted:g} = {accepted / drafted:.4f}"
    if acceptance.drafts is not None:
        title += f" over {acceptance.drafts:g} drafts"
    return title


# --- the native truth ---------------------------------------------------------------------------


def native_figure(native: Native) -> Figure:
    """One stacked bar per start and role: its ELF objects by loader rule; a start whose audit
    drifted is named in red."""
    bars = [
        (start.start, role, {c.rule: c.objects for c in start.by_rule if c.role == role})
        for start in native.starts
        for role in sorted({c.role for c in start.by_rule})
    ]
    rules = sorted({rule for _, _, counts in bars for rule in counts}, key=_rule_order)
    colours = _rule_colours(rules)
    figure = _figure(WIDTH_IN * 0.75, 1.5 + 0.3 * len(bars))
    axes = figure.subplots()
    positions = list(range(len(bars)))
    left = [0.0] * len(bars)
    for rule in rules:
        widths = [float(counts.get(rule, 0)) for _, _, counts in bars]
        axes.barh(positions, widths, left=left, color=colours[rule], height=0.65, label=rule)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    drifted = {start.start for start in native.starts if start.drifts}
    axes.set_yticks(positions, [f"start {start}  {role}" for start, role, _ in bars])
    for label, (start, _, _) in zip(axes.get_yticklabels(), bars, strict=True):
        if start in drifted:
            label.set_color(FLOOR_COLOUR)
    axes.invert_yaxis()
    axes.set_xlabel("ELF objects mapped")
    files = ", ".join(f"start {s.start}: {s.files}" for s in native.starts)
    axes.set_title(f"distinct ELF files per start: {files}", loc="left")
    figure.legend(loc="outside lower center", ncols=len(rules))
    return figure


def _rule_order(rule: str) -> tuple[int, str]:
    known = list(RULE_COLOURS)
    return (known.index(rule) if rule in known else len(known), rule)


def _rule_colours(rules: Sequence[str]) -> dict[str, str]:
    others = iter(OTHER_RULE_COLOURS * (1 + len(rules) // len(OTHER_RULE_COLOURS)))
    return {rule: RULE_COLOURS.get(rule) or next(others) for rule in rules}


# --- against a reference ------------------------------------------------------------------------


def differences_figure(comparison: Comparison) -> Figure:
    """Per section, the facts that differ from the reference: changed, only here, only there."""
    sections = comparison.sections
    figure = _figure(WIDTH_IN * 0.75, 1.4 + 0.3 * len(sections))
    axes = figure.subplots()
    positions = list(range(len(sections)))
    left = [0.0] * len(sections)
    for label, values, colour in (
        ("values differ", [s.changed for s in sections], SERIES_COLOURS[0]),
        ("only in this one", [s.only_a for s in sections], SERIES_COLOURS[1]),
        ("only in the reference", [s.only_b for s in sections], REFERENCE_COLOUR),
    ):
        widths = [float(v) for v in values]
        axes.barh(positions, widths, left=left, color=colour, height=0.65, label=label)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axes.set_yticks(positions, [s.section for s in sections])
    axes.invert_yaxis()
    axes.set_xlabel("facts")
    figure.legend(loc="outside lower center", ncols=3)
    return figure
