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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlparse

from repro_serving.builder.documents.manifest import Python, expand, placeholder_path
from repro_serving.builder.documents.python import (
    Distribution,
    PythonFacts,
    RecordCheck,
    RecordMismatch,
)
from repro_serving.builder.errors import BadInput, NotObservable
from repro_serving.builder.hashing import file_size, over_cores, sha256_file
from repro_serving.builder.observe.program import run_program
from repro_serving.builder.placeholders import Venv
from repro_serving.builder.readers import ENVIRONMENT_FILE_LIMIT, parse_json, read_bytes

INTERPRETER_TIMEOUT_S: Final = 30.0


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
    done = run_program(
        argv,
        timeout=INTERPRETER_TIMEOUT_S,
        cannot="cannot run the interpreter of the virtual environment",
        where=str(python),
        hint="check that the environment's interpreter exists and runs",
    )
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
