"""A bundle handed to a machine that has never seen repro: its `launch`, README.md and tools/.

Each bundle is copied to an empty directory outside the repository and run there with a PATH
that holds python3 (this interpreter's base, not a venv), coreutils and nothing of repro, a
HOME of its own, no PYTHONPATH and no VIRTUAL_ENV: the launcher installs the repro sealed in
the bundle and runs it. The cheap cases use the committed Laguna record (an imported record:
`--verify-only`, or a refusal before anything is installed); one case restores and replays the
committed tiny-cpu bundle in full on a machine whose only interpreter is the distribution's
python3.11, with the outcome `repro launch` gets from the repository on this host (a passing
sealed run naming the interpreter difference on a host of its dispatch, the launcher's refusal
before anything is installed on another).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import bundle_assets
import pytest
from conftest import REPO_ROOT
from schemas import assert_valid

from repro_serving.builder.build import BuildRefused, staged_readme
from repro_serving.builder.cli import main
from repro_serving.builder.drift import DriftKind
from repro_serving.builder.handoff.readme import CHECK_HEADING
from repro_serving.builder.hostcheck import verify_here
from repro_serving.builder.sealing import bundle
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys, write_key_pair
from repro_serving.builder.verify import verify

COMMITTED = REPO_ROOT / "repro"
PUBLIC = REPO_ROOT / "keys" / "example.pub"
PRIVATE = REPO_ROOT / "keys" / "example.key"
TRUSTED = TrustedKeys.from_key_file(PUBLIC)
LAGUNA, TINY = "laguna-102tps", "tiny-cpu"
DROPPED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "XDG_CACHE_HOME", "XDG_DATA_HOME")
HANDOFF_CLAIMS = ("launch, ", "tools/ = ", "kernels/ = ", "README.md = ", "statement.")
"""Claims the README cannot state: of the files written with it, and of the statement signed
after it."""
QUICK_S = 300


@dataclass(frozen=True)
class Machine:
    """A fresh user on this machine: a HOME of their own and a PATH without repro."""

    home: Path
    bin: Path

    @classmethod
    def make(cls, root: Path, python: Path | None = None) -> Machine:
        """`python`: the machine's python3 (default: this interpreter's base)."""
        machine = cls(root / "home", root / "bin")
        machine.home.mkdir(parents=True)
        machine.bin.mkdir(parents=True)
        release = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        (machine.bin / "python3").symlink_to(python or Path(sys.base_prefix) / "bin" / release)
        return machine

    def env(self, path: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in DROPPED}
        env.update(HOME=str(self.home), PATH=path or f"{self.bin}:/usr/bin:/bin")
        assert shutil.which("repro", path=env["PATH"]) is None
        return env

    @property
    def envs(self) -> Path:
        return self.home / ".cache" / "repro" / "envs"


def handed_over(name: str, root: Path) -> Path:
    """The committed bundle `name`, copied to an empty directory outside the repository."""
    copy = root / "elsewhere" / name
    shutil.copytree(COMMITTED / name, copy)
    assert not copy.resolve().is_relative_to(REPO_ROOT)
    return copy


def launch(
    copy: Path, machine: Machine, *args: str, path: str | None = None, timeout: float = QUICK_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["./launch", *args],
        cwd=copy,
        env=machine.env(path),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def verify_json(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    capsys.readouterr()
    code = main(["verify", str(path), "--key", str(PUBLIC), "--json"])
    return code, assert_valid("verify", capsys.readouterr().out)


# --- what every bundle carries ------------------------------------------------------------------


@pytest.mark.parametrize("name", [TINY, LAGUNA])
def test_every_committed_bundle_carries_its_launcher_readme_and_tools(name: str) -> None:
    path = COMMITTED / name
    lock = json.loads((path / bundle.LOCK).read_text())
    sums = bundle.parse_sha256sums((path / bundle.SHA256SUMS).read_bytes(), where=name)
    assert bundle.handoff_content(lock["bundle"]["repro_version"]) <= sums.keys()
    assert (path / bundle.LAUNCHER).stat().st_mode & stat.S_IXUSR, "launch is executable"
    assert (path / bundle.LAUNCHER).read_bytes().startswith(b"#!/bin/sh\n")


@pytest.mark.parametrize("name", [TINY, LAGUNA])
def test_the_readme_states_the_values_verify_prints(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = verify_json(COMMITTED / name, capsys)
    assert code == 0
    claims = document["claims"]
    assert isinstance(claims, list)
    printed = [
        (c["claim"], c["evidence"], c["value"])
        for c in claims
        if not c["claim"].startswith(("content = ", *HANDOFF_CLAIMS))
    ]
    assert readme_rows(COMMITTED / name) == printed
    assert any(c["claim"] == "README.md = the claims recomputed above" and c["ok"] for c in claims)


def readme_rows(path: Path) -> list[tuple[str, str, str]]:
    lines = (path / bundle.README).read_text().splitlines()
    start = lines.index("| claim | class | value |") + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("| "):
            break
        cells = re.split(r" (?<!\\)\| ", line[2:-2])
        claim, evidence, value = (c.replace("\\|", "|").replace("\\\\", "\\") for c in cells)
        rows.append((claim, evidence, value))
    return rows


# --- checked without repro: the README's own recipe -----------------------------------------------


def recipe(path: Path) -> str:
    text = (path / bundle.README).read_text()
    section = text[text.index(CHECK_HEADING) :]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def run_recipe(copy: Path, public: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-eu", "-c", recipe(copy)],
        cwd=copy,
        env={"PATH": "/usr/bin:/bin", "PUB": str(public)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_readme_recipe_checks_a_bundle_without_repro(tmp_path: Path) -> None:
    copy = handed_over(LAGUNA, tmp_path)
    done = run_recipe(copy, PUBLIC)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.rstrip().endswith("Signature Verified Successfully")
    assert not {p.name for p in copy.iterdir()} - {p.name for p in (COMMITTED / LAGUNA).iterdir()}

    other = write_key_pair(tmp_path / "other")
    assert other.key_id != SigningKey.from_path(PRIVATE).key_id
    refused = run_recipe(copy, tmp_path / "other.pub")
    assert refused.returncode != 0
    assert "Signature Verification Failure" in refused.stdout + refused.stderr

    teacher = copy / bundle.ORACLE_DIR / bundle.TEACHER_FILE
    teacher.write_bytes(teacher.read_bytes().replace(b"1", b"2", 1))
    changed = run_recipe(copy, PUBLIC)
    assert changed.returncode != 0 and "oracle/teacher.json: FAILED" in changed.stdout


# --- the launcher: refusals before anything is installed ---------------------------------------


def test_no_key_no_run(tmp_path: Path) -> None:
    machine = Machine.make(tmp_path)
    done = launch(handed_over(LAGUNA, tmp_path), machine, "--verify-only")
    assert done.returncode == 2
    assert "no key, no run" in done.stderr
    assert not machine.envs.exists()


def locked_version(name: str = LAGUNA) -> str:
    """The version of the repro that sealed the committed bundle `name` (its tools' wheel)."""
    version = bundle_assets.sealer_version(COMMITTED / name)
    assert version is not None, f"the lock of {name} names the repro that sealed it"
    return version


WHEEL = f"{bundle.TOOLS_DIR}/{bundle.wheel_filename(locked_version())}"


def _restated(copy: Path, signatures: list[dict[str, str]]) -> None:
    """The statement made to seal the current SHA256SUMS, in an envelope with `signatures`: what
    anyone can write without the signer's key."""
    old = hashlib.sha256((COMMITTED / LAGUNA / "SHA256SUMS").read_bytes()).hexdigest()
    new = hashlib.sha256((copy / "SHA256SUMS").read_bytes()).hexdigest()
    statement = (copy / "statement.json").read_bytes().replace(old.encode(), new.encode())
    (copy / "statement.json").write_bytes(statement)
    envelope = json.loads((copy / "statement.dsse.json").read_text())
    envelope.update(payload=base64.b64encode(statement).decode(), signatures=signatures)
    (copy / "statement.dsse.json").write_text(json.dumps(envelope, separators=(",", ":")))


UNCHECKED = "no signature of statement.dsse.json could be checked"
UNPROVEN = {
    "no signature": (lambda copy: _restated(copy, []), "--key", 1, UNCHECKED),
    "a signature that is no base64": (
        lambda copy: _restated(copy, [{"keyid": "", "sig": "!!"}]), "--key", 1, UNCHECKED,
    ),
    "the signer's signature over the old statement": (
        lambda copy: _restated(
            copy, json.loads((COMMITTED / LAGUNA / "statement.dsse.json").read_text())["signatures"]
        ),
        "--key",
        1,
        "does not verify with",
    ),
    "a key file that is not there": (
        lambda copy: _restated(copy, []), "--key=missing", 2, "no such file",
    ),
    "a key directory without keys": (
        lambda copy: _restated(copy, []), "--trusted-keys", 2, "no *.pub key in it",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", UNPROVEN, ids=list(UNPROVEN))
def test_nothing_runs_unless_the_signature_is_proven_with_the_key_named(
    tmp_path: Path, case: str
) -> None:
    """The repro launch installs is the bundle's own: until openssl has proven the signature
    with the user's key, no file of the bundle may run, its helper included."""
    restate, option, code, reason = UNPROVEN[case]
    copy = handed_over(LAGUNA, tmp_path)
    ran = tmp_path / "helper-ran"
    helper = copy / "tools" / "launch_helper.py"
    helper.write_text(f"open({str(ran)!r}, 'w').close()\n" + helper.read_text())
    digest = hashlib.sha256(helper.read_bytes()).hexdigest()
    sums = [
        f"{digest}  tools/launch_helper.py" if line.endswith("  tools/launch_helper.py") else line
        for line in (copy / "SHA256SUMS").read_text().splitlines()
    ]
    (copy / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    restate(copy)
    machine = Machine.make(tmp_path)
    keys = tmp_path / "no-keys"
    keys.mkdir()
    arguments = {
        "--key": ["--key", str(PUBLIC)],
        "--key=missing": ["--key", str(tmp_path / "missing.pub")],
        "--trusted-keys": ["--trusted-keys", str(keys)],
    }[option]
    done = launch(copy, machine, *arguments, "--verify-only")
    assert done.returncode == code, done.stderr
    assert reason in done.stderr
    assert not ran.exists(), "a file of the unproven bundle ran"
    assert not machine.envs.exists()


def test_without_openssl_nothing_is_installed(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    path = _only(tools, *COREUTILS)
    (tools / "python3").symlink_to(Machine.make(tmp_path / "m").bin / "python3")
    machine = Machine.make(tmp_path)
    done = launch(handed_over(LAGUNA, tmp_path), machine, "--key", str(PUBLIC), path=path)
    assert done.returncode == 3, done.stderr
    assert "openssl (3.0 or later) is not on PATH" in done.stderr
    assert not machine.envs.exists()


@pytest.mark.parametrize("changed", [bundle.LAUNCHER, WHEEL])
def test_a_changed_launch_or_wheel_is_refused_before_anything_is_installed(
    tmp_path: Path, changed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = handed_over(LAGUNA, tmp_path)
    with (copy / changed).open("ab") as stream:
        stream.write(b"\n# one more line\n" if changed == bundle.LAUNCHER else b"\0")
    code, document = verify_json(copy, capsys)
    assert code == 1
    drifts = document["drifts"]
    assert isinstance(drifts, list)
    assert [(d["kind"], d["subject"]) for d in drifts] == [(DriftKind.FILE_DIGEST.value, changed)]
    machine = Machine.make(tmp_path)
    done = launch(copy, machine, "--key", str(PUBLIC))
    assert done.returncode == 1, done.stderr
    assert f"{changed}: FAILED" in done.stderr
    assert "nothing was installed" in done.stderr
    assert not machine.envs.exists()


def _fake(directory: Path, name: str, script: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def _only(directory: Path, *tools: str) -> str:
    for tool in tools:
        found = shutil.which(tool, path="/usr/bin:/bin")
        assert found is not None, tool
        (directory / tool).symlink_to(found)
    return str(directory)


COREUTILS = ("uname", "dirname", "sha256sum", "cut", "grep", "sed", "mktemp", "cat", "wc")


MACHINES = ("no python3", "python 3.10", "another OS", "another arch")


@pytest.mark.parametrize("machine_kind", MACHINES)
def test_launch_refuses_a_machine_it_cannot_run_on_and_says_why(
    tmp_path: Path, machine_kind: str
) -> None:
    machine = Machine.make(tmp_path)
    tools = tmp_path / "tools"
    tools.mkdir()
    if machine_kind == "no python3":
        path = _only(tools, *COREUTILS)
        reason = "no python3 on PATH"
    elif machine_kind == "python 3.10":
        _fake(tools, "python3", 'case "$*" in *version_info*) exit 1;; *) echo 3.10.14;; esac\n')
        path = _only(tools, *COREUTILS)
        reason = "is Python 3.10.14; launch needs 3.11 or later"
    elif machine_kind == "another OS":
        _fake(tools, "uname", "echo Darwin\n")
        path = f"{tools}:{machine.bin}:/usr/bin:/bin"
        reason = "the bundle runs on Linux; this machine runs Darwin"
    else:
        _fake(tools, "uname", 'if [ "$1" = -m ]; then echo aarch64; else echo Linux; fi\n')
        path = f"{tools}:{machine.bin}:/usr/bin:/bin"
        reason = "the bundle was sealed for x86_64; this machine is aarch64"
    done = launch(handed_over(LAGUNA, tmp_path), machine, "--key", str(PUBLIC), path=path)
    assert done.returncode in (1, 3), done.stderr
    assert reason in done.stderr
    assert not machine.envs.exists()


# --- the launcher: its private environment, made once, checked before every use ------------------


@dataclass(frozen=True)
class Launched:
    copy: Path
    machine: Machine
    first: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    root = tmp_path_factory.mktemp("launched")
    machine = Machine.make(root)
    copy = handed_over(LAGUNA, root)
    yield Launched(copy, machine, launch(copy, machine, "--key", str(PUBLIC), "--verify-only"))


def test_launch_installs_the_sealed_repro_and_verifies_the_bundle_with_it(
    launched: Launched,
) -> None:
    done = launched.first
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"making the private environment of {Path(WHEEL).name}" in done.stderr
    assert "signed by" in done.stderr and "(checked with openssl)" in done.stderr
    assert f"PASS: {launched.copy} signed by" in done.stderr
    (env,) = launched.machine.envs.iterdir()
    site = next((env / "venv" / "lib").glob("python3.*/site-packages"))
    installed = site / "repro_serving" / "builder" / "cli.py"
    with zipfile.ZipFile(launched.copy / WHEEL) as sealed:
        assert installed.read_bytes() == sealed.read("repro_serving/builder/cli.py")
    assert not list(env.rglob("__pycache__")), "no bytecode written"
    assert sorted(p.name for p in launched.copy.iterdir()) == sorted(
        p.name for p in (COMMITTED / LAGUNA).iterdir()
    ), "nothing was written into the bundle"


def test_a_second_launch_checks_the_environment_and_reuses_it(
    launched: Launched, tmp_path: Path
) -> None:
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    shutil.copy(PUBLIC, trusted / "example.pub")
    done = launch(launched.copy, launched.machine, "--trusted-keys", str(trusted), "--verify-only")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "checking the private environment" in done.stderr
    assert "making the private environment" not in done.stderr
    assert len(list(launched.machine.envs.iterdir())) == 1


REPRO = Path("repro_serving", "builder")
"""repro's own modules in the launcher's venv."""
MAN_PAGE = Path("share", "man", "man1", "ttx.1")
"""A data file of a pinned wheel (fontTools, through matplotlib): outside site-packages."""
CACHE_CHANGES = {
    "a .pth file added": lambda site: (site / "zz-startup.pth").write_text("import os\n"),
    "a module of repro changed": lambda site: (site / REPRO / "cli.py").write_text("pass\n"),
    "a dependency's file changed": lambda site: (site / "rich" / "__init__.py").write_text(""),
    "a module of repro removed": lambda site: (site / REPRO / "verify.py").unlink(),
    "a pyvenv.cfg in bin/, read before the venv's own": lambda site: (
        site.parents[2] / "bin" / "pyvenv.cfg"
    ).write_text("home = /elsewhere\ninclude-system-site-packages = true\n"),
    "lib64 made a directory of its own": lambda site: (
        (site.parents[2] / "lib64").unlink(),
        (site.parents[2] / "lib64").mkdir(),
    ),
    # a wheel's data files install under the environment's root (fontTools' manual page)
    "a data file of a wheel changed": lambda site: (site.parents[2] / MAN_PAGE).write_text(""),
    "a data file of a wheel removed": lambda site: (site.parents[2] / MAN_PAGE).unlink(),
    "a file added beside the data files": lambda site: (
        (site.parents[2] / MAN_PAGE).with_name("extra.1").write_text("")
    ),
}
"""How the cached environment is changed: each refused before the repro in it runs."""


def test_the_interpreter_configuration_of_the_environment_is_written_anew_before_use(
    launched: Launched, tmp_path: Path
) -> None:
    """pyvenv.cfg says where the standard library is (`home`) and whether the system's
    site-packages are seen: whatever the cache says, it is rewritten to this interpreter's."""
    machine = Machine.make(tmp_path)
    shutil.copytree(launched.machine.home / ".cache", machine.home / ".cache", symlinks=True)
    (env,) = machine.envs.iterdir()
    config = env / "venv" / "pyvenv.cfg"
    config.write_text(
        "home = /elsewhere/bin\nInclude-System-Site-Packages = true\nversion = 3.11.7\n"
    )
    done = launch(launched.copy, machine, "--key", str(PUBLIC), "--verify-only")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = config.read_text().splitlines()
    real = Path(sys.base_prefix) / "bin"
    assert f"home = {real.resolve()}" in lines and "include-system-site-packages = false" in lines
    assert not any("/elsewhere" in line or "true" in line for line in lines)


@pytest.mark.parametrize("change", CACHE_CHANGES, ids=list(CACHE_CHANGES))
def test_a_changed_private_environment_is_refused(
    launched: Launched, tmp_path: Path, change: str
) -> None:
    machine = Machine.make(tmp_path)
    shutil.copytree(launched.machine.home / ".cache", machine.home / ".cache", symlinks=True)
    (env,) = machine.envs.iterdir()
    site = next((env / "venv" / "lib").glob("python3.*/site-packages"))
    CACHE_CHANGES[change](site)
    done = launch(launched.copy, machine, "--key", str(PUBLIC), "--verify-only")
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"the private environment {env} is not what was installed" in done.stderr
    assert "repro verify" not in done.stderr, "the changed repro never ran"


# --- changed, then signed again: the recomputed claims refuse it --------------------------------


def resealed(root: Path, edit: Callable[[Path], None], *, handoff: bool = True) -> Path:
    """The committed Laguna bundle edited, then sealed again with the example key."""
    return bundle_assets.resealed(
        COMMITTED / LAGUNA, root, edit, "manifests/laguna-102tps.toml", handoff=handoff
    )


def _append(relative: str, data: bytes) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        with (root / relative).open("ab") as stream:
            stream.write(data)

    return edit


def _replace(relative: str, old: bytes, new: bytes) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        data = (root / relative).read_bytes()
        assert old in data
        (root / relative).write_bytes(data.replace(old, new, 1))

    return edit


def _wheel_module_changed(root: Path) -> None:
    """repro_serving/builder/cli.py inside the wheel changed, its RECORD left as it was."""
    wheel, module = root / WHEEL, "repro_serving/builder/cli.py"
    entries = []
    with zipfile.ZipFile(wheel) as archive:
        assert module in archive.namelist()
        for info in archive.infolist():
            data = archive.read(info)
            if info.filename == module:
                data += b"\n# changed\n"
            entries.append((info, data))
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for info, data in entries:
            archive.writestr(info, data)


LAUNCHER_CLAIM = "launch, tools/launch_helper.py = what repro writes"
TOOLS_CLAIM = f"tools/ = repro {locked_version()} and its dependencies pinned by sha256"
README_CLAIM = "README.md = the claims recomputed above"
RESEALED = {
    "launch given one more line": (_append(bundle.LAUNCHER, b"true\n"), [LAUNCHER_CLAIM]),
    "launch_helper.py changed": (
        _append("tools/launch_helper.py", b"\n# changed\n"), [LAUNCHER_CLAIM],
    ),
    "a value of the README changed": (
        _replace(bundle.README, b"101.94172124017027 tok/s", b"111.94172124017027 tok/s"),
        [README_CLAIM],
    ),
    "a module of the wheel changed": (_wheel_module_changed, [TOOLS_CLAIM]),
    "a dependency no longer pinned": (
        _replace("tools/requirements.txt", b"\npydantic==", b"\n# pydantic=="), [TOOLS_CLAIM],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", RESEALED, ids=list(RESEALED))
def test_a_changed_launcher_readme_or_tool_signed_again_is_refused_by_verify(
    tmp_path: Path, case: str
) -> None:
    edit, claims = RESEALED[case]
    report = verify(resealed(tmp_path, edit), TRUSTED)
    assert report.findings == (), "the signature and every digest hold"
    assert [c.claim for c in report.checks if not c.ok] == claims


def test_nothing_is_sealed_that_verify_would_refuse(tmp_path: Path) -> None:
    """README.md is made from the claims recomputed over the staged bundle: a claim that does
    not hold there stops the seal, naming it."""
    staged = tmp_path / LAGUNA
    shutil.copytree(COMMITTED / LAGUNA, staged)
    cleanup = staged / "evidence" / "run" / "cleanup-status.txt"
    cleanup.write_text(cleanup.read_text().replace("worker_status=0", "worker_status=1"))
    with pytest.raises(BuildRefused) as refused:
        staged_readme(staged)
    assert "cleanup status" in [d.subject for d in refused.value.drifts]


def test_a_bundle_sealed_without_its_launcher_is_refused_by_verify(tmp_path: Path) -> None:
    def without(root: Path) -> None:
        (root / bundle.LAUNCHER).unlink()
        (root / bundle.README).unlink()
        shutil.rmtree(root / bundle.TOOLS_DIR)

    report = verify(resealed(tmp_path, without, handoff=False), TRUSTED)
    content = next(c for c in report.checks if c.claim.startswith("content = "))
    assert not content.ok
    missing = sorted(bundle.handoff_content(locked_version()))
    assert content.detail == "missing " + ", ".join(missing)


def test_launch_runs_the_bundles_own_verify_and_stops_at_its_refusal(
    launched: Launched, tmp_path: Path
) -> None:
    """A README that lies, signed again: launch's own checks hold (every file is the sealed one),
    the repro it installed refuses, and nothing is restored or started."""
    edit, _ = RESEALED["a value of the README changed"]
    copy = resealed(tmp_path, edit)
    done = launch(copy, launched.machine, "--key", str(PUBLIC), "--verify-only")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "checking the private environment" in done.stderr, "the environment was reused"
    assert f"FAIL: {copy} signed by" in done.stderr
    assert "repro verify refused the bundle (above): nothing was restored or started" in done.stderr
    assert not (launched.machine.home / ".local").exists()


# --- the whole way: restore and replay tiny-cpu where repro never was -----------------------------


DEBIAN_PYTHON = Path("/usr/bin/python3.11")
"""The distribution's interpreter: another release of the series than the one the committed
bundle was sealed with (`make test` installs it where absent)."""


@pytest.mark.server
def test_a_copy_of_tiny_cpu_launches_itself_with_the_distributions_python_alone(
    tmp_path: Path,
) -> None:
    """The committed bundle, copied and launched by its own `launch` on a machine whose only
    interpreter is Debian's python3.11 (not the release it was sealed with): the serving venv
    restored with it from the locked wheels, the model regenerated, and the candidate replayed
    with the interpreter named as a difference the manifest allows; or, on a CPU that selects
    other kernels, refused in seconds before anything is installed, saying what to run instead."""
    release = subprocess.run(
        [DEBIAN_PYTHON, "-I", "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    sealed_release = json.loads((COMMITTED / TINY / "lock.json").read_text())["python"][
        "interpreter"
    ]
    assert release != sealed_release, "the machine's interpreter is another release"
    here = verify_here(COMMITTED / TINY, TRUSTED, anchor=REPO_ROOT / "manifests")
    other_dispatch = bool(here.stopped)
    machine = Machine.make(tmp_path, DEBIAN_PYTHON)
    copy = handed_over(TINY, tmp_path)
    started = time.monotonic()
    done = launch(
        copy, machine, "--key", str(PUBLIC), "--signing-key", str(PRIVATE), "--json", timeout=1800
    )
    work = machine.home / ".local" / "share" / "repro" / "bundles" / TINY
    if other_dispatch:
        assert time.monotonic() - started < 15
        assert done.returncode == 1, done.stderr[-3000:]
        assert "this CPU selects" in done.stderr and "the bundle ran vllm._C" in done.stderr
        assert "repro build manifests/tiny-cpu.toml --signing-key KEY" in done.stderr
        assert "nothing was installed" in done.stderr
        assert not machine.envs.exists() and not work.exists(), "nothing was installed"
        return
    document = assert_valid("launch", done.stdout)
    assert (work / ".venv-serve" / "bin" / "python").exists(), done.stderr[-3000:]
    assert done.returncode == 0 and document["ok"] is True, done.stderr[-3000:]
    assert document["run"]["profile"] == "candidate"
    (difference,) = document["differences"]
    assert (difference["subject"], difference["sealed"], difference["here"]) == (
        "python.interpreter",
        f"Python {sealed_release}",
        f"Python {release}",
    )
    assert difference["accepted_by"] == '[python] interpreter = "3.11"'
    sealed = Path(document["sealed"])
    assert sealed.parent == work / "runs"
    replayed = json.loads((sealed / "evidence" / "replay.json").read_text())
    assert replayed["differences"] == [difference]
    report = verify(sealed, TRUSTED)
    assert report.ok, [c.claim for c in report.checks if not c.ok]
    assert not (sealed / bundle.LAUNCHER).exists(), "a sealed run is evidence, not a bundle"
