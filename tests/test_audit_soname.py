"""A need met by an object already loaded under that SONAME, as glibc does it.

On a CUDA host torch loads its CUDA runtime by path (site-packages/nvidia/cu13/lib/
libcudart.so.13) before vLLM's extension, which needs `libcudart.so.13` with no RUNPATH to it:
glibc finds the loaded object by SONAME and never searches, while the emulation, which does not
know the order of loads, searches ld.so.cache and names the system toolkit's copy (the same
bytes). Seen live on an H100 with vLLM 0.26.0 (bench/gpu, docs/gpu.md): 40 origin drifts for a
clean server, then, once those were accepted, the toolkit copy's own dependencies sealed with a
requester the process never mapped, which verify refused."""

from __future__ import annotations

import hashlib
from pathlib import Path

from repro_serving.builder.drift import DriftKind
from repro_serving.builder.native.audit import _Explainer
from repro_serving.builder.native.loader import Outcome, Resolution
from repro_serving.builder.native.processes import MappedFile, ProcessSnapshot
from repro_serving.builder.native.procmaps import FileId

SITE = "/venv/lib/python3.12/site-packages"
LOADED = FileId(1, 10)
TOOLKIT = FileId(1, 20)
RUNTIME = b"\x7fELF the CUDA runtime"


def explainer(tmp_path: Path, *, soname: str | None, mapped_bytes: bytes = RUNTIME) -> _Explainer:
    process = ProcessSnapshot(
        pid=7, ppid=1, name="python3", role="engine_core", cmdline=("python3",),
        exe="/usr/bin/python3.12", environ={}, files=(LOADED,),
    )  # fmt: skip
    digest = hashlib.sha256(mapped_bytes).hexdigest()
    path = f"{SITE}/nvidia/cu13/lib/libcudart.so.13"
    mapped = {LOADED: MappedFile(LOADED, path, False, False, True, digest)}
    names = {LOADED: frozenset({"libcudart.so.13"})}
    return _Explainer(process, mapped, names, {LOADED: soname} if soname else {})


def searched(tmp_path: Path) -> Resolution:
    toolkit = tmp_path / "cuda" / "libcudart.so.13"
    toolkit.parent.mkdir(exist_ok=True)
    toolkit.write_bytes(RUNTIME)
    return Resolution(
        need="libcudart.so.13",
        requester=f"{SITE}/vllm/_C_stable_libtorch.abi3.so",
        outcome=Outcome.FOUND,
        path=str(toolkit),
        reason="ld.so.cache",
        file_id=TOOLKIT,
    )


def test_a_need_met_by_a_mapped_object_of_that_soname_and_bytes_is_no_drift(
    tmp_path: Path,
) -> None:
    judge = explainer(tmp_path, soname="libcudart.so.13")
    need = searched(tmp_path)
    judge.check_resolution(need)
    assert judge.drifts == []


def test_what_the_searched_file_loaded_names_the_mapped_object_as_its_requester(
    tmp_path: Path,
) -> None:
    judge = explainer(tmp_path, soname="libcudart.so.13")
    need = searched(tmp_path)
    assert judge.met_by_soname(need) is not None
    librt = Resolution(
        need="librt.so.1", requester=str(need.path), outcome=Outcome.FOUND,
        path="/usr/lib/x86_64-linux-gnu/librt.so.1", reason="ld.so.cache",
    )  # fmt: skip
    assert judge.requester_of(librt) == f"{SITE}/nvidia/cu13/lib/libcudart.so.13"


def test_other_bytes_under_that_soname_are_still_a_drift(tmp_path: Path) -> None:
    judge = explainer(tmp_path, soname="libcudart.so.13", mapped_bytes=b"another runtime")
    judge.check_resolution(searched(tmp_path))
    (drift,) = judge.drifts
    assert drift.kind is DriftKind.UNEXPECTED_MAPPING


def test_a_mapped_file_of_that_name_but_no_such_soname_is_still_a_drift(tmp_path: Path) -> None:
    judge = explainer(tmp_path, soname=None)
    judge.check_resolution(searched(tmp_path))
    (drift,) = judge.drifts
    assert drift.kind is DriftKind.ORIGIN_DRIFT
    assert drift.observed == f"{SITE}/nvidia/cu13/lib/libcudart.so.13"
