"""The embedded default end to end: generate the tiny model, build, verify, launch, report.

`repro demo` writes the deterministic tiny Llama model where `manifests/tiny-cpu.toml` expects
it (its files must match their pinned sha256), builds the bundle against a real vLLM CPU server
(teacher profile, every process audited live), verifies it offline and against this host,
replays it with the candidate profile against the sealed teacher, and prints the report. The
bundle and the sealed run are written under `--out` (default: a new temporary directory), signed
with the project's example key. Exit 0 only when every step passes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from repro_serving.builder import tinymodel
from repro_serving.builder.build import BuildRefused, build
from repro_serving.builder.commands._shared import output_directory, print_report, report_document
from repro_serving.builder.commands.run import print_summary
from repro_serving.builder.errors import BadInput, ExitCode
from repro_serving.builder.manifest import Manifest
from repro_serving.builder.render import console, drift_table, table, write_json
from repro_serving.builder.replay import PreflightRefused, launch
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys
from repro_serving.builder.verify import verify

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MANIFEST = REPO_ROOT / "manifests" / "tiny-cpu.toml"
EXAMPLE_KEY = REPO_ROOT / "keys" / "example.key"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, help="where the bundle and the run go")
    parser.add_argument("--json", action="store_true", help="machine-readable report")


def execute(args: argparse.Namespace) -> int:
    if not DEFAULT_MANIFEST.is_file():
        raise BadInput(
            "repro demo runs from a checkout of repro",
            where=str(DEFAULT_MANIFEST),
            found="no embedded default manifest: this repro is installed without its source",
            hint="run it from a clone of the repository (`make demo`)",
        )
    out = args.out or Path(tempfile.mkdtemp(prefix="repro-demo-"))
    output_directory(out / "bundles", option="--out")
    manifest_path = Path(os.path.relpath(DEFAULT_MANIFEST))
    manifest = Manifest.from_path(manifest_path)
    key = SigningKey.from_path(EXAMPLE_KEY)
    trusted = TrustedKeys.from_key_file(EXAMPLE_KEY.with_suffix(".pub"))
    say = _quiet if args.json else _say

    for model in manifest.models:
        if model.repo == tinymodel.REPO_ID:
            say(f"generating the tiny model into {model.directory(manifest.resolve('.'))}")
            tinymodel.generate(model.directory(manifest.resolve(".")))
    say("building the bundle (observe every pin, run the teacher, seal)")
    try:
        built = build(manifest_path, key, out / "bundles", out / "build-run", progress=say)
    except BuildRefused as refused:
        if args.json:
            write_json({"ok": False, "drifts": [d.model_dump(mode="json") for d in refused.drifts]})
        else:
            console().print(drift_table(refused.drifts, refused.what))
        return int(ExitCode.CHECK_FAILED)
    say(f"verifying {built.sealed.path} offline and against this host")
    verified = verify(built.sealed.path, trusted, host=True)
    if not verified.ok:
        if args.json:
            write_json({"ok": False, "verify": report_document(verified)})
        else:
            print_report(verified)
        return int(ExitCode.CHECK_FAILED)
    say("launching the bundle (candidate profile against the sealed teacher)")
    try:
        replay = launch(built.sealed.path, trusted, runs=out / "runs", signing_key=key)
    except PreflightRefused as refused:
        if args.json:
            write_json({"ok": False, "preflight": report_document(refused.report)})
        else:
            print_report(refused.report)
        return int(ExitCode.CHECK_FAILED)
    if args.json:
        write_json(
            {
                "ok": replay.run.passed,
                "bundle": str(built.sealed.path),
                "run": replay.run.summary(),
                "sealed_run": str(replay.sealed.path) if replay.sealed else None,
            }
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
    return int(replay.run.exit_code)


def _say(message: str) -> None:
    sys.stderr.write(f"repro demo: {message}\n")
    sys.stderr.flush()


def _quiet(_message: str) -> None:
    return None
