"""The serving virtual environment a manifest names, and what is installed in it.

This module owns three things:

- the values of the path placeholders (`{python}`, `{venv}`, `{site}`, `{python_prefix}`,
  `{model.<role>}`), read from the venv's `pyvenv.cfg`, so that every place that expands a
  manifest template sees the same paths, and the reverse, `placeholder_path`, which writes an
  observed absolute path in those terms so that a fact holds for the same bytes under another
  root and never for other bytes;
- the Python facts (`observe_python`): the interpreter's version as `pyvenv.cfg` states it and
  as the interpreter itself reports it, every distribution installed in site-packages with its
  version read from its `*.dist-info/METADATA` (never by importing it, never through pip),
  editable installs and the directory they point to, and every installed file against the
  sha256 its distribution's RECORD states;
- `compare`, the pure judgement of those facts against `[python]`.

RECORD scope: with `check_record`, every distribution of site-packages is checked, not only the
pinned ones, because an unpinned dependency (transformers, tokenizers, ...) changes what runs as
much as a pinned one, and the whole serving venv of the embedded default (149 distributions,
35,419 hashed entries, 3.1 GB) checks in 4 to 6 s on two cores with a warm page cache. Entries
without a hash (RECORD itself) and bytecode caches (`__pycache__/*.pyc`, which the interpreter
and pip rewrite) are skipped, as the RECORD specification allows. Files in site-packages that no
RECORD lists are reported as unowned, except `__pycache__/*.pyc`, which RECORD leaves out by
design: a stray `.pth` or `sitecustomize.py` runs at every start of the interpreter.
"""

from __future__ import annotations

import base64
import csv
import io
import os
import posixpath
import re
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, ConfigDict

from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import BadInput, NotObservable
from repro_serving.builder.hashing import file_size, over_cores, sha256_file
from repro_serving.builder.manifest import Manifest, Python, expand
from repro_serving.builder.native.pyenv import parse_venv_config
from repro_serving.builder.readers import ENVIRONMENT_FILE_LIMIT, NoSuchFile, parse_json, read_bytes

INTERPRETER_TIMEOUT_S: Final = 30.0


@dataclass(frozen=True)
class Venv:
    root: Path
    python: Path
    site: Path
    prefix: Path
    version: str
    """The interpreter version `pyvenv.cfg` states, such as '3.11.7'."""

    @classmethod
    def at(cls, root: Path) -> Venv:
        config = root / "pyvenv.cfg"
        try:
            data = read_bytes(config, limit=ENVIRONMENT_FILE_LIMIT, what="pyvenv.cfg")
        except NoSuchFile as error:
            raise NotObservable(
                "the serving virtual environment is missing",
                where=str(config),
                expected="a virtual environment made by `python -m venv`",
                found=error.found,
                hint="create it with `make serve-env`",
            ) from error
        values = parse_venv_config(data.decode("utf-8", errors="replace"))
        home, version = values.get("home"), values.get("version_info") or values.get("version")
        if not home or not version:
            raise NotObservable(
                "pyvenv.cfg does not say which interpreter made the environment",
                where=str(config),
                expected="'home' and 'version' keys",
                found=", ".join(sorted(values)) or "no keys",
            )
        major_minor = ".".join(version.split(".")[:2])
        return cls(
            root=root,
            python=root / "bin" / "python",
            site=root / "lib" / f"python{major_minor}" / "site-packages",
            prefix=Path(home).parent,
            version=version,
        )


def path_values(manifest: Manifest) -> dict[str, str]:
    """The value of every path placeholder of `manifest` on this host."""
    values = venv_values(Venv.at(_normal(manifest.resolve(manifest.python.venv))))
    for model in manifest.models:
        values[f"model.{model.role}"] = str(_normal(model.directory(manifest.resolve("."))))
    return values


def venv_values(venv: Venv) -> dict[str, str]:
    """The placeholders a virtual environment gives values to."""
    return {
        "python": str(venv.python),
        "venv": str(venv.root),
        "site": str(venv.site),
        "python_prefix": str(venv.prefix),
    }


def _normal(path: Path) -> Path:
    """Absolute and without `..`, symlinks kept: a venv's `bin/python` must stay its own path."""
    return Path(os.path.normpath(path.absolute()))


def expand_all(templates: tuple[str, ...], values: dict[str, str]) -> tuple[str, ...]:
    return tuple(expand(template, values) for template in templates)


def placeholder_path(path: Path | str, values: Mapping[str, str]) -> str:
    """`path` as a template over `values`: the longest value that is `path` or one of its parent
    directories becomes its `{name}`; a path under none stays absolute. Braces of the path itself
    are doubled, so that `expand(placeholder_path(p, values), values)` gives `p` back, normalised.
    Ties between values of equal length go to the first name in sorted order."""
    normal = posixpath.abspath(path)  # `_normal` as a string: absolute, `..` gone, symlinks kept
    best: tuple[str, str] | None = None
    for name, value in sorted(values.items()):
        root = os.path.normpath(value)
        inside = normal == root or normal.startswith(root.rstrip("/") + "/")
        if inside and (best is None or len(root) > len(best[1])):
            best = (name, root)
    if best is None:
        return _literal(normal)
    name, root = best
    rest = normal[len(root) :] if root != "/" else normal
    return "{" + name + "}" + _literal(rest)


def _literal(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


# --- facts ----------------------------------------------------------------------------------------


class _Fact(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Distribution(_Fact):
    """One installed distribution, as its dist-info directory describes it."""

    name: str
    """As its METADATA spells it."""
    version: str
    dist_info: str
    """The dist-info directory, in placeholder form."""
    editable: str | None = None
    """For an editable install, the directory it points to, in placeholder form."""
    record_sha256: str | None = None
    """The sha256 of its RECORD file; None when it has none."""

    @property
    def key(self) -> str:
        return normalize(self.name)


class RecordMismatch(_Fact):
    """An installed file whose bytes are not those its distribution's RECORD states."""

    path: str
    """In placeholder form."""
    recorded: str
    """As RECORD states it: `sha256=<urlsafe base64 without padding>`."""
    observed: str | None
    """In the same form; None when the file is missing."""


class RecordCheck(_Fact):
    """Every hashed RECORD entry of one distribution checked against the file it names."""

    distribution: str
    """The normalised name."""
    files: int
    """How many entries carry a hash and were checked."""
    mismatches: tuple[RecordMismatch, ...] = ()


class PythonFacts(_Fact):
    venv: str
    """The venv's root, in placeholder form."""
    configured_version: str
    """The version `pyvenv.cfg` states."""
    version: str
    """The version the interpreter reports (first word of `sys.version`)."""
    build: str
    """The rest of `sys.version`: build date and compiler; recorded, not judged."""
    distributions: tuple[Distribution, ...]
    """By normalised name, then dist-info path."""
    records: tuple[RecordCheck, ...] | None
    """One check per distribution that has a RECORD; None when RECORD checks were not asked."""
    unowned: tuple[str, ...] = ()
    """Files of site-packages no RECORD lists, in placeholder form (only with RECORD checks)."""


def normalize(name: str) -> str:
    """A distribution name normalised per PEP 503."""
    return re.sub(r"[-_.]+", "-", name).lower()


# --- observing ------------------------------------------------------------------------------------


def observe_python(python: Python, venv: Venv, values: Mapping[str, str]) -> PythonFacts:
    """The Python facts of `venv`; RECORD checks when `python.check_record`."""
    version, build = interpreter_version(venv.python)
    found = tuple(distributions(venv.site, values))
    records: tuple[RecordCheck, ...] | None = None
    unowned: tuple[str, ...] = ()
    if python.check_record:
        entries = {d: record_entries(_expand(d.dist_info, values)) for d in found}
        records = check_records(entries, values)
        unowned = unowned_files(venv.site, entries.values(), values)
    return PythonFacts(
        venv=placeholder_path(venv.root, values),
        configured_version=venv.version,
        version=version,
        build=build,
        distributions=found,
        records=records,
        unowned=unowned,
    )


def interpreter_version(python: Path) -> tuple[str, str]:
    """`sys.version` of `python`, split into the version and the rest; run isolated and without
    `site`, so that no `.pth` file or package of the environment runs."""
    argv = [str(python), "-I", "-S", "-c", "import sys; print(sys.version)"]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=INTERPRETER_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NotObservable(
            "cannot run the interpreter of the virtual environment",
            where=str(python),
            found=str(error),
            hint="check that the environment's interpreter exists and runs",
        ) from error
    if done.returncode != 0 or not done.stdout.strip():
        raise NotObservable(
            "the interpreter of the virtual environment did not report its version",
            where=str(python),
            expected="sys.version on stdout, exit status 0",
            found=f"exit status {done.returncode}: {done.stderr.strip() or 'no output'}",
        )
    version, _, build = done.stdout.strip().partition(" ")
    return version, build.strip()


def distributions(site: Path, values: Mapping[str, str]) -> Iterator[Distribution]:
    """Every `*.dist-info` of `site` but pip's `~`-named leftovers, by normalised name."""
    found = [
        _distribution(path, values)
        for path in sorted(site.glob("*.dist-info"))
        if not path.name.startswith("~") and path.is_dir()
    ]
    yield from sorted(found, key=lambda d: (d.key, d.dist_info))


def _distribution(dist_info: Path, values: Mapping[str, str]) -> Distribution:
    name, version = _name_and_version(dist_info / "METADATA")
    record = dist_info / "RECORD"
    return Distribution(
        name=name,
        version=version,
        dist_info=placeholder_path(dist_info, values),
        editable=_editable_target(dist_info / "direct_url.json", values),
        record_sha256=sha256_file(record) if record.is_file() else None,
    )


def _name_and_version(metadata: Path) -> tuple[str, str]:
    what = "an installed distribution's metadata"
    text = _installed_file(metadata, what).decode("utf-8", errors="replace")
    headers = HeaderParser().parsestr(text.split("\n\n", 1)[0])
    name, version = headers.get("Name"), headers.get("Version")
    if not name or not version:
        raise NotObservable(
            "an installed distribution's metadata has no name or version",
            where=str(metadata),
            expected="'Name' and 'Version' headers",
            found=", ".join(sorted(headers.keys())) or "no headers",
            hint="the installation is broken: reinstall the distribution",
        )
    return str(name).strip(), str(version).strip()


def _editable_target(direct_url: Path, values: Mapping[str, str]) -> str | None:
    """The directory of an editable install (PEP 610: `dir_info.editable`), None otherwise."""
    if not direct_url.is_file():
        return None
    what = "an installed distribution's direct_url.json"
    try:
        document = parse_json(_installed_file(direct_url, what), where=str(direct_url))
    except BadInput as error:
        raise NotObservable(
            f"cannot read {what}", where=str(direct_url), found=error.found or error.what
        ) from error
    dir_info = document.get("dir_info") if isinstance(document, dict) else None
    if not isinstance(dir_info, dict) or dir_info.get("editable") is not True:
        return None
    url = urlparse(str(document.get("url", "")))
    return placeholder_path(unquote(url.path), values)


def _installed_file(path: Path, what: str) -> bytes:
    """A file of an installed distribution: one that is missing, not a regular file or too large
    leaves the installation unobservable as it is."""
    try:
        return read_bytes(path, limit=ENVIRONMENT_FILE_LIMIT, what=what)
    except BadInput as error:
        raise NotObservable(
            f"cannot read {what}",
            where=str(path),
            found=error.found or error.what,
            hint="the installation is broken: reinstall the distribution",
        ) from error


@dataclass(frozen=True)
class RecordEntry:
    path: str
    """Absolute and normalised."""
    recorded: str | None
    """`sha256=<urlsafe base64 without padding>`; None for an entry without a hash."""


def record_entries(dist_info: Path) -> tuple[RecordEntry, ...]:
    """The entries of `dist_info`'s RECORD, paths resolved against site-packages (the
    dist-info's parent); none when it has no RECORD."""
    record = dist_info / "RECORD"
    if not record.is_file():
        return ()
    text = _installed_file(record, "an installed distribution's RECORD").decode(
        "utf-8", errors="replace"
    )
    rows = csv.reader(io.StringIO(text))
    site = str(dist_info.parent)
    return tuple(
        RecordEntry(posixpath.normpath(posixpath.join(site, row[0])), _hash(row))
        for row in rows
        if row
    )


def _hash(row: list[str]) -> str | None:
    """The recorded hash of an entry, None for none and for a bytecode cache: pip compiles
    after installing, overwriting any `.pyc` a wheel shipped (numpy's `conv_template` cache in
    the serving venv), so such a hash no longer holds on a sound install."""
    if len(row) < 2 or not row[1] or _is_bytecode_cache(row[0]):
        return None
    return row[1]


def _is_bytecode_cache(path: str) -> bool:
    head, name = posixpath.split(path)
    return posixpath.basename(head) == "__pycache__" and name.endswith(".pyc")


def record_digest(path: Path | str) -> str:
    """The sha256 of `path` in RECORD's form."""
    raw = bytes.fromhex(sha256_file(path))
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def check_records(
    entries: Mapping[Distribution, tuple[RecordEntry, ...]],
    values: Mapping[str, str],
) -> tuple[RecordCheck, ...]:
    """Each distribution's hashed entries against the files, hashed on every core."""
    hashed = {d: [e for e in group if e.recorded is not None] for d, group in entries.items()}
    paths = sorted({e.path for group in hashed.values() for e in group})
    observed = dict(zip(paths, over_cores(paths, _observed_digest, file_size), strict=True))
    return tuple(
        RecordCheck(
            distribution=distribution.key,
            files=len(group),
            mismatches=tuple(
                RecordMismatch(
                    path=placeholder_path(entry.path, values),
                    recorded=str(entry.recorded),
                    observed=observed[entry.path],
                )
                for entry in group
                if observed[entry.path] != entry.recorded
            ),
        )
        for distribution, group in hashed.items()
        if distribution.record_sha256 is not None
    )


def _observed_digest(path: str) -> str | None:
    if not posixpath.isfile(path):
        return None
    return record_digest(path)


def unowned_files(
    site: Path, records: Iterable[tuple[RecordEntry, ...]], values: Mapping[str, str]
) -> tuple[str, ...]:
    """Files under `site` that no RECORD lists, `__pycache__/*.pyc` aside."""
    owned = {entry.path for group in records for entry in group}
    unowned = []
    for directory, _dirs, files in os.walk(site):
        for name in files:
            path = posixpath.join(directory, name)
            if path not in owned and not _is_bytecode_cache(path):
                unowned.append(placeholder_path(path, values))
    return tuple(sorted(unowned))


def _expand(template: str, values: Mapping[str, str]) -> Path:
    return Path(expand(template, values))


# --- comparing ------------------------------------------------------------------------------------


def compare(
    expected: Python, observed: PythonFacts, sources: Mapping[str, str] | None = None
) -> list[Drift]:
    """Every way `observed` disagrees with `[python]`. `sources` gives the directory of each
    `[[source]]` by name, in placeholder form like the facts, for packages installed from one."""
    return [
        *interpreter_drifts(expected.interpreter, observed),
        *package_drifts(expected, observed, sources or {}),
        *editable_drifts(expected, observed),
        *record_drifts(expected, observed),
    ]


def version_matches(pin: str, version: str) -> bool:
    """'3.11' accepts any 3.11.x; '3.12.13' only that release."""
    wanted = pin.split(".")
    return version.split(".")[: len(wanted)] == wanted


def interpreter_drifts(pin: str, observed: PythonFacts) -> list[Drift]:
    return [
        Drift(
            kind=DriftKind.PYTHON_INTERPRETER,
            subject=f"{observed.venv}: {where}",
            expected=f"Python {pin}",
            observed=f"Python {version}",
            why="the environment's interpreter is not the pinned version",
        )
        for where, version in (
            ("pyvenv.cfg", observed.configured_version),
            ("the interpreter's sys.version", observed.version),
        )
        if not version_matches(pin, version)
    ]


def package_drifts(
    expected: Python, observed: PythonFacts, sources: Mapping[str, str]
) -> list[Drift]:
    drifts = []
    for name, package in sorted(expected.packages.items()):
        installed = [d for d in observed.distributions if d.key == normalize(name)]
        found = ", ".join(f"{d.name}=={d.version}" for d in installed) or "not installed"
        if len(installed) == 1 and installed[0].version == package.pinned:
            drifts += _source_drifts(name, package.source, installed[0], sources)
            continue
        why = "the pinned version is not installed"
        if len(installed) > 1:
            why = "more than one installed distribution claims the name"
        drifts.append(
            Drift(
                kind=DriftKind.PACKAGE_VERSION,
                subject=f"package {name}",
                expected=f"{name}=={package.pinned}",
                observed=found,
                why=why,
            )
        )
    return drifts


def _source_drifts(
    name: str, source: str | None, installed: Distribution, sources: Mapping[str, str]
) -> list[Drift]:
    if source is None or installed.editable == sources.get(source):
        return []
    return [
        Drift(
            kind=DriftKind.EDITABLE_INSTALL,
            subject=f"package {name}",
            expected=f"editable install of source {source} at {sources.get(source, '?')}",
            observed=_install_kind(installed),
            why="the package is not installed from its declared source tree",
        )
    ]


def _install_kind(distribution: Distribution) -> str:
    if distribution.editable is None:
        return f"installed from a distribution ({distribution.dist_info})"
    return f"editable install pointing at {distribution.editable}"


def editable_drifts(expected: Python, observed: PythonFacts) -> list[Drift]:
    """An editable install whose code no `[[source]]` pins: RECORD covers none of its code."""
    declared = {normalize(n) for n, p in expected.packages.items() if p.source is not None}
    return [
        Drift(
            kind=DriftKind.EDITABLE_INSTALL,
            subject=f"package {d.name}",
            expected="an installed distribution, or a package declared with its source",
            observed=_install_kind(d),
            why="an editable install runs code from a tree no pin covers",
        )
        for d in observed.distributions
        if d.editable is not None and d.key not in declared
    ]


def record_drifts(expected: Python, observed: PythonFacts) -> list[Drift]:
    if not expected.check_record:
        return []
    if observed.records is None:
        return [
            Drift(
                kind=DriftKind.INSTALLED_FILE,
                subject=observed.venv,
                expected="every installed file checked against its RECORD",
                observed="not checked",
                why="the facts were observed without RECORD checks",
            )
        ]
    drifts = [_no_record(d) for d in observed.distributions if d.record_sha256 is None]
    # a check of no file checked nothing: every RECORD lists the dist-info's METADATA at least
    checked = {c.distribution for c in observed.records if c.files > 0}
    drifts += [
        _unchecked(d)
        for d in observed.distributions
        if d.record_sha256 is not None and normalize(d.name) not in checked
    ]
    drifts += [_mismatch(c.distribution, m) for c in observed.records for m in c.mismatches]
    drifts += [_unowned(path) for path in observed.unowned]
    return drifts


def _unchecked(distribution: Distribution) -> Drift:
    return Drift(
        kind=DriftKind.INSTALLED_FILE,
        subject=f"{distribution.dist_info}/RECORD",
        expected="every file of its RECORD checked",
        observed="no check of its files recorded",
        why=f"nothing says the files of {distribution.name} are the ones its RECORD hashes",
    )


def _no_record(distribution: Distribution) -> Drift:
    return Drift(
        kind=DriftKind.INSTALLED_FILE,
        subject=f"{distribution.dist_info}/RECORD",
        expected="a RECORD listing every installed file with its sha256",
        observed="no RECORD",
        why=f"the files of {distribution.name} cannot be checked",
    )


def _mismatch(distribution: str, mismatch: RecordMismatch) -> Drift:
    modified = mismatch.observed is not None
    return Drift(
        kind=DriftKind.INSTALLED_FILE,
        subject=mismatch.path,
        expected=mismatch.recorded,
        observed=mismatch.observed or "missing",
        why=f"{'modified' if modified else 'missing'} since {distribution} was installed",
    )


def _unowned(path: str) -> Drift:
    return Drift(
        kind=DriftKind.UNOWNED_FILE,
        subject=path,
        expected="only files some distribution's RECORD lists",
        observed="a file no RECORD lists",
        why="site-packages holds a file no installed distribution accounts for",
    )
