"""Kernel sets (`kernels/*.toml`, shipped with the package), and the accelerator boundary
they draw.

A platform set (`cuda`, `xpu`, `cpu`) says what a serving process may map that no DT_NEEDED
closure explains: the driver's own libraries and device nodes (allowed from the driver's roots,
pinned by the driver version), libraries the runtime dlopens, and directories holding kernels
compiled at run time (allowed by place, each one's hash recorded). `classify` sorts every mapped
ELF of a live audit into static closure / driver / expected dlopen / JIT artifact / unexpected;
it is pure, so the same function judges a live tree and committed evidence.

A stack's set (e.g. `laguna-b70`) also pins its native truth: the extension modules it imports
and the kernel libraries it must map, each at a path in placeholder form with its sha256; native
modules seen loaded from another tree (`[[external]]`), which stay drift unless declared; and
runtime log markers proving a kernel path ran. `origin_of` judges one mapped file against those
pins, purely: the same bytes at another path are origin drift.
"""

from __future__ import annotations

import fnmatch
import itertools
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Final, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from repro_serving.builder.documents import validate_document
from repro_serving.builder.documents.manifest import (
    PATH_PLACEHOLDERS,
    GitCommit,
    LogMarker,
    Sha256,
    expand,
    placeholders_in,
)
from repro_serving.builder.errors import BadInput
from repro_serving.builder.native.dispatch import Dispatch
from repro_serving.builder.readers import KERNEL_SET_LIMIT, NoSuchFile, read_toml

KERNELS_DIR = Path(__file__).resolve().parents[2] / "kernels"
"""The kernel sets repro ships, as package data: an installed repro finds them too."""

# A Python extension module: a PEP 3149 or stable-ABI file name inside an installation's
# package directories, or any module of CPython's own lib-dynload. The same name elsewhere (a
# JIT cache, /tmp) is not an import of an installed package.
_EXTENSION_MODULE = re.compile(r"\.(cpython-\d+[^/]*|abi3)\.so$")
_PACKAGE_DIRS = ("/site-packages/", "/dist-packages/")
_STDLIB_EXTENSIONS = "/lib-dynload/"
_CLOSURE_RULES = ("executable", "startup", "dependency")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


JIT_PLACEHOLDERS: Final = ("home", "tmpdir")
"""What a JIT directory is relative to: the mapping process's own HOME, and the temporary
directory Python's `tempfile` gives it (TMPDIR, TEMP or TMP, else /tmp)."""


def _jit_pattern(pattern: str) -> str:
    """A JIT pattern is an absolute path glob or starts with `{home}/` or `{tmpdir}/`."""
    try:
        names = placeholders_in(pattern)
    except ValueError as error:
        raise ValueError(f"jit {pattern!r}: malformed placeholder") from error
    starts = pattern.startswith("/") or any(pattern.startswith(f"{{{n}}}/") for n in names)
    if not starts or set(names) - set(JIT_PLACEHOLDERS) or len(names) > 1:
        raise ValueError(
            f"jit {pattern!r}: expected an absolute glob or one starting with {{home}}/ or "
            "{tmpdir}/, and no other placeholder"
        )
    return pattern


class Platform(_Frozen):
    driver_roots: tuple[str, ...] = ()
    """Directories the driver's user-space libraries are installed or mounted in."""
    driver_libraries: tuple[str, ...] = ()
    """File-name globs of the driver's libraries."""
    device_nodes: tuple[str, ...] = ()
    """Path globs of the device nodes the driver maps."""
    dlopen: tuple[str, ...] = ()
    """File-name globs of libraries the runtime loads with dlopen."""
    jit: tuple[Annotated[str, AfterValidator(_jit_pattern)], ...] = ()
    """Path globs of kernels compiled at run time, relative to the mapping process's own
    `{home}` or `{tmpdir}` (a process without HOME has no `{home}`): `*` matches within one
    path segment, `**` any number of segments."""


ModuleName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
]
_SCOPED_PLACEHOLDER: Final = re.compile(
    r"^(model\.(target|draft|tokenizer)|source\.[A-Za-z0-9][A-Za-z0-9._-]{0,127})$"
)


def placeholder_problem(template: str) -> str | None:
    """Why `template` is not a path in placeholder form, or None: it must start with one known
    placeholder (`{venv}`, `{site}`, `{python}`, `{python_prefix}`, `{model.<role>}`,
    `{source.<name>}`, a `[[source]]` work tree of the manifest) and use no other."""
    try:
        names = placeholders_in(template)
    except ValueError:
        return "malformed placeholder"
    if not names or not template.startswith("{"):
        return "a path starting with a placeholder"
    unknown = [
        name
        for name in names
        if name not in PATH_PLACEHOLDERS and not _SCOPED_PLACEHOLDER.match(name)
    ]
    return f"unknown placeholder {{{unknown[0]}}}" if unknown else None


def _placeholder_path(value: str) -> str:
    problem = placeholder_problem(value)
    if problem is not None:
        raise ValueError(f"{problem}: {value!r}")
    return value


PlaceholderPath = Annotated[str, Field(min_length=1), AfterValidator(_placeholder_path)]


class KernelModule(_Frozen):
    """A Python extension module the stack imports, pinned to its file and bytes."""

    module: ModuleName
    path: PlaceholderPath
    sha256: Sha256
    built_from: GitCommit | None = None
    """The source commit the binary was observed to be built from, as the record states it."""


class KernelLibrary(_Frozen):
    """A kernel library that must be mapped, from exactly this path, with these bytes."""

    path: PlaceholderPath
    sha256: Sha256
    built_from: GitCommit | None = None


class ExternalModule(_Frozen):
    """A native module seen loaded from outside the stack's own trees: the hazard of a loader
    mapping a library from another build tree. Recorded as it was observed; a live audit
    flags its mapping as origin drift unless the set `declared` it on purpose."""

    module: ModuleName
    path: Annotated[str, Field(min_length=1, pattern=r"^/")]
    """The absolute path it was observed at."""
    sha256: Sha256
    built_from: GitCommit | None = None
    declared: bool = False
    """True only when this origin is intended: then it is accepted at exactly this path and
    with exactly these bytes."""


class KernelSet(_Frozen):
    schema_: Literal["repro.kernels/v1"]
    name: str
    description: str
    platform: Platform = Platform()
    modules: tuple[KernelModule, ...] = ()
    libraries: tuple[KernelLibrary, ...] = ()
    external: tuple[ExternalModule, ...] = ()
    markers: tuple[LogMarker, ...] = ()
    """Runtime log markers proving a kernel path ran, judged like `[oracle.gates]` markers."""
    dispatch: tuple[Dispatch, ...] = ()
    """Run-time choices of code by host capability (`builder.native.dispatch`)."""

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        paths = [m.path for m in self.modules] + [lib.path for lib in self.libraries]
        for what, values in (
            ("module", [m.module for m in self.modules] + [e.module for e in self.external]),
            ("path", paths + [e.path for e in self.external]),
            ("marker", [m.name for m in self.markers]),
            ("dispatch", [d.name for d in self.dispatch]),
        ):
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"{what} listed twice: {', '.join(repeated)}")
        return self

    def placeholders(self) -> tuple[str, ...]:
        """Every placeholder the set's paths use, each once, in order of appearance."""
        paths = [m.path for m in self.modules] + [lib.path for lib in self.libraries]
        names = (name for path in paths for name in placeholders_in(path))
        return tuple(dict.fromkeys(names))

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @classmethod
    def load(cls, name: str, directory: Path = KERNELS_DIR) -> KernelSet:
        path = directory / f"{name}.toml"
        try:
            document = read_toml(path, limit=KERNEL_SET_LIMIT, what="a kernel set")
        except NoSuchFile as error:
            known = ", ".join(sorted(p.stem for p in directory.glob("*.toml"))) or "none"
            raise BadInput(
                "no such kernel set", where=str(path), expected=f"one of {known}", found=error.found
            ) from error
        document["schema_"] = document.pop("schema", None)
        kernel_set = validate_document(
            cls, document, where=str(path), what="the kernel set", refusal="malformed kernel set"
        )
        if kernel_set.name != name:
            raise BadInput(
                "a kernel set's name differs from its file name",
                where=str(path),
                expected=name,
                found=kernel_set.name,
            )
        return kernel_set


def dispatches(kernel_sets: Sequence[KernelSet]) -> dict[str, tuple[str, Dispatch]]:
    """Every dispatch of `kernel_sets` by the name it chooses for, with the set declaring it;
    a choice declared by two sets is a malformed combination."""
    found: dict[str, tuple[str, Dispatch]] = {}
    for kernel_set in kernel_sets:
        for dispatch in kernel_set.dispatch:
            if dispatch.name in found:
                raise BadInput(
                    "two kernel sets declare the same dispatch",
                    where=f"kernel sets {found[dispatch.name][0]} and {kernel_set.name}",
                    expected="each run-time choice declared once",
                    found=dispatch.name,
                )
            found[dispatch.name] = (kernel_set.name, dispatch)
    return found


class Category(StrEnum):
    STATIC = "static closure"
    DRIVER = "driver"
    DLOPEN = "expected dlopen"
    JIT = "JIT artifact"
    UNEXPECTED = "unexpected"


def classify(
    path: str, rule: str, platform: Platform, environ: Mapping[str, str] | None = None
) -> tuple[Category, str]:
    """Where a mapped ELF stands at the accelerator boundary, and which entry says so.

    `rule` is the live audit's: how the loader came to map the file (executable, startup,
    dependency, preload, dlopen); `environ` the mapping process's environment, which places
    its JIT directories. Run-time places are checked first: a JIT artifact or a driver library
    is that even when some other object happens to need it by name.
    """
    name = posixpath.basename(path)
    place = jit_matcher([platform], environ or {})(path)
    if place is not None:
        return Category.JIT, f"jit {place}"
    if posixpath.dirname(path) in _roots(platform.driver_roots):
        for pattern in platform.driver_libraries:
            if fnmatch.fnmatchcase(name, pattern):
                return Category.DRIVER, f"driver {pattern}"
    if rule in _CLOSURE_RULES:
        return Category.STATIC, rule
    if rule == "dlopen":
        for pattern in platform.dlopen:
            if fnmatch.fnmatchcase(name, pattern):
                return Category.DLOPEN, f"dlopen {pattern}"
        if _is_extension_module(path):
            return Category.DLOPEN, "python extension module"
    return Category.UNEXPECTED, f"{rule}: matches no entry of the platform set"


def jit_matcher(
    platforms: Sequence[Platform], environ: Mapping[str, str]
) -> Callable[[str], str | None]:
    """The JIT glob of `platforms` a path lies in, for a process with `environ`, or None: each
    pattern's placeholder expanded once (its `{home}` or `{tmpdir}`, a pattern naming one the
    process has none of matching nothing), `*` within one segment, `**` across any number; a
    path outside a pattern's fixed leading directories passed over without a glob."""
    directories = jit_directories(environ)
    patterns = []
    for platform in platforms:
        for pattern in platform.jit:
            names = placeholders_in(pattern)
            if any(name not in directories for name in names):
                continue
            parts = (expand(pattern, directories) if names else pattern).split("/")
            fixed = "/".join(itertools.takewhile(lambda part: not _GLOB.search(part), parts))
            patterns.append((pattern, fixed, parts))

    def place(path: str) -> str | None:
        candidates = [
            (pattern, parts) for pattern, fixed, parts in patterns if path.startswith(fixed)
        ]
        split = path.split("/") if candidates else []
        return next((pattern for pattern, parts in candidates if _glob(split, parts)), None)

    return place


_GLOB: Final = re.compile(r"[*?\[]")


def jit_directories(environ: Mapping[str, str]) -> dict[str, str]:
    """`{home}` and `{tmpdir}` of a process with `environ`, as its runtime finds them: HOME
    (none without it), and the directory Python's `tempfile.gettempdir` picks first."""
    temporary = (environ[n] for n in ("TMPDIR", "TEMP", "TMP") if environ.get(n))
    found = {"tmpdir": next(temporary, "/tmp")}
    if environ.get("HOME"):
        found["home"] = environ["HOME"]
    return {name: posixpath.normpath(value) for name, value in found.items()}


def _glob(parts: Sequence[str], pattern: Sequence[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_glob(parts[skip:], pattern[1:]) for skip in range(len(parts) + 1))
    return (
        bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _glob(parts[1:], pattern[1:])
    )


def _is_extension_module(path: str) -> bool:
    if _STDLIB_EXTENSIONS in path:
        return True
    installed = any(directory in path for directory in _PACKAGE_DIRS)
    return installed and _EXTENSION_MODULE.search(posixpath.basename(path)) is not None


def _roots(roots: tuple[str, ...]) -> set[str]:
    return {root.rstrip("/") for root in roots}


# --- the origin of a mapped file -----------------------------------------------------------------


class Origin(StrEnum):
    PINNED = "pinned"
    DECLARED_EXTERNAL = "declared external"
    ORIGIN_DRIFT = "origin drift"
    UNDECLARED_EXTERNAL = "undeclared external"
    BYTES_DRIFT = "bytes drift"
    UNKNOWN = "not in the kernel set"


@dataclass(frozen=True)
class OriginVerdict:
    """Where a mapped file stands against a kernel set's pins, and the entry that says so."""

    origin: Origin
    entry: str

    @property
    def drift(self) -> bool:
        return self.origin not in (Origin.PINNED, Origin.DECLARED_EXTERNAL, Origin.UNKNOWN)


def origin_of(
    path: str, sha256: str, kernel_set: KernelSet, values: Mapping[str, str]
) -> OriginVerdict:
    """Judge one mapped file (its real path and sha256) against the set's pins, with `values`
    expanding the placeholders on this host. A pinned path with other bytes, pinned bytes at
    another path, or an external module not declared, is drift; a file the set says nothing
    about is left to the platform boundary (`classify`)."""
    entries: list[KernelModule | KernelLibrary] = [*kernel_set.modules, *kernel_set.libraries]
    pinned = {expand(entry.path, values): (entry.sha256, _entry_name(entry)) for entry in entries}
    if path in pinned:
        expected, name = pinned[path]
        return OriginVerdict(Origin.PINNED if sha256 == expected else Origin.BYTES_DRIFT, name)
    for external in kernel_set.external:
        if sha256 == external.sha256 or path == external.path:
            same = sha256 == external.sha256 and path == external.path
            accepted = external.declared and same
            origin = Origin.DECLARED_EXTERNAL if accepted else Origin.UNDECLARED_EXTERNAL
            return OriginVerdict(origin, f"external {external.module} at {external.path}")
    for location, (expected, name) in pinned.items():
        if sha256 == expected:
            return OriginVerdict(Origin.ORIGIN_DRIFT, f"{name}, pinned at {location}")
    return OriginVerdict(Origin.UNKNOWN, "")


def _entry_name(entry: KernelModule | KernelLibrary) -> str:
    return entry.module if isinstance(entry, KernelModule) else posixpath.basename(entry.path)


def kernel_set_files(names: Sequence[str], directory: Path = KERNELS_DIR) -> dict[str, Path]:
    """The files of the named kernel sets by their name in a bundle's kernels/ directory."""
    return {f"{name}.toml": directory / f"{name}.toml" for name in names}


def runtime_markers(names: Sequence[str], directory: Path = KERNELS_DIR) -> tuple[LogMarker, ...]:
    """The runtime markers of the named kernel sets, in order, for `launch.gates.judge`."""
    return tuple(marker for name in names for marker in KernelSet.load(name, directory).markers)
