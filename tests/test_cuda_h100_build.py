"""A real teacher run of vLLM 0.26.0 on CUDA, as `repro build` of manifests/tiny-cuda.toml left it.

`tests/evidence/cuda-h100-build/` is the run directory (`--run-dir`, the start's private HOME and
working directory left out) of that build at 50e23c0 on an NVIDIA H100 (PCI 10de:2330, driver
580.159.04, compute capability 9.0) reached with no package index, staged and installed by
bench/gpu (docs/gpu.md): two fresh starts of the tiny model in float16 with CUDA graphs and
torch.compile, each audited live with no drift, every gate passing; `build.log` is its output.
The build then refused to seal, because the staged bundle's verify judged that run otherwise
than the live audit had:

- the API server imports opencv, whose cv2 prepends its own lib64 to LD_LIBRARY_PATH; its
  children (EngineCore, the resource tracker) inherit that, and verify held every process to
  run.json's value. One rule now judges a process's environment live and sealed alike
  (`rules.environment_drifts`): a child may change the loader's path and preload, whose every
  entry the audit judges by content;
- start 2 "maps other files": its Triton launchers and compiled graphs lie under its own HOME,
  in a compile cache whose key holds that HOME. They are claimed by JIT place, name and bytes
  (`claims.mapped_claims`), not by path.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from repro_serving.builder.claims import environments_claim, mapped_claims
from repro_serving.builder.documents.audit import AuditDocument, ProcessEvidence
from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.documents.observations import ObservationsDocument
from repro_serving.builder.documents.rundir import RUN_PRIVATE_ENV
from repro_serving.builder.drift import DriftKind
from repro_serving.builder.native.kernels import KernelSet
from repro_serving.builder.native.rules import Launched, env_drifts, environment_drifts
from repro_serving.builder.native.sealedaudit import manifest_policy, rejudge

RUN = Path(__file__).resolve().parent / "evidence" / "cuda-h100-build"
LOCK = Path(__file__).resolve().parents[1] / "bench" / "gpu" / "wheels.lock"
MANIFEST = Path(__file__).resolve().parents[1] / "manifests" / "tiny-cuda.toml"
STARTS = (1, 2)
ROLES = ("api_server", "engine_core", "resource_tracker")
LAUNCHER = "__triton_launcher.cpython-312-x86_64-linux-gnu.so"


def observations() -> ObservationsDocument:
    path = RUN / "observations.json"
    return ObservationsDocument.from_bytes(path.read_bytes(), where=str(path))


def test_the_observations_of_a_gpu_host_read_back_with_their_accelerator() -> None:
    host = observations().host
    (gpu,) = host.accelerators
    assert (gpu.vendor_device, gpu.vendor_name, gpu.driver) == ("10de:2330", "NVIDIA", "nvidia")
    assert gpu.driver_version == "580.159.04"
    assert host.arch == "x86_64" and host.cpu_count == 16


def test_the_serving_venv_checked_whole_against_its_records() -> None:
    python = observations().python
    assert python is not None and python.version.startswith("3.12.")
    assert python.records is not None and python.unowned == ()
    assert all(check.mismatches == () for check in python.records)
    versions = {d.name: d.version for d in python.distributions}
    assert (versions["vllm"], versions["torch"]) == ("0.26.0", "2.11.0")


def test_vllm_is_pinned_to_the_staged_wheel() -> None:
    pinned = observations().artifacts.pinned["vllm"]
    staged = {line.split()[1]: line.split()[3] for line in LOCK.read_text().splitlines()[1:]}
    assert staged[pinned.filename] == pinned.sha256


def test_every_gate_of_the_teacher_run_passed() -> None:
    verdicts: list[dict[str, Any]] = json.loads((RUN / "verdicts.json").read_text())
    assert {v["status"] for v in verdicts} <= {"pass", "n/a"}
    audits = {v["gate"]: v["summary"] for v in verdicts if v["gate"].startswith("live_audit")}
    assert audits == {
        f"live_audit:start-{n}": "3 processes (api_server, engine_core, resource_tracker), "
        "377 ELF files, no drift"
        for n in (1, 2)
    }


@pytest.mark.parametrize("start", ["start-1", "start-2"])
def test_each_start_served_with_flash_attention_3_and_cuda_graphs(start: str) -> None:
    log = (RUN / start / "server.log").read_text()
    assert "version 0.26.0" in log
    assert "Using FlashAttention version 3" in log
    assert "Capturing CUDA graphs (PIECEWISE)" in log and "Capturing CUDA graphs (FULL)" in log
    assert "--enforce-eager" not in log
    rows = json.loads((RUN / start / "rows.json").read_text())
    assert len(rows) == 5


def documents(start: int) -> list[AuditDocument]:
    found = []
    for role in ROLES:
        path = RUN / f"start-{start}" / "audit" / f"{role}.json"
        found.append(AuditDocument.from_bytes(path.read_bytes(), where=str(path)))
    return found


def processes(start: int) -> list[ProcessEvidence]:
    return [process for document in documents(start) for process in document.processes]


def launched() -> Launched:
    """What verify holds each start's tree to: run.json's environment."""
    env = json.loads((RUN / "run.json").read_text())["env"]
    return Launched(env, "run.json env", RUN_PRIVATE_ENV)


def cuda() -> list[KernelSet]:
    return [KernelSet.load(name) for name in Manifest.from_path(MANIFEST).native.kernel_sets]


def test_the_children_run_with_the_library_path_opencv_prepended() -> None:
    """The fact the seal was refused on: the API server's children hold another LD_LIBRARY_PATH
    than the one the tree was started with."""
    site = "/root/serve-venv/lib/python3.12/site-packages"
    for start in STARTS:
        paths = {p.role: p.environ["LD_LIBRARY_PATH"] for p in processes(start)}
        assert paths == {
            "api_server": "/usr/local/nvidia/lib64",
            "engine_core": f"{site}/cv2/../../lib64:/usr/local/nvidia/lib64",
            "resource_tracker": f"{site}/cv2/../../lib64:/usr/local/nvidia/lib64",
        }


@pytest.mark.parametrize("start", STARTS)
def test_each_sealed_audit_judged_again_as_verify_does_finds_no_drift(start: int) -> None:
    """The re-judgement verify applies (every rule of the live audit, and the environment the
    tree was started with), on the sealed manifest, kernel set and host: what the live audit
    found, nothing more."""
    observed = observations()
    policy = manifest_policy(
        Manifest.from_path(MANIFEST), observed.values, cuda(), observed.host.capabilities()
    )
    policy = dataclasses.replace(policy, launched=launched())
    where = f"start-{start}/audit"
    assert rejudge(documents(start), policy, interpreter=None, where=where) == []
    assert all(document.drifts == () for document in documents(start))


def test_a_child_that_changes_any_other_variable_is_still_refused() -> None:
    """Only the loader's path and preload, judged entry by entry, may change on the way down."""
    tree = processes(1)
    root = next(p for p in tree if p.role == "api_server")
    changed = [
        p.model_copy(update={"environ": {**p.environ, "PYTHONHASHSEED": "1"}})
        if p.role == "engine_core"
        else p
        for p in tree
    ]
    (drift,) = environment_drifts(changed, root.pid, launched())
    assert drift.kind is DriftKind.ENVIRONMENT
    assert drift.subject.endswith("(engine_core): PYTHONHASHSEED")
    assert (drift.expected, drift.observed) == ("'0' (run.json env)", "'1'")


def test_a_library_path_changed_to_a_directory_outside_every_root_is_refused_by_content() -> None:
    observed = observations()
    policy = manifest_policy(
        Manifest.from_path(MANIFEST), observed.values, cuda(), observed.host.capabilities()
    )
    engine = next(p for p in processes(1) if p.role == "engine_core")
    assert env_drifts(engine.pid, engine.role, engine.environ, policy) == []
    evil = {**engine.environ, "LD_LIBRARY_PATH": "/tmp/evil:/usr/local/nvidia/lib64"}
    (drift,) = env_drifts(engine.pid, engine.role, evil, policy)
    assert drift.kind is DriftKind.FORBIDDEN_ENV and drift.observed == "/tmp/evil"


def test_both_starts_map_what_one_native_claim_says_jit_files_counted_by_place_and_name() -> None:
    """What verify's native.roles holds every later start to: start 2's Triton launchers lie
    under its own HOME, in a compile cache keyed otherwise."""
    values, kernel_sets = observations().values, cuda()
    first, second = processes(1), processes(2)
    roles, jit = mapped_claims(first, values, kernel_sets=kernel_sets)
    assert (roles, jit) == mapped_claims(second, values, kernel_sets=kernel_sets)
    assert environments_claim(first, values) == environments_claim(second, values)
    assert {(f.place, f.name, f.files) for f in jit["engine_core"]} == {
        ("{home}/.cache/vllm/torch_compile_cache/**", LAUNCHER, 19),
        ("{home}/.triton/cache/**", "cuda_utils.cpython-312-x86_64-linux-gnu.so", 1),
    }
    paths = [o.path for objects in roles.values() for o in objects]
    assert not [path for path in paths if "/build-run/" in path]
