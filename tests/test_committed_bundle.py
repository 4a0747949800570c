"""The committed example bundle `repro/tiny-cpu/` on whatever host runs the suite.

`repro build manifests/tiny-cpu.toml` sealed it once, on one kind of CPU. Every fresh clone (CI
included) restores what it pins (`make serve-env`), verifies it offline, and then either replays
it (a host whose CPU selects the kernels it ran: same wheel bytes, other paths) or proves that
`verify --host` and `launch` refuse it before anything starts, naming the module, the recorded
variant and the deciding CPU flags. Which of the two this host gets is decided by the sealed
kernel sets, never by the test; every branch of that decision is also exercised with the facts
of each kind of x86-64 host, so no outcome here depends on the CPU alone.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT
from schemas import assert_valid

from repro_serving.builder import hostcheck
from repro_serving.builder.cli import main
from repro_serving.builder.documents.bundle import OpenedBundle
from repro_serving.builder.drift import DriftKind
from repro_serving.builder.hostcheck import dispatch_drifts, verify_here
from repro_serving.builder.native.dispatch import HostCapabilities
from repro_serving.builder.observe.host import observe_host
from repro_serving.builder.replay import PreflightRefused, launch
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys
from repro_serving.builder.verify import verify

pytestmark = pytest.mark.server

BUNDLE = REPO_ROOT / "repro" / "tiny-cpu"
ANCHOR = REPO_ROOT / "manifests"
PUBLIC = REPO_ROOT / "keys" / "example.pub"
TRUSTED = TrustedKeys.from_key_file(PUBLIC)

AVX2 = frozenset({"avx", "avx2", "fma"})
AVX512 = AVX2 | {"avx512f", "avx512vl", "avx512bw", "avx512dq"}
KINDS = {
    "avx2": (HostCapabilities("x86_64", AVX2), "vllm._C_AVX2"),
    "avx512": (HostCapabilities("x86_64", AVX512), "vllm._C_AVX512"),
    "avx512-bf16": (HostCapabilities("x86_64", AVX512 | {"avx512_bf16"}), "vllm._C"),
}


def opened() -> OpenedBundle:
    return OpenedBundle.read(BUNDLE, ANCHOR)


def recorded_kernels() -> str:
    return next(c.variant for c in opened().lock.native.dispatch if c.name == "vllm._C")


def same_dispatch_here() -> bool:
    return dispatch_drifts(opened(), observe_host().capabilities()) == []


def test_the_committed_bundle_verifies_offline_from_the_cli(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["verify", str(BUNDLE), "--key", str(PUBLIC), "--json"])
    document = assert_valid("verify", capsys.readouterr().out)
    assert code == 0, [c for c in document["claims"] if not c["ok"]]
    assert document["ok"] and document["drifts"] == []
    dispatch = next(c for c in document["claims"] if c["claim"].startswith("native.dispatch"))
    assert dispatch["ok"] and f"vllm._C={recorded_kernels()}" in dispatch["value"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_verify_host_predicts_the_kernels_of_each_kind_of_host(kind: str) -> None:
    host, kernels = KINDS[kind]
    drifts = dispatch_drifts(opened(), host)
    if kernels == recorded_kernels():
        assert drifts == []
        return
    vllm = next(d for d in drifts if d.subject == "vllm._C")
    assert vllm.kind is DriftKind.DISPATCH
    assert vllm.expected.startswith(f"{recorded_kernels()} (arch=x86_64, ")
    assert vllm.observed.startswith(f"{kernels} (arch=x86_64, ")
    assert "cpu:avx512f=" in vllm.expected and "cpu:avx512f=" in vllm.observed
    assert "differ" in vllm.why and "cpu:" in vllm.why


def restored(anchor: Path, capsys: pytest.CaptureFixture[str], *, action: str) -> dict[str, Any]:
    """`repro restore` of the bundle against `anchor`, its --json document: it passed, and its
    interpreter and model steps each took `action`."""
    code = main(["restore", str(BUNDLE), "--key", str(PUBLIC), "--anchor", str(anchor), "--json"])
    document: dict[str, Any] = assert_valid("restore", capsys.readouterr().out)
    assert code == 0, document
    steps = [(s["kind"], s["action"]) for s in document["steps"]]
    assert steps == [("python", action), ("model", action)]
    return document


def test_restore_finds_everything_the_bundle_pins_in_place(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`make serve-env` restored it before the suite; restoring again does nothing."""
    document = restored(ANCHOR, capsys, action="already")
    assert document["changed"] is False


def test_the_committed_bundle_holds_here_or_is_refused_before_anything_starts() -> None:
    report = verify_here(BUNDLE, TRUSTED, anchor=ANCHOR)
    if same_dispatch_here():
        assert report.findings == (), [(d.kind, d.subject, d.observed) for d in report.findings]
        assert report.ok
        return
    assert not report.ok and report.observations is None, "nothing else was observed"
    assert {d.kind for d in report.findings} == {DriftKind.DISPATCH}
    assert "vllm._C" in {d.subject for d in report.findings}
    assert report.stopped.startswith("this host selects other code than the record ran")


def test_restored_into_an_empty_directory_it_replays_here_or_launch_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fresh-machine path: restore into a directory that holds nothing, then launch."""
    anchor = tmp_path / "fresh" / "manifests"
    anchor.mkdir(parents=True)
    restored(anchor, capsys, action="restored")
    key = SigningKey.from_path(REPO_ROOT / "keys" / "example.key")
    runs = tmp_path / "runs"
    if not same_dispatch_here():
        with pytest.raises(PreflightRefused) as refused:
            launch(BUNDLE, TRUSTED, runs=runs, signing_key=key, anchor=anchor)
        assert {d.kind for d in refused.value.report.findings} == {DriftKind.DISPATCH}
        assert not runs.exists() or not any(runs.iterdir()), "nothing was started"
        return
    replay = launch(BUNDLE, TRUSTED, runs=runs, signing_key=key, anchor=anchor)
    failed = [v.summary for v in replay.run.verdicts if not v.passed]
    assert replay.run.passed, failed
    assert replay.sealed is not None and verify(replay.sealed.path, TRUSTED).ok


def test_on_every_other_kind_of_host_verify_and_launch_refuse_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The branch a host of other kernels takes, taken here whatever this CPU is: this host's
    facts with the CPU flags of each other kind of x86-64 host."""
    here = observe_host()
    key = SigningKey.from_path(REPO_ROOT / "keys" / "example.key")
    others = [kind for kind, (_, kernels) in KINDS.items() if kernels != recorded_kernels()]
    assert len(others) == 2
    for kind in others:
        flags = tuple(sorted(KINDS[kind][0].cpu_flags))
        monkeypatch.setattr(hostcheck, "observe_host", lambda f=flags: replace(here, cpu_flags=f))
        report = verify_here(BUNDLE, TRUSTED, anchor=ANCHOR)
        assert not report.ok and report.observations is None, kind
        vllm = next(d for d in report.findings if d.subject == "vllm._C")
        assert vllm.observed.startswith(f"{KINDS[kind][1]} (arch=x86_64, "), kind
        assert "repro build manifests/tiny-cpu.toml --signing-key KEY" in report.stopped
        runs = tmp_path / kind
        with pytest.raises(PreflightRefused) as refused:
            launch(BUNDLE, TRUSTED, runs=runs, signing_key=key, anchor=ANCHOR)
        assert {d.kind for d in refused.value.report.findings} == {DriftKind.DISPATCH}
        assert not runs.exists() or not any(runs.iterdir()), "nothing was started"
