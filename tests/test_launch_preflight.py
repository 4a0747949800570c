"""The bundle's own launcher refuses a machine before it installs anything.

`tools/launch_helper.py preflight` runs under the python3 the launcher found, with the standard
library alone, so it reads the host as `builder.observe.host` does and predicts the code the CPU
selects as `builder.native.dispatch` does: each host kind (AVX2 only, AVX-512 without BF16,
AVX-512 with BF16, another architecture) is faked here and the two are held equal on every
dispatch of every shipped kernel set. The committed bundle is then judged on each faked host.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from repro_serving.builder.documents.lock import Lock
from repro_serving.builder.drift import DriftKind
from repro_serving.builder.handoff import launch_helper
from repro_serving.builder.handoff.launch_helper import HostView
from repro_serving.builder.handoff.launcher import HELPER_SOURCE
from repro_serving.builder.hostcheck import native_drifts
from repro_serving.builder.native.dispatch import HostCapabilities, predict
from repro_serving.builder.native.kernels import KERNELS_DIR, KernelSet, dispatches

TINY = REPO_ROOT / "repro" / "tiny-cpu"
AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c"})
AVX512 = AVX2 | {"avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512cd"}
HOSTS = {
    "avx2 only": ("x86_64", AVX2),
    "avx-512 without bf16": ("x86_64", AVX512),
    "avx-512 with bf16": ("x86_64", AVX512 | {"avx512_bf16"}),
    "aarch64": ("aarch64", frozenset({"asimd", "sve"})),
}


def host(kind: str) -> HostView:
    arch, flags = HOSTS[kind]
    return HostView(
        arch=arch, os="linux", os_release="Debian GNU/Linux 12 (bookworm)", kernel="6.1.0",
        cpu_flags=flags, pci=(),
    )  # fmt: skip


@pytest.mark.parametrize("kind", HOSTS)
@pytest.mark.parametrize("env", [{}, {"ATEN_CPU_CAPABILITY": "avx2"}])
def test_the_launcher_predicts_the_code_each_cpu_selects_as_repro_does(
    kind: str, env: dict[str, str]
) -> None:
    arch, flags = HOSTS[kind]
    sets = [KernelSet.load(p.stem) for p in sorted(KERNELS_DIR.glob("*.toml"))]
    rules = dispatches(sets)
    assert rules, "the shipped kernel sets declare dispatches"
    for kernel_set, rule in rules.values():
        text = (KERNELS_DIR / f"{kernel_set}.toml").read_text()
        raw = next(r for r in tomllib.loads(text)["dispatch"] if r["name"] == rule.name)
        ours = predict(rule, HostCapabilities(arch, flags), env).variant or "no variant"
        assert launch_helper.predict(raw, arch, flags, env) == ours, (kernel_set, rule.name)


def _sealed_host_kind() -> str:
    """The kind of host the committed tiny-cpu bundle was sealed on, from its lock."""
    facts = json.loads((TINY / "lock.json").read_text())["native"]["dispatch"][0]["facts"]
    if facts.get("cpu:avx512_bf16"):
        return "avx-512 with bf16"
    return "avx-512 without bf16" if facts.get("cpu:avx512f") else "avx2 only"


@pytest.mark.parametrize("kind", [k for k in HOSTS if k != "aarch64"])
def test_a_cpu_of_other_dispatch_is_refused_naming_what_to_run_instead(kind: str) -> None:
    problems, chosen = launch_helper.preflight(TINY, host(kind))
    if kind == _sealed_host_kind():
        assert not any("this CPU selects" in p for p in problems), problems
        return
    assert chosen is None, "nothing else is looked at"
    assert problems and all("this CPU selects" in p for p in problems), problems
    first = problems[0]
    assert first.startswith("vllm._C: this CPU selects vllm._C")
    assert "the bundle ran vllm._C" in first and "cpu:avx512f=" in first
    assert "repro build manifests/tiny-cpu.toml --signing-key KEY" in first


def test_the_manifests_enforced_host_facts_are_named() -> None:
    enforced = {
        "os_release": "Ubuntu 24.04.4 LTS",
        "accelerators": [{"vendor_device": "8086:e223", "count": 4}],
        "drivers": {"xe": "1.2"},
    }
    here = dataclasses.replace(host("avx2 only"), pci=(("0000:23:00.0", "8086:e223", "xe", "1.1"),))
    assert launch_helper.host_problems(enforced, here) == [
        "os_release: the manifest's [host] enforces 'Ubuntu 24.04.4 LTS'; this host has "
        "'Debian GNU/Linux 12 (bookworm)'",
        "accelerator 8086:e223: the manifest enforces 4 present; found 1 at 0000:23:00.0",
        "driver xe: the manifest enforces 1.2; found 1.1",
    ]


def test_a_port_in_use_is_named() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        (problem,) = launch_helper._port_problems(port)
    assert problem.startswith(f"port {port} on 127.0.0.1 (the manifest's [launch] port)")
    assert launch_helper._port_problems(port) == []


def test_an_interpreter_the_manifest_admits_is_found_or_how_to_get_one_said() -> None:
    release = ".".join(map(str, sys.version_info[:3]))
    chosen, problem = launch_helper.serving_interpreter(release[:4], release)
    assert problem is None and chosen is not None
    assert Path(chosen).resolve() == Path(chosen)
    none, problem = launch_helper.serving_interpreter("3.11.99", "3.11.99")
    assert none is None and problem is not None
    assert "needs Python 3.11.99" in problem and "pyenv install 3.11.99" in problem


def test_the_helper_refuses_in_seconds_with_the_standard_library_alone(tmp_path: Path) -> None:
    """Run as the launcher runs it: isolated, with the distribution's python3, before any
    install; the host is this one."""
    start = time.monotonic()
    done = subprocess.run(
        ["/usr/bin/python3", "-I", "-B", str(HELPER_SOURCE), "preflight", str(TINY)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert time.monotonic() - start < 15
    if _sealed_host_kind() == _this_host_kind():
        assert done.returncode == 0, done.stderr
        assert Path(done.stdout.strip()).is_file()
    else:
        assert done.returncode == 1 and "this CPU selects" in done.stderr


def _this_host_kind() -> str:
    flags = HostView.here().cpu_flags
    if "avx512_bf16" in flags:
        return "avx-512 with bf16"
    return "avx-512 without bf16" if "avx512f" in flags else "avx2 only"


def test_a_host_without_the_serving_venv_is_a_drift_naming_the_missing_place() -> None:
    """`verify --host` or a launch from a directory where the manifest's venv is not found: the
    lock's mappings cannot be located, which is said once, not an internal error."""
    path = REPO_ROOT / "repro" / "tiny-cpu" / "lock.json"
    lock = Lock.from_bytes(path.read_bytes(), where=str(path))
    venv = "/nowhere/.venv-serve"
    (drift,) = native_drifts(lock, {"venv": venv, "site": f"{venv}/lib/python3.11/site-packages"})
    assert drift.kind is DriftKind.NOT_OBSERVABLE and drift.subject == "native.roles"
    assert drift.expected == "a place on this host for {python_prefix}"
    paths = [o.path for objects in lock.native.roles.values() for o in objects]
    unplaced = [p for p in paths if "{python_prefix}" in p]
    assert unplaced and len(unplaced) < len(paths)
    assert drift.observed == f"none: {len(unplaced)} locked mappings cannot be located here"
