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
) -> ServerSpec:
    """The start of `profile`; `port` and `models` (role → directory) replace the manifest's."""
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
        **{name: expand(value, values) for name, value in launch.env_for(profile).items()},
    }
    from repro_serving.launch.server import ServerSpec

    return ServerSpec(
        argv=tuple(expand(arg, values) for arg in launch.argv_for(profile)),
        env=env,
        port=int(values["port"]),
        log_path=workdir / LOG_FILE,
        # A fresh directory: vLLM's children inherit an LD_LIBRARY_PATH ending in ':' (cv2 sets
        # it), so the loader searches their working directory; it must hold nothing.
        cwd=workdir / "cwd",
        readiness_path=launch.readiness.path,
        ready_timeout_s=launch.start_timeout_s,
        stop_timeout_s=launch.stop_timeout_s,
    )
