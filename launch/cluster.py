"""A stack served across the nodes of a Ray cluster: every rank on its own node, each observed,
started, audited and torn down there.

repro runs no agent of its own: it connects to the Ray cluster the manifest names (`[cluster]
address`, else `RAY_ADDRESS`), finds the Ray node of each declared `[[node]]` by the address it
was started with, and pins one actor of this module to it (node-affinity scheduling, never soft).
That actor does on its host what `launch.server` and the live audit do on repro's own: it reads
the host's facts and its own environment (the node's, as the raylet passed it on), asks the
serving interpreter which code paths it chose, starts the rank's exact argv and environment in a
process group of its own, audits that tree with the policy it is given, tells which audited
process died, and tears the tree down with proof. Every node must hold repro (the same version,
in the interpreter Ray runs), the serving venv and the model at the paths the manifest names.

The serving stack itself need not run on Ray (vLLM's CPU platform refuses Ray's executor; its
multiprocessing executor spans hosts with `--nnodes`): Ray carries repro's observations only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import psutil

from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.documents.nodes import NodeFacts, NodesDocument, node_name
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import NotObservable, ReproError
from repro_serving.builder.native.audit import AuditReport
from repro_serving.builder.native.kernels import KernelSet
from repro_serving.builder.native.policy import judge_tree, observe_tree
from repro_serving.builder.native.rules import AuditPolicy
from repro_serving.builder.observe.dispatch import probe_code_paths
from repro_serving.builder.observe.host import observe_host
from repro_serving.launch import server as lifecycle
from repro_serving.launch.spec import ServerSpec

ADDRESS_VARIABLE: Final = "RAY_ADDRESS"
CALL_SLACK_S: Final = 60.0
"""Beyond a step's own bound, how long a node may take to answer before it is unreachable."""
POLL_S: Final = 2.0
SETTLE_S: Final = 10.0
"""How long a failed suite waits for the process whose death failed it to be seen gone."""


class NodeUnreachable(NotObservable):
    """A declared node has no Ray node, or its actor stopped answering."""


class NodeDrift(ReproError):
    """A node does not hold what the run needs (an undeclared node, a forbidden variable)."""


# --- the actor on each node ----------------------------------------------------------------------


class NodeAgent:
    """The actor pinned to one node. Its methods run there; what they return travels back."""

    def __init__(self, rank: int, address: str) -> None:
        self._rank = rank
        self._address = address
        self._server: lifecycle.RunningServer | None = None
        self._log: Path | None = None
        self._audited: dict[int, str] = {}
        self._teardown: lifecycle.Teardown | None = None

    def facts(
        self,
        forbidden: Sequence[str],
        kernel_sets: Sequence[KernelSet],
        python: str,
        env: Mapping[str, str],
    ) -> NodeFacts:
        import ray

        return NodeFacts(
            rank=self._rank,
            address=self._address,
            node_id=ray.get_runtime_context().get_node_id(),
            hostname=socket.gethostname(),
            host=observe_host(),
            forbidden={name: os.environ[name] for name in forbidden if name in os.environ},
            probes=probe_code_paths(kernel_sets, Path(python), env),
            boot_id=_boot_id(),
        )

    def spawn(self, spec: ServerSpec) -> int:
        """Start the rank's tree and return its leader's pid at once: the stack's readiness
        (rank 0's probe) is the driver's to await."""
        if self._server is not None:
            raise RuntimeError("this node's rank is already started")
        self._log = spec.log_path
        self._server = server = lifecycle.spawn(spec)
        self._audited, self._teardown = {}, None
        return server.pid

    def exited(self) -> int | None:
        """The exit status of the rank's leader when it has ended, else None."""
        return None if self._server is None else self._server.process.poll()

    def audit(self, policy: AuditPolicy) -> AuditReport:
        server = self._require()
        report = judge_tree(observe_tree(server.pid, show_progress=False), policy)
        self._audited = {p.pid: p.role for p in report.processes}
        return report

    def lost(self) -> tuple[str, ...]:
        """Each audited process that has since ended, as `pid N (role)`."""
        gone = []
        for pid, role in sorted(self._audited.items()):
            alive = False
            with contextlib.suppress(psutil.NoSuchProcess):
                process = psutil.Process(pid)
                alive = process.is_running() and process.status() != psutil.STATUS_ZOMBIE
            if not alive:
                gone.append(f"pid {pid} ({role})")
        return tuple(gone)

    def stop(self) -> lifecycle.Teardown:
        """Tear the rank's tree down with proof; again, the same teardown (the driver may have
        stopped rank 0 early, when a process of another rank died mid-suite)."""
        if self._server is None and self._teardown is not None:
            return self._teardown
        # A teardown that failed leaves the server here: asked again, it is tried again.
        self._teardown = lifecycle.stop(self._require())
        self._server = None
        return self._teardown

    def log(self) -> bytes:
        """The log of the rank's last start on this node (empty before any)."""
        if self._log is None:
            return b""
        with contextlib.suppress(OSError):
            return self._log.read_bytes()
        return b""

    def _require(self) -> lifecycle.RunningServer:
        if self._server is None:
            raise RuntimeError("this node's rank is not started")
        return self._server


# --- the driver's side ---------------------------------------------------------------------------


def ray_address(manifest: Manifest, environment: Mapping[str, str]) -> str:
    """Where the cluster is: the manifest's `[cluster] address`, else `RAY_ADDRESS`."""
    declared = manifest.cluster.address if manifest.cluster is not None else None
    address = declared or environment.get(ADDRESS_VARIABLE)
    if not address:
        raise NodeUnreachable(
            "no Ray cluster to reach the nodes through",
            where=f"{manifest.source}: [[node]]",
            expected=f"[cluster] address, or {ADDRESS_VARIABLE} in the environment",
            found="neither",
            hint="start the cluster (`ray start --head` on one node, `ray start --address` on "
            "the others) and name its address",
        )
    return address


class Cluster:
    """The declared nodes of a manifest, each with its actor; `connect` opens it."""

    def __init__(self, manifest: Manifest, agents: Mapping[int, Any], undeclared: Sequence[str]):
        self.manifest = manifest
        self._agents = dict(agents)
        self.undeclared = tuple(undeclared)

    def call(self, rank: int, method: str, *args: Any, timeout_s: float = CALL_SLACK_S) -> Any:
        """`method` of rank `rank`'s actor, run on its node; a node that fails to answer is
        `NodeUnreachable`, naming it; a `ReproError` raised there is raised here."""
        return self.wait(rank, self.submit(rank, method, *args), timeout_s=timeout_s)

    def submit(self, rank: int, method: str, *args: Any) -> Any:
        return getattr(self._agents[rank], method).remote(*args)

    def wait(self, rank: int, future: Any, *, timeout_s: float) -> Any:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        node = self.manifest.declared_nodes[rank]
        try:
            return ray.get(future, timeout=timeout_s)
        except RayTaskError as error:
            cause = getattr(error, "cause", None)
            if isinstance(cause, ReproError):
                name = node_name(rank, node.address)
                cause.where = name if cause.where is None else f"{name}: {cause.where}"
                raise cause from None
            raise
        except (RayActorError, GetTimeoutError) as error:
            raise NodeUnreachable(
                "a node stopped answering",
                where=node_name(rank, node.address),
                expected=f"its actor's answer within {timeout_s:g} s",
                found=f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
            ) from error

    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted(self._agents))


@contextlib.contextmanager
def connect(manifest: Manifest, environment: Mapping[str, str]) -> Iterator[Cluster]:
    """The cluster of `manifest`, one actor pinned to each declared node; refused naming the
    node when a declared one has no live Ray node. The actors end on the way out."""
    address = ray_address(manifest, environment)
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError as error:
        raise NodeUnreachable(
            "Ray is not installed beside repro",
            where=f"{manifest.source}: [[node]]",
            expected="the ray package, to reach the nodes through the cluster",
            found=str(error),
            hint="pip install 'repro-serving[cluster]' (the same Ray version as the cluster's)",
        ) from error
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise NodeUnreachable(
            "cannot connect to the Ray cluster",
            where=address,
            expected="a running Ray cluster at that address",
            found=str(error).splitlines()[0] if str(error) else type(error).__name__,
        ) from error
    try:
        found: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        live = {n["NodeManagerAddress"]: n["NodeID"] for n in found if n["Alive"]}
        declared = {node.address for node in manifest.declared_nodes}
        missing = [n for n in manifest.declared_nodes if n.address not in live]
        if missing:
            node = missing[0]
            raise NodeUnreachable(
                "a declared node is not in the Ray cluster",
                where=node_name(node.rank, node.address),
                expected=f"a live Ray node started with --node-ip-address={node.address}",
                found="live nodes: " + (", ".join(sorted(live)) or "none"),
            )
        remote = ray.remote(num_cpus=0, max_restarts=0)(NodeAgent)
        agents = {
            node.rank: remote.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(live[node.address], soft=False)
            ).remote(node.rank, node.address)
            for node in manifest.declared_nodes
        }
        yield Cluster(manifest, agents, sorted(set(live) - declared))
    finally:
        ray.shutdown()


def observe_nodes(
    cluster: Cluster,
    kernel_sets: Sequence[KernelSet],
    python: str,
    env_of: Callable[[int], Mapping[str, str]],
) -> NodesDocument:
    """Every declared node's facts, asked of its actor (all at once); `env_of(rank)` is the
    environment that rank's stack starts with, in which the probes run."""
    manifest = cluster.manifest
    forbidden = list(manifest.native.forbidden_environment)
    futures = {
        rank: cluster.submit(
            rank, "facts", forbidden, list(kernel_sets), python, dict(env_of(rank))
        )
        for rank in cluster.ranks()
    }
    nodes = tuple(
        cluster.wait(rank, future, timeout_s=CALL_SLACK_S) for rank, future in futures.items()
    )
    return NodesDocument(nodes=nodes, undeclared=cluster.undeclared)


def node_drifts(document: NodesDocument) -> list[Drift]:
    """What of the nodes' facts refuses a run: a node nobody declared, a forbidden variable set
    in a node's environment; each drift names its node."""
    found = [
        Drift(
            kind=DriftKind.HOST,
            subject=f"node {address}",
            expected="the cluster's nodes exactly the manifest's [[node]]",
            observed=f"a live Ray node at {address} that no [[node]] declares",
            why="every worker on every node is observed and judged: stop it, or declare it",
        )
        for address in document.undeclared
    ]
    found += [
        Drift(
            kind=DriftKind.FORBIDDEN_ENV,
            subject=node_name(node.rank, node.address),
            expected="none of the manifest's forbidden environment",
            observed=", ".join(f"{name}={value}" for name, value in node.forbidden.items()),
            why="nothing may be injected into a node of the stack: unset it where that node's "
            "Ray was started",
        )
        for node in document.nodes
        if node.forbidden
    ]
    return found


def refusal(drifts: Sequence[Drift]) -> NodeDrift:
    """The error of a run refused by `drifts` (the first named, the others as notes)."""
    first = drifts[0]
    error = NodeDrift(
        f"a node does not hold what the run needs ({first.kind.value})",
        where=first.subject,
        expected=first.expected,
        found=first.observed,
        hint=first.why,
    )
    for other in drifts[1:]:
        error.add_note(f"{other.subject}: {other.observed}")
    return error


def exited(cluster: Cluster, ranks: Sequence[int]) -> str | None:
    """Which of `ranks` has ended, with its status and the tail of its log; None if none."""
    for rank in ranks:
        status = cluster.call(rank, "exited")
        if status is not None:
            node = cluster.manifest.declared_nodes[rank]
            tail = lifecycle.tail(cluster.call(rank, "log"))
            return (
                f"{node_name(rank, node.address)} exited with status {status} before the stack "
                f"was ready; last lines of its log:\n{tail}\n(rank 0)"
            )
    return None


class LossWatch:
    """Every node's audited processes checked alive every few seconds while the suite runs; at
    the first loss, rank 0 is stopped at once (a stack that lost a rank may hang in a collective
    until its own timeout: the suite then fails now) and the loss is kept, naming its node."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._done = threading.Event()
        self.found: tuple[int, tuple[str, ...]] | None = None
        self._thread = threading.Thread(target=self._watch, name="repro-loss-watch", daemon=True)

    def __enter__(self) -> LossWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(POLL_S):
            # A watcher that fails only stops watching: `refuse` asks every node again.
            with contextlib.suppress(Exception):
                self.found = self._first_loss()
                if self.found is not None:
                    self._cluster.call(0, "stop")
                    return

    def _first_loss(self) -> tuple[int, tuple[str, ...]] | None:
        for rank in self._cluster.ranks():
            gone: tuple[str, ...] = self._cluster.call(rank, "lost")
            if gone:
                return rank, gone
        return None

    def refuse(self, *, settle_s: float = 0.0) -> None:
        """Raise `NodeDrift` for the loss seen, else for any audited process ended by now;
        with `settle_s`, keep asking that long (the stack failed: a process that died may take
        a moment to be seen gone)."""
        deadline = time.monotonic() + settle_s
        while (found := self.found or self._first_loss()) is None:
            if time.monotonic() >= deadline:
                return
            time.sleep(POLL_S / 4)
        rank, gone = found
        node = self._cluster.manifest.declared_nodes[rank]
        raise NodeDrift(
            "a process of the stack ended during the run",
            where=node_name(rank, node.address),
            expected="every audited process alive until teardown",
            found="ended: " + ", ".join(gone),
        )


BOOT_ID: Final = Path("/proc/sys/kernel/random/boot_id")


def _boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None
