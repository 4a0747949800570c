"""The live truth of a running process tree: who runs, and which files each process maps.

I/O only: psutil for the tree, `/proc/<pid>/maps` for mappings, `/proc/<pid>/map_files/` to
read the bytes actually mapped (the same inode even when the path was since replaced or
deleted). Each distinct file is read and hashed once however many processes map it. A process
that exits during the snapshot, or whose maps cannot be read, is recorded with the reason.
"""

from __future__ import annotations

import dataclasses
import re
import stat
from collections.abc import Callable
from pathlib import Path

import psutil

from repro_serving.builder.errors import NotObservable
from repro_serving.builder.hashing import file_size, over_cores, sha256_stream
from repro_serving.builder.native.procmaps import FileId, Mapping, file_mappings, parse_maps
from repro_serving.builder.native.roles import classify_role
from repro_serving.builder.native.snapshot import MappedFile, ProcessSnapshot, TreeSnapshot

ELF_MAGIC = b"\x7fELF"

# Environment variables that steer the dynamic loader, the interpreter's imports, a kernel
# library's choice of code path (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, MKL_CBWR, ...) or where
# its runtime compiles kernels (HOME, the temporary directory); only these are kept from a
# process's environment, so a snapshot never carries unrelated secrets.
LOADER_ENV = re.compile(
    r"^(LD_[A-Z_]+|PYTHON[A-Z_]*|GLIBC_TUNABLES|VLLM_[A-Z0-9_]+|ATEN_[A-Z_]+|ONEDNN_[A-Z_]+"
    r"|DNNL_[A-Z_]+|MKL_[A-Z_]+|HOME|TMPDIR|TEMP|TMP)$"
)


def parse_environ(block: bytes) -> dict[str, str]:
    """The loader-relevant variables of a `/proc/<pid>/environ` block.

    A process that renames itself (setproctitle, as vLLM's EngineCore and Worker do) clears the
    start of that block, so empty items are skipped rather than taken as its end.
    """
    environ: dict[str, str] = {}
    for item in block.decode("utf-8", "surrogateescape").split("\0"):
        name, separator, value = item.partition("=")
        if separator and LOADER_ENV.match(name):
            environ.setdefault(name, value)
    return environ


def environ_variable(block: bytes, name: str) -> str | None:
    """One variable of a `/proc/<pid>/environ` block, its first occurrence as getenv reads it;
    None when unset."""
    prefix = f"{name}=".encode()
    for item in block.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode("utf-8", "surrogateescape")
    return None


def pid_listening_on(port: int) -> int:
    """The pid of the process that listens on a TCP port of this host."""
    try:
        connections = psutil.net_connections(kind="inet")
    except psutil.AccessDenied as error:
        raise NotObservable(
            "cannot list the sockets of this host", where=f"port {port}", hint="run as root"
        ) from error
    pids = {
        c.pid
        for c in connections
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid
    }
    if not pids:
        raise NotObservable(
            "no process listens on the port",
            where=f"port {port}",
            expected="a running server",
            found="nothing listening",
        )
    return min(pids)


class HashMemo:
    """Digests of mapped files already read, for the snapshots of one run (a server started
    again maps the same files). A file is known by its identity, size and change time, so one
    rewritten in place (same inode, new bytes, new ctime) is read again."""

    def __init__(self) -> None:
        self._known: dict[tuple[FileId, int, int, int], MappedFile] = {}

    def key(self, source: Path, file_id: FileId) -> tuple[FileId, int, int, int] | None:
        try:
            status = source.stat()
        except OSError:
            return None
        return (file_id, status.st_size, status.st_mtime_ns, status.st_ctime_ns)

    def get(self, key: tuple[FileId, int, int, int] | None) -> MappedFile | None:
        return None if key is None else self._known.get(key)

    def put(self, key: tuple[FileId, int, int, int] | None, mapped: MappedFile) -> None:
        if key is not None and mapped.error is None:
            self._known[key] = mapped


def snapshot_tree(
    root_pid: int,
    progress: Callable[[str], None] | None = None,
    memo: HashMemo | None = None,
) -> TreeSnapshot:
    """Every process of the tree rooted at `root_pid`, its mappings, each file hashed once
    (and, with `memo`, once across the snapshots that share it)."""
    try:
        root = psutil.Process(root_pid)
        members = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess as error:
        raise NotObservable(
            "the process does not exist", where=f"pid {root_pid}", found="no such process"
        ) from error
    processes: list[ProcessSnapshot] = []
    first_seen: dict[FileId, tuple[int, Mapping]] = {}
    for process in members:
        snapshot, mappings = _snapshot_process(process)
        processes.append(snapshot)
        for file_id, group in mappings.items():
            first_seen.setdefault(file_id, (process.pid, group[0]))
    if progress is not None:
        progress(f"{len(first_seen)} mapped files of {len(processes)} processes")
    seen = list(first_seen.items())
    read = over_cores(
        seen,
        lambda item: _read_remembered(item[1][0], item[0], item[1][1], memo),
        lambda item: file_size(item[1][1].path or ""),
    )
    files = {file_id: mapped for (file_id, _), mapped in zip(seen, read, strict=True)}
    return TreeSnapshot(root_pid=root_pid, processes=tuple(processes), files=files)


def _snapshot_process(
    process: psutil.Process,
) -> tuple[ProcessSnapshot, dict[FileId, tuple[Mapping, ...]]]:
    pid = process.pid
    try:
        with process.oneshot():
            name, ppid = process.name(), process.ppid()
            cmdline = tuple(process.cmdline())
            exe = process.exe() or None
            started_at = process.create_time()
        block = Path(f"/proc/{pid}/environ").read_bytes()
        maps_text = Path(f"/proc/{pid}/maps").read_text()
    except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
        return _failed(pid, "exited during the audit"), {}
    except (psutil.AccessDenied, PermissionError) as error:
        return _failed(pid, f"cannot read its state: {error}"), {}
    mappings = file_mappings(parse_maps(maps_text, where=f"/proc/{pid}/maps"))
    snapshot = ProcessSnapshot(
        pid=pid,
        ppid=ppid,
        name=name,
        role=classify_role(name, cmdline),
        cmdline=cmdline,
        exe=exe,
        environ=parse_environ(block),
        files=tuple(mappings),
        cwd=_cwd(pid),
        search_path=environ_variable(block, "PATH"),
        started_at=started_at,
    )
    return snapshot, mappings


def _cwd(pid: int) -> str | None:
    try:
        return str(Path(f"/proc/{pid}/cwd").readlink())
    except OSError:
        return None


def _failed(pid: int, reason: str) -> ProcessSnapshot:
    return ProcessSnapshot(
        pid=pid,
        ppid=0,
        name="?",
        role="other",
        cmdline=(),
        exe=None,
        environ={},
        files=(),
        error=reason,
    )


def _read_remembered(
    pid: int, file_id: FileId, mapping: Mapping, memo: HashMemo | None
) -> MappedFile:
    if memo is None:
        return read_mapped_file(pid, file_id, mapping)
    key = memo.key(Path(f"/proc/{pid}/map_files/{mapping.range_name}"), file_id)
    known = memo.get(key)
    if known is not None and known.path == mapping.path and known.deleted == mapping.deleted:
        # The identity and change time say these are the same bytes; where it is now is new.
        current = _current_id(known.path)
        return dataclasses.replace(known, replaced=current is not None and current != file_id)
    mapped = read_mapped_file(pid, file_id, mapping)
    memo.put(key, mapped)
    return mapped


def read_mapped_file(pid: int, file_id: FileId, mapping: Mapping) -> MappedFile:
    """Hash the bytes of the mapped inode itself, through `map_files/`, not the path.

    Only ELF objects are hashed: other mapped files (model weights, locale archives) can be
    gigabytes and are pinned by their own observers. Where the kernel offers no `map_files/`
    (some sandboxed kernels), the path is read instead, but only while it still names the
    mapped inode: a replaced or deleted file is then reported unreadable, never misattributed.
    """
    path = mapping.path or ""
    # Renaming a new file over a mapped one unlinks the mapped inode: the kernel then says
    # "deleted" and the path names another file. Both facts are reported.
    current = _current_id(path)
    replaced = current is not None and current != file_id
    if current == file_id and _is_device_node(path):
        return MappedFile(file_id, path, mapping.deleted, False, False, None, device_node=True)
    sources = [Path(f"/proc/{pid}/map_files/{mapping.range_name}")]
    if current == file_id:
        sources.append(Path(path))
    error: OSError | None = None
    for source in sources:
        try:
            with source.open("rb") as stream:
                is_elf = stream.read(4) == ELF_MAGIC
                stream.seek(0)
                digest = sha256_stream(stream) if is_elf else None
        except OSError as failure:
            error = failure
            continue
        return MappedFile(file_id, path, mapping.deleted, replaced, is_elf, digest)
    return MappedFile(file_id, path, mapping.deleted, replaced, False, None, str(error))


def _is_device_node(path: str) -> bool:
    try:
        mode = Path(path).stat().st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def _current_id(path: str) -> FileId | None:
    try:
        status = Path(path).stat()
    except OSError:
        return None
    return FileId(status.st_dev, status.st_ino)
