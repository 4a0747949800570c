"""The audit a user gets of a CUDA process repro did not start, on a real H200 host.

`tests/evidence/h200-venv/` was captured by `tests/evidence/h200/capture.py` on an NVIDIA H200
host (Intel Xeon, AVX-512, AVX512-BF16, AMX), judged there by the code of `repro audit --pid P
--kernel-set cuda --module torch._C`: `workload.py` from the host's virtual environment started
as `python3` found on PATH, by the full path of the venv's `python3`, and on PATH with a
gcc-built library in LD_PRELOAD. Its verdicts are the command's own `--json` output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from repro_serving.builder.native.dispatch import HostCapabilities, predict
from repro_serving.builder.native.kernels import KernelSet, dispatches

EVIDENCE = Path(__file__).resolve().parent / "evidence" / "h200-venv"
VENV = "/opt/torch/.venv"


def audit(way: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((EVIDENCE / way / "audit.json").read_text())
    return document


def environment(way: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((EVIDENCE / way / "environment.json").read_text())
    return document


def explained(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (obj["path"], obj["rule"])
        for process in document["processes"]
        for obj in process["objects"]
    }


@pytest.mark.parametrize("way", ["path", "full-path"])
def test_a_clean_cuda_process_passes_started_either_way(way: str) -> None:
    document = audit(way)
    assert document["passed"] and document["drifts"] == []
    (process,) = environment(way)["processes"]
    assert process["venv"] == VENV and process["outside"] == []
    assert VENV in environment(way)["allowed_roots"]


def test_started_on_path_and_by_full_path_every_mapping_is_explained_alike() -> None:
    path, full = audit("path"), audit("full-path")
    assert explained(path) == explained(full)
    assert len(explained(path)) == path["files"] > 60
    assert any(
        p.startswith(f"{VENV}/lib/python3.12/site-packages/torch/") for p, _ in explained(path)
    )


def test_the_injected_process_has_exactly_the_preload_findings() -> None:
    document = audit("preload")
    summary = json.loads((EVIDENCE / "summary.json").read_text())["preload"]
    injected = summary["injected"]
    assert not document["passed"]
    assert [(d["kind"], d["subject"].split(": ", 1)[1]) for d in document["drifts"]] == [
        ("forbidden-env", "LD_PRELOAD"),
        ("unexpected-mapping", injected),
    ]
    assert document["drifts"][0]["observed"] == f"LD_PRELOAD={injected}"
    # nothing else differs from the clean start on PATH
    assert explained(document) - explained(audit("path")) == {(injected, "preload")}


def test_the_cpu_rules_predict_what_torch_chose_on_that_host() -> None:
    captured = json.loads((EVIDENCE / "dispatch.json").read_text())
    host = HostCapabilities(captured["arch"], frozenset(captured["cpu_flags"]))
    rules = dispatches([KernelSet.load("cpu")])
    assert captured["torch_cpu_is_avx512_supported"]
    assert captured["torch_cpu_is_avx512_bf16_supported"]
    assert predict(rules["vllm._C"][1], host).variant == "vllm._C"
    aten = predict(rules["torch.aten_cpu_capability"][1], host).variant
    assert aten == captured["aten_cpu_capability"] == "AVX512"
