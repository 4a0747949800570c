"""Dispatch truth: every branch of every rule, predicted from faked host facts.

The rules are the repository's own (`kernels/cpu.toml`); the facts are those of the
three kinds of x86-64 host these machines come as (AVX2 only, AVX-512 without BF16, AVX-512 with
BF16), an Arm host, and the launch environment's override. Nothing here depends on the CPU it
runs on. A real process maps a real variant file, so the live audit is judged on real mappings
with the host facts faked.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from policies import policy_allowing
from pydantic import ValidationError

from repro_serving.builder.drift import DriftKind
from repro_serving.builder.native.dispatch import Dispatch, HostCapabilities, differs, predict
from repro_serving.builder.native.kernels import KernelSet, dispatches
from repro_serving.builder.native.policy import judge_tree
from repro_serving.builder.native.processes import snapshot_tree

AVX2 = frozenset({"avx", "avx2", "fma", "sse4_2"})
AVX512 = AVX2 | {"avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512cd"}
AVX512_BF16 = AVX512 | {"avx512_bf16", "avx512_vnni"}

HOSTS = {
    "avx2": HostCapabilities("x86_64", AVX2),
    "avx512": HostCapabilities("x86_64", AVX512),
    "avx512-bf16": HostCapabilities("x86_64", AVX512_BF16),
    "aarch64": HostCapabilities("aarch64", frozenset({"asimd", "sve"})),
}


def cpu_rule(name: str) -> Dispatch:
    return dispatches([KernelSet.load("cpu")])[name][1]


@pytest.mark.parametrize(
    ("host", "variant"),
    [
        ("avx2", "vllm._C_AVX2"),
        ("avx512", "vllm._C_AVX512"),
        ("avx512-bf16", "vllm._C"),
        ("aarch64", "vllm._C"),
    ],
)
def test_vllm_cpu_kernels_are_predicted_for_each_kind_of_host(host: str, variant: str) -> None:
    assert predict(cpu_rule("vllm._C"), HOSTS[host]).variant == variant


@pytest.mark.parametrize(
    ("host", "env", "variant"),
    [
        ("avx2", {}, "AVX2"),
        ("avx512", {}, "AVX512"),
        ("avx512-bf16", {}, "AVX512"),
        ("aarch64", {}, "DEFAULT"),
        ("avx512", {"ATEN_CPU_CAPABILITY": "avx2"}, "AVX2"),
        ("avx512", {"ATEN_CPU_CAPABILITY": "default"}, "DEFAULT"),
        ("avx2", {"ATEN_CPU_CAPABILITY": "bogus"}, "AVX2"),
    ],
)
def test_aten_cpu_capability_is_predicted_with_its_override(
    host: str, env: dict[str, str], variant: str
) -> None:
    assert predict(cpu_rule("torch.aten_cpu_capability"), HOSTS[host], env).variant == variant


def test_only_the_facts_that_select_code_are_recorded() -> None:
    prediction = predict(cpu_rule("vllm._C"), HOSTS["avx512"])
    assert prediction.facts == {
        "arch": "x86_64",
        "cpu:avx512f": True,
        "cpu:avx512vl": True,
        "cpu:avx512bw": True,
        "cpu:avx512dq": True,
        "cpu:avx512_bf16": False,
    }
    forced = predict(
        cpu_rule("torch.aten_cpu_capability"), HOSTS["avx2"], {"ATEN_CPU_CAPABILITY": "avx2"}
    )
    assert forced.facts["env:ATEN_CPU_CAPABILITY"] == "avx2"
    assert "cpu:sse4_2" not in forced.facts


def test_another_dispatch_is_one_drift_naming_module_variants_and_the_deciding_fact() -> None:
    recorded = predict(cpu_rule("vllm._C"), HOSTS["avx512"])
    here = predict(cpu_rule("vllm._C"), HOSTS["avx2"])
    drift = differs("vllm._C", "vllm._C_AVX512", recorded.facts, here)
    assert drift is not None
    assert drift.kind is DriftKind.DISPATCH and drift.subject == "vllm._C"
    assert drift.expected == (
        "vllm._C_AVX512 (arch=x86_64, cpu:avx512_bf16=no, cpu:avx512bw=yes, cpu:avx512dq=yes, "
        "cpu:avx512f=yes, cpu:avx512vl=yes)"
    )
    assert drift.observed == (
        "vllm._C_AVX2 (arch=x86_64, cpu:avx512_bf16=no, cpu:avx512bw=no, cpu:avx512dq=no, "
        "cpu:avx512f=no, cpu:avx512vl=no)"
    )
    assert "cpu:avx512f" in drift.why and "cpu:avx512_bf16" not in drift.why
    assert differs("vllm._C", "vllm._C_AVX512", recorded.facts, recorded) is None


def test_a_rule_that_leaves_some_host_unpredicted_is_malformed() -> None:
    with pytest.raises(ValidationError, match="the last variant must need no CPU flag"):
        Dispatch.model_validate(
            {
                "name": "m._C",
                "kind": "module",
                "decided_by": "here",
                "variants": [{"name": "m._C", "when": {"cpu_flags": ["avx2"]}}],
            }
        )
    with pytest.raises(ValidationError, match="the module itself must be one variant"):
        Dispatch.model_validate(
            {
                "name": "m._C",
                "kind": "module",
                "decided_by": "here",
                "variants": [{"name": "m._C_AVX2"}],
            }
        )


# --- the live audit accepts exactly the predicted variant ----------------------------------------

LOADER = """
import ctypes, sys, time
ctypes.CDLL(sys.argv[1])
print("ready", flush=True)
time.sleep(120)
"""

VARIANTS = ("_C", "_C_AVX512", "_C_AVX2")


@pytest.fixture
def avx2_process(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A process that imported `fakepkg._C_AVX2`: a real ELF at that module's file name, beside
    the two variants it did not load."""
    package = tmp_path / "venv" / "lib" / "site-packages" / "fakepkg"
    package.mkdir(parents=True)
    zlib = Path("/usr/lib/x86_64-linux-gnu/libz.so.1").resolve()
    for variant in VARIANTS:
        shutil.copyfile(zlib, package / f"{variant}.abi3.so")
    child = subprocess.Popen(
        [sys.executable, "-c", LOADER, str(package / "_C_AVX2.abi3.so")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    yield child.pid, tmp_path / "venv"
    child.kill()
    child.wait()


def fake_set(directory: Path) -> KernelSet:
    (directory / "fake.toml").write_text(
        'schema = "repro.kernels/v1"\nname = "fake"\ndescription = "vLLM-like dispatch"\n'
        "[[dispatch]]\n"
        'name = "fakepkg._C"\nkind = "module"\ndecided_by = "import_kernels"\n'
        "variants = [\n"
        '  { name = "fakepkg._C", when = { cpu_flags = ["avx512f", "avx512_bf16"] } },\n'
        '  { name = "fakepkg._C_AVX512", when = { cpu_flags = ["avx512f"] } },\n'
        '  { name = "fakepkg._C_AVX2" },\n'
        "]\n"
    )
    return KernelSet.load("fake", directory)


def judge_as(pid: int, venv: Path, kernel_set: KernelSet, host: str) -> list[tuple[str, str]]:
    tree = snapshot_tree(pid)
    policy = policy_allowing(
        tree,
        venv,
        modules=("fakepkg._C",),
        dispatches={d.name: d for d in kernel_set.dispatch},
        host=HOSTS[host],
    )
    return [
        (d.kind.value, d.expected + " | " + d.observed) for d in judge_tree(tree, policy).drifts
    ]


def test_the_audit_accepts_the_variant_its_host_selects(
    avx2_process: tuple[int, Path], tmp_path: Path
) -> None:
    pid, venv = avx2_process
    assert judge_as(pid, venv, fake_set(tmp_path), "avx2") == []


@pytest.mark.parametrize(("host", "expected"), [("avx512", "_C_AVX512"), ("avx512-bf16", "_C")])
def test_the_audit_refuses_a_variant_its_host_does_not_select(
    avx2_process: tuple[int, Path], tmp_path: Path, host: str, expected: str
) -> None:
    pid, venv = avx2_process
    drifts = judge_as(pid, venv, fake_set(tmp_path), host)
    assert [kind for kind, _ in drifts] == ["not-mapped", "dispatch"]
    assert drifts[0][1].startswith(f"fakepkg.{expected} mapped by a process of the tree")
    assert drifts[1][1].endswith("| fakepkg._C_AVX2 mapped")


# --- a real AVX-512 host's own answers -------------------------------------------------------

H200_HOST = Path(__file__).resolve().parent / "evidence" / "h200" / "dispatch.json"


def test_the_rules_predict_what_torch_chose_on_a_real_avx512_bf16_host() -> None:
    """`tests/evidence/h200/dispatch.json` was captured on an Intel Xeon with AVX-512, AVX512-BF16
    and AMX: its /proc/cpuinfo flags and torch's own answers there (the ATen capability, and the
    two checks vLLM's CPU platform makes before importing a kernel library). The rules, given
    those flags, must say the same: vLLM would import `vllm._C`, ATen runs its AVX512 path."""
    captured = json.loads(H200_HOST.read_text())
    host = HostCapabilities(captured["arch"], frozenset(captured["cpu_flags"]))
    assert (
        captured["torch_cpu_is_avx512_supported"] and captured["torch_cpu_is_avx512_bf16_supported"]
    )
    assert predict(cpu_rule("vllm._C"), host).variant == "vllm._C"
    assert (
        predict(cpu_rule("torch.aten_cpu_capability"), host).variant
        == (captured["aten_cpu_capability"])
    )
