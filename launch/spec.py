"""From a manifest's `[launch]` to the exact argv and environment of a server start.

The manifest owns the launch; this module only expands its placeholders for one profile on
this host. The environment is whole, never inherited: the venv's `bin` and the system's on
PATH, a private HOME under the run directory and a private short TMPDIR, then the manifest's
variables.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from repro_serving.builder.manifest import Manifest, expand
from repro_serving.builder.observe.python import path_values
from repro_serving.launch.rundir import LOG_FILE

if TYPE_CHECKING:  # `repro verify` reads RUN_PRIVATE_ENV only: no process handling for it
    from repro_serving.launch.server import ServerSpec

RUN_PRIVATE_ENV: Final = frozenset({"PATH", "HOME", "TMPDIR"})
"""What a start's environment holds of its own beside the manifest's variables."""


def server_spec(
    manifest: Manifest,
    profile: str,
    workdir: Path,
    *,
    port: int | None = None,
    models: Mapping[str, Path] | None = None,
    rank: int = 0,
) -> ServerSpec:
    """The start of `profile` on node `rank` (a manifest of one node has rank 0 alone); `port`
    and `models` (role → directory) replace the manifest's. A rank other than 0 serves no HTTP:
    it has no readiness probe, rank 0's readiness is the stack's."""
    launch = manifest.launch
    values = {
        **path_values(manifest),
        **{f"model.{role}": str(path) for role, path in (models or {}).items()},
        "port": str(port or launch.port),
    }
    home, cwd = workdir / "home", workdir / "cwd"
    for directory in (home, cwd):
        directory.mkdir(parents=True, exist_ok=True)
    # vLLM binds ZeroMQ IPC sockets under TMPDIR and a socket path holds at most 107 bytes, so
    # the private TMPDIR is a short one of its own, never a deep run directory.
    tmp = Path(tempfile.mkdtemp(prefix="repro-run-", dir="/tmp"))
    env = {
        "PATH": f"{values['venv']}/bin:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(tmp),
        **{name: expand(value, values) for name, value in manifest.node_env(rank, profile).items()},
    }
    from repro_serving.launch.server import ServerSpec

    return ServerSpec(
        argv=tuple(expand(arg, values) for arg in manifest.node_argv(rank, profile)),
        env=env,
        port=int(values["port"]),
        log_path=workdir / LOG_FILE,
        # Served across nodes, rank 0 answers on its node's address (the suite is asked there).
        host=manifest.declared_nodes[0].address if manifest.clustered else "127.0.0.1",
        # A fresh directory: vLLM's children inherit an LD_LIBRARY_PATH ending in ':' (cv2 sets
        # it), so the loader searches their working directory; it must hold nothing.
        cwd=workdir / "cwd",
        readiness_path=launch.readiness.path if rank == 0 else None,
        ready_timeout_s=launch.start_timeout_s,
        stop_timeout_s=launch.stop_timeout_s,
    )
