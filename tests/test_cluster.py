"""A stack served across two nodes: the manifest's `[[node]]`, the nodes reached through a real
Ray cluster (two `ray start` on loopback addresses, started and stopped here), the committed
`repro/tiny-cpu-2node` bundle verified, replayed, and refused with the node named.

vLLM's CPU platform spans the two nodes with tensor parallelism 2 (rank 0 the API server, rank 1
headless); Ray carries repro's observations of each node. The tests marked `cluster` start real
servers on the cluster (a few minutes in all on two cores).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from bundle_assets import resealed
from conftest import REPO_ROOT
from raycluster import ADDRESSES, LocalCluster, two_nodes

from repro_serving.builder import hostcheck, replay
from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.documents.bundle import OpenedBundle
from repro_serving.builder.documents.evidence import Teacher
from repro_serving.builder.documents.manifest import InvalidDocument, Manifest
from repro_serving.builder.documents.rundir import NODES_FILE, read_rows
from repro_serving.builder.drift import DriftKind
from repro_serving.builder.native.dispatch import HostCapabilities
from repro_serving.builder.native.policy import policy_from_manifest
from repro_serving.builder.observe.host import observe_host
from repro_serving.builder.replay import PreflightRefused, launch
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys
from repro_serving.builder.verify import verify
from repro_serving.launch import cluster as nodes
from repro_serving.launch.run import Event, RunPlan, run_profile
from repro_serving.launch.spec import ServerSpec

BUNDLE = REPO_ROOT / "repro" / "tiny-cpu-2node"
MANIFEST = REPO_ROOT / "manifests" / "tiny-cpu-2node.toml"
ANCHOR = REPO_ROOT / "manifests"
TRUSTED = TrustedKeys.from_key_file(REPO_ROOT / "keys" / "example.pub")
KEY = SigningKey.from_path(REPO_ROOT / "keys" / "example.key")
RANK_1 = f"node rank 1 ({ADDRESSES[1]})"
MASTER_PORT = "29517"
AVX2 = ("avx", "avx2", "fma")
AVX512 = (*AVX2, "avx512bw", "avx512dq", "avx512f", "avx512vl")


def opened() -> OpenedBundle:
    return OpenedBundle.read(BUNDLE, ANCHOR)


def sealed_flags() -> tuple[str, ...]:
    """CPU flags of the kind of host the bundle's nodes ran on (its vllm._C variant's)."""
    variant = next(c.variant for c in opened().lock.nodes[1].dispatch if c.name == "vllm._C")
    return {"vllm._C_AVX2": AVX2, "vllm._C_AVX512": AVX512}.get(variant, (*AVX512, "avx512_bf16"))


def stack_processes() -> list[psutil.Process]:
    """Every process of a tiny-cpu-2node stack on this machine: both ranks' roots (their argv
    names the stack's master port) and their descendants (which rename themselves)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if MASTER_PORT in (process.info["cmdline"] or ()):
                found += [process, *process.children(recursive=True)]
    return found


# --- the manifest -----------------------------------------------------------------------------


def test_the_two_node_manifest_declares_each_rank_and_others_stay_one_host() -> None:
    manifest = Manifest.from_path(MANIFEST)
    assert manifest.clustered
    assert [(n.rank, n.address) for n in manifest.declared_nodes] == [
        (0, ADDRESSES[0]),
        (1, ADDRESSES[1]),
    ]
    assert manifest.node_argv(0, "teacher") == manifest.launch.argv_for("teacher")
    assert manifest.node_argv(1, "teacher")[-2:] == ("--headless", "--no-enable-prefix-caching")
    assert manifest.node_processes(1) == {"headless": 1, "resource_tracker": 1, "worker": 1}
    for name in ("tiny-cpu", "laguna-102tps", "fp8-kv"):
        assert not Manifest.from_path(REPO_ROOT / "manifests" / f"{name}.toml").clustered


RANK_0 = "[[node]]\nrank = 0\n"
RANK_1_PROCESSES = "[node.processes]\nheadless = 1\nresource_tracker = 1\nworker = 1\n"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("rank = 1\n", "rank = 2\n", "node ranks"),
        ('address = "127.0.0.3"', 'address = "127.0.0.2"', "duplicate node address"),
        (RANK_0, RANK_0 + 'argv = ["x"]\n', "none: rank 0 starts [launch] (launch.argv)"),
        (RANK_1_PROCESSES, "", "the processes of rank 1"),
        (RANK_0, RANK_0 + 'env = {LD_PRELOAD = "/x.so"}\n', "forbidden environment variable"),
    ],
)
def test_a_malformed_node_list_is_refused_naming_the_key(old: str, new: str, message: str) -> None:
    text = MANIFEST.read_text()
    assert old in text
    with pytest.raises(InvalidDocument) as refused:
        Manifest.from_toml(text.replace(old, new, 1), base_dir=ANCHOR)
    assert message in refused.value.diagnostics()


def test_a_cluster_without_nodes_is_refused() -> None:
    text = (REPO_ROOT / "manifests" / "tiny-cpu.toml").read_text()
    with pytest.raises(InvalidDocument) as refused:
        Manifest.from_toml(text + '\n[cluster]\naddress = "127.0.0.2:6379"\n', base_dir=ANCHOR)
    assert "cluster without nodes" in str(refused.value)


def test_node_drifts_name_an_undeclared_node_and_a_node_with_a_forbidden_variable() -> None:
    facts = nodes.NodesDocument.from_bytes(
        opened().evidence(NODES_FILE).read_bytes(), where="sealed"
    )
    assert nodes.node_drifts(facts) == []
    injected = replace_node(facts, 1, forbidden={"LD_PRELOAD": "/tmp/x.so"})
    extra = injected.model_copy(update={"undeclared": ("127.0.0.9",)})
    found = nodes.node_drifts(extra)
    assert [(d.kind, d.subject) for d in found] == [
        (DriftKind.HOST, "node 127.0.0.9"),
        (DriftKind.FORBIDDEN_ENV, RANK_1),
    ]
    assert "LD_PRELOAD=/tmp/x.so" in found[1].observed


def replace_node(facts: nodes.NodesDocument, rank: int, **update: object) -> nodes.NodesDocument:
    changed = tuple(n.model_copy(update=update) if n.rank == rank else n for n in facts.nodes)
    return facts.model_copy(update={"nodes": changed})


# --- the committed bundle, offline --------------------------------------------------------------


def test_the_committed_two_node_bundle_verifies_with_both_nodes_recomputed() -> None:
    report = verify(BUNDLE, TRUSTED, anchor=ANCHOR)
    assert report.ok, [(c.claim, c.detail) for c in report.checks if not c.ok]
    lock = opened().lock
    assert [(n.rank, n.address) for n in lock.nodes] == [(0, ADDRESSES[0]), (1, ADDRESSES[1])]
    assert set(lock.nodes[1].roles) == {"headless", "resource_tracker", "worker"}
    check = next(c for c in report.checks if c.claim.startswith("nodes"))
    assert check.ok and f"rank 1 {ADDRESSES[1]}" in check.value
    gates = {c.claim for c in report.checks}
    assert "gates (every verdict recomputed)" in gates
    verdicts = json.loads(opened().evidence("verdicts.json").read_text())
    assert "live_audit:start-1:rank-1" in [v["gate"] for v in verdicts]


@pytest.mark.parametrize(
    ("what", "edit"),
    [
        ("a node's host facts", lambda d: d["nodes"][1]["host"].update(cpu_count=64)),
        ("a node's mappings", lambda d: d["nodes"][1]["roles"].pop("worker")),
        ("a node's address", lambda d: d["nodes"][1].update(address="127.0.0.9")),
        ("a node dropped", lambda d: d["nodes"].pop()),
    ],
)
def test_a_resealed_lock_that_lies_about_a_node_is_refused(
    tmp_path: Path, what: str, edit: object
) -> None:
    def lie(staging: Path) -> None:
        path = staging / "lock.json"
        document = json.loads(path.read_text())
        edit(document)  # type: ignore[operator]
        path.write_bytes(canonical_json(document))

    bundle = resealed(BUNDLE, tmp_path, lie, str(MANIFEST))
    report = verify(bundle, TRUSTED, anchor=ANCHOR)
    failed = [c for c in report.checks if not c.ok]
    assert not report.ok, what
    assert any(c.claim.startswith("nodes") for c in failed), [(c.claim, c.detail) for c in failed]


def test_nodes_facts_resealed_without_rank_1_are_refused(tmp_path: Path) -> None:
    def drop(staging: Path) -> None:
        path = staging / "evidence" / NODES_FILE
        document = json.loads(path.read_text())
        document["nodes"] = document["nodes"][:1]
        path.write_bytes(canonical_json(document))

    report = verify(resealed(BUNDLE, tmp_path, drop, str(MANIFEST)), TRUSTED, anchor=ANCHOR)
    check = next(c for c in report.checks if c.claim.startswith("nodes"))
    assert not check.ok and f"{RANK_1}: no answer" in check.detail


# --- on a real two-node cluster ------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with two_nodes() as running:
        yield running


@pytest.fixture
def on_cluster(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> LocalCluster:
    monkeypatch.setenv(nodes.ADDRESS_VARIABLE, cluster.address)
    return cluster


def fake_host(monkeypatch: pytest.MonkeyPatch, flags_of: dict[int, tuple[str, ...]]) -> None:
    """This host (rank 0's and repro's) and each node as hosts of the CPU flags given: the
    nodes' real facts, observed through Ray, with their flags replaced."""
    here = observe_host()
    monkeypatch.setattr(hostcheck, "observe_host", lambda: replace(here, cpu_flags=flags_of[0]))
    real = replay.observe_cluster

    def faked(*args: object, **kwargs: object) -> nodes.NodesDocument:
        facts = real(*args, **kwargs)  # type: ignore[arg-type]
        for rank, flags in flags_of.items():
            host = replace(facts.node(rank).host, cpu_flags=flags)
            facts = replace_node(facts, rank, host=host)
        return facts

    monkeypatch.setattr(replay, "observe_cluster", faked)


@pytest.mark.server
@pytest.mark.cluster
def test_a_node_whose_dispatch_facts_changed_is_refused_before_anything_starts(
    on_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sealed = sealed_flags()
    other = AVX2 if sealed != AVX2 else AVX512
    fake_host(monkeypatch, {0: sealed, 1: other})
    runs = tmp_path / "runs"
    with pytest.raises(PreflightRefused) as refused:
        launch(BUNDLE, TRUSTED, runs=runs, signing_key=KEY, anchor=ANCHOR)
    findings = refused.value.report.findings
    assert findings and {d.kind for d in findings} == {DriftKind.DISPATCH}
    assert all(d.subject.startswith(f"{RANK_1}: ") for d in findings), findings
    assert not runs.exists() or not any(runs.iterdir()), "nothing was started"
    assert stack_processes() == []


@pytest.mark.server
@pytest.mark.cluster
def test_the_two_node_bundle_replays_on_the_cluster_and_every_node_is_torn_down(
    on_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On a host of the kind the bundle sealed it replays and passes; on any other CPU the same
    replay is refused before anything starts (the test fakes nothing then)."""
    here = HostCapabilities("x86_64", frozenset(observe_host().cpu_flags))
    same = (
        hostcheck.claim_drifts(
            opened().lock.nodes[0].dispatch, opened().kernel_sets(), opened().lock.launch.env, here
        )
        == []
    )
    runs = tmp_path / "runs"
    if not same:
        with pytest.raises(PreflightRefused) as refused:
            launch(BUNDLE, TRUSTED, runs=runs, signing_key=KEY, anchor=ANCHOR)
        assert DriftKind.DISPATCH in {d.kind for d in refused.value.report.findings}
        return
    done = launch(BUNDLE, TRUSTED, runs=runs, signing_key=KEY, anchor=ANCHOR)
    failed = [(v.gate, v.summary) for v in done.run.verdicts if not v.passed]
    assert done.run.passed, (failed, done.run.error and done.run.error.diagnostics())
    gates = [v.gate for v in done.run.verdicts]
    assert {"live_audit:start-1", "live_audit:start-1:rank-1"} <= set(gates)
    assert done.sealed is not None
    sealed_run = verify(done.sealed.path, TRUSTED)
    assert sealed_run.ok, [(c.claim, c.detail) for c in sealed_run.checks if not c.ok]
    lock = OpenedBundle.read(done.sealed.path).lock
    assert [n.rank for n in lock.nodes] == [0, 1]
    start = done.run.starts[0]
    assert start.teardown is not None and start.ranks[1].teardown is not None
    assert stack_processes() == []


@pytest.mark.server
@pytest.mark.cluster
def test_a_worker_killed_on_rank_1_mid_suite_fails_the_run_naming_the_node(
    on_cluster: LocalCluster, tmp_path: Path
) -> None:
    bundle = opened()
    teacher = Teacher.from_bytes(bundle.teacher_bytes(), where="sealed teacher")
    killed: list[int] = []

    def kill_rank_1_worker(event: Event) -> None:
        if event.kind != "row" or killed:
            return
        headless = [p for p in stack_processes() if "--headless" in p.cmdline()]
        workers = [
            c
            for p in headless
            for c in p.children()
            if "Worker" in " ".join(c.cmdline()) or "Worker" in c.name()
        ]
        assert workers, "rank 1's worker is running"
        workers[0].send_signal(signal.SIGKILL)
        killed.append(workers[0].pid)

    run_dir = tmp_path / "run"
    plan = RunPlan(
        bundle.manifest,
        "candidate",
        run_dir,
        teacher=teacher,
        suite=bundle.suite,
        kernels=bundle.kernels,
    )
    record = run_profile(plan, observe=kill_rank_1_worker)
    assert killed and not record.passed
    assert record.error is not None
    assert record.error.where == RANK_1, record.error.diagnostics()
    assert f"pid {killed[0]} (worker)" in (record.error.found or "")
    assert "also:     what the suite met: error:" in record.error.diagnostics()
    start = run_dir / "start-1"
    assert len(read_rows(start / "rows.json")) >= 1, "the rows answered before are kept"
    for at in (start, start / "rank-1"):
        assert (at / "audit" / "drifts.json").is_file()
        assert json.loads((at / "teardown.json").read_text())["proven"], at
        assert (at / "server.log").stat().st_size > 0
    assert stack_processes() == [], "nothing left on either node"


@pytest.mark.server
@pytest.mark.cluster
def test_ld_preload_injected_on_rank_1_only_is_refused_naming_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    injected = "/lib/x86_64-linux-gnu/libm.so.6"
    with two_nodes({1: {"LD_PRELOAD": injected}}) as injected_cluster:
        monkeypatch.setenv(nodes.ADDRESS_VARIABLE, injected_cluster.address)
        fake_host(monkeypatch, {0: sealed_flags(), 1: sealed_flags()})
        runs = tmp_path / "runs"
        with pytest.raises(PreflightRefused) as refused:
            launch(BUNDLE, TRUSTED, runs=runs, signing_key=KEY, anchor=ANCHOR)
        findings = refused.value.report.findings
        assert [(d.kind, d.subject) for d in findings] == [(DriftKind.FORBIDDEN_ENV, RANK_1)]
        assert f"LD_PRELOAD={injected}" in findings[0].observed
        assert not runs.exists() or not any(runs.iterdir()), "nothing was started"
        # The run itself refuses it too, before any rank starts.
        bundle = opened()
        plan = RunPlan(
            bundle.manifest,
            "candidate",
            tmp_path / "run",
            suite=bundle.suite,
            kernels=bundle.kernels,
        )
        with pytest.raises(nodes.NodeDrift) as drift:
            run_profile(plan)
        assert drift.value.where == RANK_1
        assert not (tmp_path / "run").exists()
    assert stack_processes() == []


@pytest.mark.server
@pytest.mark.cluster
def test_a_declared_node_missing_or_an_undeclared_one_present_is_refused_naming_it(
    on_cluster: LocalCluster, tmp_path: Path
) -> None:
    text = MANIFEST.read_text()
    third = text + '\n[[node]]\nrank = 2\naddress = "127.0.0.4"\nargv = ["{python}"]\n'
    third += "[node.processes]\nworker = 1\n"
    missing = Manifest.from_toml(third, source="third", base_dir=ANCHOR)
    with pytest.raises(nodes.NodeUnreachable) as unreachable:
        run_profile(RunPlan(missing, "teacher", tmp_path / "missing"))
    assert unreachable.value.where == "node rank 2 (127.0.0.4)"
    assert ADDRESSES[1] in (unreachable.value.found or "")
    without_rank_1 = text[: text.index("# Rank 1:")] + text[text.index("[oracle]") :]
    alone = Manifest.from_toml(without_rank_1, source="alone", base_dir=ANCHOR)
    with pytest.raises(nodes.NodeDrift) as undeclared:
        run_profile(RunPlan(alone, "teacher", tmp_path / "alone"))
    assert undeclared.value.where == f"node {ADDRESSES[1]}"
    assert not (tmp_path / "missing").exists() and not (tmp_path / "alone").exists()
    assert stack_processes() == []


def test_a_node_agent_spawns_audits_watches_and_tears_down_a_tree_on_its_own_host(
    tmp_path: Path,
) -> None:
    """The actor's methods, called here as Ray calls them on a node: a real tree (a parent and
    its child), a child killed, the loss named, teardown proven and answered again."""
    child = "import time; time.sleep(120)"
    parent = (
        f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); "
        "print('up', flush=True); time.sleep(120)"
    )
    spec = ServerSpec(
        argv=(sys.executable, "-c", parent),
        env={"PATH": "/usr/bin:/bin"},
        port=1,
        log_path=tmp_path / "server.log",
        readiness_path=None,
        stop_timeout_s=5,
    )
    agent = nodes.NodeAgent(1, ADDRESSES[1])
    pid = agent.spawn(spec)
    deadline = time.monotonic() + 30
    while len(psutil.Process(pid).children()) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    manifest = Manifest.from_path(MANIFEST)
    policy = policy_from_manifest(manifest, observe_host().capabilities())
    report = agent.audit(dataclasses.replace(policy, roles={"other": 2}))
    assert sorted(p.pid for p in report.processes)[0] == pid
    assert agent.exited() is None and agent.lost() == ()
    (worker,) = psutil.Process(pid).children()
    worker.kill()  # a zombie its parent never reaps: ended all the same
    deadline = time.monotonic() + 10
    while not agent.lost() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert agent.lost() == (f"pid {worker.pid} (other)",)
    teardown = agent.stop()
    assert pid in teardown.pids and not psutil.pid_exists(pid)
    assert agent.stop() == teardown, "asked again, the same proven teardown"
    assert agent.log().startswith(b"up")
