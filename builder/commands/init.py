"""Draft a starting manifest from a running vLLM server, for review before `repro build`.

`repro init --port N` (or `--pid P`) reads the server's argv, environment and working
directory from /proc, the models it was told to load (every file hashed), its venv and the
versions installed there, and every file its process tree maps; it writes `--out`, a manifest
`repro check` accepts, behind a header of comments saying what its reviewer must check and which
environment variables were left out and why (names only: a variable named like a secret is never
written). Unless `--suite` names an existing oracle suite, a starting one is written beside it.
Before anything is written the manifest is validated, and the live tree is audited under it:
each drift is listed in the header, for the reviewer to resolve before a build.

Neither file is replaced without `--force`; each is written to a temporary sibling and moved into
place. Exit 0 when written and the audit under it finds no drift, 1 when written with drift, 2
for bad input (not a vLLM server, a file in the way), 3 when the server cannot be observed.
"""

from __future__ import annotations

import argparse
import os
import secrets
from pathlib import Path

from rich.markup import escape

from repro_serving.builder.documents.manifest import Manifest, Suite
from repro_serving.builder.drift import Drift
from repro_serving.builder.errors import BadInput, ExitCode, NotObservable
from repro_serving.builder.manifestdraft import Draft, DraftOptions, draft, placed, render
from repro_serving.builder.manifestdraft import suite_text as render_suite
from repro_serving.builder.native.policy import judge_tree, policy_from_manifest
from repro_serving.builder.observe.server import ServerFacts, observe_server
from repro_serving.builder.readers import describe_mode
from repro_serving.builder.render import (
    Output,
    Report,
    console,
    drift_table,
    table,
    write_report,
)
from repro_serving.builder.sealing.atomic import fsync_dir

SUITE_SUFFIX = ".suite.json"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--port", type=int, help="the server listening on this TCP port")
    target.add_argument("--pid", type=int, help="the server's API server process")
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="FILE",
        help="the manifest to write; relative paths in it resolve against its directory",
    )
    parser.add_argument(
        "--suite",
        type=Path,
        metavar="FILE",
        help="an existing oracle suite for the manifest to name; default: write a starting "
        f"one beside the manifest (<name>{SUITE_SUFFIX})",
    )
    parser.add_argument("--name", help="the bundle's name; default: the served model's")
    parser.add_argument("--force", action="store_true", help="replace files already there")
    parser.add_argument("--json", action="store_true", help="machine-readable report")


class ServerSummary(Output):
    pid: int
    """The root of the server's process tree (its API server)."""
    port: int
    entry: str
    """How its argv starts vLLM."""
    venv: str
    venv_found_by: str
    """How the venv was found from the process, as its interpreter found it."""
    interpreter: str
    """The venv's Python release."""
    processes: dict[str, int]
    """Processes of the live tree by role."""


class ModelSummary(Output):
    role: str
    repo: str
    revision: str
    location: str
    """`model.path` or `model.hf_cache`, as the manifest writes it."""
    files: int


class NativeSummary(Output):
    modules: list[str]
    kernel_sets: list[str]
    allowed_roots: list[str]
    preload: list[str]


class LeftOutVariable(Output):
    name: str
    reason: str


class InitReport(Report):
    """`repro init --json`: what was found, what was written, what the reviewer must check."""

    manifest: str
    """The manifest written."""
    suite: str
    """The oracle suite it names."""
    suite_written: bool
    """Whether repro init wrote the suite (else it was named with --suite)."""
    server: ServerSummary
    models: list[ModelSummary]
    packages: dict[str, str]
    """Pinned distribution to its version."""
    native: NativeSummary
    env_kept: list[str]
    """The variables of [launch.env]."""
    env_left_out: list[LeftOutVariable]
    """The server's other variables, by name only, with why."""
    argv_added: list[str]
    """What launch.argv has that the server's argv had not, with why."""
    review: list[str]
    drifts: list[Drift]
    """The live tree audited under the manifest written: each to resolve before a build."""


REPORT = InitReport


def execute(args: argparse.Namespace) -> int:
    out = _free_path(args.out, "--out", force=args.force)
    manifest_dir = Path(os.path.normpath(out.parent.absolute()))
    existing: Suite | None = None
    if args.suite is not None:
        existing = Suite.from_path(args.suite, named_by="--suite")
        suite = Path(os.path.normpath(args.suite.absolute()))
    else:
        suite = _free_path(out.with_name(out.stem + SUITE_SUFFIX), "the suite", force=args.force)
    facts, tree = observe_server(port=args.port, pid=args.pid)
    options = DraftOptions(
        manifest_dir=str(manifest_dir),
        suite_path=suite.name if existing is None else placed(str(suite), str(manifest_dir)),
        existing_suite=existing,
        name=args.name,
    )
    drafted = draft(facts, options)
    manifest = Manifest.from_toml(render(drafted, facts), source=str(out), base_dir=manifest_dir)
    if drafted.suite is not None:
        Suite.from_json(render_suite(drafted.suite), source=str(suite))
    audit = judge_tree(tree, policy_from_manifest(manifest, facts.host.capabilities()))
    _make_directory(manifest_dir)
    if drafted.suite is not None:
        _write(suite, render_suite(drafted.suite), force=args.force)
    _write(out, render(drafted, facts, audit.drifts), force=args.force)
    report = _report(out, suite, drafted, facts, audit.drifts)
    if args.json:
        write_report(report)
    else:
        _print(report)
    return int(ExitCode.PASS if report.ok else ExitCode.CHECK_FAILED)


def _free_path(path: Path, option: str, *, force: bool) -> Path:
    """`path` as a file to write: nothing there, or (with `force`) a regular file to replace."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        kind = "a symlink" if path.is_symlink() else describe_mode(path.stat().st_mode)
        raise BadInput(
            f"{option} is not a regular file",
            where=str(path),
            expected="a path where nothing is, or a regular file with --force",
            found=kind,
        )
    if path.exists() and not force:
        raise BadInput(
            f"{option} already exists",
            where=str(path),
            expected="a path where nothing is",
            found="a file",
            hint="--force replaces it",
        )
    return path


def _make_directory(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as error:
        raise BadInput(
            "--out's directory cannot be made",
            where=str(directory),
            expected="a directory, or a path where nothing is yet",
            found=f"{error.filename}: {error.strerror}",
        ) from error
    except OSError as error:
        raise NotObservable(
            "cannot make --out's directory", where=str(directory), found=error.strerror
        ) from error


def _write(path: Path, text: str, *, force: bool) -> None:
    """`text` into `path` all at once: written and synced beside it, then linked into place
    (refused if something appeared there meanwhile) or, with `force`, renamed over it."""
    staging = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    try:
        with staging.open("x", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        if force:
            staging.replace(path)
        else:
            os.link(staging, path)
    except FileExistsError as error:
        raise BadInput(
            "a file appeared where repro init was writing",
            where=str(path),
            expected="a path where nothing is",
            found="a file written meanwhile",
            hint="--force replaces it",
        ) from error
    except OSError as error:
        raise NotObservable(
            "cannot write the file", where=str(path), found=error.strerror or str(error)
        ) from error
    finally:
        staging.unlink(missing_ok=True)
    fsync_dir(path.parent)


def _report(
    out: Path, suite: Path, drafted: Draft, facts: ServerFacts, drifts: tuple[Drift, ...]
) -> InitReport:
    manifest = drafted.manifest
    native = manifest["native"]
    return InitReport(
        ok=not drifts,
        manifest=str(out),
        suite=str(suite),
        suite_written=drafted.suite is not None,
        server=ServerSummary(
            pid=facts.start.pid,
            port=facts.port,
            entry=facts.entry.words,
            venv=str(facts.venv.root),
            venv_found_by=facts.environment.evidence(),
            interpreter=facts.venv.version,
            processes=dict(facts.roles),
        ),
        models=[
            ModelSummary(
                role=model["role"],
                repo=model["repo"],
                revision=model["revision"],
                location=model.get("path") or model["hf_cache"],
                files=len(model["files"]),
            )
            for model in manifest["model"]
        ],
        packages={
            name: pin.removeprefix("==") for name, pin in manifest["python"]["packages"].items()
        },
        native=NativeSummary(
            modules=native["modules"],
            kernel_sets=native["kernel_sets"],
            allowed_roots=native["allowed_roots"],
            preload=native.get("preload", []),
        ),
        env_kept=list(drafted.kept_env),
        env_left_out=[LeftOutVariable(name=i.name, reason=i.reason) for i in drafted.left_out],
        argv_added=list(drafted.added),
        review=list(drafted.review),
        drifts=list(drifts),
    )


def _print(report: InitReport) -> None:
    out = console()
    server = report.server
    processes = ", ".join(f"{role} {count}" for role, count in server.processes.items())
    rows: list[tuple[str, str]] = [
        ("server", f"pid {server.pid} on port {server.port}: {server.entry}"),
        ("processes", processes),
        ("venv", f"{server.venv} (Python {server.interpreter})"),
        *(
            (
                f"model {m.role}",
                f"{m.repo} @ {m.revision}: {m.files} files in {m.location}",
            )
            for m in report.models
        ),
        ("packages", ", ".join(f"{name} {version}" for name, version in report.packages.items())),
        ("native modules", ", ".join(report.native.modules) or "-"),
        ("kernel sets", ", ".join(report.native.kernel_sets) or "-"),
        ("allowed roots", ", ".join(report.native.allowed_roots)),
        ("preload", ", ".join(report.native.preload) or "-"),
        ("env kept", ", ".join(report.env_kept) or "-"),
        ("env left out", ", ".join(item.name for item in report.env_left_out) or "-"),
    ]
    out.print(table("repro init: what the server runs", ("fact", "found"), rows))
    if report.argv_added:
        out.print(
            table(
                "added to the server's argv", ("what and why",), ((a,) for a in report.argv_added)
            )
        )
    out.print(table("the reviewer must check", ("point",), ((p,) for p in report.review)))
    if report.drifts:
        out.print(drift_table(report.drifts, "the live tree audited under the draft"))
    written = report.manifest + (f" and {report.suite}" if report.suite_written else "")
    verdict = "wrote" if report.ok else "wrote, with drift to resolve,"
    out.print(escape(f"{verdict} {written}"))
