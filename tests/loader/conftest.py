"""Fixtures for the loader tests: shared objects built with gcc, and glibc as the judge.

`build` compiles tiny C objects into a test's tmp directory with exactly the dynamic tags a
test asks for. `run_judge` starts a real process of an executable built by `build.exe` (which
optionally dlopens a name, then prints /proc/self/maps) and returns what the kernel mapped,
so each test compares repro's prediction with what glibc actually did.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from repro_serving.builder.native.elf import is_elf
from repro_serving.builder.native.ldcache import LdCache
from repro_serving.builder.native.loader import Closure, LoaderConfig
from repro_serving.builder.native.loaderhost import HostFileSystem, host_config, read_cache

_LIB_SOURCE = "int repro_fixture_{tag}(void) {{ return {value}; }}\n"
_DLOPEN_CONSTRUCTOR = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void repro_fixture_open(void) {
    const char *name = getenv("REPRO_FIXTURE_DLOPEN");
    if (name != NULL && dlopen(name, RTLD_NOW) == NULL)
        fprintf(stderr, "dlopen failed: %s\n", dlerror());
}
"""
_EXE_SOURCE = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    if (argc > 1 && dlopen(argv[1], RTLD_NOW) == NULL) {
        fprintf(stderr, "dlopen failed: %s\n", dlerror());
        return 3;
    }
    FILE *maps = fopen("/proc/self/maps", "r");
    int c;
    while ((c = fgetc(maps)) != EOF) putchar(c);
    return 0;
}
"""


@dataclass
class Build:
    """Compiles objects under `root`; every object gets a distinct body, so copies differ."""

    root: Path
    counter: int = 0
    made: list[Path] = field(default_factory=list)

    def lib(
        self,
        path: str,
        *,
        soname: str | None = None,
        needed: Sequence[str] = (),
        rpath: str | None = None,
        runpath: str | None = None,
        nodeflib: bool = False,
        flags: Sequence[str] = (),
        dlopens: bool = False,
    ) -> Path:
        """A shared object at `root/path`; `needed` are paths (relative to root) of objects
        already built, recorded by their SONAME (or file name). With `dlopens`, its constructor
        dlopens $REPRO_FIXTURE_DLOPEN, so the library itself is the caller of dlopen."""
        target = self.root / path
        self.counter += 1
        text = _LIB_SOURCE.format(tag=self.counter, value=self.counter)
        source = self._source(text + (_DLOPEN_CONSTRUCTOR if dlopens else ""))
        args = ["-shared", "-fPIC", f"-Wl,-soname,{soname or target.name}", "-ldl"]
        self._link(
            target,
            source,
            args,
            needed,
            rpath=rpath,
            runpath=runpath,
            nodeflib=nodeflib,
            flags=flags,
        )
        return target

    def exe(
        self,
        path: str,
        *,
        needed: Sequence[str] = (),
        rpath: str | None = None,
        runpath: str | None = None,
        nodeflib: bool = False,
    ) -> Path:
        """An executable at `root/path` that dlopens argv[1] if given, then prints its maps."""
        target = self.root / path
        source = self._source(_EXE_SOURCE)
        self._link(
            target,
            source,
            ["-ldl"],
            needed,
            rpath=rpath,
            runpath=runpath,
            nodeflib=nodeflib,
            flags=(),
        )
        return target

    def copy(self, source: Path, path: str) -> Path:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        return target

    def symlink(self, path: str, points_to: str) -> Path:
        link = self.root / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(points_to)
        return link

    def _source(self, text: str) -> Path:
        self.counter += 1
        source = self.root / "src" / f"object{self.counter}.c"
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(text)
        return source

    def _link(
        self,
        target: Path,
        source: Path,
        args: list[str],
        needed: Sequence[str],
        *,
        rpath: str | None,
        runpath: str | None,
        nodeflib: bool,
        flags: Sequence[str],
    ) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        command = ["gcc", "-o", str(target), str(source), *args, *flags]
        command += ["-Wl,--no-as-needed", "-Wl,--allow-shlib-undefined"]
        for dependency in needed:
            dep = self.root / dependency
            command += [f"-L{dep.parent}", f"-l:{dep.name}"]
        if rpath is not None:
            command += ["-Wl,--disable-new-dtags", f"-Wl,-rpath,{rpath}"]
        if runpath is not None:
            command += ["-Wl,--enable-new-dtags", f"-Wl,-rpath,{runpath}"]
        if nodeflib:
            command += ["-Wl,-z,nodefaultlib"]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"gcc failed: {' '.join(command)}\n{result.stderr}"
        self.made.append(target)


@dataclass(frozen=True)
class Mapped:
    """What glibc did: every ELF file the kernel shows mapped, by identity and by path."""

    returncode: int
    stderr: str
    files: frozenset[tuple[tuple[int, int], str]]

    @property
    def ids(self) -> frozenset[tuple[int, int]]:
        return frozenset(file_id for file_id, _ in self.files)


@pytest.fixture
def build(tmp_path: Path) -> Build:
    return Build(tmp_path)


@pytest.fixture(scope="session")
def base_config() -> LoaderConfig:
    """This host's loader, asked once per test run; no environment."""
    return host_config({})


@pytest.fixture(scope="session")
def cache() -> LdCache | None:
    return read_cache()


def run_judge(
    exe: Path,
    env: Mapping[str, str] | None = None,
    dlopen: str | None = None,
    cwd: Path | None = None,
) -> Mapped:
    """Run `exe` under glibc and read back its /proc/self/maps."""
    argv = [str(exe)] + ([dlopen] if dlopen is not None else [])
    result = subprocess.run(
        argv,
        env={"PATH": os.environ.get("PATH", ""), **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return Mapped(result.returncode, result.stderr, _elf_mappings(result.stdout))


def _elf_mappings(maps: str) -> frozenset[tuple[tuple[int, int], str]]:
    files = set()
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or fields[4] == "0" or not fields[5].startswith("/"):
            continue
        major, minor = (int(part, 16) for part in fields[3].split(":"))
        if is_elf(fields[5]):
            files.add(((os.makedev(major, minor), int(fields[4])), fields[5]))
    return frozenset(files)


def predicted(closure: Closure, fs: HostFileSystem) -> frozenset[tuple[tuple[int, int], str]]:
    """The closure as the kernel would name it: (st_dev, st_ino) and the real path."""
    return frozenset(
        (obj.file_id, fs.realpath(obj.path)) for obj in closure.order if obj.file_id is not None
    )
