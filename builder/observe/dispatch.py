"""The stack's own word on a code path it chose: each dispatch's probe, run live.

A code path inside the same bytes (torch's ATen CPU capability) maps nothing the live audit
could see, so the serving interpreter is asked, in a private empty directory with the launch
environment and nothing inherited, exactly as a server start would see it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from repro_serving.builder.errors import NotObservable
from repro_serving.builder.native.dispatch import DispatchKind
from repro_serving.builder.native.kernels import KernelSet
from repro_serving.builder.observe.program import run_program

PROBE_TIMEOUT_S: Final = 120.0


def probe_code_paths(
    kernel_sets: Sequence[KernelSet], python: Path, env: Mapping[str, str]
) -> dict[str, str]:
    """Dispatch name → the variant the stack reports, for every code path with a probe."""
    answers: dict[str, str] = {}
    for kernel_set in kernel_sets:
        for dispatch in kernel_set.dispatch:
            if dispatch.kind is DispatchKind.CODE_PATH and dispatch.probe:
                answers[dispatch.name] = _ask(dispatch.name, dispatch.probe, python, env)
    return answers


def _ask(name: str, code: str, python: Path, env: Mapping[str, str]) -> str:
    where = f"dispatch {name}: {python} -c {code!r}"
    with tempfile.TemporaryDirectory(prefix="repro-probe-") as cwd:
        whole = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": cwd, "TMPDIR": cwd, **env}
        done = run_program(
            [str(python), "-c", code],
            timeout=PROBE_TIMEOUT_S,
            env=whole,
            cwd=cwd,
            cannot="the stack could not be asked which code path it chose",
            where=where,
        )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise NotObservable(
            "the stack could not be asked which code path it chose",
            where=where,
            expected="exit 0 and the variant's name on the last line",
            found=f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}",
        )
    return lines[-1].strip()
