"""builder.patterns: every regular expression a manifest declares runs on RE2, in time linear in
the line, and one RE2 cannot run is refused when the manifest is read, naming its key path.

The attacker's pattern is judged in a child process with a deadline, so a regression to a
backtracking engine fails the test instead of hanging it; no test times anything in-process.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from diagnostics import refused

from repro_serving.builder.documents.manifest import LogMarker, Manifest
from repro_serving.builder.errors import BadInput, ExitCode
from repro_serving.builder.native.kernels import KernelSet
from repro_serving.builder.patterns import MAX_PROGRAM_SIZE, SYNTAX, compile_pattern
from repro_serving.launch import gates

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "tests" / "manifests"
FULL = (ASSETS / "full.toml").read_text()
FORBIDDEN = 'forbidden_log_patterns = ["falling back to", "(?i)eager fallback"]'
MARKER_PATTERN = 'pattern = "Captured audited breakable cudagraph.*graphs=146, eager_breaks=145"'
RANK_PATTERN = 'rank_pattern = "Worker_TP(\\\\d+)_EP\\\\d+"'
HINT = "  hint:     fix the manifest; `repro schema` prints every key a manifest accepts"
ATTACK = "^(a+)+$"
DEADLINE_S = 10
RANK = r"^\((Worker_TP\d+_EP\d+) pid=\d+\)"
DECLARING = (
    "manifests/*.toml",
    "kernels/*.toml",
    "tests/manifests/*.toml",
    "repro/*/manifest.toml",
    "repro/*/kernels/*.toml",
)
LOGS = sorted(ROOT.glob("records/*/evidence/*/server.log")) + sorted(
    ROOT.glob("repro/*/evidence/**/server.log")
)
FALLBACK_LINES = (
    "(Worker_TP1_EP1 pid=162988) INFO 07-26 17:46:04 [xpu.py:171] Using Triton Attention backend.",
    "(Worker_TP0_EP0 pid=162987) INFO 07-26 17:46:04 [xpu.py:171] Using Flash Attention backend.",
    "(EngineCore pid=162906) INFO 07-26 17:47:13 [cache.py:88] cache config: "
    "calculate_kv_scales=True",
    "(Worker_TP0_EP0 pid=162987) WARNING 07-26 17:47:01 [flash_attn.py:712] FP8 KV cache is not "
    "supported by this kernel. Falling back to the native attention path.",
    "Eager Fallback for the sampler, kv_cache_dtype=fp8_e5m2, kv_cache_dtype=fp8,",
)


# --- the attacker's pattern: judged in well under a second, never hung --------------------------

_JUDGE = """
import json, sys
from repro_serving.builder.documents.manifest import Gates, LogMarker
from repro_serving.builder.documents.evidence import RunEvidence
from repro_serving.launch.gates import judge

pattern, log = sys.argv[1], sys.stdin.read()
marker = LogMarker(name="attack", pattern=pattern, count=0)
declared = Gates(log_markers=(marker,), forbidden_log_patterns=(pattern,))
verdicts = judge(declared, RunEvidence(server_log=log))
wanted = ("log_marker:attack", "forbidden_log_patterns")
print(json.dumps({v.gate: [v.status, v.summary] for v in verdicts if v.gate in wanted}))
"""


def _judged_in_a_child(pattern: str, log: str) -> dict[str, list[str]]:
    """The log gates' verdicts of `pattern` over `log`, judged by another interpreter that is
    killed at the deadline."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _JUDGE, pattern],
            input=log,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
            cwd=ROOT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"judging {pattern!r} over {len(log)} characters ran past {DEADLINE_S} s")
    assert done.returncode == 0, done.stderr
    verdicts: dict[str, list[str]] = json.loads(done.stdout)
    return verdicts


@pytest.mark.parametrize("count", [32, 10_000])
def test_the_attackers_pattern_over_a_line_of_a_and_a_bang_is_judged(count: int) -> None:
    verdicts = _judged_in_a_child(ATTACK, "a" * count + "!\n")
    assert verdicts == {
        "log_marker:attack": ["pass", "attack: 0 lines, expected 0"],
        "forbidden_log_patterns": ["pass", "none of 1 forbidden patterns in 1 line of log"],
    }


def test_the_attackers_pattern_still_matches_the_line_it_describes() -> None:
    line = "a" * 10_000
    verdicts = _judged_in_a_child(ATTACK, f"{line}!\n{line}\n")
    shown = "a" * 159 + "…"
    assert verdicts == {
        "log_marker:attack": ["fail", "attack: 1 line, expected 0"],
        "forbidden_log_patterns": [
            "fail",
            f"forbidden {ATTACK!r} matches 1 line, first: {shown}",
        ],
    }


# --- refused when the manifest is read, with the key path ---------------------------------------


def _refusal(text: str) -> list[str]:
    with pytest.raises(BadInput) as caught:
        Manifest.from_toml(text, source="attacker.toml", base_dir=ASSETS)
    assert caught.value.exit_code == ExitCode.BAD_INPUT
    return caught.value.diagnostics().splitlines()


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(a)\\\\1", "invalid escape sequence: \\1"),
        ("(?=a)", "invalid perl operator: (?="),
        ("x(?!a)", "invalid perl operator: (?!"),
    ],
)
def test_a_forbidden_pattern_re2_cannot_run_is_refused_at_load(pattern: str, reason: str) -> None:
    text = FULL.replace(FORBIDDEN, f'forbidden_log_patterns = ["falling back to", "{pattern}"]')
    found = json.dumps(tomllib.loads(f'p = "{pattern}"')["p"])
    assert _refusal(text) == [
        "error: invalid manifest: invalid regular expression",
        "  where:    attacker.toml, key oracle.gates.forbidden_log_patterns[1] "
        "(line 114, column 1)",
        f"  expected: {SYNTAX}; RE2: {reason}",
        f"  found:    a string {found}",
        HINT,
    ]


@pytest.mark.parametrize(
    ("pinned", "line", "written", "reason"),
    [
        pytest.param(
            MARKER_PATTERN,
            'pattern = "(graphs)=146.*\\\\1"',
            "log_markers[0].pattern (line 119, column 1)",
            "invalid escape sequence: \\1",
            id="a marker's pattern with a backreference",
        ),
        pytest.param(
            RANK_PATTERN,
            'rank_pattern = "(?<=TP)(\\\\d+)"',
            "log_markers[0].rank_pattern (line 120, column 1)",
            "invalid perl operator: (?<=",
            id="a rank pattern with a lookbehind",
        ),
    ],
)
def test_a_marker_pattern_re2_cannot_run_is_refused_at_load(
    pinned: str, line: str, written: str, reason: str
) -> None:
    """`line` written in place of the manifest's `pinned` line; `written` where it stands."""
    assert _refusal(FULL.replace(pinned, line))[:3] == [
        "error: invalid manifest: invalid regular expression",
        f"  where:    attacker.toml, key oracle.gates.{written}",
        f"  expected: {SYNTAX}; RE2: {reason}",
    ]


def test_a_pattern_too_large_for_its_cost_bound_is_refused_at_load() -> None:
    text = FULL.replace(FORBIDDEN, 'forbidden_log_patterns = ["[ab]*a[ab]{999}x|[ab]*b[ab]{999}y"]')
    lines = _refusal(text)
    assert lines[:3] == [
        "error: invalid manifest: regular expression too large",
        "  where:    attacker.toml, key oracle.gates.forbidden_log_patterns[0] "
        "(line 114, column 1)",
        f"  expected: a regular expression of at most {MAX_PROGRAM_SIZE} RE2 instructions",
    ]


def test_a_rank_pattern_still_needs_exactly_one_capture_group() -> None:
    text = FULL.replace(RANK_PATTERN, 'rank_pattern = "Worker_TP\\\\d+_EP\\\\d+"')
    assert _refusal(text)[:4] == [
        "error: invalid manifest: wrong number of capture groups",
        "  where:    attacker.toml, key oracle.gates.log_markers[0].rank_pattern "
        "(line 120, column 1)",
        "  expected: a regex with exactly 1 capture group (the rank label)",
        '  found:    0 capture groups in a string "Worker_TP\\\\d+_EP\\\\d+"',
    ]


def test_a_kernel_sets_marker_with_a_lookahead_is_refused_at_load(tmp_path: Path) -> None:
    (tmp_path / "attacker.toml").write_text(
        'schema = "repro.kernels/v1"\nname = "attacker"\ndescription = ""\n\n'
        '[[markers]]\nname = "m"\npattern = "Using (?=Flash)"\ncount = 1\n'
    )
    error = refused(BadInput, KernelSet.load, "attacker", tmp_path)
    assert error.where == str(tmp_path / "attacker.toml")
    assert (error.found or "").startswith("key markers[0].pattern: invalid regular expression")


def test_a_refused_pattern_is_not_printed_by_re2_itself(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BadInput):
        compile_pattern("(?=a)", where="a test")
    assert capfd.readouterr().err == ""


# --- the repository's own patterns --------------------------------------------------------------


def _declared(value: object, path: str = "") -> Iterator[tuple[str, str]]:
    """Every (key path, pattern) a manifest or kernel set document declares."""
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key in ("pattern", "rank_pattern") and isinstance(item, str):
                yield where, item
            elif key == "forbidden_log_patterns" and isinstance(item, list):
                yield from ((f"{where}[{i}]", p) for i, p in enumerate(item))
            else:
                yield from _declared(item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _declared(item, f"{path}[{index}]")


DECLARING_FILES = sorted(path for glob in DECLARING for path in ROOT.glob(glob))
DOCUMENTS = [tomllib.loads(path.read_text()) for path in DECLARING_FILES]
COMMITTED = sorted({pattern for document in DOCUMENTS for _, pattern in _declared(document)})


@pytest.mark.parametrize("path", DECLARING_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_pattern_a_committed_file_declares_compiles(path: Path) -> None:
    refused = []
    for where, pattern in _declared(tomllib.loads(path.read_text())):
        try:
            compile_pattern(pattern, where=where)
        except BadInput as error:
            refused.append(f"{where}: {pattern!r}: {error.expected}")
    assert refused == []


def test_the_committed_files_declare_the_patterns_looked_for() -> None:
    assert len(LOGS) >= 3
    assert {RANK, "Using FlashAttention version 2$", "(?i)eager fallback"} <= set(COMMITTED)


def _log_lines() -> list[str]:
    lines = [line for path in LOGS for line in gates.log_lines(path.read_text())]
    return lines + list(FALLBACK_LINES)


def _compiles(pattern: str) -> bool:
    try:
        compile_pattern(pattern, where="test")
    except BadInput:
        return False  # test_every_pattern_a_committed_file_declares_compiles names it
    return True


RUNNABLE = [pattern for pattern in COMMITTED if _compiles(pattern)]


@pytest.mark.parametrize("pattern", RUNNABLE)
def test_re2_finds_what_re_found_in_every_committed_log(pattern: str) -> None:
    lines = _log_lines()
    ours, theirs = compile_pattern(pattern, where="test"), re.compile(pattern)
    found = [(m.text, m.groups) for m in map(ours.search, lines) if m is not None]
    expected = [(m.group(0), m.groups()) for m in map(theirs.search, lines) if m is not None]
    assert found == expected


def test_the_committed_logs_exercise_the_markers_and_the_fallbacks() -> None:
    lines = _log_lines()
    ranks = compile_pattern(RANK, where="test")
    labels = {m.group(1) for m in map(ranks.search, lines) if m is not None}
    assert labels == {f"Worker_TP{i}_EP{i}" for i in range(4)}
    hits = {p for p in RUNNABLE if any(map(compile_pattern(p, where="test").search, lines))}
    assert len(hits) >= 10


# --- counting per rank ----------------------------------------------------------------------------

RANKED_LOG = "\n".join(
    [
        "(Worker_TP0_EP0 pid=11) INFO [x.py:1] Using FlashAttention version 2",
        "(Worker_TP1_EP1 pid=12) INFO [x.py:1] Using FlashAttention version 2",
        "(Worker_TP1_EP1 pid=12) INFO [x.py:1] Using FlashAttention version 2",
        "(Worker_TP1_EP1 pid=12) INFO [x.py:1] Using FlashAttention version 3",
        "INFO [x.py:1] Using FlashAttention version 2",
    ]
)


def test_a_rank_pattern_counts_each_rank_by_its_captured_label() -> None:
    marker = LogMarker(
        name="fa2",
        pattern="Using FlashAttention version 2$",
        rank_pattern=RANK,
        per_rank={"Worker_TP0_EP0": 1, "Worker_TP1_EP1": 2, "(no rank)": 1},
    )
    counts = gates.marker_counts(marker, gates.log_lines(RANKED_LOG))
    assert counts == {"Worker_TP0_EP0": 1, "Worker_TP1_EP1": 2, "(no rank)": 1}
    verdict = gates.log_marker(marker, RANKED_LOG)
    assert verdict.passed
    ranks = "(no rank)=1, Worker_TP0_EP0=1, Worker_TP1_EP1=2"
    assert verdict.summary == f"fa2: exact on 3 ranks ({ranks})"


def test_a_rank_group_that_took_no_part_counts_as_no_rank() -> None:
    marker = LogMarker(
        name="fa2",
        pattern="version 2$",
        rank_pattern=r"^(?:\((Worker_TP\d+_EP\d+) pid=\d+\))?",
        per_rank={"Worker_TP0_EP0": 1, "Worker_TP1_EP1": 2, "(no rank)": 1},
    )
    assert gates.log_marker(marker, RANKED_LOG).passed


def test_the_laguna_records_markers_count_one_line_on_each_rank() -> None:
    record = ROOT / "records" / "laguna-102tps" / "evidence" / "record-run" / "server.log"
    marker = LogMarker(
        name="projections",
        pattern="Prepared Laguna DFlash FP8 W8A16 draft projections: count=31$",
        rank_pattern=RANK,
        per_rank={f"Worker_TP{i}_EP{i}": 1 for i in range(4)},
    )
    assert gates.log_marker(marker, record.read_text()).passed


# --- the engine's semantics, pinned --------------------------------------------------------------


def test_a_match_gives_the_groups_of_a_line_with_text_beyond_ascii() -> None:
    pattern = compile_pattern(r"rank=(\S+) (\d+)?", where="test")
    found = pattern.search("é → rank=ü1 x")
    assert found is not None
    assert (found.group(0), found.group(1), found.group(2)) == ("rank=ü1 ", "ü1", None)


def test_a_lone_surrogate_reads_as_the_replacement_character() -> None:
    pattern = compile_pattern("^\ufffdabc$", where="test")
    assert pattern.search("\ud800abc") is not None


def test_perl_classes_are_ascii_unlike_re() -> None:
    line = "(Worker_TP\u0663_EP3 pid=1) INFO"  # ARABIC-INDIC DIGIT THREE
    assert re.search(r"Worker_TP(\d+)_EP\d+", line) is not None
    assert compile_pattern(r"Worker_TP(\d+)_EP\d+", where="test").search(line) is None


def test_a_refusal_names_where_the_pattern_and_re2s_reason() -> None:
    with pytest.raises(BadInput) as caught:
        compile_pattern(r"(a)\1", where="log marker m: pattern")
    assert caught.value.diagnostics().splitlines() == [
        "error: invalid regular expression",
        "  where:    log marker m: pattern",
        f"  expected: {SYNTAX}; RE2: invalid escape sequence: \\1",
        "  found:    '(a)\\\\1'",
    ]
