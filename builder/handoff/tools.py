"""A bundle's `tools/`, member by member, as far as it can be checked offline.

The launcher installs what tools/ holds, so whoever holds a signing key the user trusts (the
example key is public) could seal a repro that runs their code there. Every member of the
wheel is judged, and each refusal names it (`tools/<wheel>: <member>`), what was expected and
what was found:
- its name: relative, `/`-separated, no `..`, backslash, NUL or other control character
  (judged as written in the archive, before Python's zipfile cuts a name at its NUL); one member
  per name, even ignoring case; no directory entry (repro's wheels hold none, and one can hide a
  file of its name); no file that is also the folder of another;
- what it is: a regular file, no symlink or other type in its mode bits, no setuid, setgid or
  sticky bit, stored or deflated, not encrypted;
- where it is: under `repro_serving/` or `repro_serving-<version>.dist-info/` alone: no other
  top-level package or module, no `.data/` directory (pip installs its scripts, headers and data
  outside site-packages), no `.pth` file, `sitecustomize.py` or `usercustomize.py` anywhere
  (the interpreter runs them at every start); in the dist-info only METADATA, WHEEL, RECORD,
  entry_points.txt, top_level.txt and, under licenses/, the license files this repro carries
  (pyproject's `license-files`, LICENSE: no other file, whatever its name);
- what it says: METADATA's headers parse as headers (no line that ends them early), with
  Metadata-Version, Name and Version each stated exactly once and every other single-use field
  of the core metadata at most once (of two, one reader takes the first, another the last),
  and name repro-serving of the lock's version; WHEEL states wheel 1.0,
  `Root-Is-Purelib: true` and the one tag `py3-none-any`; entry_points.txt is exactly repro's
  (`repro = repro_serving.builder.cli:main` under [console_scripts], nothing else);
  top_level.txt names repro_serving; RECORD lists every other member once, with its sha256
  and size, and nothing else;
- what it requires: only what this repro requires. Each Requires-Dist of METADATA is one of
  this repro's own (`builder.observe.tools.own_stated`: a checkout's pyproject.toml as
  setuptools writes it, an installed repro's METADATA), the same name, extras, specifier and
  marker once normalised, and Requires-Python is its own. A repro of another version may
  require otherwise, rightly; but what it would then have installed cannot be judged by this
  one, so it is refused (fail closed), naming the line, what this repro requires instead and
  the repro to verify with: `verify with repro <its version>`;
- its version names its files: `<release>+g<12 hex>`, the digest of the files under
  repro_serving/ (`builder.own.release`); an unlabelled version (a bundle sealed before
  the label) names no source and is refused. Where the repro that verifies has that very
  version, the wheel must hold the files it would pack itself, byte for byte: the first member
  that differs is named. A checkout knows its package's files, not the dist-info setuptools
  would write (the README is in METADATA, the setuptools pip fetches names itself in WHEEL),
  so its dist-info is judged by the rules above; an installed repro compares that too.

`requirements.txt` must be in the one form repro writes (`ToolRequirements`: every line
`name==version --hash=sha256:<hex>`, no option, URL or marker), for repro of the lock's version,
for the platform the lock states (its host's `<os>-<arch>`, as `sysconfig.get_platform()`
says it) and, for a built bundle, the release series of the lock's interpreter (an imported
record's interpreter is the record's, not where its tools run: any series the wheel's
Requires-Python admits). It pins every Requires-Dist of the wheel whose marker holds there, at
a version its specifier and this repro's specifier of it admit, never repro itself, and, where
the lock pins a wheel of the same distribution and version for that interpreter and platform,
with that wheel's sha256. It pins nothing else than the closure `build` pins: from the wheel's
requirements that this repro shares, what each distribution installed beside this repro
requires, markers evaluated where the tools run, no extra, read in one pass over what is
installed (the verifier's own requirements are what it runs on, so they are there). A
distribution of that closure that is not installed here is refused by name, its requirements
unknown, never let through. A pin that a distribution installed here at its pinned version
requires is at a version that distribution's specifier admits.

What cannot be judged here, and is not claimed: the files of a wheel of another version than
this repro's are its signer's code, checked for their form alone (the rules above; the label
names them, it does not vouch for them). The pinned wheels are not in the bundle: what each
requires at its pinned version is read from the distribution installed here, which may be of
another version (then its specifiers are not judged; the launcher's `pip check` judges them
where the tools are installed); a pin's sha256 is judged only where the lock pins the same
wheel, and whether the package index serves those bytes is for the launcher's pip to find out:
nothing here asks it. Every read is bounded (`WHEEL_LIMIT`, `MEMBER_LIMIT`): a broken archive or
a bomb is a refusal, never a traceback.
"""

from __future__ import annotations

import base64
import configparser
import csv
import hashlib
import io
import re
import stat
import struct
import zipfile
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.message import Message
from email.parser import HeaderParser
from functools import cached_property
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Final

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from repro_serving import DISTRIBUTION, WHEEL_NAME
from repro_serving.builder.claims import ClaimCheck
from repro_serving.builder.documents import read_sealed
from repro_serving.builder.documents.lock import EvidenceClass, Lock
from repro_serving.builder.documents.python import normalize
from repro_serving.builder.documents.tools import Pin, ToolRequirements
from repro_serving.builder.errors import ReproError
from repro_serving.builder.own import release
from repro_serving.builder.own.installed import installed_members
from repro_serving.builder.own.stated import Stated, own_stated
from repro_serving.builder.sealing.bundle import (
    REQUIREMENTS_FILE,
    TOOLS_DIR,
    path_problem,
    wheel_filename,
)

WHEEL_LIMIT: Final = 64 * 1024 * 1024
"""The most the wheel may weigh, and the most its members may hold uncompressed, together."""
MEMBER_LIMIT: Final = 10_000
"""The most members the wheel may have (repro's has about 150)."""
NAME_LIMIT: Final = 512
"""The longest member name judged (repro's longest is under 80 characters)."""
REQUIREMENTS_LIMIT: Final = 1024 * 1024
ENTRY_POINTS: Final = {"console_scripts": {"repro": "repro_serving.builder.cli:main"}}
WHEEL_FIELDS: Final = {"Wheel-Version": "1.0", "Root-Is-Purelib": "true", "Tag": "py3-none-any"}
"""WHEEL's fields, each stated once; `Generator` may name any tool, nothing else may be there."""
DIST_INFO_FILES: Final = frozenset(
    {"METADATA", "WHEEL", "RECORD", "entry_points.txt", "top_level.txt"}
)
LICENSES: Final = "licenses/"
"""The folder of a dist-info that holds the license files its METADATA's License-File names."""
STARTUP_FILES: Final = frozenset({"sitecustomize.py", "usercustomize.py"})
ONCE: Final = ("Metadata-Version", "Name", "Version")
"""METADATA's fields that every wheel states, each exactly once."""
AT_MOST_ONCE: Final = (
    "Summary",
    "Description",
    "Description-Content-Type",
    "Keywords",
    "Home-page",
    "Download-URL",
    "Author",
    "Author-email",
    "Maintainer",
    "Maintainer-email",
    "License",
    "License-Expression",
    "Requires-Python",
)
"""The other single-use fields of the core metadata: a reader takes one of several, which
another reader may not."""
FIRST_PIN_LINE: Final = 5
"""The line of requirements.txt its first pin is on, below the four lines of its header."""
_NATIVE = re.compile(r"\.(so|pyd|dll|dylib)(\.|$)")
"""An extension module or a shared library: imported before the module of the same name."""
UNREADABLE_ZIP = (  # what zipfile raises on an archive it cannot read, whatever the cause
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    NotImplementedError,
    RuntimeError,
    EOFError,
    ValueError,
    OSError,
    zlib.error,
    struct.error,
)
"""What Python's zipfile raises on an archive it cannot read (truncated, corrupt, encrypted, of
a method it lacks)."""


@dataclass(frozen=True)
class _Own:
    """The repro that verifies: its version and what it states of itself in its wheel."""

    version: str | None
    stated: Stated


@dataclass(frozen=True)
class _Wheel:
    """A wheel's members as read, and where its refusals point."""

    where: str
    dist_info: str
    infos: tuple[zipfile.ZipInfo, ...]
    contents: Mapping[str, bytes]


def tools_check(bundle: Path, lock: Lock) -> ClaimCheck:
    version = lock.bundle.repro_version
    claim = f"{TOOLS_DIR}/ = repro {version} and its dependencies pinned by sha256"
    where = f"{TOOLS_DIR}/{REQUIREMENTS_FILE}"
    try:
        data = read_sealed(bundle / where, what="the tools' pins", limit=REQUIREMENTS_LIMIT)
        requirements = ToolRequirements.from_bytes(data, where=where)
    except ReproError as error:
        detail = _one_line(error, where if error.where == str(bundle / where) else None)
        return ClaimCheck(claim, EvidenceClass.SEALED, "unreadable", False, detail)
    try:
        own = _Own(_own_version(), own_stated())
    except ReproError as error:
        detail = "what this repro requires is unknown, so is what tools/ may install: "
        return ClaimCheck(
            claim, EvidenceClass.SEALED, "unjudged", False, (detail + _one_line(error))[:600]
        )
    wheel = _read_wheel(bundle / TOOLS_DIR / wheel_filename(version), version)
    problems = wheel_problems(wheel, version, own) if isinstance(wheel, _Wheel) else [wheel]
    headers = _metadata(wheel) if isinstance(wheel, _Wheel) else None
    problems += requirements_problems(requirements, lock, version, headers, own)
    value = (
        f"{len(requirements.pins)} dependencies for Python {requirements.python} on "
        f"{requirements.platform}"
    )
    return ClaimCheck(claim, EvidenceClass.SEALED, value, not problems, "; ".join(problems)[:600])


def _own_version() -> str | None:
    """The version of the repro that verifies; None where its files cannot be read."""
    try:
        return release.repro_version()
    except ReproError:
        return None


def _one_line(error: ReproError, where: str | None = None) -> str:
    """An error's diagnostics on one line, its place named `where` when given."""
    parts = [where or error.where, error.what]
    parts += [
        error.expected and f"expected {error.expected}",
        error.found and f"found {error.found}",
    ]
    return ": ".join(part for part in parts if part)[:600]


def _problem(where: str, what: str, *, expected: str, found: str) -> str:
    return f"{where}: {what} (expected {expected}; found {found})"


# --- the wheel ------------------------------------------------------------------------------------


def _read_wheel(path: Path, version: str) -> _Wheel | str:
    """The wheel's members, each read in full within the limits; a problem naming the wheel
    when it is no archive that can be read so."""
    where = f"{TOOLS_DIR}/{path.name}"
    try:
        data = read_sealed(path, what="repro's wheel", limit=WHEEL_LIMIT)
    except ReproError as error:
        return _one_line(error, where)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = tuple(archive.infolist())
            if len(infos) > MEMBER_LIMIT:
                return _problem(
                    where,
                    "too many members",
                    expected=f"at most {MEMBER_LIMIT}",
                    found=f"{len(infos)}",
                )
            unpacked = sum(info.file_size for info in infos)
            if unpacked > WHEEL_LIMIT:
                return _problem(
                    where,
                    "its members unpack to too much",
                    expected=f"at most {WHEEL_LIMIT} bytes",
                    found=f"{unpacked} bytes",
                )
            contents = {}
            for info in infos:
                if info.flag_bits & 0x1:
                    return _problem(
                        f"{where}: {info.filename}",
                        "encrypted",
                        expected="plain",
                        found="encrypted",
                    )
                if not info.is_dir():
                    with archive.open(info) as member:
                        contents[info.filename] = member.read(info.file_size + 1)
    except UNREADABLE_ZIP as error:
        return _problem(
            where, "not a zip archive that can be read", expected="a wheel", found=repr(error)[:200]
        )
    layout = layout_problem(data, infos)
    if layout is not None:
        return f"{where}: {layout}"
    return _Wheel(where, f"{WHEEL_NAME}-{version.replace('-', '_')}.dist-info", infos, contents)


_LOCAL = struct.Struct("<4s5H3L2H")
"""A zip member's local header: signature, versions, flags, method, time, date, CRC-32, sizes,
and the lengths of its name and extra field (APPNOTE 4.3.7)."""
_END = struct.Struct("<4s4H2LH")
"""The end of the central directory: signature, disk numbers, entry counts, the directory's
size and offset, the comment's length (APPNOTE 4.3.16)."""
_DESCRIPTOR_SIGNATURE: Final = b"PK\x07\x08"


def layout_problem(data: bytes, infos: tuple[zipfile.ZipInfo, ...]) -> str | None:
    """The archive as a zip writer lays it out and nothing else: its members one after the other
    from the first byte, each its local header, name, extra field and data, then the central
    directory, then its end record with no comment and nothing after it. zipfile and pip read
    an archive from its end and skip whatever lies elsewhere, so bytes before, between or after
    the members would travel sealed and unread."""
    at = 0
    for info in sorted(infos, key=lambda i: i.header_offset):
        if info.header_offset != at:
            return (
                f"{info.orig_filename!r}: its local header at byte {info.header_offset} "
                f"(expected at byte {at}, where the member before it ends: nothing between "
                "members)"
            )
        header = data[at : at + _LOCAL.size]
        if len(header) < _LOCAL.size or header[:4] != b"PK\x03\x04":
            return f"{info.orig_filename!r}: no local header at byte {at}"
        *_, name_length, extra_length = _LOCAL.unpack(header)
        if extra_length or info.extra:
            return (
                f"{info.orig_filename!r}: an extra field of {extra_length or len(info.extra)} "
                "bytes (expected none: repro's wheels carry none, and nothing reads its bytes)"
            )
        at += _LOCAL.size + name_length + extra_length + info.compress_size
        if info.flag_bits & 0x8:  # a data descriptor follows: CRC-32 and sizes, maybe signed
            at += 16 if data[at : at + 4] == _DESCRIPTOR_SIGNATURE else 12
    end = data[-_END.size :]
    if len(end) < _END.size or end[:4] != b"PK\x05\x06":
        return (
            "its last bytes are no end of central directory record (expected the archive to "
            "end with it, with no comment and nothing appended)"
        )
    _, _, _, _, entries, size, offset, comment = _END.unpack(end)
    if comment or (offset, offset + size) != (at, len(data) - _END.size) or entries != len(infos):
        return (
            f"central directory of {entries} entries at bytes {offset}..{offset + size}, a "
            f"comment of {comment} bytes, {len(data)} bytes in all (expected {len(infos)} "
            f"entries from byte {at}, where the members end, to the end record, no comment)"
        )
    return None


def wheel_problems(wheel: _Wheel, version: str, own: _Own) -> list[str]:
    problems = _member_problems(wheel, frozenset(own.stated.license_files))
    problems += _dist_info_problems(wheel, version, own)
    problems += _record_problems(wheel)
    problems += _source_problems(wheel, version, own.version)
    return problems


def _member_problems(wheel: _Wheel, licenses: frozenset[str]) -> list[str]:
    problems = []
    seen: Counter[str] = Counter(info.orig_filename.casefold() for info in wheel.infos)
    files = {info.orig_filename for info in wheel.infos}
    for info in wheel.infos:
        problem = _member_problem(info, wheel.dist_info, seen, files, licenses)
        if problem is not None:
            problems.append(f"{wheel.where}: {info.orig_filename!r}: {problem}")
    return problems


def _member_problem(
    info: zipfile.ZipInfo,
    dist_info: str,
    seen: Mapping[str, int],
    files: set[str],
    licenses: frozenset[str],
) -> str | None:
    name = info.orig_filename  # as the archive writes it: zipfile cuts `filename` at a NUL
    if len(name) > NAME_LIMIT:
        return f"a name of {len(name)} characters (expected at most {NAME_LIMIT})"
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    path = PurePosixPath(name)
    top = name.split("/", 1)[0]
    if name.endswith("/"):
        return "a directory entry (expected files only: a directory entry can hide a file)"
    why = path_problem(name)
    if why is not None:
        return f"a name with {why} (expected a relative path inside site-packages)"
    if kind == stat.S_IFLNK:
        return f"a symlink (expected a regular file; its mode is {mode:o})"
    if kind not in (0, stat.S_IFREG) or mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX):
        return f"mode {mode:o} (expected a regular file without setuid, setgid or sticky bits)"
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        return f"compressed with method {info.compress_type} (expected stored or deflated)"
    if seen[name.casefold()] > 1:
        return "a name held by another member too, ignoring case (expected one member per name)"
    below = next((str(p) for p in path.parents if str(p) in files), None)
    if below is not None:
        return f"a file below the file {below!r} (expected one or the other)"
    if "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
        return "bytecode, which the interpreter may run instead of its source (expected none)"
    if _NATIVE.search(path.name):
        return "native code, which a py3-none-any wheel holds none of (expected none)"
    if path.suffix == ".pth":
        return "a .pth file, which the interpreter runs at every start (expected none)"
    if path.name in STARTUP_FILES:
        return "a module the interpreter imports at every start (expected none)"
    if top.endswith(".data"):
        return (
            "a .data directory, whose scripts, headers and data pip installs outside "
            "site-packages (expected none)"
        )
    if top == dist_info:
        inner = name[len(dist_info) + 1 :]
        if inner.startswith(LICENSES) and inner.removeprefix(LICENSES) not in licenses:
            shown = ", ".join(LICENSES + name for name in sorted(licenses)) or "none"
            return f"not a license file of repro (expected {shown} alone under {LICENSES})"
        if inner not in DIST_INFO_FILES and not inner.startswith(LICENSES):
            allowed = ", ".join(sorted(DIST_INFO_FILES))
            return f"not a file of repro's dist-info (expected {allowed} or {LICENSES})"
        return None
    if top != release.PACKAGE:
        what = "module" if "/" not in name else "package"
        return f"an extra top-level {what} (expected {release.PACKAGE}/ and {dist_info}/ alone)"
    return None


def _metadata(wheel: _Wheel) -> Message | None:
    data = wheel.contents.get(f"{wheel.dist_info}/METADATA")
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return HeaderParser().parsestr(text.split("\n\n", 1)[0])


def _dist_info_problems(wheel: _Wheel, version: str, own: _Own) -> list[str]:
    where = f"{wheel.where}: {wheel.dist_info}"
    problems = [
        f"{where}/{name}: missing (expected in every wheel)"
        for name in ("METADATA", "WHEEL", "RECORD", "entry_points.txt")
        if f"{wheel.dist_info}/{name}" not in wheel.contents
    ]
    headers = _metadata(wheel)
    if headers is None and f"{wheel.dist_info}/METADATA" in wheel.contents:
        problems.append(f"{where}/METADATA: not UTF-8 (expected the metadata setuptools writes)")
    if headers is not None:
        problems += _metadata_problems(headers, f"{where}/METADATA", version, own)
    problems += _wheel_file_problems(wheel, where)
    problems += _entry_point_problems(wheel, where)
    top_level = wheel.contents.get(f"{wheel.dist_info}/top_level.txt")
    if top_level is not None and top_level.split() != [release.PACKAGE.encode()]:
        problems.append(
            _problem(
                f"{where}/top_level.txt",
                "other top-level names",
                expected=release.PACKAGE,
                found=repr(top_level[:100]),
            )
        )
    return problems


def _metadata_problems(headers: Message, where: str, version: str, own: _Own) -> list[str]:
    """METADATA's headers parse as headers, its single-use fields are stated once, it names
    repro of `version`, and it requires what this repro requires, no other thing."""
    if headers.defects:
        defects = ", ".join(type(defect).__name__ for defect in headers.defects)
        return [
            _problem(
                where,
                "headers that do not parse as headers",
                expected="one `Field: value` per line up to the first blank line",
                found=defects,
            )
        ]
    problems = []
    stated = Counter(key.casefold() for key in headers)
    for field in (*ONCE, *AT_MOST_ONCE):
        count = stated[field.casefold()]
        if count > 1 or (count == 0 and field in ONCE):
            values = " / ".join(map(str, headers.get_all(field) or ())) or "none"
            problems.append(
                _problem(
                    where,
                    f"{field} stated {count} times",
                    expected="once: of several, one reader takes the first, another the last",
                    found=values[:200],
                )
            )
    if problems:
        return problems
    name, found = str(headers["Name"]), str(headers["Version"])
    if (normalize(name), found) != (DISTRIBUTION, version):
        problems.append(
            _problem(
                where,
                "another distribution or version",
                expected=f"Name {DISTRIBUTION}, Version {version}",
                found=f"Name {name}, Version {found}",
            )
        )
    return problems + _requires_problems(headers, where, version, own)


def _requires_problems(headers: Message, where: str, version: str, own: _Own) -> list[str]:
    """The wheel requires only what this repro requires: each Requires-Dist one of this repro's
    own, with the same name, extras, specifier and marker, and Requires-Python its own. A repro
    of another version may require otherwise: what that would install cannot be told from
    here, so it is refused, saying which repro can judge it."""
    this = f"this repro {own.version}" if own.version else "this repro"
    if own.version == version:
        remedy = "this repro, of the same version, requires otherwise: its METADATA is not repro's"
    else:
        remedy = (
            f"a repro of another version may require otherwise, which {this} cannot judge: "
            f"verify with repro {version}"
        )
    ours: dict[tuple[object, ...], str] = {}
    by_name: dict[str, list[str]] = {}
    for text in own.stated.requires_dist:
        requirement = Requirement(text)
        ours[_requirement_key(requirement)] = text
        by_name.setdefault(normalize(requirement.name), []).append(text)
    problems = []
    for text in map(str, headers.get_all("Requires-Dist") or ()):
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue  # refused as such by _required_problems
        if _requirement_key(requirement) in ours:
            continue
        instead = by_name.get(normalize(requirement.name))
        requires = (
            f"this repro requires {' and '.join(instead)} instead"
            if instead
            else f"this repro requires no {requirement.name}"
        )
        problems.append(
            _problem(
                where,
                f"Requires-Dist: {text} is not a requirement of {this}",
                expected=f"only this repro's requirements: {requires}",
                found=text,
            )
            + f": {remedy}"
        )
    python = headers.get("Requires-Python")
    theirs = None if python is None else str(python)
    if _specifier(theirs) != _specifier(own.stated.requires_python):
        problems.append(
            _problem(
                where,
                f"Requires-Python: {theirs or 'none'} is not this repro's",
                expected=f"Requires-Python: {own.stated.requires_python or 'none'}",
                found=theirs or "none",
            )
            + f": {remedy}"
        )
    return problems


def _requirement_key(requirement: Requirement) -> tuple[object, ...]:
    """A requirement as compared: its normalised name and extras, its specifier (`>=42` is
    `>=42.0`), its URL and its marker as packaging writes it."""
    return (
        normalize(requirement.name),
        frozenset(normalize(extra) for extra in requirement.extras),
        requirement.specifier,
        requirement.url,
        None if requirement.marker is None else str(requirement.marker),
    )


def _specifier(text: str | None) -> SpecifierSet | str | None:
    if text is None:
        return None
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return text


def _wheel_file_problems(wheel: _Wheel, where: str) -> list[str]:
    data = wheel.contents.get(f"{wheel.dist_info}/WHEEL")
    if data is None:
        return []
    headers = HeaderParser().parsestr(data.decode("utf-8", errors="replace"))
    found = {key: headers.get_all(key) or [] for key in WHEEL_FIELDS}
    stated = sorted(set(headers.keys()) - set(WHEEL_FIELDS) - {"Generator"})
    if found == {key: [value] for key, value in WHEEL_FIELDS.items()} and not stated:
        return []
    expected = ", ".join(f"{key}: {value}" for key, value in WHEEL_FIELDS.items())
    shown = [f"{key}: {' / '.join(values) or 'none'}" for key, values in found.items()]
    shown += [f"{key} (not a field of repro's wheel)" for key in stated]
    return [
        _problem(f"{where}/WHEEL", "not a pure wheel", expected=expected, found=", ".join(shown))
    ]


def _entry_point_problems(wheel: _Wheel, where: str) -> list[str]:
    data = wheel.contents.get(f"{wheel.dist_info}/entry_points.txt")
    if data is None:
        return []
    expected = "[console_scripts] repro = repro_serving.builder.cli:main, nothing else"
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment, method-assign]
    try:
        parser.read_string(data.decode("utf-8"))
    except (configparser.Error, UnicodeDecodeError) as error:
        found = str(error).splitlines()[0][:200]
        return [_problem(f"{where}/entry_points.txt", "unreadable", expected=expected, found=found)]
    points = {section: dict(parser[section]) for section in parser.sections()}
    if points == ENTRY_POINTS:
        return []
    found = "; ".join(
        f"[{section}] " + ", ".join(f"{k} = {v}" for k, v in names.items())
        for section, names in points.items()
    )
    return [
        _problem(
            f"{where}/entry_points.txt", "other entry points", expected=expected, found=found[:300]
        )
    ]


def _record_problems(wheel: _Wheel) -> list[str]:
    record_name = f"{wheel.dist_info}/RECORD"
    data = wheel.contents.get(record_name)
    if data is None:
        return []
    where = f"{wheel.where}: {record_name}"
    try:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as error:
        return [_problem(where, "unreadable", expected="CSV in UTF-8", found=str(error)[:200])]
    problems = []
    listed: Counter[str] = Counter(row[0] for row in rows if row)
    for name, count in sorted(listed.items()):
        if count > 1:
            problems.append(f"{where}: lists {name!r} {count} times (expected once)")
    for row in rows:
        if not row or row[0] == record_name or listed[row[0]] > 1:
            continue
        problem = _row_problem(row, wheel.contents)
        if problem is not None:
            problems.append(f"{where}: {row[0]!r}: {problem}")
    for name in sorted(set(wheel.contents) - set(listed)):
        problems.append(f"{wheel.where}: {name!r}: not in RECORD (expected every member listed)")
    return problems


def _row_problem(row: list[str], contents: Mapping[str, bytes]) -> str | None:
    name = row[0]
    if name not in contents:
        return "listed in RECORD but not in the wheel (expected a member for each row)"
    data = contents[name]
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    expected = [name, f"sha256={digest}", str(len(data))]
    if row != expected:
        return f"its row reads {','.join(row)[:200]!r} (expected {','.join(expected)!r})"
    return None


def _source_problems(wheel: _Wheel, version: str, own: str | None) -> list[str]:
    """Its version names its files: the label is their digest, and the wheel holds what the
    repro that verifies would pack where it has that very version."""
    package = {
        name: data for name, data in wheel.contents.items() if release.is_package_member(name)
    }
    label = release.parse_label(version)
    if label is None:
        return [
            _problem(
                wheel.where,
                f"repro {version} names no source",
                expected=f"a version <release>+g<{release.LABEL_DIGITS} hex>, the digest of "
                f"its {release.PACKAGE}/ files, as repro writes since it labels its version: "
                "seal the bundle again",
                found=version,
            )
        ]
    if own == version:
        return _compared(wheel, version)
    found = release.files_digest(package)
    if found != label[1]:
        return [
            _problem(
                f"{wheel.where}: {release.PACKAGE}/",
                f"files that are not those repro {version} names",
                expected=f"files digesting to g{label[1]}",
                found=f"files digesting to g{found}",
            )
        ]
    return []


def _compared(wheel: _Wheel, version: str) -> list[str]:
    """The first member in which the wheel differs from the one this repro, of the same version,
    would pack."""
    try:
        own = _own_members(version)
    except ReproError as error:
        problem = _one_line(error)
        return [f"{wheel.where}: cannot be compared with this repro of the same version: {problem}"]
    # a checkout's own members are its package's files: the dist-info is compared where known
    packs_dist_info = any(name.startswith(f"{wheel.dist_info}/") for name in own)
    theirs = {
        name: data
        for name, data in wheel.contents.items()
        if (packs_dist_info or release.is_package_member(name))
        and name != f"{wheel.dist_info}/RECORD"
    }
    for name in sorted(own.keys() | theirs.keys()):
        mine, its = own.get(name), theirs.get(name)
        if mine == its:
            continue
        return [
            _problem(
                f"{wheel.where}: {name}",
                f"not the member this repro {version}, of the same version, packs",
                expected=_shown(mine),
                found=_shown(its),
            )
        ]
    return []


def _shown(data: bytes | None) -> str:
    if data is None:
        return "no such member"
    return f"sha256 {hashlib.sha256(data).hexdigest()[:16]}…, {len(data)} bytes"


def _own_members(version: str) -> dict[str, bytes]:
    """The members this repro packs into its own wheel, RECORD aside: a checkout's package
    files (its dist-info is setuptools' to write), an installed repro's every file."""
    package = release.running_package()
    if package.checkout is not None:
        return release.read_files(package.files)
    return dict(installed_members(DISTRIBUTION, version))


# --- requirements.txt -----------------------------------------------------------------------------


def requirements_problems(
    requirements: ToolRequirements,
    lock: Lock,
    version: str,
    headers: Message | None,
    own: _Own,
) -> list[str]:
    where = f"{TOOLS_DIR}/{REQUIREMENTS_FILE}"
    problems = []
    if requirements.repro != version:
        problems.append(
            _problem(
                f"{where}:1",
                "written for another repro",
                expected=version,
                found=requirements.repro,
            )
        )
    for line, field, value, wanted in (
        (3, "python", requirements.python, _stated_python(lock, headers)),
        (4, "platform", requirements.platform, _stated_platform(lock)),
    ):
        if value not in wanted.values:
            problems.append(
                _problem(f"{where}:{line}", f"another {field}", expected=wanted.text, found=value)
            )
    problems += _pin_problems(requirements, lock, where)
    if headers is not None:
        environment = _marker_environment(requirements)
        ours = _applying(own.stated.requires_dist, environment)
        problems += _required_problems(requirements, headers, ours, where)
        problems += _closure_problems(requirements, headers, ours, where)
    return problems


def _applying(requires: tuple[str, ...], environment: Mapping[str, str]) -> dict[str, SpecifierSet]:
    """Normalised name → the specifier of this repro's requirements of it whose marker holds
    where the tools run (none of an extra: none is asked for)."""
    found: dict[str, SpecifierSet] = {}
    for text in requires:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate(dict(environment)):
            name = normalize(requirement.name)
            found[name] = found.get(name, SpecifierSet()) & requirement.specifier
    return found


@dataclass(frozen=True)
class _Installed:
    """A distribution installed beside this repro, as importlib.metadata finds it."""

    distribution: metadata.Distribution
    headers: str | None
    """Its METADATA up to the first blank line; None where it has none (an egg-info)."""

    @cached_property
    def stated(self) -> tuple[str, tuple[str, ...]]:
        """Its version and its Requires-Dist, read from its headers line by line (a folded
        line joined to the field it continues): the email parser takes a millisecond a
        distribution, for the long License and Description fields it does not need."""
        if self.headers is None:
            return self.distribution.version, tuple(self.distribution.requires or ())
        fields: list[tuple[str, str]] = []
        for line in self.headers.splitlines():
            if line[:1] in (" ", "\t") and fields:
                fields[-1] = (fields[-1][0], f"{fields[-1][1]} {line.strip()}")
            else:
                key, _, value = line.partition(":")
                fields.append((key.strip().casefold(), value.strip()))
        version = next((value for key, value in fields if key == "version"), "")
        return version, tuple(value for key, value in fields if key == "requires-dist")


_NAME_FIELD = re.compile(r"^Name:[ \t]*(\S+)[ \t]*$", re.MULTILINE | re.IGNORECASE)


def installed_here() -> dict[str, _Installed]:
    """Normalised name → the distribution `importlib.metadata.distribution` finds by that name
    (the first on sys.path), in one pass: only the name of each is read (parsing every
    METADATA would cost about as much as the rest of the check)."""
    found: dict[str, _Installed] = {}
    for distribution in metadata.distributions():
        text = distribution.read_text("METADATA")
        headers = None if text is None else re.split(r"\r?\n\r?\n", text, maxsplit=1)[0]
        match = _NAME_FIELD.search(headers) if headers is not None else None
        name = match[1] if match is not None else (distribution.metadata.get_all("Name") or [""])[0]
        if name:
            found.setdefault(normalize(str(name)), _Installed(distribution, headers))
    return found


def _closure_problems(
    requirements: ToolRequirements,
    headers: Message,
    ours: Mapping[str, SpecifierSet],
    where: str,
) -> list[str]:
    """No pin that nothing requires, none at a version what pulls it in refuses: `launch`
    installs every pin into the tools' environment, so one that neither repro nor anything it
    needs requires is code smuggled in. The closure starts from the wheel's requirements that
    this repro requires too (another is refused with the METADATA naming it) and follows what
    each distribution installed beside this repro requires, markers evaluated where the tools
    run, no extra (a pinned wheel's own metadata is not sealed: the installed one is read, the
    one the verifier runs on). Where a distribution of the closure is not installed here what
    it requires is unknown: it is refused by name, never let through. A pin pulled in by a
    distribution installed here at its pinned version is judged by that version's specifier
    of it too (of another version, the specifier it states is not known here)."""
    environment = _marker_environment(requirements)
    pinned = {
        normalize(pin.name): (line, pin)
        for line, pin in enumerate(requirements.pins, start=FIRST_PIN_LINE)
    }
    installed = installed_here()
    problems: list[str] = []
    needed: set[str] = set()
    pending = [
        (DISTRIBUTION, text, requirement)
        for text, requirement in _holding(headers.get_all("Requires-Dist") or (), environment)
        if normalize(requirement.name) in ours
    ]
    while pending:
        by, text, requirement = pending.pop()
        name = normalize(requirement.name)
        if by != DISTRIBUTION:
            problems += _admitted(
                by, text, requirement, installed=installed, pinned=pinned, where=where
            )
        if name in needed or name == DISTRIBUTION:
            continue
        needed.add(name)
        found = installed.get(name)
        if found is None:
            problems.append(
                _problem(
                    where,
                    f"{requirement.name}, which {by} requires ({text}) where the tools run, is "
                    "not installed beside this repro: what it requires in turn, so what may be "
                    "pinned, is unknown here",
                    expected="every distribution repro needs installed beside the repro that "
                    "verifies: verify where repro's dependencies are installed for this "
                    "platform and Python",
                    found="none",
                )
            )
            continue
        pending += [
            (name, child, required) for child, required in _holding(found.stated[1], environment)
        ]
    problems += [
        _problem(
            f"{where}:{line}",
            f"{pin.name} is pinned but required by nothing repro needs",
            expected="only the wheel's requirements and theirs",
            found=f"{pin.name}=={pin.version}",
        )
        for line, pin in enumerate(requirements.pins, start=FIRST_PIN_LINE)
        if normalize(pin.name) not in needed
    ]
    return list(dict.fromkeys(problems))


_OF_AN_EXTRA = re.compile(r"[^;]*;\s*extra\s*==\s*(\"[^\"]*\"|'[^']*')\s*")
"""A requirement of an extra alone (`name>=1; extra == "x"`): it never holds, none is asked."""


def _holding(
    texts: Sequence[object], environment: Mapping[str, str]
) -> list[tuple[str, Requirement]]:
    """The requirements among `texts` whose marker holds in `environment` (with no extra); a
    malformed one or one whose marker cannot be evaluated is left out (the wheel's are refused
    as such by `_required_problems`; what it would pull in is then required by nothing)."""
    held = []
    for text in map(str, texts):
        if _OF_AN_EXTRA.fullmatch(text):
            continue  # the common form, left out unparsed: parsing takes most of the closure
        try:
            requirement = Requirement(text)
            applies = requirement.marker is None or requirement.marker.evaluate(dict(environment))
        except (InvalidRequirement, ValueError):
            continue
        if applies:
            held.append((text, requirement))
    return held


def _admitted(
    by: str,
    text: str,
    requirement: Requirement,
    *,
    installed: Mapping[str, _Installed],
    pinned: Mapping[str, tuple[int, Pin]],
    where: str,
) -> list[str]:
    """A pin of what `by` requires is at a version `by`'s specifier admits, where `by` is
    installed here at the version pinned (its requirements read are then that version's)."""
    child = pinned.get(normalize(requirement.name))
    parent = pinned.get(by)
    found = installed.get(by)
    if child is None or parent is None or found is None or not _valid(child[1].version):
        return []
    if not (_valid(found.stated[0]) and _valid(parent[1].version)):
        return []
    if Version(found.stated[0]) != Version(parent[1].version):
        return []  # what the pinned version requires is not known here
    line, pin = child
    if requirement.specifier.contains(pin.version, prereleases=True):
        return []
    return [
        _problem(
            f"{where}:{line}",
            f"{pin.name}=={pin.version} is not what {parent[1].name}=={parent[1].version} "
            f"requires ({text})",
            expected=f"{requirement.name}{requirement.specifier}",
            found=pin.version,
        )
    ]


@dataclass(frozen=True)
class _Wanted:
    """What a field of requirements.txt may say, and how a refusal words it."""

    values: frozenset[str]
    text: str


def _stated_platform(lock: Lock) -> _Wanted:
    """The platform the tools must run on: the lock's host, as `sysconfig.get_platform()`
    names it (`linux-x86_64`), where `launch` refuses any other os or arch."""
    os_name = lock.host.enforced.os or lock.host.facts.os
    arch = lock.host.enforced.arch or lock.host.facts.arch
    if not (os_name and arch):
        return _Wanted(frozenset(), "the lock's host os and arch, which it does not state")
    return _Wanted(frozenset({f"{os_name}-{arch}"}), f"{os_name}-{arch}, the lock's host")


def _stated_python(lock: Lock, headers: Message | None) -> _Wanted:
    """The interpreter series the tools must run on: a built bundle's lock interpreter's, which
    `launch` restores the serving venv with; for an imported record, whose interpreter is the
    record's, any the wheel's Requires-Python admits."""
    if lock.record is None:
        series = _series(lock.python.interpreter)
        return _Wanted(
            frozenset({series}), f"{series}, of the lock's Python {lock.python.interpreter}"
        )
    requires = str(headers.get("Requires-Python", "")) if headers is not None else ""
    try:
        specifier = SpecifierSet(requires)
    except InvalidSpecifier:
        specifier = SpecifierSet("==0")
    admitted = frozenset(f"3.{minor}" for minor in range(40) if f"3.{minor}" in specifier)
    return _Wanted(admitted, f"a series the wheel's Requires-Python {requires!r} admits")


def _series(interpreter: str) -> str:
    return ".".join(interpreter.split(".")[:2])


def _pin_problems(requirements: ToolRequirements, lock: Lock, where: str) -> list[str]:
    problems = []
    series = _series(lock.python.interpreter)
    # the lock's wheels are for its interpreter on its host: the tools' too, for a built bundle
    same_target = lock.record is None and requirements.python == series
    for line, pin in enumerate(requirements.pins, start=FIRST_PIN_LINE):
        here = f"{where}:{line}"
        if not _valid(pin.version):
            problems.append(
                _problem(
                    here, f"{pin.name}: no version", expected="a PEP 440 version", found=pin.version
                )
            )
            continue
        if normalize(pin.name) == DISTRIBUTION:
            problems.append(
                _problem(
                    here,
                    "repro itself pinned",
                    expected=f"repro from {TOOLS_DIR}/ alone",
                    found=f"{pin.name}=={pin.version}",
                )
            )
        locked = lock.python.artifacts.get(normalize(pin.name)) if same_target else None
        if locked is not None and locked.version == pin.version and locked.sha256 != pin.sha256:
            problems.append(
                _problem(
                    here,
                    f"{pin.name}=={pin.version}: another wheel than the lock's, for the same "
                    "interpreter and platform",
                    expected=f"sha256:{locked.sha256} ({locked.filename})",
                    found=f"sha256:{pin.sha256}",
                )
            )
    return problems


def _valid(version: str) -> bool:
    try:
        Version(version)
    except InvalidVersion:
        return False
    return True


def _required_problems(
    requirements: ToolRequirements,
    headers: Message,
    ours: Mapping[str, SpecifierSet],
    where: str,
) -> list[str]:
    """Every Requires-Dist of the wheel that holds where the tools run is pinned, at a version
    its specifier admits and, where this repro requires it too, this repro's specifier (a
    loosened requirement admits no older version)."""
    problems = []
    environment = _marker_environment(requirements)
    lines = {
        normalize(pin.name): (line, pin)
        for line, pin in enumerate(requirements.pins, start=FIRST_PIN_LINE)
    }
    for text in map(str, headers.get_all("Requires-Dist") or ()):
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            problems.append(
                f"{where}: the wheel's METADATA declares a malformed requirement {text!r}"
            )
            continue
        if requirement.url:
            problems.append(
                _problem(
                    where,
                    f"the wheel requires {requirement.name} by URL",
                    expected="a requirement by name and version",
                    found=text,
                )
            )
            continue
        try:
            applies = requirement.marker is None or requirement.marker.evaluate(environment)
        except ValueError as error:  # packaging's undefined comparisons and names
            problems.append(f"{where}: the marker of {text!r} cannot be evaluated: {error}")
            continue
        if not applies:
            continue
        found = lines.get(normalize(requirement.name))
        if found is None:
            problems.append(
                _problem(
                    where,
                    f"{requirement.name}, which repro requires ({text}), is not pinned",
                    expected=f"a line {requirement.name}==<version> --hash=sha256:<64 hex>",
                    found="none",
                )
            )
            continue
        line, pin = found
        if not _valid(pin.version):
            continue  # refused as such by its line
        specifiers = [requirement.specifier]
        mine = ours.get(normalize(requirement.name))
        if mine is not None and mine != requirement.specifier:
            specifiers.append(mine)
        refused = next(
            (s for s in specifiers if not s.contains(pin.version, prereleases=True)), None
        )
        if refused is not None:
            problems.append(
                _problem(
                    f"{where}:{line}",
                    f"{pin.name}=={pin.version} is not what repro requires",
                    expected=f"{requirement.name}{refused}",
                    found=pin.version,
                )
            )
    return problems


def _marker_environment(requirements: ToolRequirements) -> dict[str, str]:
    """Requirement markers' variables where the tools run: their Python and platform."""
    system, _, machine = requirements.platform.partition("-")
    return {
        "python_version": requirements.python,
        "sys_platform": system,
        "platform_system": system.capitalize(),
        "platform_machine": machine,
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }
