"""Diffs of vLLM's Prometheus counters: sums over engines, per-position counters, and refusals
of reads that are not of the same counters."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from repro_serving.builder.documents.evidence import MetricsDelta
from repro_serving.launch.metrics import CounterReset, MetricsUnreadable, delta, families, samples

REPO = Path(__file__).resolve().parent.parent

HEADER = """\
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
"""


def generation(*values: float, created: float = 1.0) -> str:
    """`vllm:generation_tokens` of one engine per value, as vLLM exposes it."""
    lines = [HEADER]
    for engine, value in enumerate(values):
        lines.append(f'vllm:generation_tokens_total{{engine="{engine}",model_name="m"}} {value}\n')
    lines.append("# TYPE vllm:generation_tokens_created gauge\n")
    for engine in range(len(values)):
        lines.append(f'vllm:generation_tokens_created{{engine="{engine}",model_name="m"}} ')
        lines.append(f"{created}\n")
    return "".join(lines)


def per_position(counts: dict[tuple[int, int], float]) -> str:
    """`vllm:spec_decode_num_accepted_tokens_per_pos` for (engine, position) -> count."""
    lines = ["# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n"]
    for (engine, position), value in counts.items():
        labels = f'engine="{engine}",model_name="m",position="{position}"'
        lines.append(f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels}}} {value}\n")
    return "".join(lines)


def test_a_counter_is_summed_over_engines_after_the_diff() -> None:
    diff = delta(generation(10.0, 100.0), generation(15.0, 130.0))
    assert diff.generation_tokens == 35.0


def test_per_position_counters_are_summed_per_position_over_engines() -> None:
    before = per_position({(0, 0): 1.0, (0, 1): 0.0, (1, 0): 2.0, (1, 1): 2.0})
    after = per_position({(0, 0): 11.0, (0, 1): 5.0, (1, 0): 4.0, (1, 1): 3.0})
    assert delta(before, after).spec_decode_accepted_per_position == (12.0, 6.0)


def test_counters_neither_read_has_are_none() -> None:
    assert delta(generation(1.0), generation(2.0)) == MetricsDelta(generation_tokens=1.0)


def test_samples_are_keyed_by_sample_name_and_label_set() -> None:
    found = samples(generation(3.0), "here")
    assert found["vllm:generation_tokens_total"] == {
        frozenset({("engine", "0"), ("model_name", "m")}): 3.0
    }


def test_a_counter_that_goes_backwards_is_refused() -> None:
    with pytest.raises(CounterReset) as caught:
        delta(generation(10.0), generation(9.0), before_source="b.prom", after_source="a.prom")
    assert caught.value.diagnostics() == (
        "error: a counter went backwards between the two reads\n"
        '  where:    vllm:generation_tokens_total{engine="0",model_name="m"}\n'
        "  expected: at least 10.0 (b.prom)\n"
        "  found:    9.0 (a.prom)\n"
        "  hint:     the server restarted or the counter was reset: run the suite again"
    )


def test_a_counter_recreated_between_the_reads_is_refused_even_when_it_grew() -> None:
    with pytest.raises(CounterReset) as caught:
        delta(generation(10.0, created=1.0), generation(20.0, created=2.0))
    assert caught.value.what == "a counter was recreated between the two reads"
    assert caught.value.where == 'vllm:generation_tokens_created{engine="0",model_name="m"}'


def test_a_label_set_that_appears_between_the_reads_is_refused() -> None:
    with pytest.raises(CounterReset) as caught:
        delta(generation(10.0), generation(10.0, 5.0))
    assert caught.value.what == "a counter's label sets differ between the two reads"
    assert caught.value.expected == '{engine="0",model_name="m"} (metrics before the suite)'
    assert caught.value.found == (
        '{engine="0",model_name="m"}, {engine="1",model_name="m"} (metrics after the suite)'
    )


def test_a_counter_missing_from_one_read_is_refused() -> None:
    with pytest.raises(CounterReset, match="label sets differ"):
        delta("", generation(1.0))


def test_text_that_does_not_parse_is_refused_naming_its_source() -> None:
    with pytest.raises(MetricsUnreadable) as caught:
        delta(generation(1.0), "vllm:generation_tokens_total{engine} 1\n", after_source="a.prom")
    assert caught.value.diagnostics() == (
        "error: metrics text does not parse\n"
        "  where:    a.prom\n"
        "  expected: Prometheus text exposition\n"
        "  found:    line 1: 'vllm:generation_tokens_total{engine} 1' is no sample "
        'name{label="value",...} value'
    )


@pytest.mark.parametrize(
    "line",
    [
        'vllm:x_total{engine="0} 1',  # a label value never closed
        'vllm:x_total{engine="0",} ',  # no value
        'vllm:x_total{engine="0"} 1_000',  # Python's float reads it; Prometheus does not
        'vllm:x_total{engine="0",engine="1"} 1',  # one label twice
        'vllm:x_total{0engine="0"} 1',  # a label name that is no name
        "vllm:x_total 1 2 3",  # more than a timestamp after the value
        "# TYPE vllm:x_total countre",  # a type that is none
    ],
)
def test_every_malformed_line_is_refused(line: str) -> None:
    with pytest.raises(MetricsUnreadable):
        samples(generation(1.0) + line + "\n", "x.prom")


def test_the_parser_groups_every_sealed_text_as_prometheus_client_does() -> None:
    """The reference parser, on every /metrics text this repository seals or keeps."""
    texts = [*REPO.glob("repro/*/evidence/**/*.prom"), *REPO.glob("records/**/*.prom")]
    assert len(texts) >= 8
    for path in texts:
        text = path.read_text()
        reference = [
            (f.name, f.type, [(s.name, s.labels, s.value) for s in f.samples])
            for f in text_string_to_metric_families(text)
            if f.samples
        ]
        ours = [
            (f.name, f.type, [(s.name, s.labels, s.value) for s in f.samples])
            for f in families(text, str(path))
        ]
        assert ours == reference, path


def test_a_sample_given_twice_is_refused() -> None:
    text = generation(1.0) + 'vllm:generation_tokens_total{engine="0",model_name="m"} 2.0\n'
    with pytest.raises(MetricsUnreadable) as caught:
        samples(text, "x.prom")
    assert caught.value.what == "a sample appears twice"
    assert caught.value.where == 'x.prom, vllm:generation_tokens_total{engine="0",model_name="m"}'


def test_draft_positions_with_a_gap_are_refused() -> None:
    text = per_position({(0, 0): 1.0, (0, 2): 1.0})
    with pytest.raises(MetricsUnreadable) as caught:
        delta(text, text)
    assert (caught.value.what, caught.value.found) == (
        "draft positions are not contiguous",
        "positions 0, 2",
    )


def test_a_per_position_counter_without_a_position_is_refused() -> None:
    text = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0"} 1.0\n'
    with pytest.raises(MetricsUnreadable, match="without a numeric position"):
        delta(text, text)
