"""Stage the wheels of a vLLM CUDA serving stack for an accelerator host with no package index.

The host is reached only by copies of at most a few tens of MiB each. This script, run where
pip reaches an index:

1. downloads, wheels only and without dependencies, every pin of `serve-wheels.txt` (installed
   into the host's serving environment), `tools-wheels.txt` (repro's own environment) and
   `spare-wheels.txt` (reinstalled where the host rewrote a file) for CPython 3.12 on
   manylinux x86_64;
2. checks each wheel against `wheels.lock` (groups, file name, size, sha256), or writes that
   lock with `--write-lock` the first time;
3. packs both wheelhouses with the lock into one deterministic tar (fixed order, owner, mode and
   time) and splits it into parts of at most `--part-mib` MiB, one folder per part (`p01/`,
   `p02/`, ...), each with `SHA256SUMS` of its part and the whole tar's sha256 in `TAR_SHA256`.

`install.sh` on the host joins the parts, checks the tar's sha256 and every wheel's against the
lock, and installs offline.

    python3 bench/gpu/stage.py --wheelhouse /tmp/wh --out /tmp/parts --part-mib 44
"""

from __future__ import annotations

import argparse
import hashlib
import io
import re
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GROUPS = ("serve", "tools", "spare")
LOCK = HERE / "wheels.lock"
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_35_x86_64",
)
MIB = 1 << 20


def pins(group: str) -> list[str]:
    lines = (HERE / f"{group}-wheels.txt").read_text("utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(MIB):
            digest.update(block)
    return digest.hexdigest()


def download(group: str, wheelhouse: Path) -> None:
    destination = wheelhouse
    destination.mkdir(parents=True, exist_ok=True)
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
        "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
        *platforms, "--dest", str(destination),
    ]  # fmt: skip
    names = [canonical(pin.split("==")[0]) for pin in pins(group)]
    if len(set(names)) == len(names):
        subprocess.run([*command, *pins(group)], check=True)
        return
    for pin in pins(group):  # pip takes one version of a name per run
        subprocess.run([*command, pin], check=True)


def wanted(group: str, wheel: str) -> bool:
    """Whether `wheel` (a file name) is one of the pins of `group`."""
    name, version = wheel.split("-")[:2]
    key = (canonical(name), version)
    return key in {(canonical(p.split("==")[0]), p.split("==")[1]) for p in pins(group)}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def listed(wheelhouse: Path) -> list[tuple[str, str, int, str]]:
    """(groups, file name, size, sha256) of every wheel, in a fixed order; a wheel both
    environments install is listed and carried once, its groups joined by a comma."""
    rows = []
    for wheel in sorted(wheelhouse.glob("*.whl")):
        groups = ",".join(g for g in GROUPS if wanted(g, wheel.name))
        if groups:
            rows.append((groups, wheel.name, wheel.stat().st_size, sha256(wheel)))
    return rows


def lock_text(rows: list[tuple[str, str, int, str]]) -> str:
    head = "# groups file size sha256: every wheel the accelerator host installs, checked there\n"
    return head + "".join(f"{g} {n} {s} {h}\n" for g, n, s, h in rows)


def check_lock(rows: list[tuple[str, str, int, str]], wheelhouse: Path) -> None:
    for group in GROUPS:
        count = sum(1 for row in rows if group in row[0].split(","))
        if count != len(pins(group)):
            sys.exit(f"{group}: {count} wheels for {len(pins(group))} pins in {wheelhouse}")
    if LOCK.read_text("utf-8") != lock_text(rows):
        sys.exit(f"the wheels in {wheelhouse} are not those {LOCK} names (--write-lock to renew)")


def pack(wheelhouse: Path, rows: list[tuple[str, str, int, str]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        members = [("wheels.lock", LOCK)] + [
            (f"wheels/{name}", wheelhouse / name) for _g, name, _s, _h in rows
        ]
        for name, path in members:
            info = tarfile.TarInfo(name)
            info.size = path.stat().st_size
            info.mode, info.mtime, info.uid, info.gid = 0o644, 0, 0, 0
            info.uname = info.gname = "root"
            with path.open("rb") as stream:
                tar.addfile(info, stream)
    return buffer.getvalue()


def split(data: bytes, out: Path, part_mib: int) -> None:
    size = part_mib * MIB
    whole = hashlib.sha256(data).hexdigest()
    count = (len(data) + size - 1) // size
    for index in range(count):
        folder = out / f"p{index + 1:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        part = data[index * size : (index + 1) * size]
        name = f"stage.tar.{index + 1:02d}"
        (folder / name).write_bytes(part)
        (folder / "SHA256SUMS").write_text(f"{hashlib.sha256(part).hexdigest()}  {name}\n")
        (folder / "TAR_SHA256").write_text(f"{whole}  stage.tar {count} parts\n")
    print(f"stage.tar: {len(data)} bytes ({len(data) / MIB:.1f} MiB), sha256 {whole}")
    print(f"{count} parts of at most {part_mib} MiB in {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheelhouse", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--part-mib", type=int, default=44)
    parser.add_argument("--write-lock", action="store_true")
    parser.add_argument("--no-download", action="store_true")
    args = parser.parse_args()
    if not args.no_download:
        for group in GROUPS:
            download(group, args.wheelhouse)
    rows = listed(args.wheelhouse)
    if args.write_lock:
        LOCK.write_text(lock_text(rows))
    check_lock(rows, args.wheelhouse)
    for group in GROUPS:
        mine = [row for row in rows if group in row[0].split(",")]
        total = sum(size for _g, _n, size, _h in mine)
        print(f"{group}: {len(mine)} wheels, {total / MIB:.1f} MiB")
    split(pack(args.wheelhouse, rows), args.out, args.part_mib)


if __name__ == "__main__":
    main()
