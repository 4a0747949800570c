"""Make a copy of a ready-made virtual environment clean, as repro's RECORD checks judge one.

    VENV/bin/python cleanvenv.py VENV WHEELHOUSE

A host's environment may carry files no distribution's RECORD lists (a `.pth` file the host
adds, a helper module its venv tool writes) and files a host rewrote (a CA bundle). In a copy of
it, for a serving venv of its own: every file of site-packages that no RECORD lists is removed
(`__pycache__` bytecode aside), and every distribution with a file that differs from its RECORD
is named with the wheel of its exact version found in WHEELHOUSE, printed one a line as
`REINSTALL path`, for pip to reinstall; a distribution with no such wheel is printed as
`NO WHEEL name version` and the exit code is 1. Standard library only: it runs with the venv's
own interpreter before anything is installed into it.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import re
import sys
import sysconfig
from pathlib import Path


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def digest(path: Path) -> str:
    raw = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def main() -> int:
    venv, wheelhouse = Path(sys.argv[1]), Path(sys.argv[2])
    site = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    owned: set[Path] = set()
    changed: dict[str, str] = {}
    for record in sorted(site.glob("*.dist-info/RECORD")):
        meta = (record.parent / "METADATA").read_text("utf-8", errors="replace")
        name = re.search(r"^Name: (.+)$", meta, re.M)
        version = re.search(r"^Version: (.+)$", meta, re.M)
        named = name.group(1).strip() if name else "?"
        key = f"{named} {version.group(1).strip() if version else '?'}"
        for row in csv.reader(record.read_text("utf-8").splitlines()):
            if not row:
                continue
            path = (site / row[0]).resolve()
            owned.add(path)
            hashed = len(row) > 1 and row[1] and not row[0].endswith(".pyc")
            if hashed and (not path.is_file() or digest(path) != row[1]):
                changed[key] = row[0]
    removed = 0
    for path in sorted(site.rglob("*")):
        if path.is_file() and path.resolve() not in owned and "__pycache__" not in path.parts:
            print(f"REMOVE {path.relative_to(site)}")
            path.unlink()
            removed += 1
    status = 0
    wheels = {
        (canonical(w.name.split("-")[0]), w.name.split("-")[1]): w for w in wheelhouse.glob("*.whl")
    }
    for key, example in sorted(changed.items()):
        name, version = key.split(" ")
        wheel = wheels.get((canonical(name), version))
        if wheel is None:
            print(f"NO WHEEL {name} {version} (changed: {example})")
            status = 1
        else:
            print(f"REINSTALL {wheel}")
    print(
        f"removed {removed} unowned file(s); {len(changed)} distribution(s) changed",
        file=sys.stderr,
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
