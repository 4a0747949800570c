"""One run of a manifest's launch profile: start, audit, oracle, teardown, gates, evidence.

This module owns the order of a run, the same for teacher capture and for replay:

1. preflight: no variable of the manifest's forbidden environment in the caller's or the
   server's environment; no stale server of an earlier run alive; the port free;
2. the exact argv and environment of the profile (`launch.spec`) started in a process group of
   its own, its log in the run directory, ready within the manifest's bound;
3. the live audit of every process of the tree, kept per role;
4. `/metrics`, the suite once (`launch.oracle`), `/metrics` again;
5. teardown with proof (no process of the tree alive, the port free);
6. steps 1-5 again for each further fresh start the manifest asks for;
7. the gates (`launch.gates`) over the evidence, against a teacher when one is given.

Every piece of evidence is written as soon as it exists (`builder.documents.rundir`), so a run cut
short keeps what it saw. SIGINT and SIGTERM during a run tear the server down, mark the run
`interrupted`, and are raised again as `Interrupted` (a KeyboardInterrupt). A server that dies
or stops answering gives a failed run with the error recorded, never a retry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final, cast

import httpx

from repro_serving.builder.documents.evidence import (
    MetricsDelta,
    OracleRow,
    RunDocument,
    ServerDocument,
    Teacher,
    TeardownDocument,
    Verdict,
    VerdictStatus,
)
from repro_serving.builder.documents.manifest import Load, Manifest, Suite, expand
from repro_serving.builder.documents.nodes import NodesDocument, node_name
from repro_serving.builder.documents.rundir import (
    AUDIT_DIR,
    DRIFTS_FILE,
    LOG_FILE,
    METRICS_AFTER,
    METRICS_BEFORE,
    NODES_FILE,
    QUALITY_FILE,
    RUN_FILE,
    SERVER_FILE,
    SUMMARY_FILE,
    TEARDOWN_FILE,
    VERDICTS_FILE,
    RunDirectory,
    RunStatus,
    load_name,
    phase_name,
    rank_dir,
)
from repro_serving.builder.errors import BadInput, ExitCode, ReproError
from repro_serving.builder.native.audit import AuditReport
from repro_serving.builder.native.auditreport import report_document
from repro_serving.builder.native.dispatch import HostCapabilities
from repro_serving.builder.native.kernels import KERNELS_DIR, KernelSet, runtime_markers
from repro_serving.builder.native.policy import judge_tree, observe_tree, policy_from_manifest
from repro_serving.builder.native.processes import HashMemo
from repro_serving.builder.native.rules import Launched
from repro_serving.builder.observe.host import observe_host
from repro_serving.builder.placeholders import path_values
from repro_serving.launch import cluster as nodes
from repro_serving.launch import gates, metrics, oracle, quality, registry
from repro_serving.launch import server as lifecycle
from repro_serving.launch.latency import LoadFigures
from repro_serving.launch.spec import ServerSpec, server_spec
from repro_serving.launch.throughput import RowRate, UnmeasurableRow, measure, row_rate

"""Gates that compare a run with a teacher; without one the run captures the teacher."""
INTERRUPT_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
AUDIT_TIMEOUT_S: Final = 600.0
"""How long a node may take to snapshot and judge its tree (every mapped file hashed)."""


class ForbiddenEnvironment(ReproError):
    """A variable the manifest forbids (LD_PRELOAD, LD_AUDIT, …) is set."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived during a run; the server was torn down first."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class RunPlan:
    """What to run: a profile of a manifest, into a run directory, maybe against a teacher."""

    manifest: Manifest
    profile: str
    run_dir: Path
    teacher: Teacher | None = None
    port: int | None = None
    """Replaces the manifest's port (tests run beside other servers)."""
    models: Mapping[str, Path] | None = None
    """Replaces the manifest's model directories, by role."""
    caller_environment: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    registry: Path = field(default_factory=registry.default_registry)
    kernels: Path = KERNELS_DIR
    """Where the manifest's kernel sets are read: a replay reads those its bundle sealed."""
    suite: Suite | None = None
    """The suite asked: a replay asks the one its bundle sealed; None: the manifest's."""
    host: HostCapabilities | None = None
    """The host facts dispatch is predicted for; None: this host's, observed at each audit."""


@dataclass(frozen=True)
class Event:
    """Progress of a run, for a person watching, or a test acting at a given moment."""

    kind: str  # starting | ready | audited | row | load | torn-down
    start: int
    message: str
    pid: int | None = None
    row: OracleRow | None = None


Observer = Callable[[Event], None]


@dataclass(frozen=True)
class _Run:
    """What every step of one run shares."""

    plan: RunPlan
    suite: Suite
    directory: RunDirectory
    notify: Observer
    memo: HashMemo = field(default_factory=HashMemo)
    """Digests of mapped files, shared by the audits of the run's fresh starts."""
    cluster: nodes.Cluster | None = None
    """The nodes of a manifest served across hosts; None: this host alone."""
    facts: NodesDocument | None = None
    """What each node said of itself before the first start."""


@dataclass
class RankRecord:
    """What one rank other than 0 of a stack served across nodes produced in one start (rank
    0's is its start's own: the server the suite is asked of)."""

    rank: int
    pid: int | None = None
    audit: AuditReport | None = None
    teardown: lifecycle.Teardown | None = None


@dataclass
class StartRecord:
    """What one fresh start of the server produced; filled in as the start proceeds."""

    start: int
    directory: Path
    pid: int | None = None
    ready_after_s: float | None = None
    ready_at_monotonic: float | None = None
    audit: AuditReport | None = None
    rows: list[OracleRow] = field(default_factory=list)
    metrics: MetricsDelta | None = None
    loads: dict[str, list[OracleRow]] = field(default_factory=dict)
    """Each load's rows (`oracle.gates.loads`), asked after the suite, by the load's name."""
    teardown: lifecycle.Teardown | None = None
    phases_s: dict[str, float] = field(default_factory=dict)
    error: ReproError | None = None
    ranks: dict[int, RankRecord] = field(default_factory=dict)
    """Ranks 1.. of a stack served across nodes; empty on one host."""

    @property
    def answered(self) -> int:
        """The requests the client posted and saw answered: the suite's and every load's."""
        return len(self.rows) + sum(len(rows) for rows in self.loads.values())


@dataclass(frozen=True)
class RunRecord:
    """The outcome of a run; `summary` is its `--json` document and `summary.json`."""

    plan: RunPlan
    suite: Suite
    argv: tuple[str, ...]
    starts: tuple[StartRecord, ...]
    verdicts: tuple[Verdict, ...]
    quality: tuple[Verdict, ...]
    """The manifest's quality checks: reported apart, they never decide the status."""
    status: RunStatus
    error: ReproError | None
    began_at_monotonic: float
    seconds: float

    @property
    def passed(self) -> bool:
        return self.status is RunStatus.PASSED

    @property
    def exit_code(self) -> ExitCode:
        if self.error is not None:
            return self.error.exit_code
        return ExitCode.PASS if self.passed else ExitCode.CHECK_FAILED

    @property
    def rows(self) -> tuple[OracleRow, ...]:
        """The rows of the first start, the run's answer."""
        return tuple(self.starts[0].rows) if self.starts else ()

    def summary(self) -> dict[str, Any]:
        return summary_document(self)


def run_profile(plan: RunPlan, observe: Observer | None = None) -> RunRecord:
    """Run `plan` once, as many fresh starts as the manifest asks, and judge it."""
    began = time.monotonic()
    manifest = plan.manifest
    suite = plan.suite or manifest.load_suite()
    if not suite.replayable:
        raise BadInput(
            "this suite cannot be replayed",
            where=f"{manifest.source}: oracle.suite",
            expected="prompts with their text (messages or prompt) and a temperature",
            found="prompts named by sha256 alone, as an imported record keeps them",
            hint="supply the suite's prompt texts; an imported record can only be verified",
        )
    refuse_forbidden_environment(manifest, plan.caller_environment, "the caller's environment")
    with contextlib.ExitStack() as stack:
        cluster, facts = _nodes(plan, stack)
        directory = RunDirectory.create(plan.run_dir)
        if facts is not None:
            directory.write_bytes(NODES_FILE, facts.to_bytes())
        run = _Run(
            plan, suite, directory, observe or (lambda event: None), cluster=cluster, facts=facts
        )
        return _starts(run, began)


def _nodes(
    plan: RunPlan, stack: contextlib.ExitStack
) -> tuple[nodes.Cluster | None, NodesDocument | None]:
    """For a manifest served across nodes: the cluster, connected for the run, and what each
    node said of itself; refused before anything starts when a node does not hold."""
    manifest = plan.manifest
    if not manifest.clustered:
        return None, None
    cluster = stack.enter_context(nodes.connect(manifest, plan.caller_environment))
    values = path_values(manifest)
    kernel_sets = tuple(KernelSet.load(name, plan.kernels) for name in manifest.native.kernel_sets)
    facts = observe_cluster(cluster, plan.profile, kernel_sets, values)
    refused = nodes.node_drifts(facts)
    if refused:
        raise nodes.refusal(refused)
    return cluster, facts


def observe_cluster(
    cluster: nodes.Cluster,
    profile: str,
    kernel_sets: Sequence[KernelSet],
    values: Mapping[str, str],
) -> NodesDocument:
    """Every node's facts, its probes run in the environment its rank of `profile` starts
    with (the manifest's variables, placeholders expanded as for a start)."""
    manifest = cluster.manifest
    values = {**values, "port": str(manifest.launch.port)}

    def env_of(rank: int) -> dict[str, str]:
        return {k: expand(v, values) for k, v in manifest.node_env(rank, profile).items()}

    return nodes.observe_nodes(cluster, kernel_sets, values["python"], env_of)


def _starts(run: _Run, began: float) -> RunRecord:
    plan, suite, directory = run.plan, run.suite, run.directory
    manifest = plan.manifest
    starts: list[StartRecord] = []
    first = server_spec(
        manifest, plan.profile, directory.start_dir(1), port=plan.port, models=plan.models
    )
    argv = first.argv
    directory.write_json(RUN_FILE, _run_document(plan, suite, first))
    try:
        with _signals_interrupt():
            for number in range(1, manifest.oracle.gates.fresh_starts + 1):
                record = StartRecord(number, directory.start_dir(number))
                starts.append(record)
                if run.cluster is None:
                    _one_start(run, record)
                else:
                    _one_cluster_start(run, record, run.cluster)
                if record.error is not None:
                    break
    except BaseException as error:
        status = RunStatus.INTERRUPTED if isinstance(error, KeyboardInterrupt) else None
        _finish(run, argv, starts, began, status=status, crash=error)
        raise
    return _finish(run, argv, starts, began)


def refuse_forbidden_environment(
    manifest: Manifest, environment: Mapping[str, str], where: str
) -> None:
    """Raise `ForbiddenEnvironment` naming each variable of `native.forbidden_environment`
    set in `environment`."""
    forbidden = manifest.native.forbidden_environment
    found = [name for name in forbidden if name in environment]
    if found:
        raise ForbiddenEnvironment(
            "forbidden environment variable set",
            where=where,
            expected="none of " + ", ".join(forbidden),
            found=", ".join(f"{name}={environment[name]}" for name in found),
            hint="unset it: nothing may be injected into the stack that produced the record",
        )


def capture_teacher(record: RunRecord) -> Teacher:
    """The teacher a passing run makes: each row's token ids and text sha256, and the
    conventional rate a throughput floor will scale."""
    rows = record.rows
    gate = record.plan.manifest.oracle.gates.throughput
    rate = None if gate is None else measure(rows, gate.tokens).conventional_median
    return Teacher.of_rows(record.suite.name, rows, rate)


# --- one fresh start ----------------------------------------------------------------------------


def _one_start(run: _Run, record: StartRecord) -> None:
    """Start, audit, ask, tear down; a `ReproError` on the way is recorded, not raised."""
    plan, notify, number = run.plan, run.notify, record.start
    spec = server_spec(
        plan.manifest, plan.profile, record.directory, port=plan.port, models=plan.models
    )
    try:
        _preflight(plan, spec)
        notify(Event("starting", number, f"start {number}: starting {spec.argv[0]} ..."))
        with _timed(record, "start"):
            server = lifecycle.start(spec)
    except ReproError as error:
        record.error = error
        return
    try:
        _ready(run, record, server)
        notify(Event("ready", number, f"ready after {server.ready_after_s:.1f} s", pid=server.pid))
        _serve(run, record, server)
    except ReproError as error:
        record.error = error
    finally:
        _teardown(run, record, server)
    if record.teardown is not None:
        notify(Event("torn-down", number, "torn down: no process left, port free", pid=server.pid))


def _preflight(plan: RunPlan, spec: ServerSpec) -> None:
    refuse_forbidden_environment(plan.manifest, spec.env, f"the environment of {spec.argv[0]}")
    registry.refuse_stale(plan.registry)
    lifecycle.refuse_port_in_use(spec.host, spec.port)


def _ready(run: _Run, record: StartRecord, server: lifecycle.RunningServer) -> None:
    plan, directory = run.plan, run.directory
    record.pid = server.pid
    record.ready_after_s = server.ready_after_s
    record.ready_at_monotonic = server.started_at + server.ready_after_s
    entry = registry.Entry(server.pid, server.port, str(directory.root), server.spec.argv[0])
    registry.register(plan.registry, entry)
    document = ServerDocument(
        pid=server.pid,
        port=server.port,
        ready_after_s=server.ready_after_s,
        started_at=server.spawned_at,
        ready_at=time.time(),
    )
    directory.write_json(record.directory / SERVER_FILE, document.model_dump(mode="json"))


def _serve(run: _Run, record: StartRecord, server: lifecycle.RunningServer) -> None:
    with _timed(record, "audit"):
        record.audit = _audit(run, record, server.pid, server.spec.env)
    run.notify(Event("audited", record.start, _audit_line(record.audit), pid=server.pid))
    _ask(run, record, server.base_url, server.pid)


def _ask(run: _Run, record: StartRecord, base_url: str, pid: int) -> None:
    """/metrics, the suite once, /metrics again, then each load and /metrics after it, each
    piece written as soon as it exists."""
    plan, directory, notify = run.plan, run.directory, run.notify
    with oracle.client_for(base_url) as client:
        with _timed(record, "metrics"):
            before = oracle.read_metrics(client)
            directory.write_text(record.directory / METRICS_BEFORE, before)
            model = oracle.served_model(client)
        kwargs = plan.manifest.oracle.chat_template_kwargs
        request = oracle.OracleRequest(run.suite, model, kwargs)
        with _timed(record, "suite"):
            for row in oracle.answer_suite(client, request):
                record.rows.append(row)
                directory.write_rows(record.start, record.rows)
                notify(Event("row", record.start, _row_line(row), pid=pid, row=row))
        with _timed(record, "metrics"):
            after = oracle.read_metrics(client)
            directory.write_text(record.directory / METRICS_AFTER, after)
        record.metrics = metrics.delta(before, after)
        for load in plan.manifest.oracle.gates.loads:
            _ask_load(run, record, client, request, load)


def _ask_load(
    run: _Run,
    record: StartRecord,
    client: httpx.Client,
    request: oracle.OracleRequest,
    load: Load,
) -> None:
    """The suite under `load`, its rows written once every request has ended, then /metrics."""
    directory = run.directory
    with _timed(record, load_name(load.name)):
        rows = oracle.answer_load(client, request, load)
        record.loads[load.name] = rows
        directory.write_rows(record.start, rows, load.name)
    with _timed(record, "metrics"):
        after = oracle.read_metrics(client)
        directory.write_text(f"{phase_name(record.start, load.name)}/{METRICS_AFTER}", after)
    rate = LoadFigures.of(rows).aggregate_tok_s
    shown = "no aggregate rate" if rate is None else f"{rate:.1f} tok/s aggregate"
    line = f"load {load.name} ({load.shape}): {len(rows)} requests, {shown}"
    run.notify(Event("load", record.start, line))


def _audit(run: _Run, record: StartRecord, pid: int, env: Mapping[str, str]) -> AuditReport:
    """The live audit of every process of the tree started with `env`, one evidence file per
    role."""
    manifest = run.plan.manifest
    tree = observe_tree(pid, show_progress=False, memo=run.memo)
    host = run.plan.host or observe_host().capabilities()
    policy = policy_from_manifest(manifest, host, kernels=run.plan.kernels)
    launched = Launched(env, f"the environment start {record.start} was launched with")
    report = judge_tree(tree, dataclasses.replace(policy, launched=launched))
    _write_audit(run.directory, record.directory / AUDIT_DIR, report)
    return report


def _write_audit(directory: RunDirectory, audit_dir: Path, report: AuditReport) -> None:
    document = report_document(report)
    processes = cast(list[dict[str, Any]], document.pop("processes"))
    by_role: dict[str, list[dict[str, Any]]] = {}
    for process in processes:
        by_role.setdefault(str(process["role"]), []).append(process)
    for role, members in by_role.items():
        directory.write_json(audit_dir / f"{role}.json", {**document, "processes": members})
    directory.write_json(audit_dir / DRIFTS_FILE, document["drifts"])


# --- one fresh start across nodes ---------------------------------------------------------------


def _one_cluster_start(run: _Run, record: StartRecord, cluster: nodes.Cluster) -> None:
    """Every rank started on its node, the stack ready when rank 0 answers; every node
    audited; the suite asked of rank 0 while every audited process on every node is watched;
    every node torn down with proof. A `ReproError` on the way is recorded, not raised."""
    plan, notify, number = run.plan, run.notify, record.start
    specs = {
        rank: server_spec(
            plan.manifest,
            plan.profile,
            rank_dir(record.directory, rank),
            port=plan.port,
            models=plan.models,
            rank=rank,
        )
        for rank in cluster.ranks()
    }
    record.ranks = {r: RankRecord(r) for r in specs if r}
    started: list[int] = []
    try:
        _start_ranks(run, record, cluster, specs, started)
        notify(Event("ready", number, f"ready after {record.ready_after_s:.1f} s", pid=record.pid))
        with _timed(record, "audit"):
            _audit_nodes(run, record, cluster)
        notify(Event("audited", number, _nodes_audit_line(record), pid=record.pid))
        assert record.pid is not None
        with nodes.LossWatch(cluster) as watch:
            try:
                _ask(run, record, specs[0].base_url, record.pid)
            except ReproError as error:
                # A stack that failed mid-suite: the process that died, on whichever node, is
                # the cause to name; what the suite met is kept as a note.
                try:
                    watch.refuse(settle_s=nodes.SETTLE_S)
                except nodes.NodeDrift as lost:
                    lost.add_note(f"what the suite met: {error.diagnostics()}")
                    raise lost from error
                raise
        watch.refuse()
    except ReproError as error:
        record.error = error
    finally:
        _cluster_teardown(run, record, cluster, started)
    if record.teardown is not None and all(r.teardown for r in record.ranks.values()):
        notify(Event("torn-down", number, "torn down on every node: no process left, port free"))


def _start_ranks(
    run: _Run,
    record: StartRecord,
    cluster: nodes.Cluster,
    specs: Mapping[int, ServerSpec],
    started: list[int],
) -> None:
    """Preflight, then every rank spawned on its node, the highest first (rank 0 waits for the
    others to join), each appended to `started` once it runs; ready when rank 0 answers its
    probe, refused as soon as any rank has exited."""
    plan = run.plan
    registry.refuse_stale(plan.registry)
    for rank, spec in specs.items():
        node = node_name(rank, plan.manifest.declared_nodes[rank].address)
        refuse_forbidden_environment(
            plan.manifest, spec.env, f"the environment of {spec.argv[0]} on {node}"
        )
    number = record.start
    run.notify(Event("starting", number, f"start {number}: starting {len(specs)} ranks ..."))
    with _timed(record, "start"):
        began, spawned_at = time.monotonic(), time.time()
        for rank in sorted(specs, reverse=True):
            pid = cluster.call(rank, "spawn", specs[rank])
            started.append(rank)
            if rank:
                record.ranks[rank].pid = pid
            else:
                record.pid = pid
        ready_after = lifecycle.await_ready(
            specs[0], began, lambda: nodes.exited(cluster, tuple(specs))
        )
    record.ready_after_s = ready_after
    record.ready_at_monotonic = began + ready_after
    assert record.pid is not None  # rank 0 was spawned
    document = ServerDocument(
        pid=record.pid,
        port=specs[0].port,
        ready_after_s=ready_after,
        started_at=spawned_at,
        ready_at=time.time(),
    )
    run.directory.write_json(record.directory / SERVER_FILE, document.model_dump(mode="json"))


def _audit_nodes(run: _Run, record: StartRecord, cluster: nodes.Cluster) -> None:
    """Each rank's tree audited on its node, against the policy of that node's host."""
    plan, facts = run.plan, run.facts
    assert facts is not None
    for rank in cluster.ranks():
        host = facts.node(rank).host.capabilities()
        policy = policy_from_manifest(plan.manifest, host, kernels=plan.kernels)
        policy = dataclasses.replace(policy, roles=plan.manifest.node_processes(rank))
        report: AuditReport = cluster.call(rank, "audit", policy, timeout_s=AUDIT_TIMEOUT_S)
        _write_audit(run.directory, rank_dir(record.directory, rank) / AUDIT_DIR, report)
        if rank:
            record.ranks[rank].audit = report
        else:
            record.audit = report


def _cluster_teardown(
    run: _Run, record: StartRecord, cluster: nodes.Cluster, started: list[int]
) -> None:
    """Every started rank torn down with proof on its node (rank 0 first), its log fetched;
    the first failure is the start's error, the others are still attempted."""
    directory = run.directory
    with _signals_deferred(), _timed(record, "teardown"):
        for rank in sorted(started):
            at = rank_dir(record.directory, rank)
            try:
                teardown: lifecycle.Teardown = cluster.call(
                    rank, "stop", timeout_s=run.plan.manifest.launch.stop_timeout_s * 2 + 30
                )
            except ReproError as error:
                record.error = record.error or error
                _write_teardown(directory, at, None, error)
            else:
                if rank:
                    record.ranks[rank].teardown = teardown
                else:
                    record.teardown = teardown
                _write_teardown(directory, at, teardown)
            with contextlib.suppress(ReproError):
                directory.write_bytes(at / LOG_FILE, cluster.call(rank, "log"))


def _nodes_audit_line(record: StartRecord) -> str:
    reports = [record.audit, *(r.audit for r in record.ranks.values())]
    processes = sum(len(r.processes) for r in reports if r is not None)
    drifts = sum(len(r.drifts) for r in reports if r is not None)
    verdict = "no drift" if not drifts else f"{drifts} drift(s)"
    return f"live audit of {processes} processes on {len(reports)} nodes: {verdict}"


def _teardown(run: _Run, record: StartRecord, server: lifecycle.RunningServer) -> None:
    """Stop the tree with proof; a second signal meanwhile waits until teardown is done."""
    plan, directory = run.plan, run.directory
    with _signals_deferred(), _timed(record, "teardown"):
        try:
            record.teardown = lifecycle.stop(server)
        except ReproError as error:
            record.error = record.error or error
            _write_teardown(directory, record.directory, None, error)
            return
        registry.unregister(plan.registry, server.pid)
        _write_teardown(directory, record.directory, record.teardown)


def _teardown_summary(teardown: lifecycle.Teardown) -> dict[str, object]:
    return {"pids": teardown.pids, "killed": teardown.killed, "seconds": teardown.seconds}


def _write_teardown(
    directory: RunDirectory,
    at: Path,
    teardown: lifecycle.Teardown | None,
    error: ReproError | None = None,
) -> None:
    """`teardown.json`: the proof, or why there is none."""
    if teardown is None:
        document = TeardownDocument(proven=False, error=error.diagnostics() if error else None)
    else:
        document = TeardownDocument(proven=True, **dataclasses.asdict(teardown))
    directory.write_json(at / TEARDOWN_FILE, document.model_dump(mode="json"))


# --- judging and finishing -----------------------------------------------------------------------


def judge(
    plan: RunPlan, directory: RunDirectory, starts: tuple[StartRecord, ...]
) -> tuple[Verdict, ...]:
    """The manifest's gates over the evidence the run wrote, and the live audit of each start."""
    evidence = gates.run_evidence(directory, plan.manifest.oracle, plan.teacher)
    markers = runtime_markers(plan.manifest.native.kernel_sets, plan.kernels)
    verdicts = gates.judge_run(plan.manifest.oracle.gates, evidence, kernel_markers=markers)
    audits = (v for start in starts for v in _audit_verdicts(start))
    logs = (v for start in starts for v in _log_verdicts(start))
    return (*verdicts, *audits, *logs)


def _log_verdicts(start: StartRecord) -> tuple[Verdict, ...]:
    """Each node's log of `start`, up to where its teardown began."""
    teardowns = {0: start.teardown, **{r: rank.teardown for r, rank in sorted(start.ranks.items())}}
    return tuple(
        gates.server_log_verdict(
            start.start,
            _read_bytes(rank_dir(start.directory, rank) / LOG_FILE),
            teardown.log_bytes if teardown is not None else None,
            answered=0 if rank else start.answered,
            rank=rank,
        )
        for rank, teardown in teardowns.items()
    )


def _audit_verdicts(start: StartRecord) -> tuple[Verdict, ...]:
    """The live audit's verdict of each node of `start` (of its one server on one host)."""
    reports = {0: start.audit, **{rank: r.audit for rank, r in sorted(start.ranks.items())}}
    return tuple(_audit_verdict(start.start, rank, report) for rank, report in reports.items())


def _audit_verdict(start: int, rank: int, report: AuditReport | None) -> Verdict:
    if report is None:
        gate = gates.audit_gate(start, rank)
        return Verdict(gate=gate, status=VerdictStatus.FAIL, summary="no live audit")
    files = len([f for f in report.files if f.is_elf])
    roles = [process.role for process in report.processes]
    return gates.audit_verdict(start, roles, files, report.drifts, rank=rank)


def _finish(
    run: _Run,
    argv: tuple[str, ...],
    starts: list[StartRecord],
    began: float,
    *,
    status: RunStatus | None = None,
    crash: BaseException | None = None,
) -> RunRecord:
    """Judge a complete run, write verdicts and summary, then the final status, last."""
    plan, directory = run.plan, run.directory
    error = next((start.error for start in starts if start.error is not None), None)
    complete = crash is None and error is None and bool(starts)
    verdicts = judge(plan, directory, tuple(starts)) if complete else ()
    rows = tuple(starts[0].rows) if starts else ()
    quality_verdicts = quality.assess(plan.manifest.oracle.quality, rows) if complete else ()
    if status is None:
        passed = complete and all(verdict.passed for verdict in verdicts)
        status = RunStatus.PASSED if passed else RunStatus.FAILED
    record = RunRecord(
        plan=plan,
        suite=run.suite,
        argv=argv,
        starts=tuple(starts),
        verdicts=verdicts,
        quality=quality_verdicts,
        status=status,
        error=error,
        began_at_monotonic=began,
        seconds=time.monotonic() - began,
    )
    directory.write_json(VERDICTS_FILE, [v.model_dump(mode="json") for v in verdicts])
    directory.write_json(QUALITY_FILE, [v.model_dump(mode="json") for v in quality_verdicts])
    summary = record.summary()
    directory.write_json(SUMMARY_FILE, summary)
    problem = error.diagnostics() if error is not None else _crash_text(crash)
    exit_code = None if crash is not None else int(record.exit_code)
    directory.write_status(status, exit_code=exit_code, error=problem)
    return record


def _crash_text(crash: BaseException | None) -> str | None:
    if crash is None:
        return None
    if isinstance(crash, KeyboardInterrupt):
        return f"interrupted ({crash})"
    return f"{type(crash).__name__}: {crash}"


# --- the summary -------------------------------------------------------------------------------


def summary_document(record: RunRecord) -> dict[str, Any]:
    plan = record.plan
    return {
        "run_dir": str(plan.run_dir),
        "manifest": plan.manifest.source,
        "bundle": plan.manifest.bundle.name,
        "profile": plan.profile,
        "suite": record.suite.name,
        "teacher": plan.teacher is not None,
        "argv": list(record.argv),
        "status": record.status.value,
        "passed": record.passed,
        "exit_code": None if record.status is RunStatus.INTERRUPTED else int(record.exit_code),
        "error": None if record.error is None else record.error.diagnostics(),
        "seconds": record.seconds,
        "starts": [_start_document(record, start) for start in record.starts],
        "verdicts": [verdict.model_dump(mode="json") for verdict in record.verdicts],
        "quality": [verdict.model_dump(mode="json") for verdict in record.quality],
    }


def _start_document(record: RunRecord, start: StartRecord) -> dict[str, Any]:
    delta = start.metrics
    return {
        "start": start.start,
        "directory": str(start.directory),
        "pid": start.pid,
        "ready_after_s": start.ready_after_s,
        "ready_at_monotonic": start.ready_at_monotonic,
        "phases_s": dict(start.phases_s),
        "audit": None if start.audit is None else _audit_summary(start.audit),
        "rows": [_row_document(record, row) for row in start.rows],
        "loads": {name: LoadFigures.of(rows).as_details() for name, rows in start.loads.items()},
        "metrics": None if delta is None else delta.model_dump(mode="json"),
        "acceptance": None if delta is None else acceptance(delta),
        "teardown": None if start.teardown is None else _teardown_summary(start.teardown),
        "error": None if start.error is None else start.error.diagnostics(),
    }


def _audit_summary(report: AuditReport) -> dict[str, Any]:
    roles: dict[str, int] = {}
    for process in report.processes:
        roles[process.role] = roles.get(process.role, 0) + 1
    return {
        "passed": report.passed,
        "roles": roles,
        "elf_files": len([f for f in report.files if f.is_elf]),
        "drifts": len(report.drifts),
    }


def _row_document(record: RunRecord, row: OracleRow) -> dict[str, Any]:
    rate = gated_row_rate(record.plan.manifest, row)
    return {
        "prompt_id": row.prompt_id,
        "exact": exact(record.plan.teacher, row),
        "tokens": len(row.token_ids),
        "cached_tokens": row.cached_tokens,
        "tok_s": None if rate is None else rate.conventional,
        "tok_s_lower_bound": rate is not None and rate.bound is not None,
        "ttft_s": row.ttft_s,
    }


def exact(teacher: Teacher | None, row: OracleRow) -> bool | None:
    """Whether `row` has the teacher's token ids; None without a teacher."""
    if teacher is None:
        return None
    expected = next((t for t in teacher.rows if t.prompt_id == row.prompt_id), None)
    return expected is not None and expected.token_ids == row.token_ids


def gated_row_rate(manifest: Manifest, row: OracleRow) -> RowRate | None:
    """The row's rates over the gated window (every token if none is gated); None when it has
    none."""
    gate = manifest.oracle.gates.throughput
    tokens = gate.tokens if gate is not None else len(row.token_offsets_s)
    try:
        return row_rate(row, tokens)
    except UnmeasurableRow:
        return None


def acceptance(delta: MetricsDelta) -> float | None:
    """Accepted draft tokens over draft tokens during the suite; None without speculation."""
    if not delta.spec_decode_draft_tokens or delta.spec_decode_accepted is None:
        return None
    return delta.spec_decode_accepted / delta.spec_decode_draft_tokens


# --- small helpers -----------------------------------------------------------------------------


def _run_document(plan: RunPlan, suite: Suite, spec: ServerSpec) -> dict[str, Any]:
    document = RunDocument(
        manifest=plan.manifest.source,
        bundle=plan.manifest.bundle.name,
        profile=plan.profile,
        suite=suite.name,
        fresh_starts=plan.manifest.oracle.gates.fresh_starts,
        teacher=plan.teacher,
        argv=spec.argv,
        env=dict(spec.env),
        port=spec.port,
        repro_pid=os.getpid(),
    )
    return document.model_dump(mode="json")


def _read_bytes(path: Path) -> bytes:
    """A log as written; empty when the run did not get as far as writing it."""
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _audit_line(report: AuditReport) -> str:
    verdict = "no drift" if report.passed else f"{len(report.drifts)} drift(s)"
    return f"live audit of {len(report.processes)} processes: {verdict}"


def _row_line(row: OracleRow) -> str:
    return f"{row.prompt_id}: {len(row.token_ids)} tokens, TTFT {row.ttft_s * 1000:.0f} ms"


@contextlib.contextmanager
def _timed(record: StartRecord, phase: str) -> Iterator[None]:
    began = time.monotonic()
    try:
        yield
    finally:
        record.phases_s[phase] = record.phases_s.get(phase, 0.0) + time.monotonic() - began


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` where the run is, so its `finally` tears down."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in INTERRUPT_SIGNALS}
    for signum in INTERRUPT_SIGNALS:
        signal.signal(signum, _raise_interrupted)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Signals that arrive during teardown are held, and raised once teardown is done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {signum: signal.getsignal(signum) for signum in INTERRUPT_SIGNALS}
    for signum in INTERRUPT_SIGNALS:
        signal.signal(signum, lambda received, _frame: pending.append(received))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if pending:
        raise Interrupted(pending[0])
