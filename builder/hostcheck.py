"""`repro verify --host`: this machine against a verified bundle, starting nothing.

The choice of code this host's CPU makes against the recorded one first (the sealed kernel
sets predict it from this host's facts), then this host's facts against the manifest
(`builder.observations`), every locked package version, and every locked mapping: the same
bytes at its place, hashed on every core, and no library that would shadow it when the loader
emulation resolves each role's dependencies again in the environment that role started with.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from repro_serving.builder.documents.bundle import OpenedBundle
from repro_serving.builder.documents.lock import DispatchClaim, Lock, MappedObject
from repro_serving.builder.documents.manifest import expand, placeholders_in
from repro_serving.builder.documents.observations import Observations, drifts
from repro_serving.builder.documents.python import version_matches
from repro_serving.builder.drift import Difference, Drift, DriftKind
from repro_serving.builder.errors import ReproError
from repro_serving.builder.hashing import file_size, over_cores, sha256_file
from repro_serving.builder.native.dispatch import HostCapabilities, differs, predict
from repro_serving.builder.native.kernels import KernelSet, dispatches
from repro_serving.builder.native.loader import FileSystem, dlopen_closure, executable_closure
from repro_serving.builder.native.loaderhost import (
    HostFileSystem,
    RememberingFileSystem,
    host_config,
    read_cache,
)
from repro_serving.builder.native.pyenv import is_interpreter_file
from repro_serving.builder.observations import observe
from repro_serving.builder.observe.host import observe_host
from repro_serving.builder.sealing.keys import TrustedKeys
from repro_serving.builder.verify import VerifyReport, opened

__all__ = [
    "capabilities",
    "dispatch_drifts",
    "host_drifts",
    "native_drifts",
    "observe",
    "verify_here",
]


def verify_here(path: Path, trusted: TrustedKeys, *, anchor: Path | None = None) -> VerifyReport:
    """`repro verify --host`: the bundle at `path` verified from its sealed files, then this
    host observed against it. The cheapest refusal first: on a host that selects other code
    than the record ran, nothing else is observed."""
    report, sealed = opened(path, trusted, anchor)
    if sealed is None:
        return report
    selected = dispatch_drifts(sealed, capabilities())
    if selected:
        stopped = (
            "this host selects other code than the record ran: nothing else observed. To make a "
            "bundle of this host's code, build the manifest here, from a checkout of repro: "
            f"repro build {sealed.lock.bundle.manifest_path} --signing-key KEY"
        )
        return dataclasses.replace(report, findings=tuple(selected), stopped=stopped)
    observed = observe(sealed.manifest)
    found = host_drifts(sealed, observed)
    return dataclasses.replace(
        report, findings=found.drifts, observations=observed, differences=found.differences
    )


def capabilities() -> HostCapabilities:
    """The facts of this host that decide which code its stack selects."""
    return observe_host().capabilities()


def dispatch_drifts(sealed: OpenedBundle, host: HostCapabilities) -> list[Drift]:
    """Each locked choice of code against the one the sealed kernel sets predict for `host`."""
    lock = sealed.lock
    return claim_drifts(lock.native.dispatch, sealed.kernel_sets(), lock.launch.env, host)


def claim_drifts(
    claims: Sequence[DispatchClaim],
    kernel_sets: Sequence[KernelSet],
    env: Mapping[str, str],
    host: HostCapabilities,
) -> list[Drift]:
    """Each choice of code `claims` records against the one `kernel_sets` predict for `host`
    with the launch environment `env`."""
    rules = dispatches(kernel_sets)
    found = []
    for claim in claims:
        if claim.name not in rules:
            found.append(
                Drift(
                    kind=DriftKind.DISPATCH,
                    subject=claim.name,
                    expected=f"a dispatch rule in kernel set {claim.kernel_set}",
                    observed="none in the sealed kernel sets",
                    why="a recorded choice of code that no sealed rule can predict",
                )
            )
            continue
        here = predict(rules[claim.name][1], host, env)
        drift = differs(claim.name, claim.variant, claim.facts, here)
        if drift is not None:
            found.append(drift)
    return found


@dataclass(frozen=True)
class HostFindings:
    """This host against a bundle: what does not hold, and what differs where allowed."""

    drifts: tuple[Drift, ...]
    differences: tuple[Difference, ...]


def host_drifts(sealed: OpenedBundle, observed: Observations) -> HostFindings:
    """This machine against the manifest, then against every file hash the lock pins. An
    interpreter of another release than the sealed one, which the manifest's pin admits, is a
    difference: its own files (`is_interpreter_file`) and the libraries the loader maps only for
    them are then not compared with the lock's, and the difference says so."""
    # Model files: the manifest's pins are the lock's (recomputed offline), so the manifest's
    # comparison above already names every file that differs here.
    found = drifts(sealed.manifest, observed)
    lock = sealed.lock
    difference = None
    if observed.python is not None:
        here = {d.name: d.version for d in observed.python.distributions}
        found.extend(
            _lock_drift(f"package {name}", version, here.get(name))
            for name, version in sorted(lock.python.packages.items())
            if here.get(name) != version
        )
        difference = interpreter_difference(sealed, observed.python.version)
    series = _series(lock.python.interpreter) if difference else None
    found.extend(native_drifts(lock, observed.values, other_interpreter=series))
    return HostFindings(tuple(found), (difference,) if difference else ())


def _series(release: str) -> str:
    return ".".join(release.split(".")[:2])


def interpreter_difference(sealed: OpenedBundle, version: str) -> Difference | None:
    """The serving venv's interpreter against the sealed release: another release that the
    manifest's `[python] interpreter` admits is a difference (one it does not admit is the
    manifest's drift)."""
    sealed_release, pin = sealed.lock.python.interpreter, sealed.manifest.python.interpreter
    if version == sealed_release or not version_matches(pin, version):
        return None
    series = _series(sealed_release)
    files = sum(1 for path in _locked(sealed.lock) if is_interpreter_file(path, series))
    return Difference(
        subject="python.interpreter",
        sealed=f"Python {sealed_release}",
        here=f"Python {version}",
        accepted_by=f'[python] interpreter = "{pin}"',
        consequence=(
            f"the interpreter's own {files} locked files (its executable, shared library and "
            "standard library modules) and the system libraries only they need are not "
            "compared with the lock; every distribution of the venv still is"
        ),
    )


def _locked(lock: Lock) -> dict[str, tuple[str, str]]:
    """Placeholder path → (the first role that maps it, its sha256), for every hashed file."""
    locked: dict[str, tuple[str, str]] = {}
    for role, objects in sorted(lock.native.roles.items()):
        for obj in objects:
            if obj.sha256 is not None:
                locked.setdefault(obj.path, (role, obj.sha256))
    return locked


def native_drifts(
    lock: Lock, values: Mapping[str, str], *, other_interpreter: str | None = None
) -> list[Drift]:
    """Every locked mapping must be the same bytes at its place on this host, and no library
    may shadow it: each is resolved again by its name through this environment's search.
    With `other_interpreter` (the sealed series, when the venv's interpreter is another release
    of it), the interpreter's own files are not compared."""
    series = other_interpreter
    unplaced = _unplaced(lock, values)
    if unplaced is not None:
        return [unplaced]
    locked = {
        path: found
        for path, found in _locked(lock).items()
        if series is None or not is_interpreter_file(path, series)
    }
    paths = list(locked)
    digests = over_cores([expand(p, values) for p in paths], _digest, file_size)
    found = [
        _lock_drift(f"{locked[path][0]}: {path}", locked[path][1], digest)
        for path, digest in zip(paths, digests, strict=True)
        if digest != locked[path][1]
    ]
    found.extend(_shadowing(lock, values, series))
    return found


def _unplaced(lock: Lock, values: Mapping[str, str]) -> Drift | None:
    """The placeholders the lock's mappings are written with that name no place on this host
    (the serving venv, its interpreter: not found here): none of those files can be located, so
    none is compared, and this one drift says why."""
    mapped = [o for objects in lock.native.roles.values() for o in objects]
    names = [set(placeholders_in(o.path)) for o in mapped]
    missing = set().union(*names) - set(values)
    if not missing:
        return None
    named = ", ".join("{" + name + "}" for name in sorted(missing))
    count = sum(1 for placed in names if placed & missing)
    return Drift(
        kind=DriftKind.NOT_OBSERVABLE,
        subject="native.roles",
        expected=f"a place on this host for {named}",
        observed=f"none: {count} locked mappings cannot be located here",
        why="the places the lock's mappings lie in (the serving venv, its interpreter) were not "
        "found on this host; `repro restore` makes them",
    )


def _shadowing(lock: Lock, values: Mapping[str, str], other_interpreter: str | None) -> list[Drift]:
    """Each role's dependencies resolved again by the loader emulation in the environment that
    role started with: a need that now lands on another file than the locked one is shadowed
    (a library dropped earlier on LD_LIBRARY_PATH, a RUNPATH directory, the cache)."""
    found: list[Drift] = []
    for role, objects in sorted(lock.native.roles.items()):
        env = {k: expand(v, values) for k, v in lock.native.environments.get(role, {}).items()}
        found.extend(role_shadowing(role, objects, values, env, other_interpreter))
    return found


def role_shadowing(
    role: str,
    objects: tuple[MappedObject, ...],
    values: Mapping[str, str],
    env: Mapping[str, str],
    other_interpreter: str | None = None,
) -> list[Drift]:
    """`other_interpreter`: the sealed series, when another release of it runs here; what the
    loader maps for the interpreter's own files (and for those, in turn) is then its own."""
    executable = next((o for o in objects if o.rule == "executable"), None)
    if executable is None:
        return []
    series = other_interpreter
    config, cache = host_config(env), read_cache()
    # The server starts in a fresh, empty directory (`launch.spec`): resolve from one.
    fs = RememberingFileSystem(HostFileSystem(tempfile.mkdtemp(prefix="repro-cwd-")))
    locked = {fs.realpath(expand(o.path, values)): o for o in objects}
    startup = executable_closure(expand(executable.path, values), config=config, cache=cache, fs=fs)
    resolutions = list(startup.resolutions)
    caller = next(o for o in startup.order if o.executable)
    requesters = sorted(
        {o.requester for o in objects if o.rule == "dependency" and o.requester} - {executable.path}
    )
    own: set[str] = set()
    names: set[str] = set()
    if series is not None:
        requesters = [r for r in requesters if not is_interpreter_file(r, series)]
        own = {fs.realpath(expand(executable.path, values))}
        names = _names(objects, fs, values)
    for requester in requesters:
        closure = dlopen_closure(
            expand(requester, values), caller, startup.order, config=config, cache=cache, fs=fs
        )
        resolutions.extend(closure.resolutions[1:])
    drifts = []
    for resolution in resolutions:
        if resolution.path is None or not resolution.newly_loaded:
            continue
        real = fs.realpath(resolution.path)
        if fs.realpath(resolution.requester) in own and resolution.need not in names:
            own.add(real)  # mapped for the interpreter alone: a library the record never had
            continue
        if real in locked:
            continue
        drifts.append(
            Drift(
                kind=DriftKind.ORIGIN_DRIFT,
                subject=f"{role}: {resolution.need}",
                expected=_locked_for(resolution.need, objects, fs, values),
                observed=f"{resolution.path} ({resolution.reason})",
                why="the loader would now map another file than the locked one",
            )
        )
    return drifts


def _names(
    objects: tuple[MappedObject, ...], fs: FileSystem, values: Mapping[str, str]
) -> set[str]:
    """Every name a need can give of a locked library: its file name and its soname."""
    names = set()
    for obj in objects:
        names.add(Path(obj.path).name)
        info = fs.read_elf(expand(obj.path, values))
        if info is not None and info.soname:
            names.add(info.soname)
    return names


def _locked_for(
    need: str, objects: tuple[MappedObject, ...], fs: FileSystem, values: Mapping[str, str]
) -> str:
    for obj in objects:
        info = fs.read_elf(expand(obj.path, values))
        if info is not None and need in (info.soname, Path(obj.path).name):
            return obj.path
    return "no locked library of that name"


def _digest(path: str) -> str | None:
    try:
        return sha256_file(path)
    except ReproError:
        return None


def _lock_drift(subject: str, expected: str, observed: str | None) -> Drift:
    return Drift(
        kind=DriftKind.CLAIM,
        subject=subject,
        expected=expected,
        observed=observed or "missing",
        why="this host differs from what the lock pins",
    )
