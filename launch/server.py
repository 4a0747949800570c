"""The lifecycle of one serving process tree: start, readiness, teardown, proof of teardown.

This module owns how `repro` runs a server: an exact argv and an exact environment (nothing
inherited from the caller), in a process group of its own, stdout and stderr into one log file;
readiness is an HTTP probe polled within a bound; teardown is SIGTERM to the group, a bounded
wait, then SIGKILL; and teardown is not done until no process of the tree lives and the port is
free again. What to start (argv, environment, port) is the caller's: the manifest's `[launch]`.

A server that exits or never answers raises `ServerDidNotStart` with the tail of its log; a port
already held raises `PortInUse` before anything starts; a tree that survives teardown raises
`TeardownIncomplete`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from repro_serving.builder.errors import NotObservable, ReproError
from repro_serving.launch.spec import ServerSpec

if TYPE_CHECKING:
    import httpx  # imported where a server is polled: `repro verify` only reads `ServerSpec`

LOG_TAIL_LINES = 40


class PortInUse(NotObservable):
    """The port a server must listen on is already bound by someone else."""


class ServerDidNotStart(NotObservable):
    """The server exited, or did not answer its readiness probe within the bound."""


class TeardownIncomplete(ReproError):
    """A process of the tree outlived SIGKILL, or the port stayed bound after teardown."""


@dataclasses.dataclass(frozen=True)
class RunningServer:
    """A started, ready server: its group leader's pid and where it answers."""

    spec: ServerSpec
    pid: int
    started_at: float
    """On the monotonic clock."""
    ready_after_s: float
    spawned_at: float
    """When it was spawned, in seconds since the epoch (the clock process start times use)."""
    process: subprocess.Popen[bytes] = dataclasses.field(repr=False, compare=False)

    @property
    def base_url(self) -> str:
        return self.spec.base_url

    @property
    def port(self) -> int:
        return self.spec.port

    @property
    def log_path(self) -> Path:
        return self.spec.log_path


@dataclasses.dataclass(frozen=True)
class Teardown:
    """What teardown found and did: every pid of the tree, and which needed SIGKILL; when it
    began and ended (seconds since the epoch: what orders two starts), and how much of the
    server's log had been written when it began (what the server wrote while serving)."""

    pids: tuple[int, ...]
    killed: tuple[int, ...]
    seconds: float
    began_at: float
    ended_at: float
    log_bytes: int


@contextlib.contextmanager
def serving(spec: ServerSpec) -> Iterator[RunningServer]:
    """Start `spec`, yield it once ready, and always tear it down with proof on the way out."""
    server = start(spec)
    try:
        yield server
    except BaseException as error:
        try:
            stop(server)
        except ReproError as teardown_error:
            error.add_note(teardown_error.diagnostics())
        raise
    stop(server)


def start(spec: ServerSpec) -> RunningServer:
    """Start the server and wait for readiness; on failure nothing of it is left running."""
    starting = spawn(spec)
    try:
        return dataclasses.replace(starting, ready_after_s=_await_ready(starting))
    except BaseException:
        with contextlib.suppress(ReproError):
            stop(starting)
        raise


def spawn(spec: ServerSpec) -> RunningServer:
    """Start the tree and return at once; readiness is the caller's to await (`await_ready`)."""
    if spec.readiness_path is not None:
        refuse_port_in_use(spec.host, spec.port)
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    started_at, spawned_at = time.monotonic(), time.time()
    with spec.log_path.open("wb") as log:
        process = subprocess.Popen(
            spec.argv,
            env=dict(spec.env),
            cwd=spec.cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return RunningServer(
        spec=spec,
        pid=process.pid,
        started_at=started_at,
        ready_after_s=0.0,
        spawned_at=spawned_at,
        process=process,
    )


def stop(server: RunningServer) -> Teardown:
    """SIGTERM the group, SIGKILL what outlives the bound, then prove the tree gone, port free."""
    began, began_at = time.monotonic(), time.time()
    log_bytes = _size(server.log_path)
    members = tree_members(server.pid)
    _signal_all(server.pid, members, signal.SIGTERM)
    _reap_leader(server.process, server.spec.stop_timeout_s)
    _, survivors = psutil.wait_procs(members, timeout=_remaining(began, server.spec.stop_timeout_s))
    killed = tuple(sorted(process.pid for process in survivors))
    if survivors:
        _signal_all(server.pid, survivors, signal.SIGKILL)
        _reap_leader(server.process, server.spec.stop_timeout_s)
        psutil.wait_procs(survivors, timeout=server.spec.stop_timeout_s)
    _prove_gone(server, members)
    if server.spec.readiness_path is not None:
        _await_port_free(server.spec)
    pids = tuple(sorted(process.pid for process in members))
    return Teardown(
        pids=pids,
        killed=killed,
        seconds=time.monotonic() - began,
        began_at=began_at,
        ended_at=time.time(),
        log_bytes=log_bytes,
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def tree_members(pid: int) -> list[psutil.Process]:
    """The leader, its descendants, and anything else still in its process group."""
    members: dict[int, psutil.Process] = {}
    with contextlib.suppress(psutil.NoSuchProcess):
        leader = psutil.Process(pid)
        members[pid] = leader
        for child in leader.children(recursive=True):
            members[child.pid] = child
    for process in psutil.process_iter():
        with contextlib.suppress(ProcessLookupError, psutil.Error):
            if process.pid not in members and os.getpgid(process.pid) == pid:
                members[process.pid] = process
    return list(members.values())


def living(processes: Sequence[psutil.Process]) -> list[psutil.Process]:
    """Those still running; a zombie has ended and only awaits its parent's wait()."""
    alive = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
    return alive


def port_is_free(host: str, port: int) -> bool:
    """Whether a listener could bind (host, port) now, as the server will try to."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def port_holders(port: int) -> list[int]:
    """Pids listening on `port`, where this user may see them."""
    try:
        connections = psutil.net_connections(kind="inet")
    except psutil.AccessDenied:
        return []
    return sorted(
        {
            connection.pid
            for connection in connections
            if connection.laddr
            and connection.laddr.port == port
            and connection.status == psutil.CONN_LISTEN
            and connection.pid is not None
        }
    )


def refuse_port_in_use(host: str, port: int) -> None:
    """Raise `PortInUse`, naming the port and its holder, unless (host, port) is free."""
    if port_is_free(host, port):
        return
    holders = port_holders(port)
    raise PortInUse(
        f"port {port} is already in use",
        where=f"{host}:{port}",
        expected=f"port {port} free before the server starts",
        found=f"bound by pid {', '.join(map(str, holders))}" if holders else "bound",
        hint="stop whatever holds it, or choose another port",
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel reports free now (another process may still take it before use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log, decoded leniently (a server may write any bytes)."""
    try:
        return tail(path.read_bytes(), lines)
    except OSError as error:
        return f"(log unreadable: {error})"


def tail(log: bytes, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log's bytes, decoded leniently."""
    return "\n".join(log.decode(errors="replace").splitlines()[-lines:])


def _await_ready(server: RunningServer) -> float:
    def exited() -> str | None:
        code = server.process.poll()
        return None if code is None else f"it exited with status {code} before it was ready"

    return await_ready(server.spec, server.started_at, exited)


def await_ready(spec: ServerSpec, started_at: float, exited: Callable[[], str | None]) -> float:
    """Seconds from `started_at` until `spec`'s readiness probe answers 200; `exited` says what
    ended meanwhile (then nothing will answer), else None."""
    import httpx

    url = f"{spec.base_url}{spec.readiness_path}"
    deadline = started_at + spec.ready_timeout_s
    with httpx.Client(trust_env=False, timeout=spec.poll_interval_s + 5.0) as client:
        while True:
            ended = exited()
            if ended is not None:
                raise _did_not_start(spec, ended)
            if _answers(client, url):
                return time.monotonic() - started_at
            if time.monotonic() >= deadline:
                raise _did_not_start(
                    spec, f"it did not answer GET {url} within {spec.ready_timeout_s:g} s"
                )
            time.sleep(spec.poll_interval_s)


def _answers(client: httpx.Client, url: str) -> bool:
    import httpx

    try:
        return client.get(url).status_code == httpx.codes.OK
    except httpx.TransportError:
        return False


def _did_not_start(spec: ServerSpec, found: str) -> ServerDidNotStart:
    return ServerDidNotStart(
        "the server did not become ready",
        where=f"{spec.argv[0]} (log {spec.log_path})",
        expected=f"HTTP 200 from {spec.base_url}{spec.readiness_path} "
        f"within {spec.ready_timeout_s:g} s",
        found=f"{found}; last lines of its log:\n{log_tail(spec.log_path)}",
    )


def _signal_all(group: int, members: Sequence[psutil.Process], signum: signal.Signals) -> None:
    """Signal the whole group, and any member that left it (a child may call setsid)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signum)
    for process in members:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signum)


def _reap_leader(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=timeout_s)


def _remaining(began: float, bound_s: float) -> float:
    return max(0.0, bound_s - (time.monotonic() - began))


def _prove_gone(server: RunningServer, members: Sequence[psutil.Process]) -> None:
    alive = living([*members, *tree_members(server.pid)])
    if alive:
        raise TeardownIncomplete(
            "processes of the server outlived teardown",
            where=f"process group {server.pid}",
            expected="no process of the tree alive after SIGTERM, then SIGKILL",
            found=", ".join(f"pid {process.pid}" for process in alive),
        )


def _await_port_free(spec: ServerSpec) -> None:
    deadline = time.monotonic() + spec.port_release_timeout_s
    while not port_is_free(spec.host, spec.port):
        if time.monotonic() >= deadline:
            holders = port_holders(spec.port)
            raise TeardownIncomplete(
                f"port {spec.port} is still bound after teardown",
                where=f"{spec.host}:{spec.port}",
                expected=f"port free within {spec.port_release_timeout_s:g} s of teardown",
                found=f"bound by pid {', '.join(map(str, holders))}" if holders else "bound",
            )
        time.sleep(0.1)
