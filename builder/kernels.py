"""Kernel sets of the repository's `kernels/` folder, and the accelerator boundary they draw.

A platform set (`cuda`, `xpu`, `cpu`) says what a serving process may map that no DT_NEEDED
closure explains: the driver's own libraries and device nodes (allowed from the driver's roots,
pinned by the driver version), libraries the runtime dlopens, and directories holding kernels
compiled at run time (allowed by place, each one's hash recorded). `classify` sorts every mapped
ELF of a live audit into static closure / driver / expected dlopen / JIT artifact / unexpected;
it is pure, so the same function judges a live tree and committed evidence.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from builder.errors import BadInput

KERNELS_DIR = Path(__file__).resolve().parents[1] / "kernels"

# A Python extension module: a PEP 3149 or stable-ABI file name inside an installation's
# package directories, or any module of CPython's own lib-dynload. The same name elsewhere (a
# JIT cache, /tmp) is not an import of an installed package.
_EXTENSION_MODULE = re.compile(r"\.(cpython-\d+[^/]*|abi3)\.so$")
_PACKAGE_DIRS = ("/site-packages/", "/dist-packages/")
_STDLIB_EXTENSIONS = "/lib-dynload/"
_CLOSURE_RULES = ("executable", "startup", "dependency")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Platform(_Frozen):
    driver_roots: tuple[str, ...] = ()
    """Directories the driver's user-space libraries are installed or mounted in."""
    driver_libraries: tuple[str, ...] = ()
    """File-name globs of the driver's libraries."""
    device_nodes: tuple[str, ...] = ()
    """Path globs of the device nodes the driver maps."""
    dlopen: tuple[str, ...] = ()
    """File-name globs of libraries the runtime loads with dlopen."""
    jit: tuple[str, ...] = ()
    """Path globs of kernels compiled at run time."""


class KernelSet(_Frozen):
    schema_: Literal["repro.kernels/v1"]
    name: str
    description: str
    platform: Platform = Platform()

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @classmethod
    def load(cls, name: str, directory: Path = KERNELS_DIR) -> KernelSet:
        path = directory / f"{name}.toml"
        try:
            document = tomllib.loads(path.read_text())
        except OSError as error:
            known = ", ".join(sorted(p.stem for p in directory.glob("*.toml"))) or "none"
            raise BadInput(
                "no such kernel set",
                where=str(path),
                expected=f"one of {known}",
                found=error.strerror or type(error).__name__,
            ) from error
        except tomllib.TOMLDecodeError as error:
            raise BadInput("malformed kernel set", where=str(path), found=str(error)) from error
        document["schema_"] = document.pop("schema", None)
        try:
            kernel_set = cls.model_validate(document)
        except ValidationError as error:
            first = error.errors()[0]
            raise BadInput(
                "malformed kernel set",
                where=f"{path}: {'.'.join(str(p) for p in first['loc'])}",
                expected=first["msg"],
                found=repr(first.get("input")),
            ) from error
        if kernel_set.name != name:
            raise BadInput(
                "a kernel set's name differs from its file name",
                where=str(path),
                expected=name,
                found=kernel_set.name,
            )
        return kernel_set


class Category(StrEnum):
    STATIC = "static closure"
    DRIVER = "driver"
    DLOPEN = "expected dlopen"
    JIT = "JIT artifact"
    UNEXPECTED = "unexpected"


def classify(path: str, rule: str, platform: Platform) -> tuple[Category, str]:
    """Where a mapped ELF stands at the accelerator boundary, and which entry says so.

    `rule` is the live audit's: how the loader came to map the file (executable, startup,
    dependency, preload, dlopen). Run-time places are checked first: a JIT artifact or a
    driver library is that even when some other object happens to need it by name.
    """
    name = posixpath.basename(path)
    for pattern in platform.jit:
        if fnmatch.fnmatchcase(path, pattern):
            return Category.JIT, f"jit {pattern}"
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


def _is_extension_module(path: str) -> bool:
    if _STDLIB_EXTENSIONS in path:
        return True
    installed = any(directory in path for directory in _PACKAGE_DIRS)
    return installed and _EXTENSION_MODULE.search(posixpath.basename(path)) is not None


def _roots(roots: tuple[str, ...]) -> set[str]:
    return {root.rstrip("/") for root in roots}
