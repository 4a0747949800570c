"""A real teacher run of vLLM 0.26.0 on CUDA, as `repro build` of manifests/tiny-cuda.toml left it.

`tests/evidence/cuda-h100-teacher/` is the run directory (`--run-dir`) of that build on an
NVIDIA H100 (PCI 10de:2330, driver 580.159.04, compute capability 9.0) reached with no package
index, staged and installed by bench/gpu (docs/gpu.md): two fresh starts of the tiny model in
float16 with CUDA graphs and torch.compile, each audited live, every gate passing. The build then
refused to seal: the staged bundle's re-judged audits name, as the requester of three system
libraries, the system CUDA toolkit's libcudart.so.13, a file no process mapped (the audit had
accepted a need met by torch's own copy of it by SONAME, but kept the copy it searched for as
the requester: fixed since, in builder/native/audit.py). What is checked here offline is what
that run observed and judged; the bundle itself is still to be built on such a host.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from repro_serving.builder.documents.audit import AuditDocument
from repro_serving.builder.documents.observations import ObservationsDocument
from repro_serving.builder.native.sealedaudit import _requester_drifts

RUN = Path(__file__).resolve().parent / "evidence" / "cuda-h100-teacher"
LOCK = Path(__file__).resolve().parents[1] / "bench" / "gpu" / "wheels.lock"
TOOLKIT_RUNTIME = "/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13"


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


@pytest.mark.parametrize("start", ["start-1", "start-2"])
def test_the_sealed_audit_names_only_the_unmapped_toolkit_runtime_as_a_requester(
    start: str,
) -> None:
    """Why the build refused to seal: each refused requester is the toolkit's libcudart.so.13,
    which no process mapped; every object it names is a system library torch's own copy of the
    runtime (the same bytes) needs as well."""
    refused = []
    for role in ("api_server", "engine_core", "resource_tracker"):
        path = RUN / start / "audit" / f"{role}.json"
        document = AuditDocument.from_bytes(path.read_bytes(), where=str(path))
        for process in document.processes:
            refused += [(d.subject, d.observed) for d in _requester_drifts(process, start)]
    assert refused and {observed for _subject, observed in refused} == {TOOLKIT_RUNTIME}
    libraries = {subject.split(": ")[1] for subject, _observed in refused}
    assert libraries <= {
        "/usr/lib/x86_64-linux-gnu/librt.so.1",
        "/usr/lib/x86_64-linux-gnu/libpthread.so.0",
        "/usr/lib/x86_64-linux-gnu/libdl.so.2",
    }
