"""Shared fixtures.

`tiny_server`: one real vLLM CPU server on the tiny model of the embedded default, started once
per test session from `.venv-serve` (created by `scripts/setup-serve.sh`) and torn down, with
proof, at the end. `tiny_server_spec`: how that server is started, for tests that start their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from builder import tinymodel
from launch import server as lifecycle

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVE_VENV = REPO_ROOT / ".venv-serve"
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


TinyServerSpec = Callable[[Path, int, Path], lifecycle.ServerSpec]


def tiny_server_spec(model_dir: Path, port: int, workdir: Path) -> lifecycle.ServerSpec:
    """The tiny model's server: argv and the whole environment; its log and scratch in `workdir`.

    Float32 (bfloat16 kills the worker with SIGILL on these CPUs), eager mode (no compile
    step), a 1 GiB KV cache, nothing fetched from the network. Prefix caching keeps vLLM's
    default (on); the oracle's prompts are shorter than one 128-token block, so nothing is reused.
    """
    python = SERVE_VENV / "bin" / "python"
    (workdir / "home").mkdir(parents=True, exist_ok=True)
    (workdir / "tmp").mkdir(parents=True, exist_ok=True)
    argv = (
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", TINY_MODEL_NAME,
        "--dtype", "float32",
        "--max-model-len", "2048",
        "--enforce-eager",
        "--enable-prompt-tokens-details",
        "--seed", "0",
        "--host", "127.0.0.1",
        "--port", str(port),
    )  # fmt: skip
    env = {
        "PATH": f"{SERVE_VENV / 'bin'}:/usr/bin:/bin",
        "HOME": str(workdir / "home"),
        "TMPDIR": str(workdir / "tmp"),
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
    }
    return lifecycle.ServerSpec(
        argv=argv, env=env, port=port, log_path=workdir / "server.log", ready_timeout_s=240.0
    )


def _require_serving_env() -> None:
    if not (SERVE_VENV / "bin" / "python").is_file():
        pytest.skip(f"no serving environment at {SERVE_VENV}: run scripts/setup-serve.sh")


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
