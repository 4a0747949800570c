"""The accelerator boundary: platform sets classify the real H200 audit, and nothing else passes.

`tests/evidence/h200/` was captured on an NVIDIA H200 host by an earlier version of `capture.py`
beside it: repro's live audit of a process that initialised CUDA, ran a cuBLAS matmul and a
Triton kernel (`workload.py`). The capture of today's `capture.py`, which judges as `repro audit`
does, is `tests/evidence/h200-venv/` (tests/test_h200_venv_capture.py).
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from diagnostics import refused

from repro_serving.builder.errors import BadInput
from repro_serving.builder.native.kernels import Category, KernelSet, classify

EVIDENCE = Path(__file__).parent / "evidence" / "h200"


@pytest.fixture(scope="module")
def audit() -> dict[str, Any]:
    document: dict[str, Any] = json.loads((EVIDENCE / "audit.json").read_text())
    return document


ROOT_ENVIRON = {"HOME": "/root"}
"""The capture ran as root with HOME unset in its saved environment; its caches are root's."""


def categories(audit: dict[str, Any], kernel_set: str) -> dict[str, Category]:
    platform = KernelSet.load(kernel_set).platform
    return {
        o["path"]: classify(o["path"], o["rule"], platform, ROOT_ENVIRON)[0]
        for process in audit["processes"]
        for o in process["objects"]
    }


def test_every_mapping_of_the_h200_audit_is_explained_by_the_cuda_set(
    audit: dict[str, Any],
) -> None:
    found = categories(audit, "cuda")
    assert Category.UNEXPECTED not in found.values(), [
        path for path, category in found.items() if category is Category.UNEXPECTED
    ]
    assert Counter(found.values()) == {
        Category.STATIC: 42,
        Category.DLOPEN: 21,
        Category.DRIVER: 2,
        Category.JIT: 2,
    }
    assert found["/usr/local/nvidia/lib64/libcuda.so.580.159.04"] is Category.DRIVER
    assert found["/usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04"] is Category.DRIVER
    jit = sorted(p for p, c in found.items() if c is Category.JIT)
    assert all(p.startswith("/root/.triton/cache/") for p in jit) and len(jit) == 2
    nvrtc = [p for p in found if p.endswith("/libnvrtc.so.13")]
    assert nvrtc and found[nvrtc[0]] is Category.DLOPEN
    cublas = [p for p in found if p.endswith("/libcublasLt.so.13")]
    assert cublas and found[cublas[0]] is Category.STATIC, "cuBLASLt is in torch's closure"


def test_the_cpu_set_does_not_explain_a_cuda_process(audit: dict[str, Any]) -> None:
    found = categories(audit, "cpu")
    unexpected = {Path(p).name for p, c in found.items() if c is Category.UNEXPECTED}
    # libcuda itself arrives as a DT_NEEDED of Triton's JIT launcher (through LD_LIBRARY_PATH):
    # under the cpu set, the launcher that pulls it in is what is refused.
    assert {
        "libnvidia-ml.so.580.159.04",
        "libnvrtc.so.13",
        "__triton_launcher.cpython-312-x86_64-linux-gnu.so",
        "cuda_utils.cpython-312-x86_64-linux-gnu.so",
    } <= unexpected


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("/tmp/libinjected.so", "dlopen"),
        ("/usr/local/nvidia/lib64/libinjected.so", "dlopen"),
        ("/opt/torch/.venv/lib/python3.12/site-packages/torch/lib/libinjected.so", "dlopen"),
        ("/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13", "preload"),
        ("/tmp/libcuda.so.1", "dlopen"),
    ],
)
def test_a_library_injected_into_the_evidence_is_unexpected(
    audit: dict[str, Any], path: str, rule: str
) -> None:
    injected = copy.deepcopy(audit)
    objects = injected["processes"][0]["objects"]
    objects.append({**objects[-1], "path": path, "rule": rule, "reason": "injected"})
    found = categories(injected, "cuda")
    assert found[path] is Category.UNEXPECTED
    assert [p for p, c in found.items() if c is Category.UNEXPECTED] == [path]


def test_every_platform_set_loads_under_its_own_name() -> None:
    for name in ("cpu", "cuda", "xpu"):
        assert KernelSet.load(name).name == name


def test_an_unknown_kernel_set_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(BadInput) as caught:
        KernelSet.load("rocm")
    assert caught.value.where is not None and caught.value.where.endswith("kernels/rocm.toml")
    assert caught.value.expected == "one of cpu, cuda, laguna-b70, xpu"


def test_a_kernel_set_with_an_unknown_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "odd.toml").write_text(
        'schema = "repro.kernels/v1"\nname = "odd"\ndescription = "x"\n[platform]\ndriver = []\n'
    )
    error = refused(BadInput, KernelSet.load, "odd", tmp_path)
    assert error.where == str(tmp_path / "odd.toml")
    assert (error.found or "").startswith(
        "key platform.driver: unknown key (expected one of the keys driver_roots"
    )
    assert "(did you mean driver_roots?)" in (error.found or "")


# --- JIT directories: the mapping process's own ------------------------------------------------

RUN = {"HOME": "/runs/r1/start-1/home", "TMPDIR": "/tmp/repro-run-ab12"}


@pytest.mark.parametrize(
    ("path", "environ", "jit"),
    [
        ("/tmp/repro-run-ab12/torchinductor_root/x7/c.so", RUN, True),
        ("/runs/r1/start-1/home/.cache/torch/kernels/a/b.so", RUN, True),
        # inductor's cache in a temporary directory the process does not have
        ("/tmp/torchinductor_root/ab/evil.so", RUN, False),
        # the same cache name under another directory than the process's HOME
        ("/srv/evil/.cache/torch/kernels/evil.so", RUN, False),
        ("/tmp/torchinductor_root/ab/c.so", {}, True),  # tempfile's default without TMPDIR
        ("/root/.cache/torch/kernels/a.so", {}, False),  # no HOME, no home cache
        ("/tmp/repro-run-ab12/x/torchinductor_root/c.so", RUN, False),
    ],
)
def test_a_jit_artifact_is_one_under_the_mapping_process_own_directories(
    path: str, environ: dict[str, str], jit: bool
) -> None:
    platform = KernelSet.load("cpu").platform
    assert (classify(path, "dlopen", platform, environ)[0] is Category.JIT) is jit


def test_a_jit_pattern_outside_home_and_tmpdir_or_with_another_placeholder_is_refused(
    tmp_path: Path,
) -> None:
    for pattern in ("*/.cache/torch/kernels/*", "{venv}/cache/**", "{home}x/**"):
        (tmp_path / "bad.toml").write_text(
            'schema = "repro.kernels/v1"\nname = "bad"\ndescription = "bad jit"\n'
            f'[platform]\njit = ["{pattern}"]\n'
        )
        with pytest.raises(BadInput) as refused:
            KernelSet.load("bad", tmp_path)
        assert "jit" in str(refused.value.diagnostics()), pattern


def test_vllm_compile_cache_launchers_are_jit_under_the_cuda_set() -> None:
    """vLLM's torch.compile moves Triton's cache into its own (TRITON_CACHE_DIR under
    ~/.cache/vllm/torch_compile_cache/<hash>/rank_0_0/triton_cache): a launcher built there is
    JIT under the cuda set, the same file name elsewhere in HOME is not."""
    platform = KernelSet.load("cuda").platform
    launcher = "__triton_launcher.cpython-312-x86_64-linux-gnu.so"
    cache = "/root/.cache/vllm/torch_compile_cache/0f1e2d3c4b/rank_0_0/triton_cache/ABCDEF"
    found = classify(f"{cache}/{launcher}", "unexplained", platform, ROOT_ENVIRON)[0]
    assert found is Category.JIT
    elsewhere = classify(f"/root/.cache/other/{launcher}", "unexplained", platform, ROOT_ENVIRON)
    assert elsewhere[0] is Category.UNEXPECTED
