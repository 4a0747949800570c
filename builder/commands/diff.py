"""What differs between two locks, bundles or sealed run directories.

Each side is a `lock.json` or a directory holding one (a bundle, or a run sealed by `repro
launch`). Every fact is compared by its key path (`native.roles.worker[{site}/torch/lib/…]`),
so a moved library, a changed hash or a new package each show as one line. Exit 0 when the
two are the same, 1 when they differ.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from repro_serving.builder.errors import BadInput, ExitCode
from repro_serving.builder.lock import Lock
from repro_serving.builder.readers import LOCK_LIMIT, NoSuchFile, read_bytes
from repro_serving.builder.render import console, table, write_json
from repro_serving.builder.sealing import bundle


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", type=Path, metavar="A", help="lock.json, bundle or run directory")
    parser.add_argument("b", type=Path, metavar="B", help="lock.json, bundle or run directory")
    parser.add_argument("--json", action="store_true", help="machine-readable differences")


def execute(args: argparse.Namespace) -> int:
    left, right = flatten(_lock(args.a)), flatten(_lock(args.b))
    differences = [
        (key, left.get(key), right.get(key))
        for key in sorted(left.keys() | right.keys())
        if left.get(key) != right.get(key)
    ]
    if args.json:
        write_json(
            {"a": str(args.a), "b": str(args.b),
             "differences": [{"key": k, "a": a, "b": b} for k, a, b in differences]}
        )  # fmt: skip
    elif differences:
        console().print(
            table(f"{len(differences)} difference(s)", ("fact", str(args.a), str(args.b)),
                  ((k, _show(a), _show(b)) for k, a, b in differences))
        )  # fmt: skip
    else:
        console().print(f"same: {args.a} and {args.b} pin the same facts")
    return int(ExitCode.CHECK_FAILED if differences else ExitCode.PASS)


def flatten(lock: Lock) -> dict[str, Any]:
    """Every leaf of the lock by key path; list entries that carry a path are keyed by it."""
    return dict(_leaves("", lock.model_dump(mode="json", by_alias=True)))


def _leaves(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(f"{prefix}.{key}" if prefix else str(key), inner)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for index, inner in enumerate(value):
            label = inner.get("path") or inner.get("role") or inner.get("name")
            label = label or inner.get("prompt_id") or str(index)
            yield from _leaves(f"{prefix}[{label}]", inner)
    else:
        yield prefix, value


def _lock(path: Path) -> Lock:
    file = path / bundle.LOCK if path.is_dir() else path
    try:
        data = read_bytes(file, limit=LOCK_LIMIT, what="a lock")
    except NoSuchFile as error:
        raise BadInput(
            "no lock to compare",
            where=str(file),
            expected="a lock.json, or a bundle or run directory holding one",
            found=error.found,
        ) from error
    return Lock.from_bytes(data, where=str(file))


def _show(value: Any) -> str:
    return "(absent)" if value is None else str(value)
