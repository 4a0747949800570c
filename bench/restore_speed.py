"""How long `repro restore` takes to make the serving environment, against the script it replaced.

One invocation, on this machine, each into its own empty temporary directory:

1. the peer: the procedure `scripts/setup-serve.sh` followed before restore existed (`python -m
   venv`, then `pip install --no-deps --only-binary=:all: -r requirements/serve.txt`), which
   checks no hash and proves nothing about what it installed;
2. `repro restore repro/tiny-cpu --key keys/example.pub --anchor DIR/manifests`: the bundle
   verified offline, every locked wheel fetched through pip's configured index and checked by
   sha256, installed in hash-checking mode, relocated, every RECORD hash checked, renamed into
   place; the tiny model regenerated and checked;
3. its installer alone, on the same already-fetched wheels: pip (`--require-hashes --no-deps
   --no-index`, what restore runs) against uv (`uv pip install` with the same flags), to say
   which one serves better; uv is installed into a scratch venv for this and nowhere else.

The page cache is warm for every row (the wheels are read once before). The result is printed and
written as JSON with the machine. Usage: .venv/bin/python bench/restore_speed.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import machine  # noqa: E402
from repro_serving.builder.documents.lock import Lock  # noqa: E402
from repro_serving.builder.observe.artifacts import download, requirement_lines  # noqa: E402

BUNDLE = REPO_ROOT / "repro" / "tiny-cpu"
PUBLIC = REPO_ROOT / "keys" / "example.pub"
SERVE_REQUIREMENTS = REPO_ROOT / "requirements" / "serve.txt"
RESULT = REPO_ROOT / "bench" / "results" / "restore_speed.json"
PYTHON = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"


def timed(command: list[str], **kwargs: Any) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, **kwargs)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=RESULT)
    args = parser.parse_args()
    lock = Lock.from_bytes((BUNDLE / "lock.json").read_bytes(), where=str(BUNDLE / "lock.json"))
    rows: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="repro-bench-restore-") as scratch:
        root = Path(scratch)
        wheels = root / "wheels"
        requirements = [f"{a.name}=={a.version}" for _, a in sorted(lock.python.artifacts.items())]
        print("warming the page cache: fetching every locked wheel once", flush=True)
        fetch_start = time.perf_counter()
        download(PYTHON, requirements, wheels)
        rows["fetch the locked wheels (pip download)"] = time.perf_counter() - fetch_start

        print("peer: python -m venv + pip install -r requirements/serve.txt", flush=True)
        peer = root / "peer"
        rows["peer: setup-serve (venv + pip install -r serve.txt)"] = timed(
            [str(PYTHON), "-m", "venv", str(peer)]
        ) + timed(
            [
                str(peer / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
                "--only-binary=:all:", "-r", str(SERVE_REQUIREMENTS),
            ]
        )  # fmt: skip

        print("repro restore repro/tiny-cpu", flush=True)
        anchor = root / "restored" / "manifests"
        anchor.mkdir(parents=True)
        rows["repro restore (verify, fetch, check, install, RECORD, model)"] = timed(
            [
                str(REPO_ROOT / ".venv" / "bin" / "repro"), "restore", str(BUNDLE),
                "--key", str(PUBLIC), "--anchor", str(anchor), "--json",
            ]
        )  # fmt: skip

        hashed = root / "hashed.txt"
        hashed.write_text("".join(f"{line}\n" for line in requirement_lines(lock.python.artifacts)))
        install = [
            "--no-deps", "--no-index", "--require-hashes", "--find-links", str(wheels),
            "-r", str(hashed),
        ]  # fmt: skip
        print("installer alone: pip", flush=True)
        by_pip = root / "by-pip"
        subprocess.run([str(PYTHON), "-m", "venv", "--without-pip", str(by_pip)], check=True)
        rows["install only: pip --require-hashes (restore's installer)"] = timed(
            [
                sys.executable, "-m", "pip", "--python", str(by_pip / "bin" / "python"),
                "install", "--quiet", "--no-compile", "--only-binary=:all:", *install,
            ]
        )  # fmt: skip

        print("installer alone: uv", flush=True)
        tools = root / "tools"
        subprocess.run([str(PYTHON), "-m", "venv", str(tools)], check=True)
        subprocess.run(
            [str(tools / "bin" / "pip"), "install", "--quiet", "uv"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        version = subprocess.run(
            [str(tools / "bin" / "uv"), "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()
        by_uv = root / "by-uv"
        subprocess.run([str(PYTHON), "-m", "venv", "--without-pip", str(by_uv)], check=True)
        rows[f"install only: {version} pip install --require-hashes"] = timed(
            [
                str(tools / "bin" / "uv"), "pip", "install", "--quiet",
                "--python", str(by_uv / "bin" / "python"), "--link-mode", "copy", *install,
            ],
            env={**os.environ, "UV_CACHE_DIR": str(root / "uv-cache")},
        )  # fmt: skip
        sizes = sum(p.stat().st_size for p in wheels.glob("*.whl"))
        shutil.rmtree(wheels)

    result = {
        "machine": machine(),
        "bundle": str(BUNDLE.relative_to(REPO_ROOT)),
        "wheels": len(lock.python.artifacts),
        "wheel_bytes": sizes,
        "seconds": rows,
    }
    width = max(len(name) for name in rows)
    print(f"\n{result['machine']}: {len(lock.python.artifacts)} wheels, {sizes / 1e9:.2f} GB")
    for name, seconds in rows.items():
        print(f"  {name:<{width}}  {seconds:7.1f} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
