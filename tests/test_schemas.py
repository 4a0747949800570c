"""The JSON Schemas repro ships: each exactly what its models produce, one for the lock and one
per command that prints `--json`, printed by `repro schema NAME`, and strict enough that a
document that is not what repro writes fails it (checked by `jsonschema`, not by pydantic)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from schemas import assert_valid, assert_valid_error

from repro_serving.builder import commands
from repro_serving.builder.cli import main
from repro_serving.builder.commands.launch import LaunchOutput
from repro_serving.builder.commands.run import RunOutput, RunSummary
from repro_serving.builder.commands.schema import documents, schema_file, schema_names
from repro_serving.builder.render import write_report
from repro_serving.builder.schemadoc import shipped, shipped_names

REPO = Path(__file__).resolve().parent.parent


def run(argv: Sequence[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def json_commands() -> set[str]:
    """Every command whose parser takes `--json`."""
    found = set()
    for name in commands.names():
        parser = argparse.ArgumentParser()
        commands.load(name).configure_parser(parser)
        if "--json" in parser._option_string_actions:
            found.add(name)
    return found


def test_every_shipped_schema_is_exactly_what_the_models_produce() -> None:
    """Regenerate with: .venv/bin/python -c 'from repro_serving.builder.commands.schema import
    documents; [open(f"builder/schemas/{n}", "w").write(t) for n, t in documents().items()]'"""
    produced = documents()
    assert sorted(produced) == shipped_names()
    for name, text in produced.items():
        assert shipped(name) == text, f"{name} is stale: regenerate it"


def test_there_is_one_report_schema_per_command_with_json_and_the_lock_and_manifest() -> None:
    reports = {n for n in schema_names() if n not in ("manifest", "lock")}
    assert reports == json_commands()
    assert {"manifest", "lock"} <= set(schema_names())
    for name in reports:
        assert getattr(commands.load(name), "REPORT", None) is not None


@pytest.mark.parametrize("name", sorted(shipped_names()))
def test_each_schema_is_a_valid_draft_2020_12_schema_with_described_fields(name: str) -> None:
    schema = json.loads(shipped(name))
    Draft202012Validator.check_schema(schema)
    if name == "manifest.v1.json":
        return  # tested with its models in test_manifest.py
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    described = [
        field
        for definition in [schema, *schema.get("$defs", {}).values()]
        for field in definition.get("properties", {}).values()
        if "description" in field
    ]
    assert described, "field docstrings become descriptions"


@pytest.mark.parametrize("name", ["manifest", "lock", "verify", "closure"])
def test_repro_schema_prints_the_shipped_file_it_names(name: str) -> None:
    code, out, _ = run(["schema", name])
    assert code == 0
    assert out == shipped(schema_file(name))


def test_repro_schema_without_a_name_prints_the_manifests_as_it_always_did() -> None:
    assert run(["schema"])[1] == shipped("manifest.v1.json")


def test_an_unknown_schema_name_is_bad_input_listing_every_name() -> None:
    code, out, err = run(["schema", "bundle"])
    assert (code, out) == (2, "")
    assert "no such schema" in err
    assert "'bundle'" in err
    assert all(name in err for name in schema_names())


# --- the schemas hold documents to what repro writes ---------------------------------------------


def test_a_report_without_its_envelope_or_with_a_key_more_fails_its_schema(tmp_path: Path) -> None:
    code, out, _ = run(["keygen", "--out", str(tmp_path / "k"), "--json"])
    assert code == 0
    document = assert_valid("keygen", out)
    assert list(document)[:3] == ["version", "ok", "error"]
    for broken in (
        {k: v for k, v in document.items() if k != "version"},
        {k: v for k, v in document.items() if k != "error"},
        {**document, "note": "more"},
        {**document, "ok": False},
    ):
        with pytest.raises(AssertionError, match=r"^not a valid report-keygen\.v1\.json"):
            assert_valid("keygen", broken)


def test_an_error_document_is_valid_for_every_command_and_nothing_else_is() -> None:
    code, out, _ = run(["verify", "--json"])  # a usage error
    assert code == 2
    document = assert_valid_error(json.loads(out))
    assert document["error"]["exit_code"] == 2
    with pytest.raises(AssertionError):
        assert_valid_error({**document, "error": None})


def test_closure_json_follows_its_schema() -> None:
    code, out, _ = run(["closure", sys.executable, "--json"])
    document = assert_valid("closure", out)
    assert code == 0 and document["ok"] is True
    assert document["files"][0]["file"] == sys.executable


def test_check_json_of_a_manifest_without_evidence_states_none() -> None:
    code, out, _ = run(["check", str(REPO / "manifests" / "tiny-cpu.toml"), "--json"])
    assert code == 0
    assert assert_valid("check", out)["plan"]["evidence"] is None


@pytest.fixture
def sleeper() -> Iterator[int]:
    child = subprocess.Popen(["sleep", "60"])
    yield child.pid
    child.kill()
    child.wait()


def test_audit_json_of_a_plain_process_follows_its_schema(
    sleeper: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["audit", "--pid", str(sleeper), "--allow-root", "/", "--json"])
    document = assert_valid("audit", capsys.readouterr().out)
    assert document["ok"] is (code == 0) is document["passed"]
    assert document["root_pid"] == sleeper


def test_launch_json_of_a_record_that_cannot_run_here_is_a_preflight_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Laguna record sealed now, then launched here: refused before anything starts."""
    assert main(["build", str(REPO / "manifests" / "laguna-102tps.toml"),
                 "--signing-key", str(REPO / "keys" / "example.key"),
                 "--out", str(tmp_path / "bundles"), "--json"]) == 0  # fmt: skip
    built = assert_valid("build", capsys.readouterr().out)
    public = str(REPO / "keys" / "example.pub")
    assert main(["verify", built["bundle"], "--key", public, "--json"]) == 0
    assert assert_valid("verify", capsys.readouterr().out)["ok"] is True
    runs = tmp_path / "runs"
    code = main(["launch", built["bundle"], "--key", public, "--runs", str(runs), "--json"])
    document = assert_valid("launch", capsys.readouterr().out)
    assert code == 1 and document["ok"] is False
    assert document["preflight"]["drifts"], "every missing fact, at once"
    assert not runs.exists() or not any(runs.iterdir()), "nothing was started"


def test_the_run_summary_a_run_seals_is_what_run_launch_and_demo_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`summary.json` of the teacher run that sealed the committed bundle (written by
    `launch.run` beside the evidence, not sealed: `tests/evidence/tiny-cpu/summary.json`), read
    by the model `--json` prints it with, unchanged, and valid in each report that carries it."""
    sealed = json.loads((REPO / "tests" / "evidence" / "tiny-cpu" / "summary.json").read_text())
    summary = RunSummary.model_validate(sealed)
    assert summary.model_dump(mode="json") == sealed
    document = RunOutput(ok=summary.passed, run=summary, captured_teacher=None)
    write_report(document)
    assert assert_valid("run", capsys.readouterr().out)["run"] == sealed
    launched = LaunchOutput(ok=summary.passed, run=summary, sealed=None)
    assert_valid("launch", launched.model_dump(mode="json"))
