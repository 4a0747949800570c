"""A real Ray cluster of two nodes on this machine, started and stopped by the tests themselves.

Two `ray start` on loopback addresses of 127.0.0.0/8: the head on 127.0.0.1, a second node on
127.0.0.2, each with a custom temp directory of its own under /tmp (Ray's socket paths must stay
short), so that stopping them touches no other Ray on the machine. A node's environment may be
given (an injected LD_PRELOAD, say): its raylet and every worker it starts inherit it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from repro_serving.launch.server import free_port

RAY = Path(sys.executable).parent / "ray"
ADDRESSES = ("127.0.0.2", "127.0.0.3")
"""Rank 0's node, rank 1's. Not 127.0.0.1: Ray registers a node started on it under the host's
own interface address instead."""


@dataclass(frozen=True)
class LocalCluster:
    address: str
    """The head's GCS address, as RAY_ADDRESS takes it."""
    temp_dir: Path


def _ray(args: list[str], env: Mapping[str, str]) -> None:
    done = subprocess.run(
        [str(RAY), *args], env=dict(env), capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"ray {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}")


@contextlib.contextmanager
def two_nodes(node_env: Mapping[int, Mapping[str, str]] | None = None) -> Iterator[LocalCluster]:
    """A head on 127.0.0.1 (rank 0's node) and a node on 127.0.0.2 (rank 1's); `node_env[i]`
    is added to node i's environment. Every process of both is gone on the way out."""
    temp = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    base |= {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    common = ["--num-cpus=1", "--disable-usage-stats", f"--temp-dir={temp}"]
    extra = node_env or {}
    try:
        _ray(
            ["start", "--head", f"--node-ip-address={ADDRESSES[0]}", f"--port={port}",
             "--include-dashboard=false", *common],
            {**base, **extra.get(0, {})},
        )  # fmt: skip
        _ray(
            ["start", f"--address={ADDRESSES[0]}:{port}", f"--node-ip-address={ADDRESSES[1]}",
             *common],
            {**base, **extra.get(1, {})},
        )  # fmt: skip
        yield LocalCluster(f"{ADDRESSES[0]}:{port}", temp)
    finally:
        _stop(temp)


def ray_processes(temp: Path) -> list[psutil.Process]:
    """Every live process of the cluster under `temp`: those whose argv names it, and their
    descendants (Ray's agents rename themselves, their argv then names nothing)."""
    found: dict[int, psutil.Process] = {}
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(str(temp) in arg for arg in process.info["cmdline"] or ()):
                found[process.pid] = process
                found |= {child.pid: child for child in process.children(recursive=True)}
    return list(found.values())


def _stop(temp: Path) -> None:
    """SIGTERM every process of the cluster, SIGKILL what outlives 15 s, and prove none left."""
    processes = ray_processes(temp)
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(processes, timeout=15)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=10)
    deadline = time.monotonic() + 10
    while ray_processes(temp) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = ray_processes(temp)
    assert not left, f"Ray processes outlived the cluster: {[p.pid for p in left]}"
