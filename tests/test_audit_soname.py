"""A need satisfied by an object already loaded under that SONAME, as glibc does it.

On a CUDA host torch loads its CUDA runtime by path (site-packages/nvidia/cu13/lib/
libcudart.so.13) before vLLM's extension, which needs `libcudart.so.13` with no RUNPATH to it:
glibc finds the loaded object by SONAME and never searches, while the emulation, which does not
know the order of loads, would search ld.so.cache and name the system toolkit's copy. Seen live
on an H100 with vLLM 0.26.0 (bench/gpu, docs/gpu.md)."""

from __future__ import annotations

from repro_serving.builder.drift import DriftKind
from repro_serving.builder.native.audit import _Explainer
from repro_serving.builder.native.loader import Outcome, Resolution
from repro_serving.builder.native.processes import MappedFile, ProcessSnapshot
from repro_serving.builder.native.procmaps import FileId

SITE = "/venv/lib/python3.12/site-packages"
LOADED = FileId(1, 10)
TOOLKIT = FileId(1, 20)


def explainer(soname: str | None) -> _Explainer:
    process = ProcessSnapshot(
        pid=7, ppid=1, name="python3", role="engine_core", cmdline=("python3",),
        exe="/usr/bin/python3.12", environ={}, files=(LOADED,),
    )  # fmt: skip
    mapped = {
        LOADED: MappedFile(
            LOADED, f"{SITE}/nvidia/cu13/lib/libcudart.so.13", False, False, True, "ab"
        )
    }
    names = {LOADED: frozenset({"libcudart.so.13"})}
    return _Explainer(process, mapped, names, {LOADED: soname} if soname else {})


def searched() -> Resolution:
    return Resolution(
        need="libcudart.so.13",
        requester=f"{SITE}/vllm/_C_stable_libtorch.abi3.so",
        outcome=Outcome.FOUND,
        path="/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13",
        reason="ld.so.cache",
        file_id=TOOLKIT,
    )


def test_a_need_met_by_a_mapped_object_of_that_soname_is_no_drift() -> None:
    judge = explainer("libcudart.so.13")
    judge.check_resolution(searched())
    assert judge.drifts == []


def test_a_mapped_file_of_that_name_but_another_soname_is_still_a_drift() -> None:
    judge = explainer(None)
    judge.check_resolution(searched())
    (drift,) = judge.drifts
    assert drift.kind in (DriftKind.ORIGIN_DRIFT, DriftKind.UNEXPECTED_MAPPING)
    assert drift.observed == f"{SITE}/nvidia/cu13/lib/libcudart.so.13"
