"""repro as a user installs it: `pip install <repo>` (not editable) into a clean venv, then run
from another directory, also with unrelated top-level `builder` and `launch` packages first on
the path (PyPI and ROS 2 ship both names).

The venv is made once per module (about a minute: pip resolves and installs the runtime
dependencies); the demo of the installed copy runs the real tiny server and is marked `server`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro_serving import DISTRIBUTION
from repro_serving.builder import commands
from repro_serving.builder.own import release
from repro_serving.builder.sealing.bundle import wheel_filename
from repro_serving.builder.sealing.statement import repro_version

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
MANIFESTS = sorted((REPO / "manifests").glob("*.toml"))
SHADOW = """raise ImportError("an unrelated top-level package {name!r} was imported")\n"""


def test_discovery_finds_every_folder_of_the_mapping_through_the_links() -> None:
    """setuptools finds the packages from the checkout's root, through the links under
    repro_serving/: every folder below a mapped folder (a Python package or one of package
    data only, such as manifests/ and keys/) is a package, and nothing else is."""
    discovery = pytest.importorskip("setuptools.discovery")
    find = SETUPTOOLS["packages"]["find"]
    assert find["where"] == ["."]
    finder = discovery.PEP420PackageFinder if find["namespaces"] else discovery.PackageFinder
    discovered = set(finder.find(str(REPO), include=find["include"]))
    mapped = SETUPTOOLS["package-dir"]
    expected = set(mapped)
    for package, folder in mapped.items():
        for inner in (REPO / folder).rglob("*"):
            parts = inner.relative_to(REPO / folder).parts
            if inner.is_dir() and "__pycache__" not in parts and not any("." in p for p in parts):
                expected.add(".".join((package, *parts)))
    assert sorted(discovered) == sorted(expected)
    assert {"repro_serving.builder.commands", "repro_serving.attestation"} <= discovered
    # the label of `repro --version` digests the files of the same packages
    assert release.checkout_packages(REPO, SETUPTOOLS) == sorted(discovered)


def test_the_links_of_the_checkout_name_the_mapped_folders() -> None:
    """In a checkout, repro_serving/<name> is the folder package-dir maps repro_serving.<name>
    to, so the interpreter and the type checker see the names an installed repro has."""
    for package, folder in SETUPTOOLS["package-dir"].items():
        if package == "repro_serving":
            continue
        link = REPO / "repro_serving" / package.removeprefix("repro_serving.")
        assert link.is_symlink(), link
        assert link.resolve() == (REPO / folder).resolve()


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean venv holding repro installed from this checkout, not editable: its bin/."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "install", "-c", str(REPO / "requirements" / "dev.txt"), str(REPO)],
        check=True,
        capture_output=True,
    )
    return venv / "bin"


@pytest.fixture(scope="module")
def shadow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of top-level `builder` and `launch` packages that fail when imported."""
    root = tmp_path_factory.mktemp("shadow")
    for name in ("builder", "launch"):
        (root / name).mkdir()
        (root / name / "__init__.py").write_text(SHADOW.format(name=name))
    return root


@pytest.fixture
def elsewhere(tmp_path: Path) -> Iterator[Path]:
    """A working directory that is not the checkout."""
    yield tmp_path


def _run(
    argv: list[str], cwd: Path, pythonpath: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """`argv` in `cwd` with nothing of this process's repro settings: no PYTHONPATH (unless
    `pythonpath`), no REPRO_* variable (unless given)."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    base = {k: v for k, v in base.items() if not k.startswith("REPRO_")}
    if pythonpath is not None:
        base["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        argv, cwd=cwd, env=base | env, capture_output=True, text=True, check=False
    )


def test_installed_not_editable_and_only_its_own_package(installed: Path) -> None:
    python = str(installed / "python")
    probe = (
        "import importlib.metadata as m, json; d = m.distribution('repro-serving');"
        "print(json.dumps([d.read_text('top_level.txt'), d.read_text('direct_url.json')]))"
    )
    done = _run([python, "-c", probe], cwd=installed)
    top_level, direct_url = __import__("json").loads(done.stdout)
    assert top_level.split() == ["repro_serving"]
    assert '"editable": true' not in (direct_url or "")


@pytest.mark.parametrize("with_shadow", [False, True], ids=["plain", "shadowed"])
def test_every_command_runs_from_another_directory(
    installed: Path, shadow: Path, elsewhere: Path, with_shadow: bool
) -> None:
    path = shadow if with_shadow else None
    repro = str(installed / "repro")
    version = _run([repro, "--version"], elsewhere, path)
    assert (version.returncode, version.stdout.split()) == (0, [DISTRIBUTION, repro_version()])
    module = _run([str(installed / "python"), "-m", "repro_serving", "--version"], elsewhere, path)
    assert module.stdout == version.stdout
    for name in commands.names():
        done = _run([repro, name, "--help"], elsewhere, path)
        assert done.returncode == 0, (name, done.stderr)
    for manifest in MANIFESTS:
        done = _run([repro, "check", str(manifest)], elsewhere, path)
        assert done.returncode == 0, (manifest.name, done.stdout[-2000:], done.stderr)
    for bundle in ("tiny-cpu", "laguna-102tps"):
        argv = [
            repro,
            "verify",
            str(REPO / "repro" / bundle),
            "--key",
            str(REPO / "keys/example.pub"),
        ]
        done = _run(argv, elsewhere, path)
        assert done.returncode == 0, (bundle, done.stdout[-3000:], done.stderr)


def test_the_checkout_is_not_shadowed_either(shadow: Path, elsewhere: Path) -> None:
    done = _run(
        [sys.executable, "-m", "repro_serving", "check", str(MANIFESTS[0])], elsewhere, shadow
    )
    assert done.returncode == 0, done.stderr


def test_key_paths_come_from_the_environment(installed: Path, elsewhere: Path) -> None:
    verify = [str(installed / "repro"), "verify", str(REPO / "repro" / "laguna-102tps")]
    public = str(REPO / "keys" / "example.pub")
    refused = _run(verify, elsewhere)
    assert refused.returncode == 2 and "no trusted key" in refused.stderr
    done = _run(verify, elsewhere, REPRO_KEY=public)
    assert done.returncode == 0, done.stderr
    both = _run(verify, elsewhere, REPRO_KEY=public, REPRO_TRUSTED_KEYS=str(REPO / "keys"))
    assert both.returncode == 2 and "both a key file and a trusted-keys directory" in both.stderr
    absent = str(elsewhere / "absent.pub")  # the command line wins over the environment
    given = _run([*verify, "--key", public], elsewhere, REPRO_KEY=absent)
    assert given.returncode == 0, given.stderr
    build = [str(installed / "repro"), "build", str(MANIFESTS[0]), "--out", str(elsewhere)]
    unsigned = _run(build, elsewhere)
    assert unsigned.returncode == 2 and "REPRO_SIGNING_KEY" in unsigned.stderr


def test_an_installed_repro_seals_the_wheel_it_was_installed_from(
    installed: Path, elsewhere: Path
) -> None:
    """No source tree beside an installed repro: the bundle's tools/ wheel is its installed
    files packed again. It holds exactly the files of the wheel built from this checkout, with
    the same bytes, and packing twice gives the same bytes."""
    repro = str(installed / "repro")
    manifest = str(REPO / "manifests" / "laguna-102tps.toml")
    wheels = []
    for out in (elsewhere / "first", elsewhere / "second"):
        argv = [repro, "build", manifest, "--out", str(out), "-q"]
        done = _run(argv, elsewhere, REPRO_SIGNING_KEY=str(REPO / "keys" / "example.key"))
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr
        assert done.stderr == ""  # -q: no progress lines
        (wheel,) = (out / "laguna-102tps" / "tools").glob("*.whl")
        wheels.append(wheel)
        verified = _run(
            [repro, "verify", str(out / "laguna-102tps"), "--json"],
            elsewhere,
            REPRO_KEY=str(REPO / "keys" / "example.pub"),
        )
        assert verified.returncode == 0, verified.stdout[-3000:]
    assert wheels[0].read_bytes() == wheels[1].read_bytes()
    built = elsewhere / "built"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(built), str(REPO)],
        check=True,
        capture_output=True,
    )
    (source_wheel,) = built.glob("*.whl")
    version = repro_version()
    labelled = release.parse_label(version)
    assert labelled is not None, version
    public = labelled[0]
    assert (wheels[0].name, source_wheel.name) == (
        wheel_filename(version),
        wheel_filename(public),
    )
    assert _contents(wheels[0]) == _relabelled(_contents(source_wheel), public, version)


def _relabelled(contents: dict[str, bytes], public: str, version: str) -> dict[str, bytes]:
    """pip's wheel of the checkout as repro packs it: the dist-info folder and METADATA's
    Version name the labelled version, every other byte the same."""
    folder, labelled = f"repro_serving-{public}.dist-info/", f"repro_serving-{version}.dist-info/"
    renamed = {
        (labelled + name.removeprefix(folder) if name.startswith(folder) else name): data
        for name, data in contents.items()
    }
    metadata = labelled + "METADATA"
    old, new = f"\nVersion: {public}\n".encode(), f"\nVersion: {version}\n".encode()
    assert renamed[metadata].count(old) == 1
    renamed[metadata] = renamed[metadata].replace(old, new)
    return renamed


def _contents(wheel: Path) -> dict[str, bytes]:
    """Every entry but RECORD (each wheel's own list of the others), by name."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if not n.endswith(".dist-info/RECORD")]
        return {name: archive.read(name) for name in names}


@pytest.mark.server
def test_the_demo_of_an_installed_repro(installed: Path, elsewhere: Path) -> None:
    """build (the wheel it carries packed again from the installed files), verify --host and
    launch, from the package data alone, serving from the checkout's restored environment."""
    serve = REPO / ".venv-serve"
    if not (serve / "bin" / "python").is_file():
        pytest.fail(f"no serving environment at {serve}: run `make serve-env`")
    out = elsewhere / "demo"
    done = _run(
        [str(installed / "repro"), "demo", "--serve-venv", str(serve), "--out", str(out)], elsewhere
    )
    assert done.returncode == 0, (done.stdout[-4000:], done.stderr[-4000:])
    (bundle,) = (out / "bundles").iterdir()
    (wheel,) = (bundle / "tools").glob("*.whl")
    assert wheel.name == wheel_filename(repro_version())
