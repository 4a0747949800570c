"""The command line imports only what it runs: `repro --help` no command, a command itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from repro_serving.builder import commands

REPO = Path(__file__).resolve().parents[1]
PROBE = """
import json, sys
from repro_serving.builder.cli import main
code = main(sys.argv[2:])
own = ("repro_serving.builder.commands.", "repro_serving.launch", "numpy")
loaded = sorted(m for m in sys.modules if m.startswith(own))
open(sys.argv[1], "w").write(json.dumps({"code": code, "loaded": loaded}))
"""


def _loaded(tmp_path: Path, *argv: str) -> tuple[int, list[str]]:
    out = tmp_path / "loaded.json"
    subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *argv],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    document = json.loads(out.read_text())
    return document["code"], document["loaded"]


def test_help_lists_every_command_and_imports_none(tmp_path: Path) -> None:
    code, loaded = _loaded(tmp_path, "--help")
    assert code == 0
    assert loaded == []


@pytest.mark.parametrize("command", ["verify", "closure", "schema"])
def test_a_command_imports_itself_and_no_other_command(tmp_path: Path, command: str) -> None:
    code, loaded = _loaded(tmp_path, command, "--help")
    assert code == 0
    package = "repro_serving.builder.commands"
    imported = {m.removeprefix(f"{package}.") for m in loaded if m.startswith(f"{package}.")}
    # itself and what commands share (the private modules, `_shared`, `_keys`, ...)
    assert command in imported
    assert {m for m in imported if not m.startswith("_")} == {command}
    assert "numpy" not in loaded


def test_each_summary_is_the_first_line_of_the_command_modules_docstring() -> None:
    for name in commands.names():
        module = commands.load(name)
        assert module.__doc__ is not None, name
        assert commands.summary(name) == module.__doc__.strip().splitlines()[0]


def test_a_passing_verify_prints_its_verdict_without_loading_rich(tmp_path: Path) -> None:
    out = tmp_path / "loaded.json"
    probe = PROBE.replace('"numpy")', '"numpy", "rich")')
    subprocess.run(
        [sys.executable, "-c", probe, str(out), "verify", "repro/tiny-cpu", "--key",
         "keys/example.pub"],
        cwd=REPO, capture_output=True, check=True,
    )  # fmt: skip
    document = json.loads(out.read_text())
    assert document["code"] == 0
    assert not [m for m in document["loaded"] if m.startswith("rich")]


COLLECTOR = """
import gc, json, sys
import repro_serving.builder.cli as cli
out, caller, *command = sys.argv[1:]
seen = []
loaded = cli.build_parser
def build_parser(name):
    seen.append(gc.isenabled())  # while the command's modules load
    return loaded(name)
cli.build_parser = build_parser
if caller == "program":
    sys.argv = ["repro", *command]
    code = cli.main()
else:
    code = cli.main(command)
state = {"code": code, "loading": seen, "after": gc.isenabled(), "frozen": gc.get_freeze_count()}
open(out, "w").write(json.dumps(state))
"""


@pytest.mark.parametrize("caller", ["program", "argv"])
def test_only_the_program_pauses_the_collector_while_its_command_loads(
    tmp_path: Path, caller: str
) -> None:
    out = tmp_path / "state.json"
    subprocess.run(
        [sys.executable, "-c", COLLECTOR, str(out), caller, "schema", "lock"],
        cwd=REPO, capture_output=True, check=True,
    )  # fmt: skip
    state = json.loads(out.read_text())
    assert state["code"] == 0
    if caller == "program":
        # paused while loading, collecting again while it runs, nothing left to walk at exit
        assert (state["loading"], state["after"]) == ([False], True)
        assert state["frozen"] > 0
    else:
        assert state == {"code": 0, "loading": [True], "after": True, "frozen": 0}
