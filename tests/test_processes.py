"""Snapshots of real process trees: roles, mapped files by identity, deleted and replaced files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from repro_serving.builder.errors import NotObservable
from repro_serving.builder.hashing import sha256_file
from repro_serving.builder.native.processes import HashMemo, read_mapped_file, snapshot_tree
from repro_serving.builder.native.procmaps import FileId, Mapping
from repro_serving.builder.native.roles import classify_role

# A child that maps a copy of a shared library, reports ready, and sleeps until killed.
MAPPER = """
import ctypes, sys, time
ctypes.CDLL(sys.argv[1])
print("ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def library_copy(tmp_path: Path) -> Path:
    source = Path("/usr/lib/x86_64-linux-gnu/libz.so.1")
    if not source.exists():
        pytest.fail(f"fixture library missing: {source}")
    copy = tmp_path / "libz-copy.so.1"
    shutil.copyfile(source.resolve(), copy)
    return copy


@pytest.fixture
def mapper(library_copy: Path) -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", MAPPER, str(library_copy)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    yield child
    child.kill()
    child.wait()


def _mapped(child: subprocess.Popen[str], path: Path) -> list[object]:
    tree = snapshot_tree(child.pid)
    return [f for f in tree.files.values() if f.path == str(path)]


def test_a_library_mapped_by_a_child_is_seen_with_its_hash(
    mapper: subprocess.Popen[str], library_copy: Path
) -> None:
    tree = snapshot_tree(mapper.pid)
    (process,) = tree.processes
    assert process.pid == mapper.pid and process.error is None
    (mapped,) = [f for f in tree.files.values() if f.path == str(library_copy)]
    assert mapped.is_elf and not mapped.deleted and not mapped.replaced
    assert mapped.sha256 == sha256_file(library_copy)
    assert mapped.file_id in process.files


def test_a_deleted_library_is_flagged_and_still_hashed_from_the_mapping(
    mapper: subprocess.Popen[str], library_copy: Path
) -> None:
    expected = sha256_file(library_copy)
    library_copy.unlink()
    (mapped,) = [f for f in snapshot_tree(mapper.pid).files.values() if f.path == str(library_copy)]
    assert mapped.deleted and not mapped.replaced
    assert mapped.sha256 == expected


def test_a_replaced_library_is_flagged_and_hashed_as_mapped_not_as_on_disk(
    mapper: subprocess.Popen[str], library_copy: Path
) -> None:
    expected = sha256_file(library_copy)
    replacement = library_copy.with_name("replacement")
    replacement.write_bytes(b"\x7fELF not the mapped library")
    replacement.replace(library_copy)
    (mapped,) = [f for f in snapshot_tree(mapper.pid).files.values() if f.path == str(library_copy)]
    assert mapped.replaced and mapped.deleted, "the kernel unlinks the inode renamed over"
    assert mapped.sha256 == expected != sha256_file(library_copy)


def test_children_are_part_of_the_tree_and_each_file_is_listed_once() -> None:
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess,sys,time; "
            "subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']); "
            "time.sleep(60)",
        ]
    )
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(parent.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = snapshot_tree(parent.pid)
        assert len(tree.processes) == 2
        (child,) = [p for p in tree.processes if p.pid != parent.pid]
        assert child.ppid == parent.pid
        interpreter = Path(sys.executable).resolve()
        shared = [f for f in tree.files.values() if Path(f.path) == interpreter]
        assert len(shared) == 1, "the interpreter both processes map is one file"
        assert all(shared[0].file_id in p.files for p in tree.processes)
    finally:
        for process in psutil.Process(parent.pid).children(recursive=True):
            process.kill()
        parent.kill()
        parent.wait()


def test_a_missing_process_is_not_observable() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    with pytest.raises(NotObservable) as caught:
        snapshot_tree(child.pid)
    assert caught.value.where == f"pid {child.pid}"


@pytest.mark.parametrize(
    ("name", "cmdline", "role"),
    [
        ("python", ["python", "-m", "vllm.entrypoints.openai.api_server"], "api_server"),
        (
            "python",
            ["python", "-c", "from multiprocessing.resource_tracker import main"],
            "resource_tracker",
        ),
        ("VLLM::EngineCore", ["VLLM::EngineCore"], "engine_core"),
        ("VLLM::Worker_TP1", ["VLLM::Worker_TP1"], "worker"),
        ("bash", ["bash"], "other"),
    ],
)
def test_roles_of_a_vllm_tree(name: str, cmdline: list[str], role: str) -> None:
    assert classify_role(name, cmdline) == role


def test_a_mapped_device_node_is_recorded_without_reading_it() -> None:
    # How a driver's device node (e.g. /dev/nvidia0) appears in maps: its own (dev, inode).
    status = Path("/dev/null").stat()
    node_id = FileId(status.st_dev, status.st_ino)
    mapping = Mapping(0x1000, 0x2000, "rw-s", 0, node_id, "/dev/null", deleted=False)
    node = read_mapped_file(os.getpid(), node_id, mapping)
    assert node.device_node and not node.is_elf and not node.replaced
    assert node.error is None and node.sha256 is None


def test_a_child_that_exited_during_the_audit_is_reported_not_a_crash() -> None:
    # The child exits at once and its parent never reaps it: a zombie, listed by the tree
    # but with nothing left to read, as a process that exits mid-audit leaves things.
    parent = subprocess.Popen(
        [sys.executable, "-c", "import os,time; os.spawnv(os.P_NOWAIT, '/bin/true', ['true']); "
         "print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            children = psutil.Process(parent.pid).children()
            if children and children[0].status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.05)
        tree = snapshot_tree(parent.pid)
        (gone,) = [p for p in tree.processes if p.pid != parent.pid]
        assert gone.error == "exited during the audit"
        assert gone.files == ()
    finally:
        parent.kill()
        parent.wait()


def test_a_memo_shared_by_snapshots_reads_a_file_rewritten_in_place_again(
    mapper: subprocess.Popen[str], library_copy: Path
) -> None:
    memo = HashMemo()
    (before,) = [
        f for f in snapshot_tree(mapper.pid, memo=memo).files.values()
        if f.path == str(library_copy)
    ]  # fmt: skip
    with library_copy.open("r+b") as stream:  # same inode, other bytes, a new change time
        stream.seek(-1, 2)
        last = stream.read(1)
        stream.seek(-1, 2)
        stream.write(bytes([last[0] ^ 0xFF]))
    (after,) = [
        f for f in snapshot_tree(mapper.pid, memo=memo).files.values()
        if f.path == str(library_copy)
    ]  # fmt: skip
    assert before.sha256 != after.sha256 == sha256_file(library_copy)
    assert (again := snapshot_tree(mapper.pid, memo=memo).files[after.file_id]) == after
    assert again.sha256 == after.sha256
