"""A bundle as one file: `repro pack`, `repro unpack`, and `repro verify` of the archive.

The bundle packed is the committed tiny one; the hostile archives are written with Python's
own tarfile, as anyone could write them.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from repro_serving.builder.cli import main
from repro_serving.builder.sealing.archive import pack, unpack

BUNDLE = REPO_ROOT / "repro" / "tiny-cpu"
PUBLIC = str(REPO_ROOT / "keys" / "example.pub")


def test_one_bundle_always_packs_to_the_same_bytes(tmp_path: Path) -> None:
    first = pack(BUNDLE, tmp_path / "a.tar")
    copy = tmp_path / "copy" / "tiny-cpu"
    shutil.copytree(BUNDLE, copy)
    for path in copy.rglob("*"):  # another owner's times: none of it is packed
        path.touch()
    assert pack(copy, tmp_path / "b.tar") == first
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    unpacked = unpack(tmp_path / "a.tar", tmp_path)
    assert unpacked == tmp_path / "tiny-cpu"
    assert pack(unpacked, tmp_path / "c.tar") == first
    assert (unpacked / "launch").stat().st_mode & 0o777 == 0o755
    assert (unpacked / "lock.json").stat().st_mode & 0o777 == 0o644


def test_verify_takes_the_archive_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "tiny-cpu.tar"
    pack(BUNDLE, archive)
    assert main(["verify", str(archive), "--key", PUBLIC, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] and document["bundle"] == str(archive)
    assert list(tmp_path.iterdir()) == [archive]  # unpacked elsewhere, and gone


def test_an_archive_of_a_changed_bundle_fails_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "tiny-cpu"
    shutil.copytree(BUNDLE, copy)
    rows = copy / "evidence" / "start-1" / "rows.json"
    rows.write_text(rows.read_text().replace('"greeting"', '"greetings"', 1))
    pack(copy, tmp_path / "changed.tar")
    assert main(["verify", str(tmp_path / "changed.tar"), "--key", PUBLIC]) == 1
    assert "FAIL: " in capsys.readouterr().out


def test_launch_takes_the_archive_and_refuses_it_at_preflight_when_it_does_not_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`repro launch ARCHIVE` verifies the packed bundle first, as it does a directory: one
    changed row and nothing starts, no run directory is made, the archive is left as it was."""
    copy = tmp_path / "tiny-cpu"
    shutil.copytree(BUNDLE, copy)
    rows = copy / "evidence" / "start-1" / "rows.json"
    rows.write_text(rows.read_text().replace('"greeting"', '"greetings"', 1))
    archive = tmp_path / "changed.tar"
    pack(copy, archive)
    before = archive.read_bytes()
    runs = tmp_path / "runs"
    code = main(["launch", str(archive), "--key", PUBLIC, "--runs", str(runs), "--json"])
    assert code == 1
    document = json.loads(capsys.readouterr().out)
    assert document["preflight"]["bundle"] == str(archive)
    drifts = document["preflight"]["drifts"]
    assert [(d["kind"], d["subject"]) for d in drifts] == [
        ("file-digest", "evidence/start-1/rows.json")
    ]
    assert not runs.exists()
    assert archive.read_bytes() == before


def test_pack_and_unpack_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "b.tar"
    assert main(["pack", str(BUNDLE), "--out", str(archive), "--json"]) == 0
    packed = json.loads(capsys.readouterr().out)
    assert packed["archive"] == str(archive) and len(packed["sha256"]) == 64
    assert main(["pack", str(BUNDLE), "--out", str(archive)]) == 2  # never over a file
    (tmp_path / "into").mkdir()
    assert main(["unpack", str(archive), "--into", str(tmp_path / "into"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bundle"] == str(tmp_path / "into" / "tiny-cpu")
    assert main(["unpack", str(archive), "--into", str(tmp_path / "into")]) == 2
    assert "the bundle's directory exists" in capsys.readouterr().err


def test_a_bundle_holding_a_link_is_not_packed(tmp_path: Path) -> None:
    copy = tmp_path / "tiny-cpu"
    shutil.copytree(BUNDLE, copy)
    (copy / "evidence" / "link").symlink_to("/etc/passwd")
    with pytest.raises(Exception, match="the bundle cannot be packed"):
        pack(copy, tmp_path / "x.tar")
    assert not (tmp_path / "x.tar").exists()


def _archive(path: Path, members: list[tuple[str, bytes | None, bytes]]) -> Path:
    """A tar of `members`: each a name, its content (None for a directory or a link), a type."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, content, kind in members:
            entry = tarfile.TarInfo(name)
            entry.type = kind
            if kind == tarfile.SYMTYPE:
                entry.linkname = "/etc/passwd"
            if content is not None:
                entry.size = len(content)
            tar.addfile(entry, io.BytesIO(content) if content is not None else None)
    return path


DIR, FILE, LINK = tarfile.DIRTYPE, tarfile.REGTYPE, tarfile.SYMTYPE
HOSTILE: dict[str, Callable[[Path], Path]] = {
    "a member climbing out": lambda p: _archive(
        p, [("b", None, DIR), ("b/../../evil", b"x", FILE)]
    ),
    "an absolute member": lambda p: _archive(p, [("b", None, DIR), ("/tmp/evil", b"x", FILE)]),
    "a link": lambda p: _archive(p, [("b", None, DIR), ("b/l", None, LINK)]),
    "two top-level directories": lambda p: _archive(
        p, [("b", None, DIR), ("c", None, DIR), ("c/x", b"x", FILE)]
    ),
    "a file first": lambda p: _archive(p, [("b", b"x", FILE)]),
    "a name twice": lambda p: _archive(
        p, [("b", None, DIR), ("b/x", b"1", FILE), ("b/x", b"2", FILE)]
    ),
    "a file where a directory is named": lambda p: _archive(
        p, [("b", None, DIR), ("b/x", b"1", FILE), ("b/x/y", b"2", FILE)]
    ),
    "not a tar": lambda p: (p.write_bytes(b"PK\x03\x04 not a tar" * 40), p)[1],
    "an empty tar": lambda p: _archive(p, []),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_archive_is_refused_and_leaves_nothing(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = HOSTILE[case](tmp_path / "hostile.tar")
    into = tmp_path / "into"
    into.mkdir()
    assert main(["unpack", str(archive), "--into", str(into)]) == 2
    assert "not a bundle archive" in capsys.readouterr().err
    assert list(into.iterdir()) == []
    assert not (tmp_path / "evil").exists() and not Path("/tmp/evil").exists()
