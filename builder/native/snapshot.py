"""A running process tree as `builder.native.processes` read it: who ran, with which environment,
and which files each process mapped. Data only: the audit (`builder.native.audit`) judges it,
live or again from a sealed audit."""

from __future__ import annotations

from dataclasses import dataclass, field

from repro_serving.builder.native.procmaps import FileId


@dataclass(frozen=True)
class MappedFile:
    """One distinct file mapped by some process of the tree."""

    file_id: FileId
    path: str
    deleted: bool
    replaced: bool
    is_elf: bool
    sha256: str | None
    error: str | None = None
    device_node: bool = False
    """A character or block device mapped by a driver (e.g. /dev/nvidia0): no bytes to hash."""


@dataclass(frozen=True)
class ProcessSnapshot:
    pid: int
    ppid: int
    name: str
    role: str
    cmdline: tuple[str, ...]
    exe: str | None
    environ: dict[str, str]
    files: tuple[FileId, ...]
    error: str | None = None
    cwd: str | None = None
    """Its working directory now (`/proc/<pid>/cwd`), None when it cannot be read."""
    search_path: str | None = None
    """The PATH it was started with, None when unset (or cleared by a process that renamed
    itself): with `cwd`, how its interpreter resolved a bare argv[0] (`builder.native.pyenv`)."""
    started_at: float | None = None
    """When the kernel started it, in seconds since the epoch (psutil's create_time: the boot
    time, read to the second, plus its start in clock ticks): what tells two starts apart."""


@dataclass(frozen=True)
class TreeSnapshot:
    root_pid: int
    processes: tuple[ProcessSnapshot, ...]
    files: dict[FileId, MappedFile] = field(default_factory=dict)
