"""Offline verification of a sealed bundle directory: signature, statement, files, SHA256SUMS.

Every problem is a `Drift` naming the file, never an exception, so one run reports all of them;
the caller turns a non-empty list into exit code 1. Only a bundle path that is not a directory
at all (or is the root directory, or is empty) is `BadInput`, and a directory that cannot be
listed or an entry that cannot be looked at `NotObservable`. Every file is read through
`builder.readers`, never through a symlink and within the limit of its kind; a file that is not
sealed is reported by its name and its size alone, never opened.

The order of trust: the DSSE envelope must verify against a trusted key (`builder.sealing.dsse`
says which envelopes are read) and carry payloadType application/vnd.in-toto+json; its payload is
then the statement (`builder.sealing.statement` says how it is read), and statement.json must be
exactly those bytes; the signed statement must name this directory; each of its subjects must
be a regular file on disk with its digest, and nothing else may be there; SHA256SUMS must list
exactly the same digests. When the signature does not verify nothing else is compared: there is
nothing to compare with.

A sealed run (the statement's run build type) also carries test-result.dsse.json: an envelope
verified the same way, whose payload is an in-toto test-result statement over exactly the
statement's subjects; it is missing, unsigned or about other files: drift. A bundle holds none.
What the statements say beyond the files (the lock's dependencies, the gates' verdicts) is
recomputed by `builder.verify`, from the statements this report hands on.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import BadInput, NotObservable, ReproError
from repro_serving.builder.hashing import sha256_bytes, sha256_file, sha256_files
from repro_serving.builder.readers import (
    ENVELOPE_LIMIT,
    SHA256SUMS_LIMIT,
    describe_mode,
    read_bytes,
)
from repro_serving.builder.sealing import dsse
from repro_serving.builder.sealing.bundle import (
    ENVELOPE,
    MANIFEST,
    REQUIRED_CONTENT,
    SEAL_FILES,
    SHA256SUMS,
    STATEMENT,
    TEST_RESULT_ENVELOPE,
    content_path_problem,
    parse_sha256sums,
    path_problem,
)
from repro_serving.builder.sealing.keys import TrustedKeys
from repro_serving.builder.sealing.statement import GateResultsStatement, Statement


@dataclass(frozen=True)
class BundleReport:
    """What verifying a bundle found: the signers, every sealed file's digest, the drifts."""

    path: Path
    key_ids: tuple[str, ...]
    digests: Mapping[str, str]
    findings: tuple[Drift, ...]
    sealed_run: bool = False
    """The signed statement seals a replay's run directory, not a bundle made by `repro build`."""
    statement: Statement | None = None
    """The signed provenance statement; None when the signature did not hold."""
    gate_results: GateResultsStatement | None = None
    """A sealed run's signed test-result statement, when it holds."""

    @property
    def ok(self) -> bool:
        return not self.findings


@dataclass(frozen=True)
class _Scan:
    """The regular files below a bundle directory with their sizes, and every other entry as a
    finding."""

    files: Mapping[str, Path]
    sizes: Mapping[str, int]
    directories: tuple[str, ...]
    findings: tuple[Drift, ...]


_NOT_A_BUNDLE_HINT = "name a directory written by `repro build`, such as repro/<name>"


def bundle_path(text: str) -> Path:
    """The bundle a command line names; an empty argument names none (not the current
    directory, which is what `Path("")` would make of it)."""
    if not text:
        raise BadInput(
            "not a bundle directory", where="''", found="an empty path", hint=_NOT_A_BUNDLE_HINT
        )
    return Path(text)


def verify_bundle(bundle: Path, trusted: TrustedKeys) -> BundleReport:
    """Verify `bundle` offline against `trusted`; the report's findings are empty when it holds."""
    if not bundle.is_dir():
        raise BadInput("not a bundle directory", where=str(bundle), hint=_NOT_A_BUNDLE_HINT)
    if not Path(os.path.abspath(bundle)).name:  # noqa: PTH100 - the name as given, as below
        raise BadInput(
            "not a bundle directory",
            where=str(bundle),
            found="the root directory: a bundle is a directory named after it",
            hint=_NOT_A_BUNDLE_HINT,
        )
    scan = _scan(bundle)
    signed, signature_findings = _signed_statement(scan, trusted)
    if signed is None:
        return BundleReport(bundle, (), MappingProxyType({}), (*scan.findings, *signature_findings))
    digests = signed.statement.digests()
    gate_results, gate_findings = _gate_results(scan, signed.statement, trusted)
    findings = [
        *scan.findings,
        *_statement_file(scan, signed),
        *gate_findings,
        *_bundle_name(bundle, signed.statement),
        *_layout(signed.statement),
        *_files(scan, digests),
        *_checksums(scan, digests),
    ]
    return BundleReport(
        bundle,
        signed.key_ids,
        MappingProxyType(digests),
        tuple(findings),
        signed.statement.sealed_run,
        signed.statement,
        gate_results,
    )


def _scan(bundle: Path) -> _Scan:
    files: dict[str, Path] = {}
    sizes: dict[str, int] = {}
    directories: list[str] = []
    findings: list[Drift] = []
    pending = [(bundle, "")]
    while pending:
        directory, prefix = pending.pop()
        for entry in _entries(directory):
            relative = prefix + os.fsdecode(entry.name)
            info = _lstat(entry.path)
            problem = path_problem(relative)
            if problem is not None:
                findings.append(_unsafe_path(relative, problem))
            elif stat.S_ISDIR(info.st_mode):
                directories.append(relative)
                pending.append((Path(entry.path), relative + "/"))
            elif stat.S_ISREG(info.st_mode):
                files[relative] = Path(entry.path)
                sizes[relative] = info.st_size
            else:
                findings.append(_not_regular(bundle, relative, Path(entry.path), info))
    return _Scan(files, sizes, tuple(sorted(directories)), tuple(findings))


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError as error:
        raise NotObservable(
            "cannot list a bundle directory",
            where=str(directory),
            found=error.strerror or type(error).__name__,
        ) from error


def _lstat(path: str) -> os.stat_result:
    """The entry itself, never what it links to; a directory that can be listed but not searched
    lets its names be read, not the entries they name."""
    try:
        return os.lstat(path)
    except OSError as error:
        raise NotObservable(
            "cannot look at a bundle entry",
            where=path,
            found=error.strerror or type(error).__name__,
            hint="check that every directory of the bundle is readable and searchable by this user",
        ) from error


def _unsafe_path(relative: str, problem: str) -> Drift:
    return Drift(
        kind=DriftKind.UNSAFE_PATH,
        subject=ascii(relative)[1:-1],
        expected="a plain relative path",
        observed=problem,
        why="a bundle file must have a name SHA256SUMS and the statement can hold as it is",
    )


def _not_regular(bundle: Path, relative: str, path: Path, info: os.stat_result) -> Drift:
    if stat.S_ISLNK(info.st_mode):
        target = path.readlink()
        # judged by the link's text alone: resolving could loop or leave the bundle
        lands = Path(os.path.normpath(path.parent.absolute() / target))
        outside = not lands.is_relative_to(Path(os.path.normpath(bundle.absolute())))
        return Drift(
            kind=DriftKind.NOT_REGULAR_FILE,
            subject=relative,
            expected="a regular file",
            observed=f"a symlink to {target}" + (" (outside the bundle)" if outside else ""),
            why="a bundle holds no symlinks: what a link reads can change without the bundle",
        )
    return Drift(
        kind=DriftKind.NOT_REGULAR_FILE,
        subject=relative,
        expected="a regular file",
        observed=describe_mode(info.st_mode),
        why="a bundle holds regular files and directories only",
    )


@dataclass(frozen=True)
class _Signed:
    statement: Statement
    payload: bytes
    key_ids: tuple[str, ...]


def _signed_statement(scan: _Scan, trusted: TrustedKeys) -> tuple[_Signed | None, list[Drift]]:
    """The statement the envelope carries and who signed it, or why there is none to trust."""
    if ENVELOPE not in scan.files:
        return None, [
            Drift(
                kind=DriftKind.SIGNATURE,
                subject=ENVELOPE,
                expected="a DSSE envelope signed by a trusted key",
                observed="no such file",
                why="the bundle is unsigned: none of its files can be trusted",
            )
        ]
    opened, drifts = _signed_payload(
        scan,
        ENVELOPE,
        trusted,
        Statement,
        untrusted="none of the bundle's files can be trusted",
        unread="the signed payload seals nothing",
    )
    if opened is None:
        return None, drifts
    verified, statement = opened
    return _Signed(statement, verified.payload, verified.key_ids), []


_Payload = TypeVar("_Payload", Statement, GateResultsStatement)


def _signed_payload(
    scan: _Scan,
    name: str,
    trusted: TrustedKeys,
    model: type[_Payload],
    *,
    untrusted: str,
    unread: str,
) -> tuple[tuple[dsse.Verified, _Payload] | None, list[Drift]]:
    """The envelope `name`, verified against the trusted keys, and the statement it carries;
    or the one drift that says why not (`untrusted`, `unread`: what each failure costs)."""
    try:
        verified = _verified(scan, name, trusted)
    except (BadInput, dsse.SignatureRefused) as error:
        return None, [_finding(DriftKind.SIGNATURE, error, untrusted, name)]
    try:
        _check_type(verified, name)
        payload = model.from_json(verified.payload, where=f"the payload of {name}")
    except BadInput as error:
        return None, [_finding(DriftKind.STATEMENT, error, unread, name)]
    return (verified, payload), []


def _verified(scan: _Scan, name: str, trusted: TrustedKeys) -> dsse.Verified:
    data = read_bytes(scan.files[name], limit=ENVELOPE_LIMIT, what=name, follow_symlinks=False)
    return dsse.verify(dsse.Envelope.from_json(data, where=name), trusted, where=name)


def _check_type(verified: dsse.Verified, name: str) -> None:
    if verified.payload_type != dsse.PAYLOAD_TYPE:
        raise BadInput(
            "the envelope does not carry an in-toto statement",
            where=name,
            expected=f"payloadType {dsse.PAYLOAD_TYPE}",
            found=f"payloadType {verified.payload_type}",
        )


def _gate_results(
    scan: _Scan, statement: Statement, trusted: TrustedKeys
) -> tuple[GateResultsStatement | None, list[Drift]]:
    """A sealed run's signed test-result statement over the statement's own subjects, or why
    there is none; a bundle's extra test-result envelope is reported, never read."""
    present = TEST_RESULT_ENVELOPE in scan.files
    if not statement.sealed_run:
        if not present:
            return None, []
        size = scan.sizes[TEST_RESULT_ENVELOPE]
        return None, [
            Drift(
                kind=DriftKind.EXTRA_FILE,
                subject=TEST_RESULT_ENVELOPE,
                expected="no such file",
                observed=f"a file of {size} bytes",
                why="only a sealed run carries the test results of its gates",
            )
        ]
    if not present:
        return None, [
            Drift(
                kind=DriftKind.MISSING_FILE,
                subject=TEST_RESULT_ENVELOPE,
                expected="a DSSE envelope of the run's gate results, signed by a trusted key",
                observed="no such file",
                why="a sealed run carries the test results of its gates",
            )
        ]
    consequence = "the run's gate results cannot be trusted"
    opened, drifts = _signed_payload(
        scan,
        TEST_RESULT_ENVELOPE,
        trusted,
        GateResultsStatement,
        untrusted=consequence,
        unread=consequence,
    )
    if opened is None:
        return None, drifts
    _, results = opened
    ours, theirs = statement.digests(), results.digests()
    if theirs == ours:
        return results, []
    differing = sorted(
        name for name in ours.keys() | theirs.keys() if ours.get(name) != theirs.get(name)
    )
    return None, [
        Drift(
            kind=DriftKind.STATEMENT,
            subject=TEST_RESULT_ENVELOPE,
            expected=f"the {len(ours)} subjects of {ENVELOPE}",
            observed=f"{len(differing)} subject(s) differ, first {differing[0]}",
            why="the run's gate results are about other files than the run sealed",
        )
    ]


def _finding(
    kind: DriftKind, error: ReproError, consequence: str, subject: str = ENVELOPE
) -> Drift:
    return Drift(
        kind=kind,
        subject=subject,
        expected=error.expected or "a DSSE envelope of a repro statement, signed by a trusted key",
        observed=error.found or error.what,
        why=f"{error.what}: {consequence}",
    )


def _statement_file(scan: _Scan, signed: _Signed) -> list[Drift]:
    if STATEMENT not in scan.files:
        return [_missing(STATEMENT, sha256_bytes(signed.payload))]
    # a file of another size is another file: no need to read it to say so
    if scan.sizes[STATEMENT] != len(signed.payload):
        found = f"a file of {scan.sizes[STATEMENT]} bytes, not the {len(signed.payload)} signed"
    else:
        found = f"sha256 {sha256_file(scan.files[STATEMENT])}"
    if found == f"sha256 {sha256_bytes(signed.payload)}":
        return []
    return [
        Drift(
            kind=DriftKind.FILE_DIGEST,
            subject=STATEMENT,
            expected=f"sha256 {sha256_bytes(signed.payload)}",
            observed=found,
            why=f"{STATEMENT} is not the statement signed in {ENVELOPE}",
        )
    ]


def _bundle_name(bundle: Path, statement: Statement) -> list[Drift]:
    # abspath, not resolve(): a symlink to a bundle is judged by the name the user gave
    name = Path(os.path.abspath(bundle)).name  # noqa: PTH100
    if name == statement.bundle_name:
        return []
    return [
        Drift(
            kind=DriftKind.STATEMENT,
            subject=str(bundle),
            expected=f"a directory named {statement.bundle_name}",
            observed=f"a directory named {name}",
            why="the signed statement seals a bundle of another name: a renamed copy, "
            "or what an interrupted seal left behind",
        )
    ]


def _layout(statement: Statement) -> list[Drift]:
    digests = statement.digests()
    findings = [
        _statement_problem(name, f"it seals {problem}")
        for name in digests
        if (problem := content_path_problem(name)) is not None
    ]
    findings += [
        _statement_problem(name, "it does not seal this file every bundle has")
        for name in (*REQUIRED_CONTENT, SHA256SUMS)
        if name not in digests
    ]
    manifest = statement.manifest.sha256
    if MANIFEST in digests and digests[MANIFEST] != manifest:
        findings.append(
            _statement_problem(
                MANIFEST, f"its provenance names another manifest, sha256 {manifest}"
            )
        )
    return findings


def _statement_problem(name: str, problem: str) -> Drift:
    return Drift(
        kind=DriftKind.STATEMENT,
        subject=name,
        expected="a statement in the layout of a repro bundle",
        observed=problem,
        why=f"the statement signed in {ENVELOPE} does not describe a repro bundle",
    )


def _missing(name: str, expected: str) -> Drift:
    return Drift(
        kind=DriftKind.MISSING_FILE,
        subject=name,
        expected=f"sha256 {expected}",
        observed="no such file",
        why="a sealed file is missing",
    )


def _files(scan: _Scan, digests: Mapping[str, str]) -> list[Drift]:
    sealed = [name for name in sorted(digests) if name in scan.files]
    extra = [name for name in sorted(scan.files) if name not in digests and name not in SEAL_FILES]
    # an extra file is reported, never read: it may be as large as the disk
    hashed = dict(zip(sealed, sha256_files([scan.files[name] for name in sealed]), strict=True))
    findings: list[Drift] = []
    for name in sorted(digests):
        if name not in scan.files:
            findings.append(_missing(name, digests[name]))
        elif (found := hashed[name]) != digests[name]:
            findings.append(
                Drift(
                    kind=DriftKind.FILE_DIGEST,
                    subject=name,
                    expected=f"sha256 {digests[name]}",
                    observed=f"sha256 {found}",
                    why="the file differs from the one that was sealed",
                )
            )
    findings += [
        Drift(
            kind=DriftKind.EXTRA_FILE,
            subject=name,
            expected="no such file",
            observed=f"a file of {scan.sizes[name]} bytes",
            why="the file is not sealed by the statement",
        )
        for name in extra
    ]
    findings += [
        Drift(
            kind=DriftKind.EXTRA_FILE,
            subject=directory + "/",
            expected="no such directory",
            observed="a directory without a sealed file",
            why="the directory is not sealed by the statement",
        )
        for directory in scan.directories
        if not any(name.startswith(directory + "/") for name in digests)
    ]
    return findings


def _checksums(scan: _Scan, digests: Mapping[str, str]) -> list[Drift]:
    if SHA256SUMS not in scan.files:
        return []
    try:
        data = read_bytes(
            scan.files[SHA256SUMS],
            limit=SHA256SUMS_LIMIT,
            what=SHA256SUMS,
            follow_symlinks=False,
        )
        listed = parse_sha256sums(data, where=SHA256SUMS)
    except BadInput as error:
        return [_checksums_problem(error.what + (f" ({error.where})" if error.where else ""))]
    sealed = {name: digest for name, digest in digests.items() if name != SHA256SUMS}
    return [
        _checksums_problem(
            f"its line for {name} says {listed.get(name, 'nothing')}, "
            f"the signed statement {sealed.get(name, 'nothing')}"
        )
        for name in sorted(sealed.keys() | listed.keys())
        if listed.get(name) != sealed.get(name)
    ]


def _checksums_problem(problem: str) -> Drift:
    return Drift(
        kind=DriftKind.CHECKSUMS,
        subject=SHA256SUMS,
        expected="one line per sealed file with its signed sha256, sorted by path",
        observed=problem,
        why="SHA256SUMS disagrees with the signed statement",
    )
