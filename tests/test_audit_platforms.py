"""Platform sets in the live audit: a kernel compiled at run time into a JIT directory is
accepted where the platform set names that directory, and refused where it does not.

A real process maps a real shared object from a Triton-like cache outside every allowed root;
repro audits it with and without the cuda platform set.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.cli import main

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
        [sys.executable, "-c", LOADER, str(launcher)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    yield child.pid, launcher
    child.kill()
    child.wait()


def audit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, str]]]:
    code = main(["audit", *args, "--json"])
    drifts: list[dict[str, str]] = json.loads(capsys.readouterr().out)["drifts"]
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
