"""Where `repro verify` spends its time before and while it verifies, for this checkout and, in
the same run, for another revision of repro (`--against REV`, checked out beside).

For each revision, every round a fresh interpreter (bytecode written by an unmeasured warm-up):

- imports: the modules `repro verify` loads (`builder.cli` and `builder.commands.verify`, which
  imports the verifier), timed from the interpreter's start of the script to their end;
- pydantic model classes: how many were built during those imports and the time spent inside
  pydantic's model metaclass building them (the outermost class of a nested build counted once);
- verify: `main(["verify", BUNDLE, "--key", PUB])` in the same process, after the imports;
- wall: the whole `repro verify BUNDLE --key PUB` command line, as a user runs it.

Each figure is the median of `--rounds`. The result, with the machine, is printed and written to
`bench/results/startup.json` (`--json FILE` for elsewhere).

Usage: .venv/bin/python bench/startup.py [--against REV] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import describe, machine  # noqa: E402

RESULT = REPO_ROOT / "bench" / "results" / "startup.json"
BUNDLE = Path("repro") / "tiny-cpu"
PUBLIC = Path("keys") / "example.pub"

# Run in a fresh interpreter from a checkout's root: prints one JSON line of seconds.
PROBE = r"""
import contextlib, io, json, sys, time
start = time.perf_counter()
import pydantic._internal._model_construction as construction
built = {"seconds": 0.0, "count": 0, "depth": 0}
original = construction.ModelMetaclass.__new__
def timed(mcs, *args, **kwargs):
    built["depth"] += 1
    began = time.perf_counter()
    try:
        return original(mcs, *args, **kwargs)
    finally:
        built["depth"] -= 1
        if built["depth"] == 0:
            built["seconds"] += time.perf_counter() - began
            built["count"] += 1
construction.ModelMetaclass.__new__ = timed
from repro_serving.builder.cli import main
import repro_serving.builder.commands.verify
imported = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["verify", sys.argv[1], "--key", sys.argv[2]])
done = time.perf_counter()
print(json.dumps({"code": code, "imports_s": imported - start, "models_s": built["seconds"],
                  "models": built["count"], "verify_s": done - imported}))
"""


def probe(root: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(BUNDLE), str(PUBLIC)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if figures["code"] != 0:
        raise SystemExit(f"repro verify exited {figures['code']} in {root}: {done.stderr[-400:]}")
    return figures


def wall(root: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    command = [sys.executable, "-m", "repro_serving", "verify", str(BUNDLE), "--key", str(PUBLIC)]
    began = time.perf_counter()
    subprocess.run(command, cwd=root, env=env, capture_output=True, check=True)
    return time.perf_counter() - began


def measure(root: Path, rounds: int) -> dict[str, Any]:
    probe(root)  # the warm-up: bytecode written, page cache warm
    wall(root)
    runs = [probe(root) for _ in range(rounds)]
    walls = [wall(root) for _ in range(rounds)]
    return {
        "imports_s": statistics.median(r["imports_s"] for r in runs),
        "models_s": statistics.median(r["models_s"] for r in runs),
        "models": runs[0]["models"],
        "verify_s": statistics.median(r["verify_s"] for r in runs),
        "wall_s": statistics.median(walls),
    }


def revision(root: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    )
    dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD"], check=False)
    return done.stdout.strip() + ("+changes" if dirty.returncode else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--against", help="another revision, measured in the same run")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path, default=RESULT)
    args = parser.parse_args()
    results = {revision(REPO_ROOT): measure(REPO_ROOT, args.rounds)}
    if args.against:
        with tempfile.TemporaryDirectory(prefix="repro-startup-") as tmp:
            other = Path(tmp) / "checkout"
            subprocess.run(
                ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", "-q", str(other),
                 args.against],
                check=True,
            )  # fmt: skip
            try:
                results[revision(other)] = measure(other, args.rounds)
            finally:
                subprocess.run(
                    ["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(other)],
                    check=True,
                )
    print(describe(machine()))
    print(f"{'revision':<22} {'imports':>9} {'models':>14} {'verify':>9} {'wall':>9}")
    for name, figures in results.items():
        built = f"{figures['models_s']:.3f} ({figures['models']})"
        print(
            f"{name:<22} {figures['imports_s']:>8.3f}s {built:>13}s"
            f" {figures['verify_s']:>8.3f}s {figures['wall_s']:>8.3f}s"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    document = {"machine": machine(), "rounds": args.rounds, "revisions": results}
    args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
