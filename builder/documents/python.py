"""The Python facts of a serving venv as sealed in `evidence/observations.json` (observed by
`builder.observe.python`), and `compare`, their pure judgement against a manifest's `[python]`."""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from repro_serving.builder.documents.manifest import Python
from repro_serving.builder.drift import Drift, DriftKind

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
