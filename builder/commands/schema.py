"""Print the JSON Schema of the manifest (repro.manifest/v1).

The schema is the file shipped in builder/schemas/, which the tests hold equal to what the
manifest's models produce.
"""

from __future__ import annotations

import argparse
import sys

from repro_serving.builder.errors import ExitCode
from repro_serving.builder.manifest import shipped_schema


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """No arguments: there is one manifest schema."""


def execute(args: argparse.Namespace) -> int:
    sys.stdout.write(shipped_schema())
    return ExitCode.PASS
