"""`repro run`: one run of a launch profile, its refusals, its evidence, and its teardown.

Quick tests pin the refusals made before anything starts (forbidden environment, a stale
server of an earlier run, a port in use, a run directory in use, a teacher of another suite).
Tests marked `server` run the real vLLM CPU server of the embedded default: the teacher
profile captured once from two fresh starts (module-scoped), the candidate judged against it,
the ngram speculative profile judged against it, the server killed mid-suite, and `repro run`
interrupted by SIGINT. Eight server starts in all.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import REPO_ROOT, TINY_MANIFEST

from repro_serving.builder import tinymodel
from repro_serving.builder.cli import main
from repro_serving.builder.documents.evidence import Teacher, VerdictStatus
from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.documents.rundir import RunStatus, read_rows, read_status
from repro_serving.launch import registry
from repro_serving.launch import server as lifecycle
from repro_serving.launch.oracle import OracleFailed
from repro_serving.launch.run import (
    Event,
    ForbiddenEnvironment,
    RunPlan,
    RunRecord,
    capture_teacher,
    run_profile,
)

MANIFEST = Manifest.from_path(TINY_MANIFEST)
ROLES = ["api_server", "engine_core", "resource_tracker", "worker"]
SUITE_IDS = [prompt.id for prompt in MANIFEST.load_suite().prompts]


def plan(tmp_path: Path, profile: str = "candidate", **fields: Any) -> RunPlan:
    values: dict[str, Any] = {
        "port": lifecycle.free_port(),
        "registry": tmp_path / "registry",
        "caller_environment": {},
    }
    return RunPlan(MANIFEST, profile, tmp_path / "run", **(values | fields))


def status_document(run_dir: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((run_dir / "status.json").read_text())
    return document


# --- refusals before anything starts ------------------------------------------------------------


def test_a_forbidden_variable_in_the_callers_environment_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    refused = plan(tmp_path, caller_environment={"LD_PRELOAD": "/tmp/hook.so", "HOME": "/root"})
    with pytest.raises(ForbiddenEnvironment) as error:
        run_profile(refused)
    assert error.value.found == "LD_PRELOAD=/tmp/hook.so"
    assert error.value.expected == "none of LD_PRELOAD, LD_AUDIT"
    assert error.value.exit_code == 1
    assert not refused.run_dir.exists()


def test_repro_run_refuses_ld_preload_in_its_own_environment_with_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LD_AUDIT", "/nowhere/audit.so")
    run_dir = tmp_path / "run"
    code = main(["run", str(TINY_MANIFEST), "--run-dir", str(run_dir)])
    assert code == 1
    err = capsys.readouterr().err
    assert "error: forbidden environment variable set" in err
    assert "LD_AUDIT=/nowhere/audit.so" in err
    assert not run_dir.exists()


@pytest.fixture
def stray_group() -> Iterator[subprocess.Popen[bytes]]:
    """A process in a group of its own, as a server left behind by an earlier run would be."""
    process = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def test_a_stale_server_of_an_earlier_run_is_refused_by_name(
    tmp_path: Path, stray_group: subprocess.Popen[bytes]
) -> None:
    refused = plan(tmp_path)
    entry = registry.Entry(stray_group.pid, 18999, "/runs/earlier", "/venv/bin/python")
    registry.register(refused.registry, entry)
    record = run_profile(refused)
    assert isinstance(record.error, registry.StaleServer)
    assert record.error.where == (
        f"process group {stray_group.pid} (/venv/bin/python), port 18999, "
        "run directory /runs/earlier"
    )
    assert record.error.found == f"pids {stray_group.pid} alive"
    assert record.exit_code == 3
    assert read_status(refused.run_dir) is RunStatus.FAILED
    assert record.starts[0].pid is None, "nothing was started"


def test_a_stale_entry_whose_group_is_gone_is_forgotten(tmp_path: Path) -> None:
    finished = subprocess.Popen(["true"], start_new_session=True)
    finished.wait()
    registry.register(tmp_path, registry.Entry(finished.pid, 1, "/runs/old", "true"))
    registry.refuse_stale(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_port_in_use_is_refused_naming_its_holder(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        record = run_profile(plan(tmp_path, port=port))
    assert isinstance(record.error, lifecycle.PortInUse)
    assert record.error.found == f"bound by pid {os.getpid()}"
    assert status_document(tmp_path / "run")["exit_code"] == 3


def test_a_run_directory_holding_anything_is_refused(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "rows.json").write_text("[]")
    code = main(["run", str(TINY_MANIFEST), "--run-dir", str(tmp_path / "run")])
    assert code == 2


def test_a_teacher_is_captured_from_the_teacher_profile_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--profile", "candidate", "--capture-teacher", str(tmp_path / "t.json")]
    assert main(["run", str(TINY_MANIFEST), *args]) == 2
    assert "expected: --profile teacher (oracle.teacher)" in capsys.readouterr().err


def test_a_teacher_of_another_suite_is_refused_before_the_server_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = Teacher(suite="tiny-completion-v1", rows=())
    (tmp_path / "teacher.json").write_text(other.model_dump_json())
    code = main(["run", str(TINY_MANIFEST), "--teacher", str(tmp_path / "teacher.json")])
    assert code == 2
    err = capsys.readouterr().err
    assert "the teacher is not of this suite" in err
    assert "found:    suite 'tiny-completion-v1' with prompts " in err


def test_a_malformed_teacher_is_refused_naming_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--teacher` is read by the reader of a sealed teacher: every problem, by key path."""
    (tmp_path / "teacher.json").write_text('{"suite": 7, "rows": [{"prompt_id": 1}]}')
    code = main(["run", str(TINY_MANIFEST), "--teacher", str(tmp_path / "teacher.json")])
    assert code == 2
    err = capsys.readouterr().err
    assert "the teacher does not follow its format" in err
    assert "  - key suite (line 1, column 2): wrong type\n      expected: a string\n" in err
    assert "      found:    an integer 7\n" in err
    assert "  - key rows[0].prompt_id (line 1, column 24): wrong type\n" in err
    assert "  - key rows[0].token_ids (line 1, column 23): missing key\n" in err


# --- real runs ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("model") / "tiny-llama"
    tinymodel.generate(directory)
    return directory


def real_plan(tmp_path: Path, model_dir: Path, profile: str, **fields: Any) -> RunPlan:
    return plan(tmp_path, profile, models={"target": model_dir}, **fields)


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> RunRecord:
    return run_profile(real_plan(tmp_path_factory.mktemp("teacher"), model_dir, "teacher"))


def verdicts(record: RunRecord) -> dict[str, VerdictStatus]:
    return {verdict.gate: verdict.status for verdict in record.verdicts}


def assert_evidence(start_dir: Path) -> None:
    for name in ("server.log", "server.json", "metrics-before.prom", "metrics-after.prom"):
        assert (start_dir / name).is_file(), name
    assert sorted(p.stem for p in (start_dir / "audit").glob("*.json")) == sorted(
        [*ROLES, "drifts"]
    )
    assert [row.prompt_id for row in read_rows(start_dir / "rows.json")] == SUITE_IDS
    assert json.loads((start_dir / "teardown.json").read_text())["proven"] is True


def assert_nothing_left(record: RunRecord) -> None:
    for start in record.starts:
        assert start.pid is not None
        assert registry.group_members(start.pid) == []
    assert lifecycle.port_is_free("127.0.0.1", record.plan.port or 0)
    assert list(record.plan.registry.glob("*.json")) == []


@pytest.mark.server
def test_the_teacher_run_reproduces_its_token_ids_from_two_fresh_starts(
    teacher_run: RunRecord,
) -> None:
    record = teacher_run
    assert record.error is None
    assert [start.start for start in record.starts] == [1, 2]
    assert [row.token_ids for row in record.starts[1].rows] == [
        row.token_ids for row in record.starts[0].rows
    ]
    assert verdicts(record) == {
        "exact_token_ids": VerdictStatus.NOT_APPLICABLE,
        "text_sha256": VerdictStatus.NOT_APPLICABLE,
        "cached_tokens_zero": VerdictStatus.PASS,
        "prefix_cache_hit_delta_zero": VerdictStatus.PASS,
        "log_markers": VerdictStatus.NOT_APPLICABLE,
        "forbidden_log_patterns": VerdictStatus.NOT_APPLICABLE,
        "spec_decode": VerdictStatus.NOT_APPLICABLE,
        "throughput": VerdictStatus.NOT_APPLICABLE,
        "fresh_starts": VerdictStatus.PASS,
        "stall": VerdictStatus.PASS,
        "latency": VerdictStatus.PASS,
        "load:c4": VerdictStatus.PASS,
        "live_audit:start-1": VerdictStatus.PASS,
        "live_audit:start-2": VerdictStatus.PASS,
        "server_log:start-1": VerdictStatus.PASS,
        "server_log:start-2": VerdictStatus.PASS,
    }
    assert record.passed and record.exit_code == 0
    for start in record.starts:
        assert_evidence(start.directory)
    assert status_document(record.plan.run_dir) == {"status": "passed", "exit_code": 0}
    assert_nothing_left(record)
    teacher = capture_teacher(record)
    assert [row.prompt_id for row in teacher.rows] == SUITE_IDS
    assert teacher.conventional_tok_s is not None and teacher.conventional_tok_s > 0


@pytest.mark.server
def test_a_cold_candidate_run_passes_every_gate_against_the_teacher(
    tmp_path: Path, model_dir: Path, teacher_run: RunRecord
) -> None:
    teacher = capture_teacher(teacher_run)
    record = run_profile(real_plan(tmp_path, model_dir, "candidate", teacher=teacher))
    failed = [v for v in record.verdicts if not v.passed]
    assert failed == []
    assert record.error is None and record.passed and record.exit_code == 0
    assert verdicts(record)["exact_token_ids"] is VerdictStatus.PASS
    assert verdicts(record)["throughput"] is VerdictStatus.PASS
    summary = json.loads((record.plan.run_dir / "summary.json").read_text())
    assert summary["status"] == "passed"
    assert [row["exact"] for row in summary["starts"][0]["rows"]] == [True] * len(SUITE_IDS)
    assert all(row["cached_tokens"] == 0 for row in summary["starts"][0]["rows"])
    assert_nothing_left(record)


@pytest.mark.server
def test_ngram_speculation_exports_real_counters_and_reproduces_the_teacher(
    tmp_path: Path, model_dir: Path, teacher_run: RunRecord
) -> None:
    """A finding on this CPU, not a design property: the random tiny model never continues a
    prompt n-gram, so every draft is rejected (acceptance 0), and the verifier's tokens equal
    the target-only teacher's token for token."""
    teacher = capture_teacher(teacher_run)
    record = run_profile(real_plan(tmp_path, model_dir, "ngram", teacher=teacher))
    assert record.error is None
    for start in record.starts:
        delta = start.metrics
        assert delta is not None
        assert delta.spec_decode_drafts and delta.spec_decode_drafts > 0
        assert delta.spec_decode_draft_tokens and delta.spec_decode_draft_tokens > 0
        assert len(delta.spec_decode_accepted_per_position) == 3
        assert sum(delta.spec_decode_accepted_per_position) == delta.spec_decode_accepted
    assert verdicts(record)["exact_token_ids"] is VerdictStatus.PASS
    assert verdicts(record)["fresh_starts"] is VerdictStatus.PASS
    assert_nothing_left(record)


def engine_core_of(pid: int) -> psutil.Process:
    children = psutil.Process(pid).children(recursive=True)
    return next(child for child in children if "EngineCore" in child.name())


@pytest.mark.server
def test_the_server_killed_mid_suite_fails_the_run_keeps_its_evidence_and_leaves_nothing(
    tmp_path: Path, model_dir: Path
) -> None:
    killed: list[int] = []

    def kill_engine_after_first_row(event: Event) -> None:
        if event.kind == "row" and not killed and event.pid is not None:
            engine = engine_core_of(event.pid)
            engine.send_signal(signal.SIGKILL)
            killed.append(engine.pid)

    record = run_profile(real_plan(tmp_path, model_dir, "candidate"), kill_engine_after_first_row)
    assert killed
    assert isinstance(record.error, OracleFailed)
    assert record.status is RunStatus.FAILED and record.exit_code == 3
    assert len(record.starts) == 1, "no second start after a failed one"
    assert record.verdicts == ()
    start_dir = record.starts[0].directory
    rows = read_rows(start_dir / "rows.json")
    assert 1 <= len(rows) < len(SUITE_IDS)
    assert rows[0].prompt_id == SUITE_IDS[0]
    assert (start_dir / "server.log").stat().st_size > 0
    assert (start_dir / "metrics-before.prom").is_file()
    assert not (start_dir / "metrics-after.prom").exists()
    assert json.loads((start_dir / "teardown.json").read_text())["proven"] is True
    status = status_document(record.plan.run_dir)
    assert (status["status"], status["exit_code"]) == ("failed", 3)
    assert status["error"] == record.error.diagnostics()
    assert record.error.what in {
        "the server reported an error in the stream",
        "the server stopped answering",
        "the server answered HTTP 500",
    }
    failing = len(rows)
    assert str(record.error.where).startswith(f"prompt {failing} ({SUITE_IDS[failing]}), POST ")
    assert_nothing_left(record)


@pytest.mark.server
def test_sigint_to_repro_run_mid_run_tears_down_and_keeps_the_evidence(
    tmp_path: Path, model_dir: Path
) -> None:
    manifest = tmp_path / "manifests" / "tiny-cpu.toml"
    manifest.parent.mkdir()
    text = TINY_MANIFEST.read_text().replace(
        'path = "../build/tiny-llama"', f'path = "{model_dir}"'
    )
    manifest.write_text(text)
    (manifest.parent / "suites").symlink_to(TINY_MANIFEST.parent / "suites")
    (tmp_path / ".venv-serve").symlink_to(REPO_ROOT / ".venv-serve")
    port, run_dir = lifecycle.free_port(), tmp_path / "run"
    argv = [sys.executable, "-m", "repro_serving", "run", str(manifest), "--profile", "candidate"]
    argv += ["--port", str(port), "--run-dir", str(run_dir)]
    repro = subprocess.Popen(argv, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    assert repro.stderr is not None
    lines = []
    for line in repro.stderr:
        lines.append(line)
        if line.startswith("[ready]"):
            break
    server_pid = json.loads((run_dir / "start-1" / "server.json").read_text())["pid"]
    repro.send_signal(signal.SIGINT)
    rest = repro.stderr.read()
    assert repro.wait(timeout=120) == 130, "".join(lines) + rest
    assert "interrupted: server torn down; evidence kept in" in rest
    assert registry.group_members(server_pid) == []
    assert lifecycle.port_is_free("127.0.0.1", port)
    status = status_document(run_dir)
    assert status["status"] == "interrupted"
    assert status["error"] == "interrupted (SIGINT)"
    assert json.loads((run_dir / "start-1" / "teardown.json").read_text())["proven"] is True
    assert (run_dir / "start-1" / "server.log").is_file()
