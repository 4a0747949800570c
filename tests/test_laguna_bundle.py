"""The Laguna 102 tok/s record as a sealed-evidence bundle: built, verified, tampered, refused.

`repro/laguna-102tps/` is committed; these tests also build it again from
`manifests/laguna-102tps.toml` and the real evidence in records/laguna-102tps, then change one
piece of that evidence at a time before sealing again and prove that the claim it backs fails.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bundle_assets import lock_edit, resealed
from schemas import assert_valid

from repro_serving.builder.build import BuildRefused, build
from repro_serving.builder.cli import main
from repro_serving.builder.documents.lock import EvidenceClass
from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.errors import BadInput
from repro_serving.builder.sealing import bundle
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys
from repro_serving.builder.verify import VerifyReport, verify
from repro_serving.launch.run import RunPlan, run_profile

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "manifests" / "laguna-102tps.toml"
COMMITTED = REPO / "repro" / "laguna-102tps"
KEY = SigningKey.from_path(REPO / "keys" / "example.key")
TRUSTED = TrustedKeys.from_key_file(REPO / "keys" / "example.pub")
RUN = "evidence/run"


def failed(report: VerifyReport) -> list[str]:
    return [check.claim for check in report.checks if not check.ok]


def values(report: VerifyReport) -> dict[str, tuple[str, str]]:
    return {c.claim: (c.evidence.value, c.value) for c in report.checks}


def test_the_committed_bundle_verifies_and_prints_every_recomputed_value() -> None:
    report = verify(COMMITTED, TRUSTED)
    assert report.ok, failed(report)
    shown = values(report)
    historical = shown["throughput median N/span, the historical mislabelled convention"]
    conventional = shown["throughput median (N-1)/span, the conventional rate"]
    assert historical == ("sealed", "102.97143559613157 tok/s")
    assert conventional == ("sealed", "101.94172124017027 tok/s")
    assert shown["token ids = teacher"] == ("sealed", "13/13 rows")
    assert shown["text sha256 = teacher"] == ("sealed", "13/13 rows")
    assert shown["cached_tokens"] == ("sealed", "0 on 13/13 rows")
    ranks = "Worker_TP0_EP0: 1, Worker_TP1_EP1: 1, Worker_TP2_EP2: 1, Worker_TP3_EP3: 1"
    assert shown["log marker graph-captured"] == ("sealed", ranks)
    assert shown["log marker graph-replayed"] == ("sealed", ranks)
    assert shown["log marker dflash-fp8-w8a16-projections"] == ("sealed", ranks)
    assert shown["speculative decoding accepted / draft tokens"] == (
        "sealed", "4747/17699 over 1609 drafts",
    )  # fmt: skip
    assert shown["accepted per position"] == (
        "sealed", "1171, 847, 631, 497, 397, 328, 248, 204, 172, 140, 112",
    )  # fmt: skip
    assert shown["cleanup status"] == (
        "sealed", "idle_status=0, original_status=0, stop_status=0, worker_status=0",
    )  # fmt: skip
    assert shown["idle snapshots"] == ("sealed", "13 before start, 13 after stop")
    assert shown["models: release files = the record's listing"] == ("sealed", "32 files")
    classes = {c.evidence for c in report.checks}
    assert EvidenceClass.LIVE not in classes
    assert {shown[k][0] for k in ("host", "sources", "python", "native modules")} == {"declared"}


def test_building_it_again_from_the_manifest_gives_a_bundle_that_verifies(tmp_path: Path) -> None:
    result = build(MANIFEST, KEY, tmp_path, tmp_path / "work")
    assert result.run is None and result.lock.record is not None
    assert verify(result.sealed.path, TRUSTED).ok
    committed = json.loads((COMMITTED / bundle.LOCK).read_text())
    rebuilt = json.loads((result.sealed.path / bundle.LOCK).read_text())
    committed["bundle"].pop("manifest_path"), rebuilt["bundle"].pop("manifest_path")
    committed["bundle"].pop("repro_version"), rebuilt["bundle"].pop("repro_version")
    assert rebuilt == committed, "the same evidence seals the same claims"


def reseal(tmp_path: Path, edit: Callable[[Path], None]) -> Path:
    return resealed(COMMITTED, tmp_path, edit, "manifests/laguna-102tps.toml")


def _bench(change: Callable[[list[dict[str, object]]], None]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / RUN / "bench.json"
        document = json.loads(path.read_text())
        change(document["rows"])
        path.write_text(json.dumps(document))

    return edit


def _one_token(rows: list[dict[str, object]]) -> None:
    ids = rows[4]["token_ids"]
    assert isinstance(ids, list)
    ids[17] += 1


def _cached_one(rows: list[dict[str, object]]) -> None:
    usage = rows[7]["usage"]
    assert isinstance(usage, dict)
    usage["prompt_tokens_details"]["cached_tokens"] = 1


def _log(change: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / RUN / "server.log"
        lines = path.read_bytes().decode().split("\n")
        path.write_bytes("\n".join(change(lines)).encode())

    return edit


def _without_first(marker: str) -> Callable[[list[str]], list[str]]:
    def change(lines: list[str]) -> list[str]:
        index = next(i for i, line in enumerate(lines) if marker in line)
        return lines[:index] + lines[index + 1 :]

    return change


def _doubled_rank(lines: list[str]) -> list[str]:
    line = next(x for x in lines if "Replayed audited breakable cudagraph" in x and "TP2" in x)
    return [*lines, line]


def _flat_curve(root: Path) -> None:
    path = root / RUN / "metrics-after-suite.prom"
    text = path.read_text()
    for position, value in enumerate((1171, 847, 631, 497, 397, 328, 248, 204, 172, 140, 112)):
        before = _before_count(root, position)
        text = text.replace(
            f'position="{position}"}} {float(before + value)}',
            f'position="{position}"}} {float(before + 431)}',
        )
    path.write_text(text)


def _before_count(root: Path, position: int) -> int:
    for line in (root / RUN / "metrics-before-suite.prom").read_text().splitlines():
        if "accepted_tokens_per_pos_total" in line and f'position="{position}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def _cleanup_nonzero(root: Path) -> None:
    path = root / RUN / "cleanup-status.txt"
    path.write_text(path.read_text().replace("worker_status=0", "worker_status=1"))


def _idle_removed(root: Path) -> None:
    (root / RUN / "idle-interval" / "poststop-12.json").unlink()


CHECKSUMS = "the record's own checksum lists = its files"
ROWS = "bench rows = their suite, their counts and their /metrics"
IDLE = "idle snapshots around the run passed, in order"
EXACTNESS = "exactness-vs-q1.json = the rows and the teacher"
"""The record's own statements (`builder.recordfiles`) that an edit of the evidence contradicts."""
LOCKED = "lock = the sealed manifest, identity and record"
README = "README.md = the claims recomputed above"
"""The README sealed with the record states the values it had: changed, it no longer does."""

TAMPERING = {
    "one token in one row": (
        _bench(_one_token),
        ["oracle.rows = bench rows", "token ids = teacher", "gate exact_token_ids", EXACTNESS],
    ),
    "a cached_tokens value set to 1": (
        _bench(_cached_one),
        ["cached_tokens", "gate cached_tokens_zero", ROWS, EXACTNESS],
    ),
    "one marker line removed": (
        _log(_without_first("Captured audited breakable cudagraph")),
        ["log marker graph-captured", "gate log_marker:graph-captured"],
    ),
    "one rank's count changed": (
        _log(_doubled_rank),
        ["log marker graph-replayed", "gate log_marker:graph-replayed"],
    ),
    "a spec-decode counter flattened": (
        _flat_curve,
        ["accepted per position", "gate spec_decode", ROWS],
    ),
    "a cleanup status non-zero": (_cleanup_nonzero, ["cleanup status"]),
    "an idle snapshot removed": (_idle_removed, ["idle snapshots", IDLE]),
}


@pytest.mark.parametrize("case", TAMPERING, ids=list(TAMPERING))
def test_evidence_changed_before_sealing_fails_the_claim_it_backs(
    tmp_path: Path, case: str
) -> None:
    """Each also contradicts the record's own checksum list of its run directory, and the
    lock assembled again from the changed evidence."""
    edit, claims = TAMPERING[case]
    report = verify(reseal(tmp_path, edit), TRUSTED)
    assert report.findings == (), "the signature and every digest hold"
    assert failed(report) == [*claims, CHECKSUMS, LOCKED, README]


def _eight_other_cards(lock: dict[str, Any]) -> None:
    card = lock["host"]["facts"]["accelerators"][0]
    lock["host"]["facts"]["accelerators"] = [
        {**card, "address": f"0000:{bus:02x}:00.0"} for bus in range(8)
    ]


def _other_commit(lock: dict[str, Any]) -> None:
    lock["sources"][0]["commit"] = "0" * 40


def _other_interpreter(lock: dict[str, Any]) -> None:
    lock["python"]["interpreter"] = "3.11.0"


def _other_argv(lock: dict[str, Any]) -> None:
    lock["launch"]["argv"] = [*lock["launch"]["argv"], "--enforce-eager"]


def _other_model_file(lock: dict[str, Any]) -> None:
    files = lock["models"][0]["files"]
    files[next(iter(files))] = "0" * 64


LOCK_LIES = {
    "host facts": _eight_other_cards,
    "a source commit": _other_commit,
    "the interpreter": _other_interpreter,
    "the launch argv": _other_argv,
    "a model file's sha256": _other_model_file,
}


@pytest.mark.parametrize("case", LOCK_LIES, ids=list(LOCK_LIES))
def test_a_lock_that_lies_about_a_declared_value_is_refused(tmp_path: Path, case: str) -> None:
    """Declared values are not checked against the world, but they are the sealed files':
    a lock that says otherwise is refused, never printed as if it were the record's."""
    report = verify(reseal(tmp_path, lock_edit(LOCK_LIES[case])), TRUSTED)
    assert report.findings == ()
    assert failed(report) == [LOCKED, README]
    lock_check = next(c for c in report.checks if c.claim == LOCKED)
    assert lock_check.detail.startswith("differs: ")


def _faster(rows: list[dict[str, object]]) -> None:
    """Every token arriving twice as fast: double the throughput."""
    for row in rows:
        offsets = row["token_id_offsets_s"]
        assert isinstance(offsets, list)
        row["token_id_offsets_s"] = [t / 2 for t in offsets]


def _build_refused(
    tmp_path: Path, change: Callable[[list[dict[str, object]]], None]
) -> pytest.ExceptionInfo[BuildRefused]:
    """`repro build` of a copy of the record whose bench rows `change` altered, laid out as in
    the repository (manifests/ beside records/)."""
    record = tmp_path / "records" / "laguna-102tps"
    shutil.copytree(REPO / "records" / "laguna-102tps", record)
    bench = record / "evidence" / "record-run" / "bench.json"
    document = json.loads(bench.read_text())
    change(document["rows"])
    bench.write_text(json.dumps(document))
    manifest = tmp_path / "manifests" / "laguna-102tps.toml"
    manifest.parent.mkdir()
    manifest.write_text(MANIFEST.read_text())
    shutil.copytree(REPO / "manifests" / "suites", manifest.parent / "suites")
    with pytest.raises(BuildRefused) as refused:
        build(manifest, KEY, tmp_path, tmp_path / "work")
    return refused


def test_a_record_whose_files_are_not_its_own_checksums_is_refused_at_build(
    tmp_path: Path,
) -> None:
    """Double throughput in bench.json: the record's own checksum list of its run directory
    names other bytes for bench.json, each row's stated rate and the summary's median are no
    longer what its offsets give, and the server's end-to-end latency and HTTP durations in its
    own /metrics are longer than the client's halved streaming, in sum and in their buckets. The
    build refuses, naming each, checksums first."""
    refused = _build_refused(tmp_path, _faster)
    first, *rest = refused.value.drifts
    assert (first.kind.value, first.subject) == (
        "checksums",
        "record-run.sha256:1 record-run/bench.json",
    )
    assert {(d.kind.value, d.subject) for d in rest} == {("claim", ROWS)}
    found = [d.observed for d in rest]
    assert sum("tok_s_1_100_after_ttft expected" in f for f in found) == 13, "one per row"
    assert sum("summary median expected" in f for f in found) == 1
    assert sum("vllm:e2e_request_latency_seconds_sum: expected a rise of between" in f
               for f in found) == 1  # fmt: skip
    assert sum("vllm:e2e_request_latency_seconds_bucket" in f for f in found) == 4
    assert sum("http_request_duration_seconds_sum" in f for f in found) == 1
    assert sum("http_request_duration_highr_seconds_bucket" in f for f in found) == 6
    assert len(found) == 26
    assert not (tmp_path / "laguna-102tps").exists()


def test_a_build_from_tampered_evidence_is_refused_by_the_records_own_gates(
    tmp_path: Path,
) -> None:
    refused = _build_refused(tmp_path, _one_token)
    subjects = [d.subject for d in refused.value.drifts]
    assert subjects[:2] == ["record-run.sha256:1 record-run/bench.json", "exact_token_ids"]
    # and the record's own comparison with its teacher, which says every row was exact
    assert set(subjects[2:]) == {EXACTNESS}
    assert not (tmp_path / "laguna-102tps").exists()


def test_a_launch_here_is_refused_at_preflight_listing_every_missing_fact(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["launch", str(COMMITTED), "--key", str(REPO / "keys" / "example.pub"),
                 "--runs", str(tmp_path), "--json"])  # fmt: skip
    report = assert_valid("launch", capsys.readouterr().out)["preflight"]
    assert code == 1
    subjects = {d["subject"] for d in report["drifts"]}
    assert "python: /home/steve/.venvs/deepseek-v4-xpu/pyvenv.cfg" in subjects
    assert "accelerator 8086:e223" in subjects
    assert {"os_release", "kernel"} <= subjects
    assert {"model target poolside/Laguna-S-2.1-INT4",
            "model draft poolside/Laguna-S-2.1-DFlash-INT4"} <= subjects  # fmt: skip
    assert {f"source {name}" for name in (
        "vllm", "kernel_record_tree", "attention_runtime_tree", "native_base_tree",
        "xpumem_source_tree")} <= subjects  # fmt: skip
    assert list(tmp_path.iterdir()) == [], "nothing was started or written"


def test_its_suite_cannot_be_replayed_and_a_run_says_so_before_anything_starts(
    tmp_path: Path,
) -> None:
    manifest = Manifest.from_path(MANIFEST)
    with pytest.raises(BadInput) as refused:
        run_profile(RunPlan(manifest, manifest.oracle.teacher, tmp_path / "run"))
    assert "this suite cannot be replayed" in str(refused.value)
    assert not (tmp_path / "run").exists()


def test_building_the_fp8_kv_lane_here_is_refused_with_every_unmet_precondition(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = REPO / "manifests" / "fp8-kv.toml"
    code = main(["build", str(manifest), "--signing-key", str(REPO / "keys" / "example.key"),
                 "--out", str(tmp_path), "--json"])  # fmt: skip
    document = assert_valid("build", capsys.readouterr().out)
    assert code == 1 and document["ok"] is False
    kinds = {(d["kind"], d["subject"]) for d in document["drifts"]}
    assert ("host", "accelerator 8086:e223") in kinds
    assert ("model-directory", "model target poolside/Laguna-S-2.1-INT4") in kinds
    assert ("source-tree", "source vllm") in kinds
    assert any(kind == "not-observable" for kind, _ in kinds), "the venv is not here"
    assert list(tmp_path.iterdir()) == [], "no bundle, nothing half-written"
