"""The I/O side of the loader emulation: this host's `LoaderConfig`, its ld.so.cache, its files.

Nothing about the loader is assumed: the real dynamic loader is asked. `<interp>
--list-diagnostics` gives $LIB, $PLATFORM, the system directories, the CPU's ISA levels and the
legacy hwcaps; `LD_DEBUG=libs` on a search through a directory that cannot exist prints the exact
subdirectories tried inside every search directory (glibc-hwcaps levels, then legacy ones).
The environment (LD_LIBRARY_PATH, LD_PRELOAD) is read only from the mapping a caller passes.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from repro_serving.builder.errors import NotObservable
from repro_serving.builder.native.elf import ElfError, ElfInfo, UnreadableFile, parse_elf, read_elf
from repro_serving.builder.native.ldcache import (
    AARCH64_CACHE_ID,
    X86_64_CACHE_ID,
    CachePlatform,
    LdCache,
)
from repro_serving.builder.native.loader import LoaderConfig
from repro_serving.builder.native.procmaps import FileId

DEFAULT_INTERPRETER = "/lib64/ld-linux-x86-64.so.2"
LD_SO_CACHE = "/etc/ld.so.cache"
LD_SO_PRELOAD = "/etc/ld.so.preload"
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EACCES)
_CACHE_IDS = {("EM_X86_64", 64): X86_64_CACHE_ID, ("EM_AARCH64", 64): AARCH64_CACHE_ID}
_DIAGNOSTIC = re.compile(r'^([\w.]+(?:\[0x[0-9a-f]+\])?)=(?:"(.*)"|(0x[0-9a-f]+))$')


@dataclass(frozen=True)
class HostFileSystem:
    """The real file system, seen from `root_cwd` (the process's working directory)."""

    working_directory: str

    @classmethod
    def here(cls) -> HostFileSystem:
        return cls(str(Path.cwd()))

    def _absolute(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.working_directory.rstrip('/')}/{path}"

    def read_elf(self, path: str) -> ElfInfo | None:
        try:
            fd = os.open(self._absolute(path), os.O_RDONLY | os.O_CLOEXEC)
        except OSError as error:
            if error.errno in _ABSENT:
                return None
            raise UnreadableFile("cannot open file", where=path, found=error.strerror) from error
        try:
            with os.fdopen(fd, "rb") as stream:
                return parse_elf(stream, path)
        except ElfError:
            raise
        except OSError as error:
            raise UnreadableFile(
                "cannot read file data", where=path, found=error.strerror
            ) from error

    def file_id(self, path: str) -> FileId | None:
        try:
            st = os.stat(self._absolute(path))  # noqa: PTH116 (once per file tried: no Path)
        except OSError:
            return None
        return FileId(st.st_dev, st.st_ino)

    def realpath(self, path: str) -> str:
        return os.path.realpath(self._absolute(path))

    def cwd(self) -> str:
        return self.working_directory


def host_config(
    env: Mapping[str, str] | None = None,
    interpreter: str = DEFAULT_INTERPRETER,
    *,
    fs: RememberingFileSystem | None = None,
) -> LoaderConfig:
    """The loader configuration of this host; LD_LIBRARY_PATH/LD_PRELOAD from `env` when given
    (an ordinary process is never in secure mode). The interpreter's facts, read here, are
    remembered in `fs` when given, so the run that uses it reads the file once."""
    diagnostics = loader_diagnostics(interpreter)
    subdirs = search_subdirectories(interpreter)
    elf = _interpreter_elf(interpreter)
    if fs is not None:
        fs.remember(elf)
    config = LoaderConfig(
        interpreter=interpreter,
        system_dirs=_system_dirs(diagnostics, interpreter),
        subdirs=subdirs,
        lib=_required(diagnostics, "dl_dst_lib", interpreter),
        platform=_required(diagnostics, "dl_platform", interpreter),
        elf_class=elf.elf_class,
        machine=elf.machine,
        little_endian=elf.little_endian,
        cache_platform=_cache_platform(diagnostics, subdirs, elf, interpreter),
        preload_file=read_preload_file(),
    )
    return with_environment(config, env or {})


def with_environment(config: LoaderConfig, env: Mapping[str, str]) -> LoaderConfig:
    """`config` as a process started with `env` sees it."""
    return replace(config, library_path=env.get("LD_LIBRARY_PATH"), preload=env.get("LD_PRELOAD"))


def read_cache(path: str = LD_SO_CACHE) -> LdCache | None:
    """The parsed cache, or None when there is none (glibc then skips the cache step)."""
    try:
        with open(path, "rb") as stream:  # noqa: PTH123
            data = stream.read()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise NotObservable(
            "cannot read the ld.so cache", where=path, found=error.strerror
        ) from error
    return LdCache.from_bytes(data, path)


def read_preload_file(path: str = LD_SO_PRELOAD) -> tuple[str, ...]:
    """rtld.c: names separated by ':', space, tab or newline; '#' starts a comment."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as stream:  # noqa: PTH123
            text = stream.read()
    except OSError:
        return ()
    without_comments = re.sub(r"#[^\n]*", " ", text)
    return tuple(name for name in re.split(r"[: \t\n]", without_comments) if name)


def loader_diagnostics(interpreter: str = DEFAULT_INTERPRETER) -> dict[str, str]:
    """`<interp> --list-diagnostics` as key → value (strings unquoted, numbers as hex text)."""
    output = _run([interpreter, "--list-diagnostics"], {}, interpreter, "--list-diagnostics")
    values: dict[str, str] = {}
    for line in output.stdout.splitlines():
        match = _DIAGNOSTIC.match(line)
        if match:
            values[match.group(1)] = (
                match.group(2) if match.group(2) is not None else match.group(3)
            )
    return values


def search_subdirectories(interpreter: str = DEFAULT_INTERPRETER) -> tuple[str, ...]:
    """The suffixes ld.so tries inside every search directory, in its order, "" last."""
    probe = f"/repro-probe-{os.urandom(16).hex()}"
    env = {"LD_DEBUG": "libs", "LD_LIBRARY_PATH": probe, "PATH": os.environ.get("PATH", "")}
    output = _run([interpreter, "--list", "/bin/true"], env, interpreter, "LD_DEBUG=libs --list")
    for line in output.stderr.splitlines():
        if "search path=" in line and "(LD_LIBRARY_PATH)" in line:
            entries = line.split("search path=", 1)[1].split("\t", 1)[0].split(":")
            return tuple(
                "" if entry == probe else entry[len(probe) + 1 :] + "/"
                for entry in entries
                if entry == probe or entry.startswith(probe + "/")
            )
    raise NotObservable(
        "the dynamic loader printed no LD_LIBRARY_PATH search path",
        where=f"LD_DEBUG=libs LD_LIBRARY_PATH={probe} {interpreter} --list /bin/true",
        expected='a line "search path=…(LD_LIBRARY_PATH)" on stderr',
        found=(output.stderr.strip().splitlines() or ["nothing"])[0],
    )


def os_version(release: str) -> int:
    """glibc `_dl_discover_osversion`: up to three numbers of the release, one byte each."""
    parts = [int(p) for p in re.findall(r"\d+", release.split("-", 1)[0])[:3]]
    version = 0
    for part in parts:
        version = (version << 8) | min(part, 255)
    return version << (8 * (3 - len(parts)))


def _run(
    argv: list[str], env: Mapping[str, str], interpreter: str, what: str
) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(
            argv, env=dict(env), capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as error:
        raise NotObservable(
            "cannot run the dynamic loader", where=interpreter, found=error.strerror
        ) from error
    except subprocess.TimeoutExpired as error:
        raise NotObservable("the dynamic loader did not answer", where=interpreter) from error
    if result.returncode != 0:
        raise NotObservable(
            f"the dynamic loader failed: {what}",
            where=" ".join(argv),
            expected="exit status 0",
            found=f"exit status {result.returncode}: {result.stderr.strip()[:200]}",
        )
    return result


def _interpreter_elf(interpreter: str) -> ElfInfo:
    try:
        return read_elf(interpreter)
    except ElfError as error:
        raise NotObservable(
            "cannot read the dynamic loader", where=interpreter, found=error.what
        ) from error


def _required(diagnostics: Mapping[str, str], key: str, interpreter: str) -> str:
    if key not in diagnostics:
        raise NotObservable(
            f"the dynamic loader did not report {key}",
            where=f"{interpreter} --list-diagnostics",
            expected=f"a line {key}=…",
            found="none (glibc older than 2.33?)",
        )
    return diagnostics[key]


def _system_dirs(diagnostics: Mapping[str, str], interpreter: str) -> tuple[str, ...]:
    keys = sorted(
        (k for k in diagnostics if k.startswith("path.system_dirs[")),
        key=lambda k: int(k[len("path.system_dirs[") : -1], 16),
    )
    if not keys:
        _required(diagnostics, "path.system_dirs[0x0]", interpreter)
    return tuple(diagnostics[k] for k in keys)


def _cache_platform(
    diagnostics: Mapping[str, str], subdirs: tuple[str, ...], elf: ElfInfo, interpreter: str
) -> CachePlatform:
    hwcaps = tuple(s[len("glibc-hwcaps/") : -1] for s in subdirs if s.startswith("glibc-hwcaps/"))
    platform = int(diagnostics.get("dl_string_platform", "0xffffffffffffffff"), 16)
    hwcap = int(diagnostics.get("dl_hwcap", "0x0"), 16)
    important = int(diagnostics.get("dl_hwcap_important", "0x0"), 16)
    cache_id = _CACHE_IDS.get((elf.machine, elf.elf_class))
    if cache_id is None:
        raise NotObservable(
            "no ld.so.cache flags known for this loader's machine",
            where=interpreter,
            expected="EM_X86_64 or EM_AARCH64, 64-bit",
            found=f"{elf.machine}, {elf.elf_class}-bit",
        )
    return CachePlatform(
        cache_id=cache_id,
        hwcaps=hwcaps,
        isa_levels=int(diagnostics.get("x86.cpu_features.isa_1", "0x1"), 16),
        hwcap=hwcap & important,
        platform_bit=None if platform == (1 << 64) - 1 else 1 << platform,
        os_version=os_version(diagnostics.get("uname.release", "")),
    )


class RememberingFileSystem:
    """A file-system view that reads each file once: one audit, verification or `repro closure`
    asks for the same few hundred objects from every process and closure, and the files do not
    change under it. A path already asked is answered from memory; a new path to a file already
    read (a symlink, `$ORIGIN/../lib`, a hard link: the same st_dev and st_ino) reuses its facts
    under the new name. Make a new one for each judgement; it never outlives it."""

    def __init__(self, inner: HostFileSystem) -> None:
        self._inner = inner
        self._elves: dict[str, ElfInfo | None] = {}
        self._by_id: dict[FileId, ElfInfo] = {}
        self._ids: dict[str, FileId | None] = {}
        self._real: dict[str, str] = {}

    def remember(self, info: ElfInfo) -> None:
        """Facts already read from `info.path` (e.g. while checking the command line)."""
        self._elves[info.path] = info
        file_id = self.file_id(info.path)
        if file_id is not None:
            self._by_id.setdefault(file_id, info)

    def read_elf(self, path: str) -> ElfInfo | None:
        if path in self._elves:
            return self._elves[path]
        file_id = self.file_id(path)
        same = self._by_id.get(file_id) if file_id is not None else None
        if same is not None:
            info: ElfInfo | None = replace(same, path=path)
        else:
            info = self._inner.read_elf(path)
            if info is not None and file_id is not None:
                self._by_id[file_id] = info
        self._elves[path] = info
        return info

    def file_id(self, path: str) -> FileId | None:
        if path not in self._ids:
            self._ids[path] = self._inner.file_id(path)
        return self._ids[path]

    def realpath(self, path: str) -> str:
        if path not in self._real:
            self._real[path] = self._inner.realpath(path)
        return self._real[path]

    def cwd(self) -> str:
        return self._inner.cwd()
