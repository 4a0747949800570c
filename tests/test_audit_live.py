"""`repro audit` on the real vLLM CPU server of the embedded default.

The whole tree (API server, resource tracker, EngineCore, Worker) and its ~150 ELF objects must
be explained by the loader emulation under the manifest's policy; the same stack without the
manifest shows vLLM's own LD_PRELOAD; a library injected with LD_PRELOAD into a server started
as `python` on PATH (this module's one server of its own) is refused by name, with its
variable, with the manifest and without. `test_audit_pyenv.py` compares the server started by
full path and on PATH.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SERVE_VENV, TINY_MANIFEST, TinyServer, tiny_server_spec
from schemas import assert_valid

from repro_serving.builder.cli import main
from repro_serving.builder.native.dispatch import predict
from repro_serving.builder.native.kernels import KernelSet, dispatches
from repro_serving.builder.observe.host import observe_host
from repro_serving.launch import server as lifecycle

pytestmark = pytest.mark.server

RULES = {"executable", "startup", "preload", "dlopen", "dependency"}
ROLES = ["api_server", "engine_core", "resource_tracker", "worker"]


def audit_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["audit", *args, "--json"])
    document: dict[str, Any] = assert_valid("audit", capsys.readouterr().out)
    return code, document


def test_every_mapping_of_every_process_is_explained_under_the_manifest(
    tiny_server: TinyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = audit_json(
        capsys, "--port", str(tiny_server.port), "--manifest", str(TINY_MANIFEST)
    )
    assert report["drifts"] == []
    assert code == 0
    assert report["version"] == 1
    assert sorted(p["role"] for p in report["processes"]) == ROLES
    assert 100 <= report["files"] <= 250
    for process in report["processes"]:
        assert process["error"] is None
        for obj in process["objects"]:
            assert obj["rule"] in RULES, obj
            assert obj["reason"], obj
        paths = [o["path"] for o in process["objects"]]
        assert len(paths) == len(set(paths)), "each file once per process"
    worker = next(p for p in report["processes"] if p["role"] == "worker")
    assert len(worker["objects"]) >= 100
    kernels = _selected_kernels().replace(".", "/")
    c_ext = next(o for o in worker["objects"] if o["path"].endswith(f"/{kernels}.abi3.so"))
    assert c_ext["rule"] == "dlopen"
    libc10 = next(o for o in worker["objects"] if o["path"].endswith("/torch/lib/libc10.so"))
    assert libc10["rule"] == "dependency"


def test_without_the_manifest_vllms_own_preload_of_libgomp_is_reported(
    tiny_server: TinyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = audit_json(capsys, "--pid", str(tiny_server.pid))
    assert code == 1
    kinds = {d["kind"] for d in report["drifts"]}
    assert kinds == {"forbidden-env", "unexpected-mapping"}
    for drift in report["drifts"]:
        assert "torch/lib/libgomp.so.1" in drift["observed"], drift
    preloading = {d["subject"].split(" ")[2].strip("():") for d in report["drifts"]}
    assert preloading <= {"resource_tracker", "engine_core", "worker"}
    assert "api_server" not in preloading, "vLLM sets LD_PRELOAD for the processes it spawns"


def test_a_declared_module_no_process_maps_is_drift(
    tiny_server: TinyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vllm._C` is accepted as the variant the cpu set selects on this host; a module nobody
    maps is drift."""
    code, report = audit_json(
        capsys,
        "--pid", str(tiny_server.pid),
        "--kernel-set", "cpu",
        "--module", "vllm._C",
        "--module", "vllm._no_such_kernels",
        "--allow-preload", _libgomp(),
    )  # fmt: skip
    assert code == 1
    (drift,) = report["drifts"]
    assert drift["kind"] == "not-mapped"
    assert drift["subject"] == "vllm._no_such_kernels"


def _selected_kernels() -> str:
    """The vLLM kernel library the cpu kernel set predicts for this host's CPU."""
    rule = dispatches([KernelSet.load("cpu")])["vllm._C"][1]
    variant = predict(rule, observe_host().capabilities()).variant
    assert variant is not None
    return variant


def test_declared_roles_other_than_the_live_tree_are_drift(
    tiny_server: TinyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = audit_json(
        capsys,
        "--pid", str(tiny_server.pid),
        "--role", "api_server=1", "--role", "engine_core=1", "--role", "worker=2",
        "--role", "resource_tracker=1",
        "--allow-preload", _libgomp(),
    )  # fmt: skip
    assert code == 1
    (drift,) = report["drifts"]
    assert (drift["kind"], drift["subject"], drift["expected"], drift["observed"]) == (
        "process-roles", "role worker", "2", "1",
    )  # fmt: skip


def _libgomp() -> str:
    """Torch's libgomp, which vLLM's CPU platform puts in LD_PRELOAD for what it spawns."""
    (site,) = (SERVE_VENV / "lib").glob("python3.*/site-packages")
    return str(site / "torch" / "lib" / "libgomp.so.1")


@pytest.fixture(scope="module")
def injected_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("injected")
    source = directory / "injected.c"
    source.write_text("int repro_injected_marker(void) { return 42; }\n")
    library = directory / "libinjected.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


@pytest.fixture(scope="module")
def preloaded_server(
    tiny_server: TinyServer, injected_library: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[lifecycle.RunningServer]:
    """The server started as `python` on PATH with a library of nobody's in LD_PRELOAD."""
    workdir = tmp_path_factory.mktemp("preloaded-server")
    spec = tiny_server_spec(tiny_server.model_dir, lifecycle.free_port(), workdir)
    spec = dataclasses.replace(spec, env={**spec.env, "LD_PRELOAD": str(injected_library)})
    spec = dataclasses.replace(spec, argv=("python", *spec.argv[1:]))  # found on PATH
    with lifecycle.serving(spec) as running:
        yield running


def by_kind(report: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    kinds: dict[str, list[dict[str, str]]] = {}
    for drift in report["drifts"]:
        kinds.setdefault(drift["kind"], []).append(drift)
    return kinds


def test_a_library_injected_with_ld_preload_is_refused_by_name(
    preloaded_server: lifecycle.RunningServer,
    injected_library: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, report = audit_json(
        capsys, "--port", str(preloaded_server.port), "--manifest", str(TINY_MANIFEST)
    )
    assert code == 1
    injected = str(injected_library)
    kinds = by_kind(report)
    assert set(kinds) == {"forbidden-env", "unexpected-mapping"}
    api = [d for d in kinds["forbidden-env"] if "(api_server)" in d["subject"]]
    assert api and api[0]["observed"] == f"LD_PRELOAD={injected}"
    mapped = {d["subject"].split(": ", 1)[1] for d in kinds["unexpected-mapping"]}
    assert mapped == {injected}
    assert all(injected in d["observed"] for d in report["drifts"])


def test_without_the_manifest_the_injected_library_and_its_variable_are_all_it_finds(
    preloaded_server: lifecycle.RunningServer,
    injected_library: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, report = audit_json(
        capsys, "--pid", str(preloaded_server.pid), "--allow-preload", _libgomp()
    )
    assert code == 1
    injected = str(injected_library)
    kinds = by_kind(report)
    assert set(kinds) == {"forbidden-env", "unexpected-mapping"}
    assert {d["subject"].split(": ", 1)[1] for d in kinds["forbidden-env"]} == {"LD_PRELOAD"}
    assert all(d["observed"].startswith(f"LD_PRELOAD={injected}") for d in kinds["forbidden-env"])
    assert {d["subject"].split(": ", 1)[1] for d in kinds["unexpected-mapping"]} == {injected}
    roles = {d["subject"].split(" ")[2].strip("():") for d in report["drifts"]}
    assert roles == set(ROLES), "every process, the API server's LD_PRELOAD inherited by all"
