"""From a manifest's `[launch]` to the exact argv and environment of a server start.

The manifest owns the launch; this module only expands its placeholders for one profile on
this host. The environment is whole, never inherited: the venv's `bin` and the system's on
PATH, a private HOME under the run directory and a private short TMPDIR, then the manifest's
variables.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping
from pathlib import Path

from repro_serving.builder.documents.manifest import Manifest, expand
from repro_serving.builder.documents.rundir import LOG_FILE
from repro_serving.builder.placeholders import path_values


@dataclasses.dataclass(frozen=True)
class ServerSpec:
    """Exactly what to start and how to judge it; `env` is the whole environment of the server."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    port: int
    log_path: Path
    host: str = "127.0.0.1"
    cwd: Path | None = None
    readiness_path: str | None = "/v1/models"
    """None: the process serves no HTTP (a headless rank): started is all it can be, and it
    holds no port to check free before or after."""
    ready_timeout_s: float = 180.0
    poll_interval_s: float = 0.5
    stop_timeout_s: float = 30.0
    port_release_timeout_s: float = 10.0

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


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
