"""Print a JSON Schema repro ships: the manifest's by default, the lock's, or a command's report.

`repro schema` prints the schema of the manifest (repro.manifest/v1); `repro schema lock` that of
`lock.json` (repro.lock/v1); `repro schema COMMAND` that of the document `repro COMMAND --json`
prints, its error document included. Each is the file shipped in builder/schemas/, which the
tests hold equal to what the models produce (`documents`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Final

from repro_serving.builder.errors import BadInput, ExitCode
from repro_serving.builder.schemadoc import shipped, shipped_names

DOCUMENTS: Final = ("manifest", "lock")
"""The schemas of files; every other name is a command's."""
VERSION_SUFFIX: Final = ".v1.json"
REPORT_PREFIX: Final = "report-"


def schema_file(name: str) -> str:
    """The shipped file of the schema `name`: `lock.v1.json`, `report-verify.v1.json`."""
    return f"{name if name in DOCUMENTS else REPORT_PREFIX + name}{VERSION_SUFFIX}"


def schema_names() -> list[str]:
    """Every schema `repro schema` prints, by name, from the files shipped."""
    return [
        name.removesuffix(VERSION_SUFFIX).removeprefix(REPORT_PREFIX) for name in shipped_names()
    ]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name",
        nargs="?",
        default="manifest",
        metavar="NAME",
        help="manifest (the default), lock, or a command whose --json document it describes: "
        + ", ".join(n for n in schema_names() if n not in DOCUMENTS),
    )


def execute(args: argparse.Namespace) -> int:
    names = schema_names()
    if args.name not in names:
        raise BadInput(
            "no such schema",
            where="NAME",
            expected="one of " + ", ".join(names),
            found=repr(args.name),
        )
    sys.stdout.write(shipped(schema_file(args.name)))
    return ExitCode.PASS


def documents() -> dict[str, str]:
    """Every schema repro ships, as its models produce it: file name -> text. The manifest's
    and the lock's from their models; each command's from the `REPORT` its module declares
    (the union of its documents), or'ed with the error document every command may print."""
    from repro_serving.builder import commands
    from repro_serving.builder.documents import lock, manifest
    from repro_serving.builder.render import ErrorReport
    from repro_serving.builder.schemadoc import schema_document

    produced = {
        schema_file("manifest"): manifest.schema_document(),
        schema_file("lock"): lock.schema_document(),
    }
    for command in commands.names():
        report = getattr(commands.load(command), "REPORT", None)
        if report is not None:
            produced[schema_file(command)] = schema_document(
                report | ErrorReport, title=f"repro {command} --json"
            )
    return produced
