"""Platform sets in the live audit: a kernel compiled at run time into a JIT directory is
accepted where the platform set names that directory, and refused where it does not.

A real process maps a real shared object from a Triton-like cache outside every allowed root;
repro audits it with and without the cuda platform set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from policies import policy_allowing
from schemas import assert_valid

from repro_serving.builder.cli import main
from repro_serving.builder.hashing import sha256_file
from repro_serving.builder.native.kernels import KernelSet
from repro_serving.builder.native.policy import judge_tree
from repro_serving.builder.native.processes import snapshot_tree

LOADER = """
import ctypes, sys, time
ctypes.CDLL(sys.argv[1])
print("ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def jit_process(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    cache = tmp_path / "home" / ".triton" / "cache" / "HEUKIG4JTP2Y"
    cache.mkdir(parents=True)
    launcher = cache / "__triton_launcher.so"
    shutil.copyfile(Path("/usr/lib/x86_64-linux-gnu/libz.so.1").resolve(), launcher)
    child = subprocess.Popen(
        [sys.executable, "-c", LOADER, str(launcher)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOME": str(tmp_path / "home")},  # the cache is under its HOME
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    yield child.pid, launcher
    child.kill()
    child.wait()


def audit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, str]]]:
    code = main(["audit", *args, "--json"])
    drifts: list[dict[str, str]] = assert_valid("audit", capsys.readouterr().out)["drifts"]
    return code, drifts


def test_a_jit_artifact_outside_the_roots_is_refused_without_a_platform_set(
    jit_process: tuple[int, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    pid, launcher = jit_process
    code, drifts = audit(capsys, "--pid", str(pid))
    assert code == 1
    assert [(d["kind"], d["why"]) for d in drifts] == [
        ("unexpected-mapping", "mapped from outside the allowed roots")
    ]
    assert drifts[0]["observed"] == f"{launcher} (dlopen)"


def test_the_cuda_platform_set_accepts_it_as_a_jit_artifact(
    jit_process: tuple[int, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    pid, _launcher = jit_process
    assert audit(capsys, "--pid", str(pid), "--kernel-set", "cuda") == (0, [])


def test_the_cpu_platform_set_does_not(
    jit_process: tuple[int, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    pid, _launcher = jit_process
    code, drifts = audit(capsys, "--pid", str(pid), "--kernel-set", "cpu")
    assert code == 1 and len(drifts) == 1


# --- kernel-set pins -----------------------------------------------------------------------------


def pinned_set(directory: Path, path: str, sha256: str) -> KernelSet:
    (directory / "pins.toml").write_text(
        'schema = "repro.kernels/v1"\nname = "pins"\ndescription = "one pinned library"\n'
        f'[[libraries]]\npath = "{path}"\nsha256 = "{sha256}"\n'
    )
    return KernelSet.load("pins", directory)


def judge_pins(pid: int, root: Path, kernel_set: KernelSet) -> list[tuple[str, str, str]]:
    tree = snapshot_tree(pid)
    policy = policy_allowing(
        tree, root, kernel_sets=(kernel_set,), values={"venv": str(root.resolve())}
    )
    return [(d.kind.value, d.subject, d.observed) for d in judge_tree(tree, policy).drifts]


def test_a_mapped_library_is_judged_against_its_kernel_set_pin(
    jit_process: tuple[int, Path], tmp_path: Path
) -> None:
    pid, launcher = jit_process
    root = tmp_path / "home"
    relative = launcher.relative_to(root)
    digest = sha256_file(launcher)
    sets = tmp_path / "sets"
    sets.mkdir()

    assert judge_pins(pid, root, pinned_set(sets, f"{{venv}}/{relative}", digest)) == []

    other = "0" * 64
    assert judge_pins(pid, root, pinned_set(sets, f"{{venv}}/{relative}", other)) == [
        ("unexpected-mapping", str(launcher), f"bytes drift (sha256 {digest})")
    ]
    assert judge_pins(pid, root, pinned_set(sets, "{venv}/elsewhere/lib.so", digest)) == [
        ("origin-drift", str(launcher), f"origin drift (sha256 {digest})")
    ]
