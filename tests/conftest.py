"""Shared fixtures.

`tiny_server`: one real vLLM CPU server on the tiny model of the embedded default, started once
per test session from `.venv-serve` (made by `make serve-env`, a `repro restore` of the committed
bundle) and torn down, with proof, at the end. `tiny_server_spec`: how that server is started,
for tests that start their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro_serving.builder import tinymodel
from repro_serving.builder.documents.manifest import Manifest
from repro_serving.launch import server as lifecycle
from repro_serving.launch.spec import ServerSpec, server_spec

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVE_VENV = REPO_ROOT / ".venv-serve"
TINY_MANIFEST = REPO_ROOT / "manifests" / "tiny-cpu.toml"
TINY_MODEL_NAME = "tiny"


@dataclass(frozen=True)
class TinyServer:
    """A ready tiny-model server: where it answers, its group leader, its log and its model."""

    base_url: str
    pid: int
    port: int
    log_path: Path
    model_dir: Path
    model_name: str


TinyServerSpec = Callable[[Path, int, Path], ServerSpec]


def tiny_server_spec(model_dir: Path, port: int, workdir: Path) -> ServerSpec:
    """The embedded default's candidate start, exactly as `manifests/tiny-cpu.toml` declares it,
    on another model directory, port and run directory."""
    return server_spec(
        Manifest.from_path(TINY_MANIFEST),
        "candidate",
        workdir,
        port=port,
        models={"target": model_dir},
    )


def _require_serving_env() -> None:
    """A missing serving environment fails: a skip would hide that no real server ran.
    `make test` builds it; deselect with `-m "not server"` to run without it."""
    if not (SERVE_VENV / "bin" / "python").is_file():
        pytest.fail(f"no serving environment at {SERVE_VENV}: run `make serve-env`")


@pytest.fixture
def tiny_server_spec_factory() -> TinyServerSpec:
    _require_serving_env()
    return tiny_server_spec


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyServer]:
    _require_serving_env()
    workdir = tmp_path_factory.mktemp("tiny-server")
    model_dir = workdir / "model"
    tinymodel.generate(model_dir)
    spec = tiny_server_spec(model_dir, lifecycle.free_port(), workdir)
    with lifecycle.serving(spec) as running:
        yield TinyServer(
            base_url=running.base_url,
            pid=running.pid,
            port=running.port,
            log_path=running.log_path,
            model_dir=model_dir,
            model_name=TINY_MODEL_NAME,
        )
