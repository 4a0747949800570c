"""A running vLLM server as `repro init` finds it: how it was started, what it serves, what its
process tree maps, and the environment it runs in.

I/O: `/proc/<pid>/cmdline`, `environ` and `cwd` of the server's root process (read whole: the
variables are sorted into kept and left out by `builder.manifestdraft`, never written as read),
psutil for the listening socket and the process's parents, the tree snapshot of
`builder.native.processes` (every mapping, each file hashed once), the serving venv's
distributions and the files each one's RECORD owns (`builder.observe.python`), and every file of
each model directory the server was told to load, hashed.

What the argv says (a vLLM server? which model? which hub cache?) is read by
`builder.vllmlog`.

A local model directory's revision is the git tree id of its files (`git write-tree` over them
as regular files), the id `builder.tinymodel` gives its generated model; a hub cache snapshot's
is the name of the snapshot directory (`models--<owner>--<name>/snapshots/<revision>`).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import psutil

from repro_serving.builder.documents.host import HostFacts
from repro_serving.builder.documents.manifest import ModelRole, flag_values
from repro_serving.builder.documents.python import Distribution
from repro_serving.builder.errors import BadInput, NotObservable
from repro_serving.builder.hashing import git_blob_sha1_file, sha256_files
from repro_serving.builder.native.kernels import KERNELS_DIR, KernelSet
from repro_serving.builder.native.loaderhost import host_config
from repro_serving.builder.native.policy import default_roots, observe_tree
from repro_serving.builder.native.processes import pid_listening_on
from repro_serving.builder.native.pyenv import (
    Environment,
    HostFiles,
    resolve_argv0,
    tree_environments,
)
from repro_serving.builder.native.snapshot import TreeSnapshot
from repro_serving.builder.observe.host import observe_host
from repro_serving.builder.observe.models import listing
from repro_serving.builder.observe.python import distributions, record_entries
from repro_serving.builder.placeholders import Venv, venv_values
from repro_serving.builder.readers import ENVIRONMENT_FILE_LIMIT, read_bytes, read_json
from repro_serving.builder.vllmlog import (
    EXPECTED_SERVER,
    REPO_ID,
    Entry,
    HubSnapshot,
    ModelArgument,
    extension_module,
    hub_cache_root,
    hub_snapshot,
    model_arguments,
    parse_environ_block,
    vllm_entry,
)

PROC: Final = Path("/proc")
_COMMIT: Final = re.compile(r"^[0-9a-f]{40}$")


# --- the facts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerStart:
    """How the server's root process was started, as `/proc` shows it."""

    pid: int
    argv: tuple[str, ...]
    environ: Mapping[str, str]
    """Its whole environment: secrets too, so never written as it is."""
    cwd: str


@dataclass(frozen=True)
class FoundModel:
    """A model the server was told to load, where it lies and its files."""

    argument: ModelArgument
    directory: str
    """Absolute, normalized (links kept: a snapshot directory is its own path)."""
    layout: Literal["directory", "hf-cache"]
    repo: str | None
    """The hub repository (hub cache), or the generator's (a generated directory); None for a
    local directory of unknown origin."""
    revision: str
    """The snapshot's name (hub cache), else the git tree id of the directory's files."""
    hf_cache: str | None
    files: Mapping[str, str]
    """Every file of the directory (fetch-tool bookkeeping aside) to its sha256."""
    generator: str | None = None
    """repro's generator whose output the directory is, byte for byte."""
    chat_template: bool = False
    """Its tokenizer config carries a chat template."""

    @property
    def role(self) -> ModelRole:
        return self.argument.role


@dataclass(frozen=True)
class MappedElf:
    path: str
    """Real path, as the kernel names the mapping."""
    sha256: str | None


@dataclass(frozen=True)
class ServerFacts:
    """Everything `builder.manifestdraft` drafts a manifest from."""

    start: ServerStart
    entry: Entry
    port: int
    venv: Venv
    environment: Environment
    """The root process's Python environment, as `builder.native.pyenv` found it."""
    real_values: Mapping[str, str]
    """The venv's path placeholders (`builder.observe.python.venv_values`) by their real paths,
    as the kernel names mapped files and the audit its roots."""
    roles: Mapping[str, int]
    """Processes of the live tree by role."""
    unreadable: tuple[str, ...]
    """Processes of the tree that could not be read, with why."""
    mapped: tuple[MappedElf, ...]
    """Every ELF file some process of the tree maps, each once."""
    child_preloads: tuple[str, ...]
    """What the stack preloaded into its own children (`stack_preloads`)."""
    arguments: tuple[ModelArgument, ...]
    """Every argument of the argv that names a model."""
    models: tuple[FoundModel, ...]
    """The model of each argument whose value no earlier one gave (`--tokenizer` naming the
    model's own directory is no model of its own)."""
    distributions: tuple[Distribution, ...]
    """Every distribution of the venv."""
    file_owners: Mapping[str, str]
    """Path inside site-packages of each mapped extension module to the distribution whose
    RECORD lists it."""
    package_owners: Mapping[str, tuple[str, ...]]
    """Top-level name inside site-packages (a package or module) to the distributions whose
    RECORD installs under it."""
    roots: tuple[str, ...]
    """The roots the audit allows without a manifest (real paths): every process's environment
    and base installation, then the loader's system directories."""
    system_dirs: tuple[str, ...]
    """The loader's system directories (real paths)."""
    host: HostFacts
    kernel_sets: tuple[KernelSet, ...]
    """Every kernel set repro ships."""


# --- observing ----------------------------------------------------------------------------------


def server_root(*, port: int | None = None, pid: int | None = None) -> int:
    """The root process of the server listening on `port`, or the process `pid`."""
    if port is not None:
        return _topmost_server(pid_listening_on(port))
    assert pid is not None, "one of port or pid"
    return pid


def _topmost_server(pid: int) -> int:
    """The highest ancestor of `pid`, on the same executable, that is a vLLM server too: several
    API server processes of one `vllm serve` listen on its port, the first one started is the
    tree's root."""
    try:
        process = psutil.Process(pid)
        while (parent := process.parent()) is not None:
            if parent.exe() != process.exe() or vllm_entry(parent.cmdline()) is None:
                break
            process = parent
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return pid
    return process.pid


def listening_port(pid: int) -> int:
    """The TCP port the process serves on: the one it listens on, or of several the one its
    argv's --port names."""
    try:
        process = psutil.Process(pid)
        connections = process.net_connections(kind="tcp")
        argv = process.cmdline()
    except psutil.NoSuchProcess as error:
        raise NotObservable(
            "the process does not exist", where=f"pid {pid}", found="no such process"
        ) from error
    except psutil.AccessDenied as error:
        raise NotObservable(
            "cannot list the sockets of the process",
            where=f"pid {pid}",
            found="permission denied",
            hint="run as the server's user or as root",
        ) from error
    ports = sorted(
        {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN and c.laddr}
    )
    asked = [int(v) for v in flag_values(argv, "--port") if v is not None and v.isdigit()]
    chosen = [p for p in ports if p in asked] or ports
    if len(chosen) == 1:
        return chosen[0]
    raise NotObservable(
        "cannot tell which port the server serves on",
        where=f"pid {pid}",
        expected="one listening TCP port, or the one its --port names",
        found=f"listening on {', '.join(map(str, ports))}" if ports else "no listening TCP socket",
        hint="give --port instead, once the server is ready",
    )


def read_start(pid: int, proc: Path = PROC) -> ServerStart:
    """The argv, whole environment and working directory of process `pid` under `proc`."""
    directory = proc / str(pid)
    if not directory.is_dir():
        raise NotObservable(
            "the process does not exist", where=str(directory), found="no such process"
        )
    cmdline = _proc_bytes(directory / "cmdline")
    environ = _proc_bytes(directory / "environ")
    try:
        cwd = str((directory / "cwd").readlink())
    except OSError as error:
        raise _unreadable(directory / "cwd", error) from error
    items = cmdline.split(b"\0")
    if items[-1] == b"":  # the terminator of the last argument; a renamed process may have none
        items.pop()
    argv = tuple(item.decode("utf-8", "surrogateescape") for item in items)
    return ServerStart(pid=pid, argv=argv, environ=parse_environ_block(environ), cwd=cwd)


def _proc_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise _unreadable(path, error) from error


def _unreadable(path: Path, error: OSError) -> NotObservable:
    hint = (
        "run as the server's user or as root"
        if isinstance(error, PermissionError)
        else "the process may have exited; start it again"
    )
    return NotObservable(
        f"cannot read {path.name} of the process",
        where=str(path),
        expected="a readable /proc entry",
        found=error.strerror or type(error).__name__,
        hint=hint,
    )


def require_vllm(start: ServerStart) -> Entry:
    """The vLLM entry point of `start`; anything else is refused, naming what runs instead."""
    entry = vllm_entry(start.argv)
    if entry is not None:
        return entry
    shown = " ".join(start.argv) or "an empty command line"
    renamed = len(start.argv) == 1 and "::" in start.argv[0]
    raise BadInput(
        "the process is not a vLLM server",
        where=f"pid {start.pid}",
        expected=EXPECTED_SERVER,
        found=shown[:300],
        hint="a process that renamed itself (VLLM::EngineCore, VLLM::Worker) is a child of the "
        "server: give the API server's pid, or --port"
        if renamed
        else "name a vLLM server: the port its API server listens on, or that process's pid",
    )


def observe_server(
    *, port: int | None = None, pid: int | None = None
) -> tuple[ServerFacts, TreeSnapshot]:
    """The facts of the vLLM server on `port` (or `pid`), and the tree snapshot they were read
    from (for the audit of the draft)."""
    root = server_root(port=port, pid=pid)
    start = read_start(root)
    entry = require_vllm(start)
    served = port if port is not None else listening_port(root)
    arguments = model_arguments(start.argv, entry)
    if not any(argument.role == "target" for argument in arguments):
        raise BadInput(
            "the server's argv names no model",
            where=f"pid {root}",
            expected="--model MODEL, or vllm serve MODEL",
            found=" ".join(start.argv)[:300],
        )
    tree = observe_tree(root, show_progress=False)
    files = HostFiles()
    environment = _root_environment(tree, start, files)
    venv = Venv.at(Path(str(environment.venv)))
    values = {"venv": str(venv.root), "site": str(venv.site)}
    found = tuple(distributions(venv.site, values))
    mapped = tuple(
        MappedElf(f.path, f.sha256)
        for f in sorted(tree.files.values(), key=lambda f: f.path)
        if f.is_elf
    )
    loader_dirs = host_config().system_dirs
    system_dirs = tuple(dict.fromkeys(os.path.realpath(d) for d in loader_dirs))
    file_owners, package_owners = _owners(venv, found, mapped)
    facts = ServerFacts(
        start=start,
        entry=entry,
        port=served,
        venv=venv,
        environment=environment,
        roles=_roles(tree),
        unreadable=tuple(f"pid {p.pid}: {p.error}" for p in tree.processes if p.error is not None),
        mapped=mapped,
        child_preloads=stack_preloads(tree),
        real_values={k: os.path.realpath(v) for k, v in venv_values(venv).items()},
        arguments=arguments,
        models=tuple(locate_model(argument, start) for argument in _distinct_values(arguments)),
        distributions=found,
        file_owners=file_owners,
        package_owners=package_owners,
        roots=default_roots(tree, loader_dirs, files).roots,
        system_dirs=system_dirs,
        host=observe_host(),
        kernel_sets=shipped_kernel_sets(),
    )
    return facts, tree


def _distinct_values(arguments: Sequence[ModelArgument]) -> tuple[ModelArgument, ...]:
    firsts: dict[str, ModelArgument] = {}
    for argument in arguments:
        firsts.setdefault(argument.value, argument)
    return tuple(firsts.values())


def _root_environment(tree: TreeSnapshot, start: ServerStart, files: HostFiles) -> Environment:
    """The root's environment, which must be a virtual environment whose interpreter argv[0] is:
    a manifest launches `{python}`, the venv's."""
    environment = next((e for e in tree_environments(tree, files) if e.pid == start.pid), None)
    where = f"pid {start.pid}"
    if environment is None or environment.venv is None:
        raise BadInput(
            "the server does not run in a virtual environment",
            where=where,
            expected="an interpreter of a venv (its pyvenv.cfg one level above bin/)",
            found=environment.how if environment is not None else "its executable cannot be read",
            hint="a manifest pins the serving venv: serve from one made with `python -m venv`",
        )
    executable = resolve_argv0(start.argv[0], start.environ.get("PATH"), start.cwd, files)
    bin_dir = posixpath.join(environment.venv, "bin")
    if executable is None or posixpath.dirname(executable.path) != bin_dir:
        raise BadInput(
            "the server's interpreter is not its venv's",
            where=where,
            expected=f"an interpreter in {bin_dir}",
            found=executable.path if executable is not None else repr(start.argv[0]),
        )
    return environment


def _roles(tree: TreeSnapshot) -> dict[str, int]:
    counts: dict[str, int] = {}
    for process in tree.processes:
        if process.error is None:
            counts[process.role] = counts.get(process.role, 0) + 1
    return dict(sorted(counts.items()))


def stack_preloads(tree: TreeSnapshot) -> tuple[str, ...]:
    """The LD_PRELOAD entries the stack put in its children's environments: every entry of a
    process other than the root that the root's own LD_PRELOAD does not hold (a child inherits
    those from whoever started the server, not from the stack)."""
    root = next((p for p in tree.processes if p.pid == tree.root_pid), None)
    inherited = set(_preload_entries(root.environ if root is not None else {}))
    entries = (
        entry
        for process in tree.processes
        if process.pid != tree.root_pid
        for entry in _preload_entries(process.environ)
        if entry not in inherited
    )
    return tuple(dict.fromkeys(entries))


def _preload_entries(environ: Mapping[str, str]) -> list[str]:
    """LD_PRELOAD's entries, split as the loader splits them (rtld.c)."""
    return [entry for entry in re.split(r"[: \t]", environ.get("LD_PRELOAD", "")) if entry]


def _owners(
    venv: Venv, found: Sequence[Distribution], mapped: Sequence[MappedElf]
) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """Which distribution installs each mapped extension module, and each top-level name."""
    site = os.path.realpath(venv.site)
    wanted = {
        relative
        for elf in mapped
        if (relative := _inside(elf.path, site)) is not None and extension_module(relative)
    }
    file_owners: dict[str, str] = {}
    package_owners: dict[str, list[str]] = {}
    for distribution in found:
        dist_info = venv.site / Path(distribution.dist_info).name
        for entry in record_entries(dist_info):
            relative = _inside(entry.path, str(venv.site))
            if relative is None:
                continue
            if relative in wanted:
                file_owners.setdefault(relative, distribution.name)
            top = relative.split("/")[0]
            if not top.endswith((".dist-info", ".pth")) and top != "__pycache__":
                owners = package_owners.setdefault(top.removesuffix(".py"), [])
                if distribution.name not in owners:
                    owners.append(distribution.name)
    return file_owners, {name: tuple(owners) for name, owners in sorted(package_owners.items())}


def _inside(path: str, root: str) -> str | None:
    root = root.rstrip("/")
    return path[len(root) + 1 :] if path.startswith(root + "/") else None


def locate_model(argument: ModelArgument, start: ServerStart) -> FoundModel:
    """Where the model `argument` names lies, as vLLM finds it: an existing directory (against
    the process's working directory), else a repository of the hub cache, and its files."""
    candidate = posixpath.normpath(posixpath.join(start.cwd, argument.value))
    if Path(candidate).is_dir():
        snapshot = hub_snapshot(candidate)
        if snapshot is not None:
            return _hub_model(argument, candidate, snapshot)
        return _directory_model(argument, candidate)
    if REPO_ID.match(argument.value):
        return _hub_model(argument, *_hub_location(argument, start))
    raise BadInput(
        "the model the server was given is neither a directory nor a hub repository",
        where=f"pid {start.pid}, argv[{argument.index}] ({argument.flag})",
        expected="an existing directory, or a repository id 'owner/name' in the hub cache",
        found=repr(argument.value),
    )


def _hub_location(argument: ModelArgument, start: ServerStart) -> tuple[str, HubSnapshot]:
    cache = hub_cache_root(start.environ, start.cwd)
    where = f"pid {start.pid}, argv[{argument.index}] ({argument.flag})"
    if cache is None:
        raise NotObservable(
            "cannot tell which hub cache the server reads",
            where=where,
            expected="HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME or HOME in its environment",
            found="none of them",
        )
    owner, name = argument.value.split("/")
    repository = Path(cache) / f"models--{owner}--{name}"
    wanted = argument.revision or "main"
    if _COMMIT.match(wanted):
        revision = wanted
    else:
        ref = repository / "refs" / wanted
        try:
            revision = (
                read_bytes(ref, limit=ENVIRONMENT_FILE_LIMIT, what="a hub cache ref")
                .decode("utf-8", "replace")
                .strip()
            )
        except BadInput as error:
            raise NotObservable(
                "the model's revision is not in the hub cache",
                where=where,
                expected=f"{ref}: the commit of {argument.value} at {wanted}",
                found=error.found or error.what,
            ) from error
    directory = str(repository / "snapshots" / revision)
    if not Path(directory).is_dir():
        raise NotObservable(
            "the model's snapshot is not in the hub cache",
            where=where,
            expected=f"the directory {directory}",
            found="no such directory",
        )
    return directory, HubSnapshot(cache, argument.value, revision)


def _hub_model(argument: ModelArgument, directory: str, snapshot: HubSnapshot) -> FoundModel:
    return FoundModel(
        argument=argument,
        directory=directory,
        layout="hf-cache",
        repo=snapshot.repo,
        revision=snapshot.revision,
        hf_cache=snapshot.cache,
        files=model_files(Path(directory)),
        chat_template=_has_chat_template(Path(directory)),
    )


def _directory_model(argument: ModelArgument, directory: str) -> FoundModel:
    from repro_serving.builder import tinymodel  # numpy: only when a directory is found

    revision = tree_id(Path(directory))
    generated = revision == tinymodel.revision()
    return FoundModel(
        argument=argument,
        directory=directory,
        layout="directory",
        repo=tinymodel.REPO_ID if generated else None,
        revision=revision,
        hf_cache=None,
        files=model_files(Path(directory)),
        generator="tiny-llama" if generated else None,
        chat_template=_has_chat_template(Path(directory)),
    )


def model_files(directory: Path) -> dict[str, str]:
    """Every file of a model directory (`builder.observe.models.listing`) to its sha256."""
    names = sorted(listing(directory))
    digests = sha256_files([directory / name for name in names])
    return dict(zip(names, digests, strict=True))


def _has_chat_template(directory: Path) -> bool:
    if (directory / "chat_template.jinja").is_file():
        return True
    config = directory / "tokenizer_config.json"
    if not config.is_file():
        return False
    document = read_json(config, limit=ENVIRONMENT_FILE_LIMIT, what="a tokenizer config")
    return isinstance(document, dict) and bool(document.get("chat_template"))


def tree_id(directory: Path) -> str:
    """The git tree id of the files under `directory` (`builder.observe.models.listing`), each a
    regular file (mode 100644), subdirectories as trees: `git write-tree` of them."""
    tree: dict[str, object] = {}
    for name in listing(directory):
        *parents, leaf = name.split("/")
        level = tree
        for part in parents:
            nested = level.setdefault(part, {})
            assert isinstance(nested, dict)
            level = nested
        level[leaf] = directory / name
    return _tree_object(tree).hex()


def _tree_object(tree: Mapping[str, object]) -> bytes:
    entries = []
    for name, item in tree.items():
        if isinstance(item, Mapping):
            entries.append(
                (os.fsencode(name) + b"/", b"40000 " + os.fsencode(name), _tree_object(item))
            )
        else:
            assert isinstance(item, Path)
            blob = bytes.fromhex(git_blob_sha1_file(item))
            entries.append((os.fsencode(name), b"100644 " + os.fsencode(name), blob))
    content = b"".join(head + b"\0" + object_id for _key, head, object_id in sorted(entries))
    header = b"tree " + str(len(content)).encode() + b"\0"
    return hashlib.sha1(header + content, usedforsecurity=False).digest()


def shipped_kernel_sets(directory: Path = KERNELS_DIR) -> tuple[KernelSet, ...]:
    """Every kernel set repro ships, by name."""
    return tuple(KernelSet.load(path.stem, directory) for path in sorted(directory.glob("*.toml")))
