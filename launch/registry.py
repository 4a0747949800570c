"""Servers repro started and has not yet proven gone: one file per process group.

A run registers its server's process group once the server is ready and removes the entry
only after teardown proved no process of the group alive. A later run reads the registry
before it starts anything: an entry whose group still has a living process is a stale server
of an earlier run (its repro was killed, or its teardown failed), refused by name with its
pids, port and run directory; an entry whose group is gone is removed.

The registry lives under the system's temporary directory, per user, unless the caller names
another one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from repro_serving.builder.documents.rundir import atomic_write, json_bytes
from repro_serving.builder.errors import NotObservable, ReproError
from repro_serving.builder.readers import REGISTRY_ENTRY_LIMIT, read_json


class StaleServer(NotObservable):
    """A server an earlier run started is still alive."""


@dataclass(frozen=True)
class Entry:
    pgid: int
    port: int
    run_dir: str
    argv0: str


def default_registry() -> Path:
    return Path(tempfile.gettempdir()) / f"repro-{os.getuid()}" / "servers"


def register(registry: Path, entry: Entry) -> None:
    atomic_write(registry / f"{entry.pgid}.json", json_bytes(asdict(entry)))


def unregister(registry: Path, pgid: int) -> None:
    (registry / f"{pgid}.json").unlink(missing_ok=True)


def group_members(pgid: int) -> list[psutil.Process]:
    """Living processes (not zombies) whose process group is `pgid`."""
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(ProcessLookupError, psutil.Error):
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
    return members


def refuse_stale(registry: Path) -> None:
    """Raise `StaleServer` for the first registered group with a living process; forget the
    entries whose group is gone."""
    for path in sorted(registry.glob("*.json")) if registry.is_dir() else ():
        entry = _read(path)
        if entry is None:
            continue
        alive = group_members(entry.pgid)
        if not alive:
            path.unlink(missing_ok=True)
            continue
        pids = ", ".join(str(process.pid) for process in alive)
        raise StaleServer(
            "a server of an earlier run is still running",
            where=f"process group {entry.pgid} ({entry.argv0}), port {entry.port}, "
            f"run directory {entry.run_dir}",
            expected="no process left by an earlier run",
            found=f"pids {pids} alive",
            hint=f"stop it (kill -- -{entry.pgid}) and run again",
        )


def _read(path: Path) -> Entry | None:
    """The entry of `path`; an unreadable one (written by nothing repro knows) is ignored."""
    try:
        return Entry(**read_json(path, limit=REGISTRY_ENTRY_LIMIT, what="a registry entry"))
    except (ReproError, TypeError):
        return None
