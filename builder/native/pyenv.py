"""The Python environment of a running process, found the way its interpreter found it.

CPython finds its environment from the name it was started by, not from the file the kernel
runs: `/proc/<pid>/exe` of a virtual environment's `python` is the real path of the base
interpreter it links to, and says nothing of the environment. The interpreter (getpath and
site.py) takes argv[0] as given when it holds a slash (relative to the working directory), and
otherwise the first executable file of that name in the directories of the process's own PATH
(an empty entry is the working directory; without PATH nothing is found). With `pyvenv.cfg` in
that file's directory or one level up, the process runs in a virtual environment whose prefix
is the directory above the file's; its `home` names where the base interpreter lies, and the
base installation is the nearest directory from there up that holds a standard library
(`lib*/python3.*/os.py`). PYTHONHOME, unless -E or -I, names the base installation instead
(`prefix[:exec_prefix]`) and `home` is then not read; the virtual environment is still found.
A process without `pyvenv.cfg` runs in its base installation alone, searched from the real
directory of its executable (a system `python3`: `/usr`).

The mapped `site-packages` directories confirm what was found: each lies in the environment or
its base installation. One that lies in neither is named (`Environment.outside`) and nothing is
added for it: a library mapped from another environment's tree stays outside the allowed roots
and the audit reports it as such. The maps explain nothing on their own.

A process whose argv[0] names no file runs in the environment of its nearest ancestor on the
same interpreter: a process that renamed itself (setproctitle, as vLLM's EngineCore and Worker
do) has overwritten argv[0] and cleared its PATH, and multiprocessing starts a child with the
parent's `sys.executable` or forks it. With no such ancestor only the base installation of its
executable is known (`bin/..` where no standard library is found, as for a program that is not
Python at all).

Everything here is pure over the observed strings but for the questions asked of the file
system, which go through `Files` (`HostFiles` on this host).
"""

from __future__ import annotations

import posixpath
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from repro_serving.builder.errors import ReproError
from repro_serving.builder.readers import ENVIRONMENT_FILE_LIMIT, read_bytes

if TYPE_CHECKING:  # snapshots are only read here: no psutil for parsing pyvenv.cfg
    from repro_serving.builder.native.snapshot import ProcessSnapshot, TreeSnapshot

VENV_CONFIG: Final = "pyvenv.cfg"
PACKAGE_DIRS: Final = frozenset({"site-packages", "dist-packages"})
_PYTHON_NAME: Final = re.compile(r"python[0-9.]*[a-z]?")


def is_interpreter_file(path: str, series: str) -> bool:
    """A file of the Python installation itself, in the placeholder form of a lock: its
    executable (`{python_prefix}/bin/python…`), its shared library (`{python_prefix}/lib/
    libpython…`), its standard library and the extension modules beside it (`{python_prefix}/
    lib/python<series>/…`). Another release of the same series has other such files; the
    distributions of a venv made with it are the same wheels."""
    prefix = "{python_prefix}/"
    if not path.startswith(prefix):
        return False
    inner = path[len(prefix) :]
    return inner.startswith(("bin/python", "lib/libpython", f"lib/python{series}/"))


class Files(Protocol):
    """The questions the search asks of the file system."""

    def is_executable(self, path: str) -> bool:
        """A regular file with an execute bit, as CPython's `isxfile` tests a PATH entry."""
        ...

    def read_text(self, path: str) -> str | None:
        """The text of a regular file; None when there is none or it cannot be read."""
        ...

    def realpath(self, path: str) -> str: ...

    def holds_stdlib(self, prefix: str) -> bool:
        """`prefix` holds a Python standard library (`lib*/python3.*/os.py`)."""
        ...


class HostFiles:
    """`Files` on this host."""

    def is_executable(self, path: str) -> bool:
        try:
            mode = Path(path).stat().st_mode
        except OSError:
            return False
        return stat.S_ISREG(mode) and bool(mode & 0o111)

    def read_text(self, path: str) -> str | None:
        try:
            data = read_bytes(path, limit=ENVIRONMENT_FILE_LIMIT, what=VENV_CONFIG)
        except ReproError:  # none, not a regular file (a FIFO is never waited on), unreadable
            return None
        return data.decode("utf-8", "replace")

    def realpath(self, path: str) -> str:
        return str(Path(path).resolve())

    def holds_stdlib(self, prefix: str) -> bool:
        try:
            return any(
                (library / "os.py").is_file() or (library / "os.pyc").is_file()
                for library in Path(prefix).glob("lib*/python3.*")
            )
        except OSError:
            return False


@dataclass(frozen=True)
class Started:
    """What `/proc` says of how a process started, as strings."""

    argv: tuple[str, ...]
    cwd: str | None
    path: str | None
    """PATH; None when unset."""
    python_home: str | None = None
    """PYTHONHOME; None when unset."""
    mapped: tuple[str, ...] = ()
    """The paths of every file it maps."""


@dataclass(frozen=True)
class Executable:
    """What the interpreter took itself to be: argv[0] resolved, symlinks kept."""

    path: str
    how: str


@dataclass(frozen=True)
class Environment:
    """The environment one process runs in, and how it was found."""

    pid: int
    venv: str | None
    """The virtual environment's prefix (`sys.prefix`), None outside one."""
    base: tuple[str, ...]
    """The base installation (`sys.base_prefix`, then `sys.base_exec_prefix` if other)."""
    how: str
    """How the interpreter found it, in words."""
    site_packages: tuple[str, ...] = ()
    """The `site-packages` directories the process maps from."""
    outside: tuple[str, ...] = ()
    """Those of `site_packages` in neither the environment nor its base installation."""

    @property
    def roots(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(root for root in (self.venv, *self.base) if root))

    def evidence(self) -> str:
        """How it was found, and what the mapped site-packages say of it."""
        if self.outside:
            return f"{self.how}; maps site-packages outside it: {', '.join(self.outside)}"
        if self.site_packages:
            return f"{self.how}; its mapped site-packages confirm it"
        return self.how


# --- argv[0] ---------------------------------------------------------------------------------


def resolve_argv0(argv0: str, path: str | None, cwd: str | None, files: Files) -> Executable | None:
    """The executable CPython takes `argv0` for: itself when absolute, against `cwd` when it
    holds a slash, else the first executable file of that name in PATH's directories (an
    empty or relative entry against `cwd`). None when it names no file it could be."""
    if not argv0:
        return None
    if argv0.startswith("/"):
        return Executable(posixpath.normpath(argv0), "argv[0] is its absolute path")
    if "/" in argv0:
        if cwd is None:
            return None
        return Executable(
            posixpath.normpath(posixpath.join(cwd, argv0)),
            f"argv[0] {argv0!r} in its working directory {cwd}",
        )
    if not path:
        return None
    for entry in path.split(":"):
        if entry.startswith("/"):
            directory, where = entry, entry
        elif cwd is None:
            continue
        else:
            directory = posixpath.join(cwd, entry) if entry else cwd
            where = f"{directory} (PATH entry {entry!r}, in its working directory)"
        candidate = posixpath.normpath(posixpath.join(directory, argv0))
        if files.is_executable(candidate):
            return Executable(candidate, f"argv[0] {argv0!r} found on its PATH in {where}")
    return None


def interpreter_options(argv: Sequence[str]) -> frozenset[str]:
    """The one-letter options given to the interpreter before its script, `-c` or `-m`."""
    letters: set[str] = set()
    rest = iter(argv[1:])
    for argument in rest:
        if argument in ("-", "--") or not argument.startswith("-"):
            break
        if argument.startswith("--"):
            if argument == "--check-hash-based-pycs":
                next(rest, None)
            continue
        for index, letter in enumerate(argument[1:], start=1):
            if letter in "cm":
                return frozenset(letters)
            if letter in "WX":
                if index == len(argument) - 1:
                    next(rest, None)
                break
            letters.add(letter)
    return frozenset(letters)


# --- pyvenv.cfg and the base installation ----------------------------------------------------


def parse_venv_config(text: str) -> dict[str, str]:
    """The keys of a `pyvenv.cfg` as CPython reads them: `key = value` lines, keys compared
    without case; the first `home` is the one getpath takes."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, equals, value = line.partition("=")
        if equals:
            values.setdefault(key.strip().lower(), value.strip())
    return values


def venv_config(executable: str, files: Files) -> tuple[str, dict[str, str]] | None:
    """The `pyvenv.cfg` of the executable's environment and its keys: one level above its
    directory, else in it (getpath's order; site.py, which only asks whether one exists, looks
    in the other order)."""
    directory = posixpath.dirname(executable)
    for candidate in (posixpath.dirname(directory), directory):
        text = files.read_text(posixpath.join(candidate, VENV_CONFIG))
        if text is not None:
            return posixpath.join(candidate, VENV_CONFIG), parse_venv_config(text)
    return None


def search_stdlib(start: str, files: Files) -> str | None:
    """The nearest of `start` and the directories above it, short of `/`, that holds a
    standard library (`/` would allow every file, and on a merged-/usr host holds `lib`)."""
    directory = posixpath.normpath(start)
    while directory != "/":
        if files.holds_stdlib(directory):
            return directory
        directory = posixpath.dirname(directory)
    return None


def base_of(directory: str, files: Files, *, python: bool = True) -> str:
    """The base installation of an interpreter in `directory`: where a standard library is
    found from there up, else `directory/..`, as for a program that is not Python."""
    found = search_stdlib(directory, files) if python else None
    return found or posixpath.dirname(posixpath.normpath(directory))


def is_python(exe: str | None) -> bool:
    """The executable's real file is a CPython interpreter by its name (python3.12, python3)."""
    return exe is not None and _PYTHON_NAME.fullmatch(posixpath.basename(exe)) is not None


def environment(pid: int, started: Started, files: Files) -> Environment | None:
    """The environment `started` runs in, found from its argv[0]; None when argv[0] names
    nothing (see `tree_environments` for what then)."""
    if not started.argv:
        return None
    executable = resolve_argv0(started.argv[0], started.path, started.cwd, files)
    if executable is None:
        return None
    options = interpreter_options(started.argv)
    home = started.python_home if started.python_home and not options & {"E", "I"} else None
    config = venv_config(executable.path, files)
    venv = posixpath.dirname(posixpath.dirname(executable.path)) if config else None
    how = [executable.how]
    if config is not None:
        how.append(f"{config[0]} makes it a virtual environment")
    if home is not None:
        prefix, _, exec_prefix = home.partition(":")
        base: tuple[str, ...] = tuple(dict.fromkeys(p for p in (prefix, exec_prefix) if p))
        how.append(f"base from PYTHONHOME={home}")
    elif config is not None and config[1].get("home"):
        base = (base_of(config[1]["home"], files),)
        how.append(f"base from its home = {config[1]['home']}")
    else:
        real = files.realpath(executable.path)
        base = (base_of(posixpath.dirname(real), files, python=is_python(real)),)
        how.append(f"base from the executable's real path {real}")
    return _confirmed(Environment(pid, venv, base, "; ".join(how)), started, files)


def site_packages(paths: Iterable[str]) -> tuple[str, ...]:
    """The `site-packages` (or `dist-packages`) directories `paths` lie in, each once, sorted."""
    found = set()
    for path in paths:
        parts = path.split("/")
        for index, part in enumerate(parts):
            if part in PACKAGE_DIRS:
                found.add("/".join(parts[: index + 1]))
                break
    return tuple(sorted(found))


def _confirmed(found: Environment, started: Started, files: Files) -> Environment:
    mapped = site_packages(started.mapped)
    roots = [files.realpath(root).rstrip("/") for root in found.roots]
    outside = tuple(
        directory
        for directory in mapped
        if not any(directory == root or directory.startswith(root + "/") for root in roots)
    )
    return Environment(found.pid, found.venv, found.base, found.how, mapped, outside)


# --- a whole tree ----------------------------------------------------------------------------


def started_of(process: ProcessSnapshot, tree: TreeSnapshot) -> Started:
    """What the snapshot of `process` says of how it started."""
    return Started(
        argv=process.cmdline,
        cwd=process.cwd,
        path=process.search_path,
        python_home=process.environ.get("PYTHONHOME"),
        mapped=tuple(tree.files[f].path for f in process.files if f in tree.files),
    )


def tree_environments(tree: TreeSnapshot, files: Files) -> tuple[Environment, ...]:
    """The environment of every readable process of `tree`, in its order: found from its own
    argv[0], else its nearest ancestor's on the same interpreter, else its executable's base."""
    by_pid = {process.pid: process for process in tree.processes}
    own = {
        process.pid: environment(process.pid, started_of(process, tree), files)
        for process in tree.processes
        if process.error is None and process.exe is not None
    }
    found = []
    for process in tree.processes:
        if process.pid not in own or process.exe is None:
            continue
        started = started_of(process, tree)
        mine = own[process.pid]
        if mine is None:
            mine = _inherited(process, by_pid, own, started, files) or _base_only(
                process, process.exe, started, files
            )
        found.append(mine)
    return tuple(found)


def _inherited(
    process: ProcessSnapshot,
    by_pid: Mapping[int, ProcessSnapshot],
    own: Mapping[int, Environment | None],
    started: Started,
    files: Files,
) -> Environment | None:
    """The environment of the nearest ancestor that found its own, every process between them
    running the same interpreter as `process`."""
    seen = {process.pid}
    parent = by_pid.get(process.ppid)
    while parent is not None and parent.pid not in seen and parent.exe == process.exe:
        seen.add(parent.pid)
        ancestor = own.get(parent.pid)
        if ancestor is not None:
            how = (
                f"{_argv0_words(process)} names no file: as its ancestor pid {parent.pid}, "
                "on the same interpreter"
            )
            inherited = Environment(process.pid, ancestor.venv, ancestor.base, how)
            return _confirmed(inherited, started, files)
        parent = by_pid.get(parent.ppid)
    return None


def _base_only(process: ProcessSnapshot, exe: str, started: Started, files: Files) -> Environment:
    base = base_of(posixpath.dirname(exe), files, python=is_python(exe))
    how = f"{_argv0_words(process)} names no file: the base installation of {exe}"
    return _confirmed(Environment(process.pid, None, (base,), how), started, files)


def _argv0_words(process: ProcessSnapshot) -> str:
    return f"argv[0] {process.cmdline[0]!r}" if process.cmdline else "an empty command line"
