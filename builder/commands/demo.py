"""The embedded default: generate the tiny model, serve it on vLLM CPU, audit it live, tear down.

`repro demo` runs `manifests/tiny-cpu.toml` end to end on this machine: the deterministic tiny
Llama model is written and checked against its pinned sha256s, the teacher profile is started
exactly as declared, every process of the running server is audited against the loader
emulation and the manifest's native policy, and the server is torn down with proof that no
process is left and the port is free. Exit 0 only when nothing drifted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.status import Status

from builder import tinymodel
from builder.auditreport import print_report, report_document
from builder.drift import Drift
from builder.errors import BadInput, ExitCode
from builder.manifest import Manifest
from builder.observe.models import model_drifts
from builder.observe.native import judge_tree, observe_tree, policy_from_manifest
from builder.render import console, drift_table, table, write_json
from launch.server import serving
from launch.spec import server_spec

DEFAULT_MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "tiny-cpu.toml"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--manifest", type=Path, default=DEFAULT_MANIFEST, help="default: manifests/tiny-cpu.toml"
    )
    parser.add_argument("--profile", default=None, help="launch profile; default: the teacher")
    parser.add_argument("--run-dir", type=Path, help="keep the server log and audit here")
    parser.add_argument("--json", action="store_true", help="machine-readable report")


def execute(args: argparse.Namespace) -> int:
    manifest = Manifest.from_path(args.manifest)
    profile = args.profile or manifest.oracle.teacher
    if profile not in manifest.launch.profiles:
        raise BadInput(
            "unknown launch profile",
            where=f"{args.manifest}: launch.profiles",
            expected=" or ".join(sorted(manifest.launch.profiles)),
            found=profile,
        )
    out = console()
    model_problems = _prepare_models(manifest)
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="repro-demo-"))
    spec = server_spec(manifest, profile, run_dir)
    starting = f"starting {manifest.bundle.name} ({profile}) on port {spec.port}"
    with _status(starting, quiet=args.json), serving(spec) as server:
        tree = observe_tree(server.pid, show_progress=not args.json)
    report = judge_tree(tree, policy_from_manifest(manifest))
    drifts = [*model_problems, *report.drifts]
    if args.json:
        write_json(
            {
                "manifest": str(args.manifest),
                "profile": profile,
                "server": {"argv": list(spec.argv), "ready_after_s": server.ready_after_s,
                           "log": str(spec.log_path)},
                "model_drifts": [d.model_dump(mode="json") for d in model_problems],
                "audit": report_document(report),
                "passed": not drifts,
            }
        )  # fmt: skip
    else:
        out.print(
            table(
                f"{manifest.bundle.name}: {manifest.bundle.description}",
                ("step", "result"),
                (
                    ("model files", _model_summary(manifest, model_problems)),
                    ("server", f"ready after {server.ready_after_s:.1f} s; log {spec.log_path}"),
                    ("teardown", "no process of the tree left; port free"),
                ),
            )
        )
        if model_problems:
            out.print(drift_table(model_problems, "model drift"))
        print_report(report, objects=False)
    return int(ExitCode.PASS if not drifts else ExitCode.CHECK_FAILED)


def _prepare_models(manifest: Manifest) -> list[Drift]:
    """Generate the embedded model where the manifest expects it, then check every pin."""
    problems: list[Drift] = []
    for model in manifest.models:
        directory = model.directory(manifest.resolve("."))
        if model.repo == tinymodel.REPO_ID:
            tinymodel.generate(directory)
        problems.extend(model_drifts(model, directory))
    return problems


def _model_summary(manifest: Manifest, problems: list[Drift]) -> str:
    files = sum(len(model.files) for model in manifest.models)
    return f"{files - len(problems)}/{files} files match their pinned sha256"


def _status(message: str, *, quiet: bool) -> Status:
    """A spinner on stderr while the server starts; silent when stderr is not a terminal."""
    return Status(message, console=Console(stderr=True, quiet=quiet or not sys.stderr.isatty()))
