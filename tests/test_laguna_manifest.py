"""manifests/laguna-102tps.toml against the record it describes: every pin equals the record's own
files, and the record's evidence passes every gate the manifest declares."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from schemas import assert_valid

from repro_serving.builder.cli import main
from repro_serving.builder.commands.check import plan
from repro_serving.builder.documents.manifest import Manifest, expand
from repro_serving.builder.errors import BadInput
from repro_serving.builder.native.kernels import KernelSet, Origin, origin_of, runtime_markers
from repro_serving.launch.gates import judge
from repro_serving.launch.historical import Record, load_record
from repro_serving.launch.throughput import measure

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "manifests" / "laguna-102tps.toml"
RECORD = ROOT / "records" / "laguna-102tps"
LOCK = RECORD / "manifests" / "runtime-lock.json"
CONVENTIONAL_MEDIAN = 101.94172124017027
ROLE_DIRECTORIES = {"target": "int4", "draft": "dflash-int4"}
NOT_CARRIED_ENV = {
    "PATH", "HOME", "TMPDIR", "PWD", "SHLVL", "LD_PRELOAD", "HF_HOME", "HF_HUB_CACHE",
    "TRANSFORMERS_CACHE", "NUMBA_CACHE_DIR", "PYTHONPYCACHEPREFIX", "SYCL_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "VLLM_CACHE_ROOT", "VLLM_RPC_BASE_PATH",
    "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
}  # fmt: skip


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return Manifest.from_path(MANIFEST)


@pytest.fixture(scope="module")
def lock() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(LOCK.read_text("utf-8"))
    return document


@pytest.fixture(scope="module")
def record() -> Record:
    return load_record(RECORD)


@pytest.fixture(scope="module")
def kernel_set() -> KernelSet:
    return KernelSet.load("laguna-b70")


def test_repro_check_passes_and_prints_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", str(MANIFEST), "--json"])
    assert (code, err.getvalue()) == (0, "")
    plan = assert_valid("check", out.getvalue())["plan"]
    assert [(m["role"], m["files"]) for m in plan["models"]] == [("target", 27), ("draft", 5)]
    assert plan["native"]["kernel_sets"] == ["xpu", "laguna-b70"]
    assert [pin["kind"] for pin in plan["native"]["kernel_pins"]] == (
        ["module"] * 4 + ["library"] * 6 + ["external (drift when mapped)"]
    )
    assert plan["oracle"]["suite"] | {"path": None} == {
        "path": None,
        "name": "laguna-s-2.1-realistic-cold-v1",
        "api": "chat",
        "prompts": 13,
        "max_tokens": 512,
        "seed": 1,
        "temperature": None,
        "replayable": False,
    }
    assert Path(plan["evidence"]["run"]).resolve() == RECORD / "evidence" / "record-run"


def test_the_model_files_are_the_records_32_release_files(manifest: Manifest) -> None:
    listed = (RECORD / "manifests" / "model-release-files.sha256").read_text("utf-8")
    expected = {}
    for line in listed.splitlines():
        digest, name = line.split("  ", 1)
        expected[name] = digest
    declared = {
        f"{ROLE_DIRECTORIES[model.role]}/{name}": digest
        for model in manifest.models
        for name, digest in model.files.items()
    }
    assert len(declared) == 32
    assert declared == expected


def test_the_kernel_set_pins_exactly_the_runtime_locks_binaries(
    kernel_set: KernelSet, lock: dict[str, Any]
) -> None:
    modules = {(m.module, Path(m.path).name, m.sha256, m.built_from) for m in kernel_set.modules}
    assert modules == {
        (m["module"], m["path"], m["sha256"], m["observed_build_source_commit"])
        for m in lock["native_modules"]
    }
    libraries = {(Path(lib.path).name, lib.sha256, lib.built_from) for lib in kernel_set.libraries}
    assert libraries == {
        (lib["path"], lib["sha256"], lib["observed_build_source_commit"])
        for lib in lock["mapped_kernel_libraries"]
    }
    (external,) = kernel_set.external
    found = lock["external_native_module"]
    assert (external.module, external.path, external.sha256, external.built_from) == (
        found["module"],
        found["observed_path"],
        found["sha256"],
        found["observed_build_source_commit"],
    )
    assert not external.declared


def test_the_manifest_declares_the_locks_host_python_and_sources(
    manifest: Manifest, lock: dict[str, Any]
) -> None:
    host = lock["host"]
    (cards,) = manifest.host.accelerators
    assert (manifest.host.os_release, manifest.host.kernel, manifest.host.arch) == (
        host["os"],
        host["kernel"],
        host["architecture"],
    )
    assert (cards.vendor_device, list(cards.addresses)) == (
        host["gpu_vendor_device"],
        host["gpu_bdfs"],
    )
    assert manifest.python.interpreter == lock["toolchain"]["python"]
    pinned = {name: package.pinned for name, package in manifest.python.packages.items()}
    packages = lock["python_packages"]
    assert pinned == {
        k: v for k, v in packages.items() if k not in {"observed_full_freeze", "warning"}
    }
    assert {s.name: s.commit for s in manifest.sources} == {
        name: tree["commit"] for name, tree in lock["source"].items()
    }
    assert list(manifest.native.modules) == [m["module"] for m in lock["native_modules"]]


def test_the_launch_environment_is_the_records_less_what_repro_owns(manifest: Manifest) -> None:
    text = (RECORD / "evidence" / "record-run" / "service-environment.txt").read_text("utf-8")
    recorded = dict(line.split("=", 1) for line in text.splitlines())
    venv = {"venv": manifest.python.venv}
    declared = {name: expand(value, venv) for name, value in manifest.launch.env.items()}
    assert declared == {k: v for k, v in recorded.items() if k not in NOT_CARRIED_ENV}


def test_the_suite_names_the_records_13_prompts_by_sha256(
    manifest: Manifest, record: Record
) -> None:
    suite = manifest.load_suite()
    bench = json.loads((RECORD / "evidence" / "record-run" / "bench.json").read_text("utf-8"))
    assert [(p.id, p.sha256) for p in suite.prompts] == [
        (row["prompt_id"], row["prompt_sha256"]) for row in bench["rows"]
    ]
    assert [p.id for p in suite.prompts] == [row.prompt_id for row in record.teacher.rows]
    assert not suite.replayable


def test_the_records_evidence_passes_every_gate_of_the_manifest(
    manifest: Manifest, record: Record
) -> None:
    sealed = measure(record.bench.rows, 100).conventional_median
    assert sealed == pytest.approx(CONVENTIONAL_MEDIAN, abs=1e-12)
    markers = runtime_markers(manifest.native.kernel_sets)
    verdicts = judge(manifest.oracle.gates, record.run_evidence(sealed), kernel_markers=markers)
    assert {v.gate: v.status.value for v in verdicts} == {
        "exact_token_ids": "pass",
        "text_sha256": "pass",
        "cached_tokens_zero": "pass",
        "prefix_cache_hit_delta_zero": "pass",
        "log_marker:graph-captured": "pass",
        "log_marker:graph-replayed": "pass",
        "log_marker:dflash-fp8-w8a16-projections": "pass",
        "kernel_marker:flash-attention-2": "pass",
        "kernel_marker:xpu-wna16-moe": "pass",
        "kernel_marker:exact-spec-attention-q12": "pass",
        "forbidden_log_patterns": "n/a",
        "spec_decode": "pass",
        "throughput": "pass",
        "fresh_starts": "n/a",
    }
    spec = next(v for v in verdicts if v.gate == "spec_decode")
    assert spec.summary.startswith("acceptance 4747/17699 = 0.2682 within [0.25, 0.29]")


def test_without_kernel_markers_judge_passes_the_manifests_gates_alone(
    manifest: Manifest, record: Record
) -> None:
    verdicts = judge(manifest.oracle.gates, record.run_evidence(CONVENTIONAL_MEDIAN))
    assert all(verdict.passed for verdict in verdicts)
    assert len(verdicts) == 11


# --- the origin of a mapped file against the kernel set -------------------------------------------

VALUES = {"source.kernel_record_tree": "/src/kernels"}


def test_a_pinned_module_at_its_path_with_its_bytes_is_pinned(kernel_set: KernelSet) -> None:
    module = kernel_set.modules[2]
    verdict = origin_of(
        "/src/kernels/vllm_xpu_kernels/_moe_C.abi3.so", module.sha256, kernel_set, VALUES
    )
    assert (verdict.origin, verdict.entry, verdict.drift) == (
        Origin.PINNED,
        "vllm_xpu_kernels._moe_C",
        False,
    )


def test_pinned_bytes_mapped_from_another_tree_are_origin_drift(kernel_set: KernelSet) -> None:
    library = kernel_set.libraries[1]
    verdict = origin_of("/other/build/libgrouped_gemm_xe_2.so", library.sha256, kernel_set, VALUES)
    assert (verdict.origin, verdict.entry, verdict.drift) == (
        Origin.ORIGIN_DRIFT,
        "libgrouped_gemm_xe_2.so, pinned at /src/kernels/vllm_xpu_kernels/libgrouped_gemm_xe_2.so",
        True,
    )


def test_other_bytes_at_a_pinned_path_are_drift(kernel_set: KernelSet) -> None:
    verdict = origin_of("/src/kernels/vllm_xpu_kernels/_C.abi3.so", "0" * 64, kernel_set, VALUES)
    assert (verdict.origin, verdict.drift) == (Origin.BYTES_DRIFT, True)


def test_the_records_external_module_is_drift_until_declared(kernel_set: KernelSet) -> None:
    (external,) = kernel_set.external
    found = origin_of(external.path, external.sha256, kernel_set, VALUES)
    assert (found.origin, found.drift) == (Origin.UNDECLARED_EXTERNAL, True)
    declared = kernel_set.model_copy(
        update={"external": (external.model_copy(update={"declared": True}),)}
    )
    accepted = origin_of(external.path, external.sha256, declared, VALUES)
    assert (accepted.origin, accepted.drift) == (Origin.DECLARED_EXTERNAL, False)
    moved = origin_of("/tmp/xpumem_allocator.abi3.so", external.sha256, declared, VALUES)
    assert (moved.origin, moved.drift) == (Origin.UNDECLARED_EXTERNAL, True)


# --- kernel sets that do not hold ---------------------------------------------------------------


def test_a_kernel_set_placeholder_the_manifest_does_not_define_is_refused() -> None:
    text = MANIFEST.read_text("utf-8").replace('name = "kernel_record_tree"', 'name = "kernels"')
    manifest = Manifest.from_toml(text, source="renamed.toml", base_dir=MANIFEST.parent)
    with pytest.raises(BadInput) as refused:
        plan(manifest, manifest.load_suite())
    assert (refused.value.what, refused.value.where, refused.value.found) == (
        "a kernel set uses a placeholder this manifest does not define",
        "renamed.toml: native.kernel_sets[1] (laguna-b70)",
        "{source.kernel_record_tree}",
    )


@pytest.mark.parametrize(
    ("path", "found"),
    [
        ("/abs/vllm_xpu_kernels/_C.abi3.so", "a path starting with a placeholder"),
        ("{home}/_C.abi3.so", "unknown placeholder {home}"),
        ("{model.critic}/_C.abi3.so", "unknown placeholder {model.critic}"),
    ],
)
def test_a_kernel_path_not_in_placeholder_form_is_refused(
    tmp_path: Path, path: str, found: str
) -> None:
    text = (ROOT / "kernels" / "laguna-b70.toml").read_text("utf-8")
    text = text.replace("{source.kernel_record_tree}/vllm_xpu_kernels/_C.abi3.so", path)
    (tmp_path / "laguna-b70.toml").write_text(text, "utf-8")
    with pytest.raises(BadInput) as refused:
        KernelSet.load("laguna-b70", tmp_path)
    assert (refused.value.what, refused.value.where) == (
        "malformed kernel set",
        str(tmp_path / "laguna-b70.toml"),
    )
    assert (refused.value.found or "").startswith(f"key modules[0].path: {found}: {path!r}")
