"""Restoring a serving environment from locked wheel artifacts, through a real package index.

The index is a directory of wheels made here (pip's find-links, the way this machine's own pip
configuration serves local wheels), installed by the real pip into a real venv of this
interpreter's release. One wheel has a console script, whose shebang names the venv's path.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import platform
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from repro_serving.builder.documents.lock import EvidenceClass, PythonClaim, WheelArtifact
from repro_serving.builder.documents.manifest import Python
from repro_serving.builder.drift import DriftKind
from repro_serving.builder.hashing import sha256_file
from repro_serving.builder.restore.python import restore_python
from repro_serving.builder.restore.step import Action

RELEASE = platform.python_version()
PYTHON = Python.model_validate(
    {"interpreter": RELEASE, "venv": "unused", "packages": {"alpha": "==1.0", "beta": "==2.0"}}
)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode("ascii")


def make_wheel(
    index: Path, name: str, version: str, *, script: bool = False, body: str = ""
) -> Path:
    """A pure-Python wheel (PEP 427) with a module, a RECORD and, with `script`, a console
    script entry point."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f'VERSION = "{version}"\n{body}'.encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: repro-tests\n"
            b"Root-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    if script:
        files[f"{dist_info}/entry_points.txt"] = (
            f"[console_scripts]\n{name} = {name}:main\n".encode()
        )
        files[f"{name}/__init__.py"] += b"def main():\n    print('hello from ' + VERSION)\n"
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    record += f"{dist_info}/RECORD,,\n"
    wheel = index / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{dist_info}/RECORD", record)
    return wheel


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package index of two wheels, configured the way pip takes any index: by its settings."""
    directory = tmp_path / "index"
    directory.mkdir()
    make_wheel(directory, "alpha", "1.0", script=True)
    make_wheel(directory, "beta", "2.0")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(directory))
    return directory


def claim_for(index: Path, **overrides: str) -> PythonClaim:
    artifacts = {
        name: WheelArtifact(
            name=name,
            version=version,
            filename=f"{name}-{version}-py3-none-any.whl",
            sha256=overrides.get(name) or sha256_file(index / f"{name}-{version}-py3-none-any.whl"),
        )
        for name, version in (("alpha", "1.0"), ("beta", "2.0"))
    }
    return PythonClaim(
        evidence=EvidenceClass.LIVE,
        interpreter=RELEASE,
        packages={"alpha": "1.0", "beta": "2.0"},
        artifacts=artifacts,
    )


def test_a_venv_is_restored_from_the_locked_wheels_and_runs_at_its_final_path(
    index: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "envs" / ".venv-serve"
    steps: list[str] = []
    result = restore_python(claim_for(index), PYTHON, venv, progress=steps.append)
    assert result.action is Action.RESTORED, result.drifts
    assert steps[-1] == "renamed into place"
    script = venv / "bin" / "alpha"
    assert script.read_text().splitlines()[0] == f"#!{venv}/bin/python"
    assert subprocess.run([script], capture_output=True, text=True, check=True).stdout == (
        "hello from 1.0\n"
    )
    for path in (venv / "bin").iterdir():
        if path.is_file() and not path.is_symlink():
            assert ".restoring-" not in path.read_text(errors="replace"), path
    assert ".restoring-" not in (venv / "pyvenv.cfg").read_text()
    assert sorted(p.name for p in venv.parent.iterdir()) == [".venv-serve"], "nothing left beside"


def test_a_second_restore_does_nothing_and_says_so(index: Path, tmp_path: Path) -> None:
    venv = tmp_path / ".venv-serve"
    assert restore_python(claim_for(index), PYTHON, venv).action is Action.RESTORED
    before = {p: p.stat().st_mtime_ns for p in venv.rglob("*") if not p.is_symlink()}
    again = restore_python(claim_for(index), PYTHON, venv)
    assert again.action is Action.ALREADY
    assert {p: p.stat().st_mtime_ns for p in venv.rglob("*") if not p.is_symlink()} == before


def test_a_wheel_whose_bytes_differ_from_the_lock_is_refused_before_install(
    index: Path, tmp_path: Path
) -> None:
    venv = tmp_path / ".venv-serve"
    served = sha256_file(index / "beta-2.0-py3-none-any.whl")
    # Same name, same version, other bytes: what a compromised or rebuilt index would serve.
    (index / "beta-2.0-py3-none-any.whl").unlink()
    make_wheel(index, "beta", "2.0", body="EVIL = True\n")
    swapped = sha256_file(index / "beta-2.0-py3-none-any.whl")
    result = restore_python(claim_for(index, beta=served), PYTHON, venv)
    assert result.action is Action.REFUSED
    assert [(d.kind, d.subject, d.expected, d.observed) for d in result.drifts] == [
        (
            DriftKind.ARTIFACT,
            "wheel beta-2.0-py3-none-any.whl",
            f"sha256 {served}",
            f"sha256 {swapped}",
        )
    ]
    assert not venv.exists() and list(tmp_path.glob(".venv-serve*")) == []


def test_a_distribution_without_a_locked_wheel_is_refused_by_name(
    index: Path, tmp_path: Path
) -> None:
    claim = claim_for(index)
    claim = claim.model_copy(
        update={
            "artifacts": {"alpha": claim.artifacts["alpha"]},
            "unrestorable": {"beta": "the package index served no wheel of it"},
        }
    )
    result = restore_python(claim, PYTHON, tmp_path / ".venv-serve")
    assert result.action is Action.REFUSED
    assert [(d.subject, d.observed) for d in result.drifts] == [
        ("package beta", "the package index served no wheel of it")
    ]
    assert not (tmp_path / ".venv-serve").exists()


def _pinned(pin: str) -> Python:
    return PYTHON.model_copy(update={"interpreter": pin})


def test_an_exact_pin_no_interpreter_here_has_is_refused_saying_how_to_get_one(
    index: Path, tmp_path: Path
) -> None:
    claim = claim_for(index).model_copy(update={"interpreter": "3.11.99"})
    result = restore_python(claim, _pinned("3.11.99"), tmp_path / ".venv-serve")
    assert result.action is Action.REFUSED
    (drift,) = result.drifts
    assert drift.kind is DriftKind.PYTHON_INTERPRETER
    assert drift.expected == "Python 3.11.99" and f"Python {RELEASE}" in drift.observed
    assert "pyenv install 3.11.99" in drift.why and "--python PATH" in drift.why
    assert not (tmp_path / ".venv-serve").exists()


def test_a_series_pin_admits_another_release_than_the_sealed_one_and_says_so(
    index: Path, tmp_path: Path
) -> None:
    """Sealed with a release this machine lacks, the manifest admitting any of its series: the
    venv is made with the release found here, and the step names both."""
    claim = claim_for(index).model_copy(update={"interpreter": "3.11.99"})
    series = ".".join(RELEASE.split(".")[:2])
    venv = tmp_path / ".venv-serve"
    result = restore_python(claim, _pinned(series), venv)
    assert result.action is Action.RESTORED, result.drifts
    assert result.detail.startswith(f"Python {RELEASE} (sealed with 3.11.99, which the manifest")
    again = restore_python(claim, _pinned(series), venv)
    assert again.action is Action.ALREADY and again.detail == result.detail


DEBIAN_PYTHON = Path("/usr/bin/python3.11")
"""The distribution's own interpreter beside the project's (`make test` installs it)."""


def test_a_second_real_interpreter_named_with_python_makes_the_venv(
    index: Path, tmp_path: Path
) -> None:
    debian = subprocess.run(
        [DEBIAN_PYTHON, "-I", "-S", "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert debian != RELEASE, "two interpreters of different releases"
    venv = tmp_path / ".venv-serve"
    result = restore_python(claim_for(index), _pinned("3.11"), venv, interpreter=DEBIAN_PYTHON)
    assert result.action is Action.RESTORED, result.drifts
    assert result.detail.startswith(f"Python {debian} (sealed with {RELEASE}")
    reported = subprocess.run(
        [venv / "bin" / "python", "-c", "import alpha, sys; print(sys.version.split()[0])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert reported == debian


def test_an_interpreter_the_pin_does_not_admit_is_refused_by_name(
    index: Path, tmp_path: Path
) -> None:
    result = restore_python(
        claim_for(index), _pinned(RELEASE), tmp_path / ".venv-serve", interpreter=DEBIAN_PYTHON
    )
    assert result.action is Action.REFUSED
    (drift,) = result.drifts
    assert drift.expected == f"Python {RELEASE}"
    assert drift.observed.startswith(f"{DEBIAN_PYTHON}: Python 3.11.")
    assert not (tmp_path / ".venv-serve").exists()


def test_an_existing_venv_that_differs_is_refused_and_force_replaces_it(
    index: Path, tmp_path: Path
) -> None:
    venv = tmp_path / ".venv-serve"
    assert restore_python(claim_for(index), PYTHON, venv).action is Action.RESTORED
    module = next(venv.glob("lib/python*/site-packages/beta/__init__.py"))
    module.write_text(module.read_text() + "# changed\n")
    refused = restore_python(claim_for(index), PYTHON, venv)
    assert refused.action is Action.REFUSED
    assert any(d.kind is DriftKind.INSTALLED_FILE for d in refused.drifts)
    assert "changed" in module.read_text(), "a refusal leaves what is there"
    forced = restore_python(claim_for(index), PYTHON, venv, force=True)
    assert forced.action is Action.RESTORED
    assert restore_python(claim_for(index), PYTHON, venv).action is Action.ALREADY


# --- kill -9 at any point -------------------------------------------------------------------------


def _restore_killed(index: Path, venv: Path, *, at_step: int = 0, after_s: float = 0.0) -> None:
    """Restore in a forked child, killed with its whole process group (pip included) right
    after progress message `at_step`, or `after_s` seconds into the restore."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.setpgid(0, 0)
            seen = 0

            def kill_at(_message: str) -> None:
                nonlocal seen
                seen += 1
                if seen == at_step:
                    os.killpg(0, signal.SIGKILL)

            restore_python(claim_for(index), PYTHON, venv, progress=kill_at)
        finally:
            os._exit(0)
    if after_s:
        time.sleep(after_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def test_a_restore_killed_at_any_point_never_leaves_a_venv_that_holds(
    index: Path, tmp_path: Path
) -> None:
    steps: list[str] = []
    restore_python(
        claim_for(index), PYTHON, tmp_path / "count" / ".venv-serve", progress=steps.append
    )
    renamed = steps.index("renamed into place") + 1
    kills = [{"at_step": step} for step in range(1, len(steps) + 1)]
    kills += [{"after_s": seconds} for seconds in (0.2, 0.8, 1.6, 2.4)]
    for number, kill in enumerate(kills):
        venv = tmp_path / f"kill-{number}" / ".venv-serve"
        _restore_killed(index, venv, **kill)  # type: ignore[arg-type]
        if venv.exists():
            # Only the rename puts it there: then it is complete.
            assert kill.get("at_step", renamed) >= renamed or "after_s" in kill
            assert restore_python(claim_for(index), PYTHON, venv).action is Action.ALREADY, kill
        else:
            again = restore_python(claim_for(index), PYTHON, venv)
            assert again.action is Action.RESTORED, (kill, again.drifts)
            assert sorted(p.name for p in venv.parent.iterdir()) == [".venv-serve"]
