"""The pure emulation of glibc 2.36's dynamic loader: which file each needed name resolves to.

This module owns the rules of `_dl_map_object`, `open_path`, `fillin_rpath`, `open_verify` and
`_dl_dst_substitute` (elf/dl-load.c), `_dl_map_object_deps` (elf/dl-deps.c) and the preloading
of rtld.c. It does no I/O: the host's configuration (`LoaderConfig`), the parsed ld.so.cache and
a `FileSystem` view are inputs, so every rule is testable and the same code explains a file on
disk (`executable_closure`) and a dlopen inside a live process (`dlopen_closure`).

The rules, in glibc's order, for a name without '/':
an object already loaded whose name or SONAME equals it; if the requester has no DT_RUNPATH, the
DT_RPATH of the requester, of its loader and up the chain, then of the executable (once);
LD_LIBRARY_PATH (not in secure mode); the requester's own DT_RUNPATH; ld.so.cache (an entry in
a system directory is ignored when the requester has DF_1_NODEFLIB); the system directories
unless DF_1_NODEFLIB. Every directory is tried with each hwcaps/legacy subdirectory first.
A file of another ELF class or machine is skipped; a file that is not loadable ELF stops the
search, as glibc's fatal error does. A file whose (st_dev, st_ino) is already loaded satisfies
the need with that object. `$ORIGIN` is the directory of the path an object was found under
(the executable's real path for the executable); `..` is left to the kernel.
Not emulated: LD_AUDIT, DT_AUXILIARY/DT_FILTER, the set-user-ID bit demanded of preloads in
secure mode, and a library's .note.ABI-tag kernel version.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol

from repro_serving.builder.errors import BadInput
from repro_serving.builder.native.elf import ElfError, ElfInfo
from repro_serving.builder.native.ldcache import CachePlatform, LdCache
from repro_serving.builder.native.procmaps import FileId

DF_1_NOOPEN = 0x40
_PRELOAD_NAME_LIMIT = 1024  # SECURE_PATH_LIMIT in rtld.c


class FileSystem(Protocol):
    """What the loader sees of the file system; relative paths are relative to `cwd()`."""

    def read_elf(self, path: str) -> ElfInfo | None:
        """The ELF facts of `path`; None when open() would fail with ENOENT, ENOTDIR or EACCES.

        Raises `builder.native.elf.ElfError` for a file that exists but is not readable ELF.
        """
        ...

    def file_id(self, path: str) -> FileId | None: ...

    def realpath(self, path: str) -> str: ...

    def cwd(self) -> str: ...


@dataclass(frozen=True)
class LoaderConfig:
    """The loader's fixed inputs. Paths and strings are verbatim, as ld.so holds them.

    `system_dirs` end with '/', in search order; `subdirs` are the suffixes tried inside each
    search directory, in order, each ending with '/' except the last, "" (the directory itself).
    `library_path` and `preload` are the raw LD_LIBRARY_PATH and LD_PRELOAD values (None when
    unset); `preload_file` the names listed in /etc/ld.so.preload.
    """

    interpreter: str
    system_dirs: tuple[str, ...]
    subdirs: tuple[str, ...]
    lib: str
    platform: str
    elf_class: int
    machine: str
    cache_platform: CachePlatform
    little_endian: bool = True
    library_path: str | None = None
    preload: str | None = None
    preload_file: tuple[str, ...] = ()
    secure: bool = False


class Outcome(StrEnum):
    FOUND = "found"
    NOT_FOUND = "not found"
    REJECTED = "rejected"  # glibc stops with an error on a file it cannot load
    DROPPED = "dropped"  # a DST without a value: glibc skips the need silently


@dataclass(frozen=True)
class Candidate:
    """One file the loader tried: the path it opened, which rule tried it, and what happened."""

    path: str
    source: str
    result: str


@dataclass(frozen=True)
class LoadedObject:
    """One object of the process's link map.

    `path` is the name glibc opened it under (l_name); `names` the names it was requested by;
    `origin` what `$ORIGIN` expands to for it (None: unknown); `loader` the object whose need
    loaded it (None for the executable and for dlopened objects, as in glibc).
    """

    path: str
    elf: ElfInfo = field(repr=False)
    file_id: FileId | None
    origin: str | None
    names: tuple[str, ...] = ()
    loader: LoadedObject | None = field(default=None, repr=False)
    executable: bool = False

    @property
    def soname(self) -> str | None:
        return self.elf.soname

    @classmethod
    def from_file(
        cls,
        path: str,
        fs: FileSystem,
        *,
        loader: LoadedObject | None = None,
        executable: bool = False,
    ) -> LoadedObject:
        """An object already in a process, opened under `path` (for the executable: its path)."""
        info = fs.read_elf(path)
        if info is None:
            raise BadInput("no such file", where=path, expected="an ELF object")
        origin_of = fs.realpath(path) if executable else path
        return cls(
            path=path,
            elf=info,
            file_id=fs.file_id(path),
            origin=_origin(origin_of, fs.cwd()),
            loader=loader,
            executable=executable,
        )


@dataclass(frozen=True)
class Resolution:
    """How one needed name was resolved, or why not.

    `path` is the file the loader uses (the existing object's path when already loaded), None
    when nothing was loaded; `directory` the search directory (with its subdirectory) that held
    it and `element` the path element as written before expansion (e.g. "$ORIGIN/../lib").
    `searched` lists every file tried, in order.
    """

    need: str
    requester: str
    outcome: Outcome
    path: str | None
    reason: str
    searched: tuple[Candidate, ...] = ()
    directory: str | None = None
    element: str | None = None
    file_id: FileId | None = None
    newly_loaded: bool = False

    @property
    def skipped(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.searched if c.result.startswith("skipped"))

    @property
    def failed(self) -> bool:
        return self.outcome in (Outcome.NOT_FOUND, Outcome.REJECTED)


@dataclass(frozen=True)
class Closure:
    """Objects in load order and every resolution made, in the order glibc made them."""

    order: tuple[LoadedObject, ...]
    resolutions: tuple[Resolution, ...]

    @property
    def failures(self) -> tuple[Resolution, ...]:
        return tuple(r for r in self.resolutions if r.failed)


def executable_closure(
    path: str, *, config: LoaderConfig, cache: LdCache | None, fs: FileSystem
) -> Closure:
    """What starting `path` loads: executable, preloads, then DT_NEEDED breadth-first."""
    process = _Process(config, cache, fs, [])
    main = process.start_executable(path)
    preloads = process.preload(main)
    queue = process.load_dependencies([main, *preloads], dlopen=False)
    rtld = process.maps[1]
    order = queue if rtld in queue else [*queue, rtld]
    return Closure(process.export(order), tuple(process.resolutions))


def resolve_dlopen(
    name: str,
    caller: LoadedObject,
    loaded: Sequence[LoadedObject],
    *,
    config: LoaderConfig,
    cache: LdCache | None,
    fs: FileSystem,
) -> Resolution:
    """Where `dlopen(name)` called from `caller` lands in a process holding `loaded`."""
    resolution, _ = _Process(config, cache, fs, loaded).dlopen(caller, name)
    return resolution


def dlopen_closure(
    name: str,
    caller: LoadedObject,
    loaded: Sequence[LoadedObject],
    *,
    config: LoaderConfig,
    cache: LdCache | None,
    fs: FileSystem,
) -> Closure:
    """What `dlopen(name)` from `caller` adds to a process holding `loaded`: the new objects in
    load order, and every resolution made (the dlopen itself first)."""
    process = _Process(config, cache, fs, loaded)
    before = len(process.maps)
    resolution, opened = process.dlopen(caller, name)
    process.resolutions.append(resolution)
    if opened is not None and process.maps.index(opened) >= before:
        process.load_dependencies([opened], dlopen=True)
    return Closure(process.export(process.maps[before:]), tuple(process.resolutions))


# --- the process model ---------------------------------------------------------------------


@dataclass(eq=False)
class _Map:
    """A link map under construction (mutable: glibc adds names as they match)."""

    path: str
    match_name: str  # l_name as glibc compares it ("" for the executable)
    elf: ElfInfo
    file_id: FileId | None
    origin: str | None
    loader: _Map | None
    executable: bool = False
    names: list[str] = field(default_factory=list)
    _dirs: dict[str, list[_Dir] | None] = field(default_factory=dict)

    @property
    def rpath(self) -> str | None:
        """DT_RPATH as glibc uses it: ignored when DT_RUNPATH is present."""
        return None if self.elf.runpath is not None else self.elf.rpath


@dataclass(frozen=True)
class _Dir:
    name: str  # the expanded directory ending with '/', or "" for the current directory
    element: str  # the path element as written


@dataclass(frozen=True)
class _Hit:
    path: str
    elf: ElfInfo
    source: str
    directory: str | None
    element: str | None


class _Fatal(Exception):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


class _Process:
    def __init__(
        self,
        config: LoaderConfig,
        cache: LdCache | None,
        fs: FileSystem,
        loaded: Sequence[LoadedObject],
    ) -> None:
        self.config = config
        self.cache = cache
        self.fs = fs
        self.maps: list[_Map] = []
        self.resolutions: list[Resolution] = []
        self._imported: dict[int, _Map] = {}
        for obj in loaded:
            self.map_for(obj)
        self.main = next((m for m in self.maps if m.executable), None)
        self.library_path = self._library_path_dirs()

    # -- building the process

    def map_for(self, obj: LoadedObject) -> _Map:
        """The map of an object given by the caller, imported once with its loader chain."""
        known = self._imported.get(id(obj))
        if known is not None:
            return known
        loader = self.map_for(obj.loader) if obj.loader is not None else None
        found = _Map(
            path=obj.path,
            match_name="" if obj.executable else obj.path,
            elf=obj.elf,
            file_id=None if obj.executable else obj.file_id,
            origin=obj.origin,
            loader=loader,
            executable=obj.executable,
            names=list(obj.names),
        )
        self._imported[id(obj)] = found
        self.maps.append(found)
        return found

    def start_executable(self, path: str) -> _Map:
        info = self._read_start(path, "executable")
        main = _Map(
            path=path,
            match_name="",  # glibc names the executable "" when the kernel started it
            elf=info,
            file_id=None,  # and records no file identity for it
            origin=_origin(self.fs.realpath(path), self.fs.cwd()),
            loader=None,
            executable=True,
        )
        interp = info.interpreter or self.config.interpreter
        rtld_info = self._read_start(interp, "program interpreter")
        rtld = _Map(
            path=interp,
            match_name=interp,
            elf=rtld_info,
            file_id=self.fs.file_id(interp),
            origin=_origin(interp, self.fs.cwd()),
            loader=None,
            names=[interp],
        )
        self.maps = [main, rtld]
        self.main = main
        self.library_path = self._library_path_dirs()
        return main

    def _read_start(self, path: str, role: str) -> ElfInfo:
        info = self.fs.read_elf(path)
        if info is None:
            raise BadInput(f"{role} not found", where=path, expected="a readable ELF file")
        verdict = self._verify(info)
        if verdict is not None and not verdict.startswith("skipped"):
            raise BadInput(f"{role} cannot be loaded", where=path, found=verdict)
        if verdict is not None:
            raise BadInput(
                f"{role} is not for this loader",
                where=path,
                expected=f"ELFCLASS{self.config.elf_class} {self.config.machine}",
                found=f"ELFCLASS{info.elf_class} {info.machine}",
            )
        return info

    def preload(self, main: _Map) -> list[_Map]:
        """LD_PRELOAD, then /etc/ld.so.preload: each loaded with the executable as loader."""
        names = [(n, "LD_PRELOAD") for n in _preload_names(self.config)]
        names += [(n, "/etc/ld.so.preload") for n in self.config.preload_file if n]
        loaded: list[_Map] = []
        for name, source in names:
            before = len(self.maps)
            resolution, found = self.map_object(main, name, preload=True)
            self.resolutions.append(replace(resolution, reason=f"{source}: {resolution.reason}"))
            if found is not None and len(self.maps) > before:
                loaded.append(found)
        return loaded

    def dlopen(self, caller: LoadedObject, name: str) -> tuple[Resolution, _Map | None]:
        """`dlopen(name)` called from `caller`, which lends its search path; for
        `resolve_dlopen` and `dlopen_closure` alike."""
        return self.map_object(self.map_for(caller), name, callmap=True, dlopen=True)

    def load_dependencies(self, roots: list[_Map], *, dlopen: bool) -> list[_Map]:
        """`_dl_map_object_deps`: breadth-first over DT_NEEDED; returns the search list."""
        queue = list(roots)
        reserved = {id(m) for m in roots}
        index = 0
        while index < len(queue):
            requester = queue[index]
            index += 1
            for needed in requester.elf.needed:
                resolution, dep = self._map_needed(requester, needed, dlopen)
                self.resolutions.append(resolution)
                if dep is not None and id(dep) not in reserved:
                    reserved.add(id(dep))
                    queue.append(dep)
        return queue

    def _map_needed(
        self, requester: _Map, needed: str, dlopen: bool
    ) -> tuple[Resolution, _Map | None]:
        """dl-deps.c `expand_dst` on a DT_NEEDED string, then `_dl_map_object`."""
        if _dst_count(needed) and self.config.secure:
            return self._failure(
                needed, requester, Outcome.REJECTED, "DST not allowed in SUID/SGID programs", ()
            ), None
        name = self._substitute(needed, requester)
        if not name:
            reason = "empty dynamic string token substitution: glibc skips this need"
            return self._failure(needed, requester, Outcome.DROPPED, reason, ()), None
        resolution, dep = self.map_object(requester, name, dlopen=dlopen)
        return (resolution if name == needed else replace(resolution, need=needed)), dep

    def export(self, maps: Sequence[_Map]) -> tuple[LoadedObject, ...]:
        exported: dict[int, LoadedObject] = {}

        def convert(m: _Map) -> LoadedObject:
            if id(m) not in exported:
                exported[id(m)] = LoadedObject(
                    path=m.path,
                    elf=m.elf,
                    file_id=m.file_id if not m.executable else self.fs.file_id(m.path),
                    origin=m.origin,
                    names=tuple(m.names),
                    loader=convert(m.loader) if m.loader is not None else None,
                    executable=m.executable,
                )
            return exported[id(m)]

        return tuple(convert(m) for m in maps)

    # -- _dl_map_object

    def map_object(
        self,
        loader: _Map | None,
        name: str,
        *,
        callmap: bool = False,
        dlopen: bool = False,
        preload: bool = False,
    ) -> tuple[Resolution, _Map | None]:
        """`_dl_map_object`. `callmap`: a dlopen call (the caller only lends its search path);
        `dlopen`: inside a dlopen; `preload`: an LD_PRELOAD entry (__RTLD_SECURE)."""
        requester = loader.path if loader is not None else ""
        existing = self._already_loaded(name)
        if existing is not None:
            found, how = existing
            return Resolution(
                name, requester, Outcome.FOUND, found.path, how, file_id=self._id_of(found)
            ), found
        searched: list[Candidate] = []
        try:
            if "/" in name:
                hit = self._open_named_path(loader, name, searched)
            else:
                hit = self._search(loader, name, searched, preload=preload)
        except _Fatal as fatal:
            reason = f"{fatal.path}: {fatal.message}"
            return self._failure(name, loader, Outcome.REJECTED, reason, searched), None
        if hit is None:
            return self._failure(
                name, loader, Outcome.NOT_FOUND, _not_found(searched), searched
            ), None
        return self._map_hit(loader, name, hit, searched, callmap=callmap, dlopen=dlopen)

    def _already_loaded(self, name: str) -> tuple[_Map, str] | None:
        for m in self.maps:
            if name == m.match_name or name in m.names:
                return m, "already loaded (name)"
            if m.elf.soname is not None and name == m.elf.soname:
                m.names.append(name)
                return m, "already loaded (soname)"
        return None

    def _map_hit(
        self,
        loader: _Map | None,
        name: str,
        hit: _Hit,
        searched: list[Candidate],
        *,
        callmap: bool,
        dlopen: bool,
    ) -> tuple[Resolution, _Map | None]:
        """`_dl_map_object_from_fd`: same file already loaded, or checks, then a new map."""
        file_id = self.fs.file_id(hit.path)
        requester = loader.path if loader is not None else ""
        same = next((m for m in self.maps if file_id and m.file_id == file_id), None)
        if same is not None:
            if name not in same.names:
                same.names.append(name)
            reason = f"same file already loaded (as {same.path}), {hit.source}"
            return Resolution(
                name,
                requester,
                Outcome.FOUND,
                same.path,
                reason,
                tuple(searched),
                hit.directory,
                hit.element,
                file_id,
            ), same
        refusal = _map_refusal(hit.elf, dlopen)
        if refusal is not None:
            reason = f"{hit.path}: {refusal}"
            return self._failure(name, loader, Outcome.REJECTED, reason, searched), None
        new = _Map(
            path=hit.path,
            match_name=hit.path,
            elf=hit.elf,
            file_id=file_id,
            origin=_origin(hit.path, self.fs.cwd()),
            loader=None if callmap else loader,
            names=[name],
        )
        self.maps.append(new)
        return Resolution(
            name,
            requester,
            Outcome.FOUND,
            hit.path,
            hit.source,
            tuple(searched),
            hit.directory,
            hit.element,
            file_id,
            newly_loaded=True,
        ), new

    def _open_named_path(
        self, loader: _Map | None, name: str, searched: list[Candidate]
    ) -> _Hit | None:
        path = self._substitute(name, loader) if loader is not None else name
        source = "absolute path" if path.startswith("/") else "relative path"
        info = self._try(path, source, searched)
        return None if info is None else _Hit(path, info, source, None, None)

    def _search(
        self, loader: _Map | None, name: str, searched: list[Candidate], *, preload: bool
    ) -> _Hit | None:
        hit = None
        if loader is None or loader.elf.runpath is None:
            hit = self._search_rpaths(loader, name, searched)
        if hit is None and self.library_path:
            hit = self._open_path(name, self.library_path, "LD_LIBRARY_PATH", searched)
        if hit is None and loader is not None:
            runpath = self._dirs(loader, "RUNPATH")
            if runpath:
                hit = self._open_path(name, runpath, f"RUNPATH of {loader.path}", searched)
        owner = loader or self.main
        if hit is None and not (preload and self.config.secure):
            hit = self._search_cache(owner, name, searched)
        if hit is None and not (owner is not None and owner.elf.nodeflib):
            dirs = [_Dir(d, d) for d in self.config.system_dirs]
            hit = self._open_path(name, dirs, "default path", searched)
        return hit

    def _search_rpaths(
        self, loader: _Map | None, name: str, searched: list[Candidate]
    ) -> _Hit | None:
        did_main = False
        chain = loader
        while chain is not None:
            dirs = self._dirs(chain, "RPATH")
            if dirs:
                own = "" if chain is loader else " (inherited)"
                source = f"RPATH of {chain.path}{own}"
                hit = self._open_path(name, dirs, source, searched)
                if hit is not None:
                    return hit
                did_main |= chain is self.main
            chain = chain.loader
        if did_main or self.main is None:
            return None
        dirs = self._dirs(self.main, "RPATH")
        if not dirs:
            return None
        own = "" if self.main is loader else " (inherited)"
        return self._open_path(name, dirs, f"RPATH of {self.main.path}{own}", searched)

    def _search_cache(
        self, owner: _Map | None, name: str, searched: list[Candidate]
    ) -> _Hit | None:
        if self.cache is None:
            return None
        cached = self.cache.lookup(name, self.config.cache_platform)
        if cached is None:
            return None
        if owner is not None and owner.elf.nodeflib:
            system = next((d for d in self.config.system_dirs if cached.startswith(d)), None)
            if system is not None:
                result = f"skipped: in system directory {system} and {owner.path} has NODEFLIB"
                searched.append(Candidate(cached, "ld.so.cache", result))
                return None
        info = self._try(cached, "ld.so.cache", searched)
        return None if info is None else _Hit(cached, info, "ld.so.cache", None, None)

    def _open_path(
        self, name: str, dirs: Sequence[_Dir], source: str, searched: list[Candidate]
    ) -> _Hit | None:
        for directory in dirs:
            for subdir in self.config.subdirs:
                path = directory.name + subdir + name
                info = self._try(path, source, searched)
                if info is not None:
                    return _Hit(path, info, source, directory.name + subdir, directory.element)
        return None

    def _try(self, path: str, source: str, searched: list[Candidate]) -> ElfInfo | None:
        """`open_verify`: the ELF when usable; None to go on; `_Fatal` when glibc gives up."""
        try:
            info = self.fs.read_elf(path)
        except ElfError as error:
            searched.append(Candidate(path, source, f"rejected: {error.what}"))
            raise _Fatal(path, _elf_error_text(error)) from error
        if info is None:
            searched.append(Candidate(path, source, "absent"))
            return None
        verdict = self._verify(info)
        if verdict is not None and not verdict.startswith("skipped"):
            searched.append(Candidate(path, source, f"rejected: {verdict}"))
            raise _Fatal(path, verdict)
        searched.append(Candidate(path, source, verdict or "loaded"))
        return info if verdict is None else None

    def _verify(self, info: ElfInfo) -> str | None:
        """None when loadable; "skipped: …" when glibc goes on; another text when it stops."""
        if info.elf_class != self.config.elf_class:
            return f"skipped: wrong ELF class: ELFCLASS{info.elf_class}"
        if info.little_endian != self.config.little_endian:
            order = "little" if self.config.little_endian else "big"
            return f"ELF file data encoding not {order}-endian"
        if info.machine != self.config.machine:
            return f"skipped: wrong machine {info.machine}, expected {self.config.machine}"
        if info.e_type not in ("ET_DYN", "ET_EXEC"):
            return f"only ET_DYN and ET_EXEC can be loaded (found {info.e_type})"
        return None

    # -- search paths and dynamic string tokens

    def _dirs(self, owner: _Map, kind: str) -> list[_Dir] | None:
        """`cache_rpath`/`decompose_rpath`: the owner's RPATH or RUNPATH list, or None."""
        if kind not in owner._dirs:
            raw = owner.rpath if kind == "RPATH" else owner.elf.runpath
            owner._dirs[kind] = self._fillin(raw, ":", owner) if raw else None
        return owner._dirs[kind] or None

    def _library_path_dirs(self) -> list[_Dir]:
        raw = self.config.library_path
        if self.config.secure or not raw:
            return []
        return self._fillin(raw, ":;", self.main)

    def _fillin(self, raw: str, separators: str, owner: _Map | None) -> list[_Dir]:
        """`fillin_rpath`: expand each element, drop unknown ones, dedupe, end with '/'."""
        dirs: list[_Dir] = []
        for element in re.split(f"[{re.escape(separators)}]", raw):
            name = ""
            if element:
                expanded = self._substitute(element, owner)
                if not expanded:
                    continue
                name = expanded.rstrip("/") or "/"
                if not name.endswith("/"):
                    name += "/"
            if all(d.name != name for d in dirs):
                dirs.append(_Dir(name, element))
        return dirs

    def _substitute(self, text: str, owner: _Map | None) -> str:
        """`_dl_dst_substitute`: "" when a known DST has no usable value."""
        if "$" not in text:
            return text
        out: list[str] = []
        check_trusted = False
        index = 0
        while index < len(text):
            if text[index] != "$":
                out.append(text[index])
                index += 1
                continue
            index += 1
            value, length = self._dst_value(text, index, owner)
            if length and value is None:
                return ""
            if length and value is not None:
                check_trusted |= _is_dst(text, index, "ORIGIN") > 0 and self._secure_exe(owner)
                out.append(value)
                index += length
            else:
                out.append("$")
        result = "".join(out)
        if check_trusted and not _is_trusted(result, self.config.system_dirs):
            return ""
        return result

    def _dst_value(self, text: str, index: int, owner: _Map | None) -> tuple[str | None, int]:
        length = _is_dst(text, index, "ORIGIN")
        if length:
            alone = index == 1 and (index + length == len(text) or text[index + length] == "/")
            if self.config.secure and not alone:
                return None, length
            return (owner.origin if owner is not None else None), length
        length = _is_dst(text, index, "PLATFORM")
        if length:
            return self.config.platform, length
        length = _is_dst(text, index, "LIB")
        if length:
            return self.config.lib, length
        return None, 0

    def _secure_exe(self, owner: _Map | None) -> bool:
        return self.config.secure and owner is not None and owner.executable

    # -- results

    def _id_of(self, m: _Map) -> FileId | None:
        return m.file_id if not m.executable else self.fs.file_id(m.path)

    def _failure(
        self,
        name: str,
        loader: _Map | None,
        outcome: Outcome,
        reason: str,
        searched: Sequence[Candidate],
    ) -> Resolution:
        requester = loader.path if loader is not None else ""
        return Resolution(name, requester, outcome, None, reason, tuple(searched))


def _map_refusal(info: ElfInfo, dlopen: bool) -> str | None:
    if info.e_type != "ET_DYN":
        return "cannot dynamically load executable"
    if info.pie:
        return "cannot dynamically load position-independent executable"
    if dlopen and info.flags_1 & DF_1_NOOPEN:
        return "shared object cannot be dlopen()ed"
    return None


def _not_found(searched: Sequence[Candidate]) -> str:
    if any(c.result.startswith("skipped: wrong ELF class") for c in searched):
        return "not found (wrong ELF class: only a file of the other class matched)"
    return "not found"


def _elf_error_text(error: ElfError) -> str:
    return error.what if error.found is None else f"{error.what} ({error.found})"


def _is_dst(text: str, index: int, ref: str) -> int:
    """glibc `is_dst`: length of the DST `ref` at `index` (just after '$'), or 0."""
    curly = text.startswith("{", index)
    start = index + 1 if curly else index
    if not text.startswith(ref, start):
        return 0
    after = start + len(ref)
    following = text[after] if after < len(text) else ""
    if curly and following != "}":
        return 0
    if following and following.isascii() and (following.isalnum() or following == "_"):
        return 0
    return len(ref) + 2 if curly else len(ref)


def _dst_count(text: str) -> int:
    return sum(
        1
        for i, char in enumerate(text)
        if char == "$" and any(_is_dst(text, i + 1, ref) for ref in ("ORIGIN", "PLATFORM", "LIB"))
    )


def _is_trusted(path: str, system_dirs: Sequence[str]) -> bool:
    """`is_trusted_path_normalize`: lexically normalised, under one of the system dirs."""
    if not path.startswith("/"):
        return False
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    normal = "/" + "/".join(parts) + ("/" if parts else "")
    return any(normal.startswith(d) for d in system_dirs)


def _origin(path: str, cwd: str) -> str:
    """`_dl_new_object`: the directory part of the path an object was opened under."""
    full = path if path.startswith("/") else cwd.rstrip("/") + "/" + path
    cut = full.rfind("/")
    return full[:cut] if cut > 0 else "/"


def _preload_names(config: LoaderConfig) -> list[str]:
    """rtld.c `handle_preload_list`: split at ' ' and ':'; in secure mode no '/' allowed."""
    if not config.preload:
        return []
    names = []
    for name in re.split("[ :]", config.preload):
        if not name or len(name) >= _PRELOAD_NAME_LIMIT:
            continue
        if config.secure and "/" in name:
            continue
        names.append(name)
    return names
