"""What `repro run` adds to a run of the embedded default's tiny suite.

Two numbers, on this machine, in one invocation:

1. time to ready: from invoking `repro run` to its first server answering, against starting the
   very same argv and environment by hand (a subprocess in its own session, `/health` polled
   every 0.1 s) just before and just after, as a ratio to the mean of the two (a shared host's
   load drifts; the load average is printed beside);
2. repro's own time: the wall time of the whole `repro run` (every fresh start the manifest
   asks for) minus the time its servers took to become ready and to answer the suite, i.e.
   interpreter start, preflight, live audit, /metrics reads, teardown, gates and evidence; as
   a share of the whole run, and without teardown (stopping a server is owed by hand too).
   The target is under 5%.

Usage: .venv/bin/python bench/run_overhead.py [--profile teacher]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import describe, machine  # noqa: E402
from repro_serving.builder import tinymodel  # noqa: E402
from repro_serving.builder.documents.manifest import Manifest  # noqa: E402
from repro_serving.launch import server as lifecycle  # noqa: E402
from repro_serving.launch.spec import server_spec  # noqa: E402

MANIFEST = REPO_ROOT / "manifests" / "tiny-cpu.toml"
HAND_POLL_S = 0.1
TARGET_SHARE = 0.05


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def start_by_hand(manifest: Manifest, profile: str, workdir: Path) -> float:
    """Seconds from Popen to HTTP 200 on the readiness path; then the group is stopped."""
    spec = server_spec(manifest, profile, workdir, port=lifecycle.free_port())
    url = spec.base_url + spec.readiness_path
    began = time.monotonic()
    with spec.log_path.open("wb") as log:
        process = subprocess.Popen(
            spec.argv,
            env=dict(spec.env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        with httpx.Client(trust_env=False, timeout=5.0) as client:
            while True:
                try:
                    if client.get(url).status_code == httpx.codes.OK:
                        return time.monotonic() - began
                except httpx.TransportError:
                    pass
                if process.poll() is not None:
                    raise SystemExit(f"the server exited; see {spec.log_path}")
                time.sleep(HAND_POLL_S)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
        while lifecycle.living(lifecycle.tree_members(process.pid)):
            time.sleep(0.1)


def run_repro(profile: str, run_dir: Path) -> tuple[float, float, dict[str, Any]]:
    """(invocation monotonic time, wall seconds, summary) of one `repro run`."""
    argv = [str(REPO_ROOT / ".venv" / "bin" / "repro"), "run", str(MANIFEST)]
    argv += ["--profile", profile, "--run-dir", str(run_dir), "--json"]
    argv += ["--port", str(lifecycle.free_port())]
    began = time.monotonic()
    finished = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.monotonic() - began
    if finished.returncode != 0:
        raise SystemExit(f"repro run exited {finished.returncode}:\n{finished.stderr}")
    summary: dict[str, Any] = json.loads(finished.stdout)
    return began, wall, summary


def phase(summary: dict[str, Any], name: str) -> float:
    return sum(float(start["phases_s"].get(name, 0.0)) for start in summary["starts"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="teacher")
    args = parser.parse_args()
    manifest = Manifest.from_path(MANIFEST)
    for model in manifest.models:
        tinymodel.generate(model.directory(manifest.resolve(".")))
    workdir = Path(tempfile.mkdtemp(prefix="repro-bench-"))
    print(f"machine: {describe(machine())}")
    print(f"load average before: {load()}")
    hand_before = start_by_hand(manifest, args.profile, workdir / "by-hand-before")
    invoked, wall, summary = run_repro(args.profile, workdir / "run")
    hand_after = start_by_hand(manifest, args.profile, workdir / "by-hand-after")
    print(f"load average after: {load()}")
    hand = (hand_before + hand_after) / 2
    first = summary["starts"][0]
    repro_ready = float(first["ready_at_monotonic"]) - invoked
    served = phase(summary, "start") + phase(summary, "suite")
    own = wall - served
    print(f"profile {args.profile}: {len(summary['starts'])} fresh start(s); evidence {workdir}")
    print(
        f"time to ready: by hand {hand_before:.2f} s before and {hand_after:.2f} s after, "
        f"through repro {repro_ready:.2f} s (ratio to their mean {repro_ready / hand:.3f})"
    )
    print(
        f"repro's own time: {own:.2f} s of a {wall:.2f} s run = {own / wall:.1%} "
        f"(target < {TARGET_SHARE:.0%})"
    )
    breakdown = {name: phase(summary, name) for name in ("audit", "metrics", "teardown")}
    rest = own - sum(breakdown.values())
    shown = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in breakdown.items())
    print(f"  of which: {shown}, interpreter start, preflight, gates and evidence {rest:.2f} s")
    without = own - breakdown["teardown"]
    print(f"  without teardown: {without:.2f} s = {without / wall:.1%}")
    print(f"  server start {phase(summary, 'start'):.2f} s, suite {phase(summary, 'suite'):.2f} s")


if __name__ == "__main__":
    main()
