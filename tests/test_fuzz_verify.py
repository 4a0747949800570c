"""`repro verify --json` over mutated copies of the committed bundles: never a traceback, never a
hang, never a pass for a lie.

Hypothesis mutates copies of `repro/tiny-cpu/` and `repro/laguna-102tps/` (never the committed
ones) and runs `builder.cli.main(["verify", COPY, "--key", keys/example.pub, "--json"])` in this
process. Every case must:
1. exit 1, 2 or 3 when the bundle was mutated (0 only for an untouched copy: the controls);
2. show no traceback on stdout or stderr, and let no exception escape `main`;
3. end within `HANG_LIMIT_S` (an ITIMER_REAL alarm raises `VerifyHang`, reported as a hang);
4. print one JSON document on stdout, with `"ok": false` whenever the exit code is not 0.

Mutations: a node of a JSON file replaced by another value (control characters, U+0085,
U+202E, integers of thousands of digits, 1e308, NaN, arrays nested up to 100 000 deep, extra
keys, wrong types) or deleted; a TOML line deleted, duplicated or given another value, a dotted
header or an inline table nested deep inserted; bytes flipped, truncated, appended, emptied or
replaced by 1 MiB of `[`; a file replaced by a FIFO, a symlink (to /dev/zero, outside the
bundle, dangling, to itself) or a directory, removed, or an extra file added (a sparse file of
4 GiB among them).

Two modes:
- as is (`test_a_mutated_bundle_is_refused_by_its_integrity`): the signature and digests no
  longer hold, and the integrity layer must say so (exit 1 with drifts and no claim checked);
  the one pass allowed is an envelope that still carries the same payload, payload type and
  signature (its key id or a field DSSE does not define changed, or its JSON written otherwise:
  what a DSSE consumer ignores), counted in the closing warning;
- re-sealed with the example key (public on purpose, so anyone can do this): the signature and
  every digest hold and only recomputing the claims can refuse. `builder.sealing.seal` seals the
  staged copy; lock.json is then put back byte for byte as mutated (or left out when the
  mutation removed it) and the bundle signed again, as an attacker's own sealer would. Whatever
  the sealer refuses (a FIFO, a symlink, a file beyond its limit) is skipped with `assume`.
`test_any_mutation_as_is_or_resealed_never_crashes_or_hangs` lets Hypothesis choose the mode.

Re-sealed, a change to a sealed file that nothing recomputes verifies, legitimately as far as
the signature goes. So the exit-0 property of re-sealed content mutations covers only the files
found, by trying, to be claim-bearing in every byte (`CLAIM_BEARING`;
`test_a_resealed_change_to_a_claim_bearing_file_is_refused`), and the only pass it accepts is a
change that leaves every changed file equal once parsed as JSON or TOML (whitespace, a comment),
counted in the closing warning. The other sealed files (the sealed-but-unchecked evidence of
`UNCHECKED`) are mutated in the mixed test, where re-sealed they may exit 0: each such pass is
listed, with its first example, in a warning when the module ends, and so is every `internal
error` (exit 4 from the CLI's last guard: a bug, though no traceback).

Hypothesis runs derandomized, without an example database, so CI sees the same cases each time.
The workspace is on /dev/shm when there is one: sealing fsyncs every file.
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import hashlib
import io
import json
import os
import re
import shutil
import signal
import stat
import tempfile
import time
import tomllib
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from bundle_assets import as_its_sealer
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from schemas import assert_valid

from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.cli import main
from repro_serving.builder.documents.lock import Lock
from repro_serving.builder.errors import ReproError
from repro_serving.builder.readers import EVIDENCE_LIMIT, read_bytes
from repro_serving.builder.sealing import dsse
from repro_serving.builder.sealing.bundle import (
    ENVELOPE,
    EVIDENCE_DIR,
    KERNEL_SETS_DIR,
    LAUNCH_HELPER,
    LAUNCHER,
    LOCK,
    MANIFEST,
    ORACLE_DIR,
    README,
    SHA256SUMS,
    STATEMENT,
    TOOLS_DIR,
    render_sha256sums,
)
from repro_serving.builder.sealing.keys import SigningKey
from repro_serving.builder.sealing.seal import BundleContent, Handoff, seal
from repro_serving.builder.sealing.statement import (
    Statement,
    resolved_dependencies,
    statement_for,
)

REPO = Path(__file__).resolve().parent.parent
PUBLIC_KEY = REPO / "keys" / "example.pub"
BUNDLES = ("tiny-cpu", "laguna-102tps")
HANG_LIMIT_S = 10
SEAL_FILES = (SHA256SUMS, STATEMENT, ENVELOPE)

SCALE = float(os.environ.get("REPRO_FUZZ_SCALE", "1"))
"""Multiplies every example count below (a quick local look: REPRO_FUZZ_SCALE=0.05)."""
AS_IS_EXAMPLES = max(1, round(1300 * SCALE))
CLAIM_EXAMPLES = max(1, round(420 * SCALE))
MIXED_EXAMPLES = max(1, round(300 * SCALE))

HANDOFF_CLAIM_BEARING = (LAUNCHER, README, f"{TOOLS_DIR}/{LAUNCH_HELPER}")
"""In every bundle: the launcher and its helper are the ones repro writes, the README the one
made from the claims recomputed."""

CLAIM_BEARING = {
    "tiny-cpu": (
        *HANDOFF_CLAIM_BEARING,
        LOCK,
        MANIFEST,
        "oracle/suite.json",
        "oracle/teacher.json",
        "evidence/start-*/audit/drifts.json",
        "evidence/verdicts.json",
        "evidence/quality.json",
        "evidence/dispatch.json",
    ),
    "laguna-102tps": (
        *HANDOFF_CLAIM_BEARING,
        LOCK,
        MANIFEST,
        "oracle/suite.json",
        "oracle/teacher.json",
        "evidence/teacher-tokens.json",
        "evidence/model-files.sha256",
        # each is listed in evidence/files/record-run.sha256, which verify compares with them;
        # that list is sealed evidence too, and a change to both verifies (see UNCHECKED)
        "evidence/run/*",
        "evidence/files/record-run.sha256",
    ),
}
"""Sealed files in which every byte is claim-bearing: any re-sealed change to one of them alone
must be refused (found by trying: a leaf of each JSON document changed, a line of each text or
TOML file changed, deleted or duplicated)."""

UNCHECKED = {
    "tiny-cpu": {
        "evidence/observations.json": "python.records[30].files 99 -> 98; "
        "python.distributions[91].record_sha256 changed: observed facts no lock value is "
        "taken from",
        "evidence/start-1/rows.json": "rows[2].token_offsets_s[27] changed without moving the "
        "median rate; rows[3].prompt_tokens 54 -> 55",
        "evidence/start-2/rows.json": "all but token_ids: rows[4].cached_tokens 0 -> -1, "
        "rows[2].prompt_index 2 -> 1002, rows[1].finish_reason 'length' -> 'lengt'",
        "evidence/start-*/metrics-*.prom": "start-2/metrics-before.prom appended b'\\x90'",
        "tools/requirements.txt": "a pin's sha256 changed: verify asks no package index; the "
        "launcher's pip refuses what the index does not serve",
        "tools/repro-*.whl": "a zip header's timestamp: the files its RECORD hashes are checked, "
        "and its name, version and dependencies",
    },
    "laguna-102tps": {
        "evidence/identity.json": "python_packages.torch '2.12.0+xpu' -> '2.12.0+xp'; "
        "native_modules[2].sha256 -> 'x'; source.kernel_record_tree.commit changed",
        "evidence/teacher-texts.json": "'schema' changed",
        "evidence/files/model-directory-verification.sha256": "byte 0 ^= 0x01",
        "evidence/files/pip-freeze-observed.txt": "a line changed",
        "kernels/*.toml": "a description or comment changed",
        "tools/requirements.txt": "as for tiny-cpu",
        "tools/repro-*.whl": "as for tiny-cpu",
        "evidence/run/*": "with its line in evidence/files/record-run.sha256 updated: "
        "exactness-vs-q1.json all_exact True -> False, an idle snapshot's 'accepted_mode' "
        "deleted",
    },
}
"""Sealed files where a re-sealed change of some field still verifies (exit 0), with an example
each: evidence no claim is recomputed from. Documentation only: the module finds them again
(its closing warning lists what it saw)."""


# --- the workspace ------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the module saw, for the closing warning."""

    cases: Counter[str] = field(default_factory=Counter)
    bundles: Counter[tuple[str, str]] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    seconds: Counter[str] = field(default_factory=Counter)
    exits: Counter[tuple[str, int]] = field(default_factory=Counter)
    equivalent: Counter[str] = field(default_factory=Counter)
    unchanged: Counter[str] = field(default_factory=Counter)
    verified: dict[tuple[str, str, str], str] = field(default_factory=dict)
    internal: dict[str, str] = field(default_factory=dict)


TALLY = Tally()


class Workspace:
    """Where the cases run: `pristine` holds each bundle copied once, and each case links its
    files from there (never writing through a link); `files` lists each bundle's regular files,
    relative and sorted; `statements` are the committed signed statements. Not a dataclass, so
    that Hypothesis shows a failing example without all of this."""

    def __init__(
        self,
        root: Path,
        pristine: dict[str, Path],
        files: dict[str, tuple[str, ...]],
        statements: dict[str, Statement],
    ) -> None:
        self.root, self.pristine, self.files, self.statements = root, pristine, files, statements

    def __repr__(self) -> str:
        return f"Workspace({self.root})"

    def fresh(self, name: str, kind: str) -> Path:
        """A new case directory holding `kind/<name>/`, a linked copy of the bundle."""
        case = Path(tempfile.mkdtemp(prefix="case-", dir=self.root))
        target = case / kind / name
        shutil.copytree(self.pristine[name], target, copy_function=os.link)
        return target


def _workspace_parent() -> Path | None:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


def _digests(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def workspace() -> Iterator[Workspace]:
    root = Path(tempfile.mkdtemp(prefix="repro-fuzz-", dir=_workspace_parent()))
    try:
        pristine, files, statements = {}, {}, {}
        for name in BUNDLES:
            committed = REPO / "repro" / name
            pristine[name] = root / "pristine" / name
            shutil.copytree(committed, pristine[name])
            files[name] = tuple(
                p.relative_to(committed).as_posix()
                for p in sorted(committed.rglob("*"))
                if p.is_file()
            )
            statements[name] = Statement.from_json(
                (committed / STATEMENT).read_bytes(), where=STATEMENT
            )
        before = {name: _digests(pristine[name]) for name in BUNDLES}
        yield Workspace(root, pristine, files, statements)
        for name in BUNDLES:  # no case wrote through a link into the pristine copies
            assert _digests(pristine[name]) == before[name], name
    finally:
        shutil.rmtree(root, ignore_errors=True)
    _warn_summary()


def _warn_summary() -> None:
    counts = ", ".join(
        f"{test}: {TALLY.cases[test]} cases in {TALLY.seconds[test]:.0f} s"
        + (f" ({TALLY.skipped[test]} not sealable, skipped)" if TALLY.skipped[test] else "")
        for test in sorted(TALLY.cases)
    )
    exits = ", ".join(f"{test} exit {code}: {n}" for (test, code), n in sorted(TALLY.exits.items()))
    per_bundle = ", ".join(f"{test} {b}: {n}" for (test, b), n in sorted(TALLY.bundles.items()))
    lines = [f"fuzz verify: {counts}", f"bundles: {per_bundle}", f"exit codes: {exits}"]
    if TALLY.unchanged:
        lines.append(f"mutations sealing gave back unchanged: {dict(TALLY.unchanged)}")
    if TALLY.equivalent:
        lines.append(f"changes equal once parsed, allowed to verify: {dict(TALLY.equivalent)}")
    if TALLY.verified:
        lines.append("re-sealed mutations that still verify (sealed but unchecked):")
        lines += [
            f"  {b} {f} [{kind}]: {example}" for (b, f, kind), example in TALLY.verified.items()
        ]
    if TALLY.internal:
        lines.append("internal errors (exit 4 from the last guard):")
        lines += [f"  {found}  <- {case}" for found, case in TALLY.internal.items()]
    warnings.warn("\n".join(lines), UserWarning, stacklevel=1)


# --- running verify -------------------------------------------------------------------------------


class VerifyHang(BaseException):
    """Raised by SIGALRM: a BaseException, so the CLI's last guard (`except Exception`) cannot
    turn a hang into exit 4."""


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    def alarm(_signum: int, _frame: FrameType | None) -> None:
        raise VerifyHang(f"{what} did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str
    document: Any


def run_verify(bundle: Path) -> Outcome:
    """`repro verify BUNDLE --key keys/example.pub --json` in this process, checked for the
    properties every case shares: it returns, in time, without a traceback, with a JSON document
    whose `ok` agrees with the exit code."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["verify", str(bundle), "--key", str(PUBLIC_KEY), "--json"]
    try:
        with (
            time_limit(HANG_LIMIT_S, "repro verify"),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            code = main(argv)
    except VerifyHang as hang:
        raise AssertionError(f"HANG: {hang}") from None
    except Exception as error:
        raise AssertionError(
            f"an exception escaped main: {type(error).__name__}: {str(error)[:300]}"
        ) from error
    stdout, stderr = out.getvalue(), err.getvalue()
    with contextlib.suppress(InvalidArgument):  # outside a Hypothesis test there is no note
        note(f"exit {code}; stderr: {stderr[-600:]!r}")
    assert "Traceback" not in stdout, f"a traceback on stdout: {stdout[-2000:]}"
    assert "Traceback" not in stderr, f"a traceback on stderr: {stderr[-2000:]}"
    try:
        document = json.loads(stdout)
    except ValueError as error:
        raise AssertionError(
            f"exit {code}: stdout is not one JSON document ({error}): {stdout[:300]!r}; "
            f"stderr: {stderr[-300:]!r}"
        ) from None
    assert isinstance(document, dict), f"stdout is JSON but not an object: {stdout[:200]!r}"
    assert_valid("verify", document)
    assert document.get("ok") is (code == 0), (
        f"exit {code} with ok={document.get('ok')!r}: {stdout[:300]!r}"
    )
    return Outcome(code, stdout, stderr, document)


def _record(test: str, outcome: Outcome, case: str) -> None:
    TALLY.cases[test] += 1
    TALLY.bundles[test, case.split(":", 1)[0]] += 1
    TALLY.exits[test, outcome.code] += 1
    if "internal error" in outcome.err:
        found = next(line for line in outcome.err.splitlines() if "internal error" in line)
        TALLY.internal.setdefault(found[:240], case[:240])


# --- re-sealing with the example key -----------------------------------------------------------


KEY = SigningKey.from_path(REPO / "keys" / "example.key")


def _sources(directory: Path) -> dict[str, Path]:
    if not directory.is_dir() or directory.is_symlink():
        return {}
    return {p.name: p for p in directory.iterdir()}


@dataclass(frozen=True)
class Resealed:
    path: Path
    digests: dict[str, str]


def reseal(staging: Path, source: str) -> Resealed | None:
    """Seal the staged bundle with the example key, its lock.json exactly as staged (or absent),
    as the repro that sealed it would; None when `builder.sealing.seal` refuses what is staged."""
    with as_its_sealer(staging):
        return _sealed_as_staged(staging, source)


def _sealed_as_staged(staging: Path, source: str) -> Resealed | None:
    lock_path = staging / LOCK
    try:
        info = lock_path.lstat()
    except FileNotFoundError:
        raw_lock = None
    else:
        if not stat.S_ISREG(info.st_mode):
            return None
        raw_lock = lock_path.read_bytes()
    content = BundleContent(
        name=staging.name,
        manifest=staging / MANIFEST,
        manifest_source=source,
        lock={"placeholder": "replaced by the staged lock.json"},
        oracle=_sources(staging / ORACLE_DIR),
        evidence=_sources(staging / EVIDENCE_DIR),
        kernels=_sources(staging / KERNEL_SETS_DIR),
        handoff=Handoff(
            launcher=staging / LAUNCHER,
            tools=_sources(staging / TOOLS_DIR),
            # as staged: a README the sealer would not write is the mutation under test
            readme=lambda _: read_bytes(staging / README, limit=EVIDENCE_LIMIT, what=README),
        ),
    )
    out = staging.parent.parent / "sealed"
    out.mkdir()
    try:
        with time_limit(HANG_LIMIT_S, "builder.seal"):
            sealed = seal(content, KEY, out)
    except ReproError:
        return None
    except VerifyHang as hang:
        raise AssertionError(f"HANG: {hang}") from None
    digests = dict(sealed.digests)
    digests.pop(SHA256SUMS)
    if raw_lock is None:
        (sealed.path / LOCK).unlink()
        digests.pop(LOCK)
    else:
        replace_file(sealed.path / LOCK, raw_lock)
        digests[LOCK] = hashlib.sha256(raw_lock).hexdigest()
    sums = render_sha256sums(digests)
    replace_file(sealed.path / SHA256SUMS, sums)
    digests[SHA256SUMS] = hashlib.sha256(sums).hexdigest()
    # an attacker's statement agrees with the lock it seals, so only the claims can refuse
    try:
        locked = Lock.from_bytes(raw_lock, where=LOCK) if raw_lock is not None else None
    except ReproError:
        locked = None
    dependencies = resolved_dependencies(locked) if locked is not None else ()
    statement = statement_for(staging.name, source, digests, dependencies=dependencies).to_json()
    replace_file(sealed.path / STATEMENT, statement)
    replace_file(sealed.path / ENVELOPE, dsse.sign(statement, KEY).to_json())
    return Resealed(sealed.path, digests)


# --- mutations ----------------------------------------------------------------------------------


def replace_file(path: Path, data: bytes) -> None:
    """Write `data` as a new file at `path`: the copies are hard links to the pristine ones."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    path.write_bytes(data)


@dataclass(frozen=True)
class Raw:
    """JSON text written verbatim where a value goes: what `json.dumps` cannot write."""

    text: str
    label: str

    def __repr__(self) -> str:
        return f"Raw({self.label})"


RAW_MARK = "@@fuzz-raw-6d1f@@"


def _raw(text: str, label: str) -> Raw:
    return Raw(text, label)


def deep_array(depth: int) -> Raw:
    return Raw("[" * depth + "]" * depth, f"'[' * {depth} + ']' * {depth}")


def deep_object(depth: int) -> Raw:
    return Raw('{"a":' * depth + "1" + "}" * depth, f"'{{\"a\":' * {depth} + '1' + '}}' * {depth}")


def huge_int(digits: int, sign: str = "") -> Raw:
    return Raw(sign + "1" + "0" * (digits - 1), f"{sign}10**{digits - 1}")


HOSTILE_TEXT = (
    "",
    "\x00",
    "\x1f\x7f",
    "\u0085",
    "\u202e",
    "a\u202eb.json",
    "\u2028\u2029",
    "\ufeff",
    "\\",
    '"',
    "NaN",
    "../../etc/passwd",
    "\U0001f600",
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e308, -1e308, 5e-324, 2.0**53 + 1, -0.0]),
    st.text(max_size=40),
    st.sampled_from(HOSTILE_TEXT),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
raw_values = st.one_of(
    st.sampled_from(
        [
            _raw("NaN", "NaN"),
            _raw("Infinity", "Infinity"),
            _raw("-Infinity", "-Infinity"),
            _raw("1e999", "1e999"),
            _raw("-0", "-0"),
        ]
    ),
    st.integers(300, 20_000).map(huge_int),
    st.sampled_from([huge_int(5001), huge_int(4301, "-")]),
    st.integers(10, 100_000).map(deep_array),
    st.sampled_from([deep_array(64), deep_array(65), deep_array(1000), deep_array(100_000)]),
    st.integers(10, 100_000).map(deep_object),
)


def wrong_types(old: object) -> list[object]:
    """The same value in another type, which a lax reader might take for it."""
    found: list[object] = [[old], {"value": old}, None, str(old), json.dumps(old)]
    if isinstance(old, bool):
        found += [int(old), str(old).lower()]
    elif isinstance(old, int):
        found += [float(old), str(old), old + 1]
    elif isinstance(old, float):
        found += [int(old), repr(old)]
    elif isinstance(old, str):
        with contextlib.suppress(ValueError):
            found.append(int(old))
        with contextlib.suppress(ValueError):
            found.append(float(old))
        found += [old.upper(), old + "\u0085", "\u202e" + old, old[:-1]]
    elif isinstance(old, list):
        found += [old[1:], [*old, old[0] if old else 0], list(reversed(old))]
    elif isinstance(old, dict):
        found += [{**old, "extra": 1}, {**old, "": None}, list(old.values())]
    return found


def replacements(old: object) -> st.SearchStrategy[object]:
    """A value other than `old` (unequal in Python's comparison, which is how verify compares)."""
    return st.one_of(
        json_values,
        raw_values,
        st.sampled_from(wrong_types(old)),
        st.dictionaries(st.text(max_size=8), json_values, min_size=1, max_size=3).map(
            lambda extra: {**old, **extra} if isinstance(old, dict) else extra
        ),
    ).filter(lambda new: isinstance(new, Raw) or not _equal(new, old))


def _equal(a: object, b: object) -> bool:
    try:
        return bool(a == b)
    except Exception:  # a comparison that fails is no equality
        return False


def _nodes(document: object, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(document, dict):
        for key, value in document.items():
            yield from _nodes(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from _nodes(value, (*path, index))


def _at(document: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


@dataclass(frozen=True)
class JsonShape:
    nodes: tuple[tuple[Any, ...], ...]
    containers: tuple[tuple[Any, ...], ...]
    """Nodes with at least one child: where a key can be deleted or an item dropped."""
    canonical: bool


_SHAPES: dict[tuple[str, str], JsonShape | None] = {}


def json_shape(workspace: Workspace, name: str, relative: str) -> JsonShape | None:
    key = (name, relative)
    if key not in _SHAPES:
        data = (workspace.pristine[name] / relative).read_bytes()
        try:
            document = json.loads(data)
        except ValueError:
            _SHAPES[key] = None
        else:
            nodes = tuple(_nodes(document))
            containers = tuple(p for p in nodes if isinstance(_at(document, p), dict | list))
            containers = tuple(p for p in containers if _at(document, p))
            _SHAPES[key] = JsonShape(nodes, containers, canonical_json(document) == data)
    return _SHAPES[key]


def write_json(document: object, raw: Raw | None, canonical: bool) -> bytes:
    if canonical:
        with contextlib.suppress(ReproError):
            text = canonical_json(document).decode()
            return (text.replace(json.dumps(RAW_MARK), raw.text, 1) if raw else text).encode()
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return (text.replace(json.dumps(RAW_MARK), raw.text, 1) if raw else text).encode()


def mutate_json(data: st.DataObject, workspace: Workspace, bundle: Path, relative: str) -> str:
    shape = json_shape(workspace, bundle.name, relative)
    assert shape is not None
    original = (workspace.pristine[bundle.name] / relative).read_bytes()
    document = json.loads(original)
    operation = data.draw(st.sampled_from(["replace", "replace", "replace", "delete"]))
    raw = None
    if operation == "delete" and shape.containers:
        path = data.draw(st.sampled_from(shape.containers), label="container")
        container = _at(document, path)
        if isinstance(container, dict):
            key = data.draw(st.sampled_from(sorted(container)), label="key")
            del container[key]
            what = f"deleted key {key!r} of {path}"
        else:
            index = data.draw(st.integers(0, len(container) - 1), label="index")
            del container[index]
            what = f"dropped item {index} of {path}"
    else:
        path = shape.nodes[data.draw(st.integers(0, len(shape.nodes) - 1), label="node")]
        old = _at(document, path)
        new = data.draw(replacements(old), label="value")
        if isinstance(new, Raw):
            raw, new = new, RAW_MARK
        if path:
            _at(document, path[:-1])[path[-1]] = new
        else:
            document = new
        shown = raw if raw is not None else new
        what = f"{path}: {_short(old)} -> {_short(shown)}"
    mutated = write_json(document, raw, shape.canonical)
    assume(mutated != original)
    replace_file(bundle / relative, mutated)
    return f"json {relative} {what}"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


_ASSIGNMENT = re.compile(r"^\s*([A-Za-z0-9_\-\".]+)\s*=")

toml_values = st.one_of(
    st.text(max_size=30).map(json.dumps),
    st.sampled_from([json.dumps(s) for s in HOSTILE_TEXT]),
    st.integers().map(str),
    st.integers(300, 20_000).map(lambda n: "1" + "0" * (n - 1)),
    st.sampled_from(
        [
            "nan",
            "inf",
            "-inf",
            "1e308",
            "true",
            "false",
            "[]",
            "{}",
            "''",
            "'''\u202e'''",
            "1979-05-27T07:32:00Z",
            "0x7fffffff",
            '"\\u0085"',
            '"\\u202e"',
            '"unterminated',
        ]
    ),
    st.integers(2, 5000).map(lambda n: "[" * n + "]" * n),
)


def mutate_toml(data: st.DataObject, workspace: Workspace, bundle: Path, relative: str) -> str:
    original = (workspace.pristine[bundle.name] / relative).read_bytes()
    lines = original.decode().split("\n")
    operation = data.draw(
        st.sampled_from(["delete", "duplicate", "value", "value", "header", "inline"])
    )
    at = data.draw(st.integers(0, len(lines) - 1), label="line")
    assignments = [i for i, line in enumerate(lines) if _ASSIGNMENT.match(line)]
    if operation == "value" and assignments:
        at = data.draw(st.sampled_from(assignments), label="assignment")
        key = lines[at].split("=", 1)[0]
        value = data.draw(toml_values, label="value")
        lines[at] = f"{key}= {value}"
        what = f"line {at + 1} value -> {_short(value)}"
    elif operation == "header":
        depth = data.draw(st.integers(2, 5000) | st.sampled_from([64, 65, 1000]), label="depth")
        lines.insert(at, "[" + ".".join(["a"] * depth) + "]")
        what = f"header [a.a...] {depth} deep before line {at + 1}"
    elif operation == "inline":
        depth = data.draw(st.integers(2, 1000) | st.just(1000), label="depth")
        lines.insert(at, "fuzz = " + "{a = " * depth + "1" + " }" * depth)
        what = f"inline table {depth} deep before line {at + 1}"
    elif operation == "duplicate":
        lines.insert(at, lines[at])
        what = f"line {at + 1} duplicated: {_short(lines[at])}"
    else:
        what = f"line {at + 1} deleted: {_short(lines[at])}"
        del lines[at]
    mutated = "\n".join(lines).encode()
    assume(mutated != original)
    replace_file(bundle / relative, mutated)
    return f"toml {relative} {what}"


def mutate_bytes(data: st.DataObject, workspace: Workspace, bundle: Path, relative: str) -> str:
    original = (workspace.pristine[bundle.name] / relative).read_bytes()
    operation = data.draw(st.sampled_from(["flip", "truncate", "append", "empty", "brackets"]))
    if operation == "flip" and original:
        at = data.draw(st.integers(0, len(original) - 1), label="offset")
        mask = data.draw(st.integers(1, 255), label="mask")
        mutated = original[:at] + bytes([original[at] ^ mask]) + original[at + 1 :]
        what = f"byte {at} ^= {mask:#04x}"
    elif operation == "truncate" and original:
        size = data.draw(st.integers(0, len(original) - 1), label="size")
        mutated, what = original[:size], f"truncated to {size} bytes"
    elif operation == "append":
        garbage = data.draw(st.binary(min_size=1, max_size=64), label="garbage")
        mutated, what = original + garbage, f"appended {garbage!r}"
    elif operation == "brackets":
        mutated, what = b"[" * (1 << 20), "replaced by 1 MiB of '['"
    else:
        mutated, what = b"", "emptied"
    assume(mutated != original)
    replace_file(bundle / relative, mutated)
    return f"bytes {relative} {what}"


def remove(bundle: Path, relative: str) -> str:
    (bundle / relative).unlink()
    return f"removed {relative}"


def mutate_layout(
    data: st.DataObject, workspace: Workspace, bundle: Path, relative: str, kind: str
) -> str:
    path = bundle / relative
    if kind == "fifo":
        path.unlink()
        os.mkfifo(path)
        return f"{relative} replaced by a FIFO"
    if kind == "symlink":
        outside = workspace.pristine[bundle.name] / relative
        target = data.draw(
            st.sampled_from(["/dev/zero", str(outside), "..", "no-such-file", path.name]),
            label="target",
        )
        path.unlink()
        path.symlink_to(target)
        return f"{relative} replaced by a symlink to {target}"
    # a directory where the file was: empty, or holding the file under its own name
    holding = data.draw(st.booleans(), label="holding the file")
    original = path.read_bytes()
    path.unlink()
    path.mkdir()
    if holding:
        (path / path.name).write_bytes(original)
    return f"{relative} replaced by a directory" + (" holding it" if holding else "")


EXTRA_NAMES = ("extra.json", "rows.json", ".hidden", "x\u0085y", "x\u202ey.json", "a b", "-")


def add_extra(data: st.DataObject, bundle: Path, content_only: bool) -> str:
    """An extra file or directory; under oracle/, evidence/, kernels/ or tools/ when
    `content_only` (what a re-seal takes), anywhere otherwise."""
    places = [ORACLE_DIR, EVIDENCE_DIR, f"{EVIDENCE_DIR}/start-1", KERNEL_SETS_DIR, "evidence/new"]
    places.append(TOOLS_DIR)
    if not content_only:
        places += ["", "new"]
    place = data.draw(st.sampled_from(places), label="directory")
    name = data.draw(st.sampled_from(EXTRA_NAMES), label="name")
    what = data.draw(st.sampled_from(["small", "json", "sparse 4 GiB", "empty directory"]))
    directory = bundle / place
    path = directory / name
    assume(not path.is_symlink() and not path.exists())
    directory.mkdir(parents=True, exist_ok=True)
    if what == "small":
        path.write_bytes(data.draw(st.binary(max_size=64), label="bytes"))
    elif what == "json":
        path.write_text(json.dumps(data.draw(json_values, label="document")))
    elif what == "sparse 4 GiB":
        path.touch()
        os.truncate(path, 4 << 30)
    else:
        path.mkdir()
    return f"extra {what} at {(Path(place) / name).as_posix()}"


def claim_bearing(name: str, relative: str) -> bool:
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in CLAIM_BEARING[name])


def changed_files(workspace: Workspace, name: str, sealed: Resealed) -> set[str]:
    """The sealed files that differ from the committed bundle's (or are new, or gone)."""
    before = workspace.statements[name].digests()
    after = sealed.digests
    return {
        f for f in before.keys() | after.keys() if f != SHA256SUMS and before.get(f) != after.get(f)
    }


def same_once_parsed(workspace: Workspace, name: str, changed: set[str], sealed: Path) -> bool:
    """Every changed file holds the same document as the committed one, parsed as JSON or TOML
    (whitespace, a comment): a change no reader can see."""
    return bool(changed) and all(_same_document(workspace, name, f, sealed) for f in changed)


def _same_document(workspace: Workspace, name: str, relative: str, sealed: Path) -> bool:
    try:
        before = (workspace.pristine[name] / relative).read_bytes()
        after = (sealed / relative).read_bytes()
        if relative.endswith(".json"):
            return bool(json.loads(before) == json.loads(after))
        if relative.endswith(".toml"):
            return bool(tomllib.loads(before.decode()) == tomllib.loads(after.decode()))
    except (OSError, ValueError, RecursionError, UnicodeDecodeError):
        return False
    return False


def _dsse_fields(data: bytes) -> tuple[bytes, str, set[bytes]] | None:
    """An envelope's payload, payload type and signatures, decoded as DSSE says a consumer
    reads them (either base64 alphabet, padding optional); None when they do not decode."""

    def decoded(value: str) -> bytes:
        text = value.translate(str.maketrans("-_", "+/"))
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)

    try:
        document = json.loads(data)
        signatures = {decoded(signature["sig"]) for signature in document["signatures"]}
        return decoded(document["payload"]), str(document["payloadType"]), signatures
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def same_signed_envelope(workspace: Workspace, bundle: Path) -> bool:
    """The mutated envelope carries the same payload, payload type and committed signature:
    what changed is only what DSSE tells a consumer to ignore (a field it does not know, the key
    id, which is a hint) or how the JSON is written."""
    try:
        after = (bundle / ENVELOPE).read_bytes()
    except OSError:
        return False
    before = _dsse_fields((workspace.pristine[bundle.name] / ENVELOPE).read_bytes())
    found = _dsse_fields(after)
    return (
        before is not None
        and found is not None
        and found[:2] == before[:2]
        and before[2] <= found[2]
    )


def _applicable(files: tuple[str, ...], kind: str) -> list[str]:
    if kind == "json":
        return [f for f in files if f.endswith(".json")]
    if kind == "toml":
        return [f for f in files if f.endswith(".toml")]
    return list(files)


def draw_mutation(
    data: st.DataObject,
    workspace: Workspace,
    bundle: Path,
    files: tuple[str, ...],
    kinds: tuple[str, ...],
    *,
    content_only: bool,
) -> tuple[str, str, str]:
    """Apply one drawn mutation to `bundle`: (kind, file or '', description)."""
    kinds = tuple(k for k in kinds if k == "extra" or _applicable(files, k))
    kind = data.draw(st.sampled_from(kinds), label="kind")
    if kind == "extra":
        return kind, "", add_extra(data, bundle, content_only)
    relative = data.draw(st.sampled_from(_applicable(files, kind)), label="file")
    if kind == "json":
        return kind, relative, mutate_json(data, workspace, bundle, relative)
    if kind == "toml":
        return kind, relative, mutate_toml(data, workspace, bundle, relative)
    if kind == "bytes":
        return kind, relative, mutate_bytes(data, workspace, bundle, relative)
    if kind == "remove":
        return kind, relative, remove(bundle, relative)
    return kind, relative, mutate_layout(data, workspace, bundle, relative, kind)


FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)

CONTENT_KINDS = ("json", "toml", "bytes", "remove")
ALL_KINDS = (*CONTENT_KINDS, "fifo", "symlink", "directory", "extra")


def _discard(bundle: Path) -> None:
    shutil.rmtree(bundle.parent.parent)


# --- the properties -------------------------------------------------------------------------------


@pytest.mark.parametrize("resealed", [False, True], ids=["as-is", "resealed"])
@pytest.mark.parametrize("name", BUNDLES)
def test_an_untouched_copy_verifies(workspace: Workspace, name: str, resealed: bool) -> None:
    """The controls: a copy, or a copy sealed again by the harness, passes: every refusal below
    is the mutation's, not the copy's or the re-seal's."""
    started = time.monotonic()
    bundle = workspace.fresh(name, "staging")
    try:
        target = bundle
        if resealed:
            sealed = reseal(bundle, workspace.statements[name].manifest.path)
            assert sealed is not None, "the untouched bundle seals"
            assert changed_files(workspace, name, sealed) == set(), "sealed again, the same files"
            target = sealed.path
        for _ in range(3):
            outcome = run_verify(target)
            assert outcome.code == 0, outcome.out[-2000:] + outcome.err[-2000:]
            _record("controls", outcome, f"{name}: untouched")
    finally:
        _discard(bundle)
        TALLY.seconds["controls"] += time.monotonic() - started


@settings(FUZZ, max_examples=AS_IS_EXAMPLES)
@given(data=st.data())
def test_a_mutated_bundle_is_refused_by_its_integrity(
    workspace: Workspace, data: st.DataObject
) -> None:
    """Any mutation of any file, seal files included, left as is: integrity refuses it."""
    started = time.monotonic()
    name = data.draw(st.sampled_from(BUNDLES), label="bundle")
    bundle = workspace.fresh(name, "bundle")
    try:
        _check_as_is(data, workspace, bundle, "as-is")
    finally:
        _discard(bundle)
        TALLY.seconds["as-is"] += time.monotonic() - started


def _check_as_is(data: st.DataObject, workspace: Workspace, bundle: Path, test: str) -> None:
    name = bundle.name
    _, relative, what = draw_mutation(
        data, workspace, bundle, workspace.files[name], ALL_KINDS, content_only=False
    )
    note(f"{name}: {what}")
    outcome = run_verify(bundle)
    _record(test, outcome, f"{name}: {what}")
    if outcome.code == 0 and relative == ENVELOPE and same_signed_envelope(workspace, bundle):
        TALLY.equivalent[f"{name} {relative}"] += 1
        return
    assert outcome.code in (1, 2, 3, 4), f"exit {outcome.code} for {name} as is: {what}"
    if outcome.code == 1:
        assert outcome.document.get("claims") == [], "a claim was checked: integrity held"
        assert outcome.document.get("drifts"), "exit 1 without a drift"


@settings(FUZZ, max_examples=CLAIM_EXAMPLES)
@given(data=st.data())
def test_a_resealed_change_to_a_claim_bearing_file_is_refused(
    workspace: Workspace, data: st.DataObject
) -> None:
    """A claim-bearing file changed (JSON node, TOML line, bytes, removed), then sealed again
    with the example key: signature and digests hold, the recomputed claims refuse it."""
    started = time.monotonic()
    name = data.draw(st.sampled_from(BUNDLES), label="bundle")
    staging = workspace.fresh(name, "staging")
    try:
        files = tuple(f for f in workspace.files[name] if claim_bearing(name, f))
        _, relative, what = draw_mutation(
            data, workspace, staging, files, CONTENT_KINDS, content_only=True
        )
        note(f"{name}: {what}")
        sealed = reseal(staging, workspace.statements[name].manifest.path)
        if sealed is None:
            TALLY.skipped["claims"] += 1
        assume(sealed is not None)
        assert sealed is not None
        changed = changed_files(workspace, name, sealed)
        assert relative in changed, f"the mutation of {relative} was not sealed: {what}"
        outcome = run_verify(sealed.path)
        _record("claims", outcome, f"{name}: {what}")
        if outcome.code == 0 and same_once_parsed(workspace, name, changed, sealed.path):
            TALLY.equivalent[f"{name} {relative}"] += 1
            return
        assert outcome.code in (1, 2, 3, 4), (
            f"exit {outcome.code}: a re-sealed change to claim-bearing {relative} of {name} "
            f"verifies: {what}"
        )
    finally:
        _discard(staging)
        TALLY.seconds["claims"] += time.monotonic() - started


def _update_record_checksum(workspace: Workspace, staging: Path, relative: str) -> str:
    """The changed run file's line in the record's own checksum list made to agree with it."""
    listing = staging / "evidence/files/record-run.sha256"
    name = "record-run/" + relative.removeprefix("evidence/run/")
    before = hashlib.sha256((workspace.pristine[staging.name] / relative).read_bytes()).hexdigest()
    path = staging / relative
    lines = listing.read_text().splitlines(keepends=True)
    if path.is_file() and not path.is_symlink():
        after = hashlib.sha256(path.read_bytes()).hexdigest()
        lines = [
            line.replace(before, after) if line.endswith(f"  {name}\n") else line for line in lines
        ]
    else:
        lines = [line for line in lines if not line.endswith(f"  {name}\n")]
    replace_file(listing, "".join(lines).encode())
    return " and its line in record-run.sha256 updated"


@settings(FUZZ, max_examples=MIXED_EXAMPLES)
@given(data=st.data())
def test_any_mutation_as_is_or_resealed_never_crashes_or_hangs(
    workspace: Workspace, data: st.DataObject
) -> None:
    """Any mutation of any file, claim-bearing or not, left as is or sealed again (Hypothesis
    chooses): no traceback, no hang, a JSON document; as is, integrity refuses it; re-sealed,
    exit 0 only where no claim-bearing file alone was changed (each such pass is listed in the
    closing warning)."""
    started = time.monotonic()
    name = data.draw(st.sampled_from(BUNDLES), label="bundle")
    resealed = data.draw(st.booleans(), label="re-sealed")
    test = "mixed, re-sealed" if resealed else "mixed, as is"
    bundle = workspace.fresh(name, "staging" if resealed else "bundle")
    try:
        if resealed:
            _check_resealed(data, workspace, bundle, test)
        else:
            _check_as_is(data, workspace, bundle, test)
    finally:
        _discard(bundle)
        TALLY.seconds[test] += time.monotonic() - started


def _check_resealed(data: st.DataObject, workspace: Workspace, staging: Path, test: str) -> None:
    name = staging.name
    files = tuple(f for f in workspace.files[name] if f not in SEAL_FILES)
    kind, relative, what = draw_mutation(
        data, workspace, staging, files, ALL_KINDS, content_only=True
    )
    consistent = (
        name == "laguna-102tps"
        and relative.startswith("evidence/run/")
        and data.draw(st.booleans(), label="update the record's checksum list")
    )
    if consistent:
        what += _update_record_checksum(workspace, staging, relative)
    note(f"{name}: {what}")
    sealed = reseal(staging, workspace.statements[name].manifest.path)
    if sealed is None:
        TALLY.skipped[test] += 1
    assume(sealed is not None)
    assert sealed is not None
    changed = changed_files(workspace, name, sealed)
    outcome = run_verify(sealed.path)
    _record(test, outcome, f"{name}: {what}")
    if not changed:
        TALLY.unchanged[test] += 1
    strict = not consistent and any(claim_bearing(name, f) for f in changed)
    if outcome.code == 0:
        if same_once_parsed(workspace, name, changed, sealed.path):
            TALLY.equivalent[f"{name} {relative}"] += 1
            return
        assert not strict, f"exit 0: a re-sealed change to claim-bearing {relative}: {what}"
        if changed:
            variant = "with its record checksum" if consistent else kind
            TALLY.verified.setdefault((name, relative or "(extra)", variant), what[:300])
    else:
        assert outcome.code in (1, 2, 3, 4)
