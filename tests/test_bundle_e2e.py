"""`repro build`, `verify` and `launch` on the real tiny stack, and what each refuses.

One bundle is built per module against a real vLLM CPU server (teacher profile, two fresh
starts, every process audited). Then every class of change is made to a copy of it, to the
host as this bundle sees it, or to the stack, and each is refused naming the claim or fact;
the untouched bundle passes every time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from bundle_assets import lock_edit, resealed
from conftest import REPO_ROOT, SERVE_VENV, TINY_MANIFEST

from repro_serving.builder import tinymodel
from repro_serving.builder.build import BuildRefused, BuildResult, build
from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.drift import DriftKind
from repro_serving.builder.hostcheck import verify_here
from repro_serving.builder.replay import launch
from repro_serving.builder.sealing import bundle
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys
from repro_serving.builder.sealing.statement import Statement, repro_version
from repro_serving.builder.verify import VerifyReport, verify
from repro_serving.launch.run import ForbiddenEnvironment

pytestmark = pytest.mark.server

KEY = SigningKey.from_path(REPO_ROOT / "keys" / "example.key")
TRUSTED = TrustedKeys.from_key_file(REPO_ROOT / "keys" / "example.pub")
MODEL_DIR = REPO_ROOT / "build" / "tiny-llama"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> BuildResult:
    tinymodel.generate(MODEL_DIR)
    root = tmp_path_factory.mktemp("built")
    (root / "bundles").mkdir()
    return build(TINY_MANIFEST, KEY, root / "bundles", root / "run")


@pytest.fixture(scope="module")
def bundle_path(built: BuildResult) -> Path:
    return built.sealed.path


def failed_claims(report: VerifyReport) -> list[str]:
    return [check.claim for check in report.checks if not check.ok]


def reseal(source: Path, parent: Path, edit: Callable[[Path], None]) -> Path:
    """The bundle's content edited, then sealed again with the same key: the signature holds,
    so only recomputing the claims can tell (a README as built may now lie)."""
    return resealed(source, parent, edit, str(TINY_MANIFEST))


def edit_json(path: Path, change: Callable[[object], object]) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


# --- the untouched bundle ---------------------------------------------------------------------


def test_the_built_bundle_verifies_offline_and_against_this_host(bundle_path: Path) -> None:
    report = verify_here(bundle_path, TRUSTED)
    assert failed_claims(report) == [] and report.findings == ()
    claims = {check.claim: check for check in report.checks}
    assert claims["oracle.rows (token ids, text sha256)"].value == "5/5 rows recomputed equal"
    assert claims["fresh start 2 reproduces token ids"].ok
    assert claims["native.roles (live audit of every process)"].value.startswith("4 roles")
    assert {check.evidence.value for check in report.checks} == {"sealed", "live"}
    sums = subprocess.run(
        ["sha256sum", "-c", "--strict", "--quiet", bundle.SHA256SUMS],
        cwd=bundle_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert sums.returncode == 0, sums.stdout + sums.stderr


def test_an_untouched_bundle_passes_twenty_times_in_a_row(bundle_path: Path) -> None:
    for _ in range(20):
        assert verify(bundle_path, TRUSTED).ok


# --- evidence changed and sealed again: each claim recomputed refuses ---------------------------


def _one_token(rows: object) -> object:
    assert isinstance(rows, list)
    rows[2]["token_ids"][5] = (rows[2]["token_ids"][5] + 1) % 256
    return rows


def _drop_vllm_c(document: object) -> object:
    """vLLM's kernel library, whichever variant this host's CPU selected, no longer mapped, nor
    what the loader mapped for it alone (a coherent audit of a process that never loaded it)."""
    assert isinstance(document, dict)
    for process in document["processes"]:
        dropped = {o["path"] for o in process["objects"] if "/vllm/_C" in o["path"]}
        kept = [o for o in process["objects"] if o["path"] not in dropped]
        while orphans := [o for o in kept if o["requester"] and _requested_by(o, dropped)]:
            dropped |= {o["path"] for o in orphans}
            kept = [o for o in kept if o["path"] not in dropped]
        process["objects"] = kept
    return document


def _requested_by(obj: dict[str, Any], paths: set[str]) -> bool:
    return os.path.normpath(obj["requester"]) in paths


def _failed_gate(verdicts: object) -> object:
    assert isinstance(verdicts, list)
    verdicts[0]["status"] = "fail"
    return verdicts


def _no_verdicts(_verdicts: object) -> object:
    return []


def _cached(rows: object) -> object:
    """A prefix served from cache on one row: what the cold gate exists to refuse."""
    assert isinstance(rows, list)
    rows[1]["cached_tokens"] = 256
    return rows


def _prefix_cache_hits(path: Path) -> None:
    """The prefix-cache hit counter risen by 256 during the suite, in the sealed metrics."""
    lines = path.read_text().splitlines()
    hits = [i for i, line in enumerate(lines) if line.startswith("vllm:prefix_cache_hits_total")]
    assert hits, "the sealed metrics export the prefix-cache hit counter"
    for index in hits:
        name, value = lines[index].rsplit(" ", 1)
        lines[index] = f"{name} {float(value) + 256}"
    path.write_text("\n".join(lines) + "\n")


README = "README.md = the claims recomputed above"
"""Fails with every claim whose recomputed value is no longer the one the README states."""
ROWS_1 = "start-1 rows = their suite, their counts and their /metrics"

EVIDENCE_EDITS = {
    "one token in one row": (
        "evidence/start-1/rows.json", _one_token,
        ["oracle.rows (token ids, text sha256)", "oracle/teacher.json = bench rows",
         "fresh start 2 reproduces token ids", "gates (every verdict recomputed)", README],
    ),
    "the teacher's token changed": (
        "oracle/teacher.json",
        lambda t: {**t, "rows": [{**t["rows"][0], "token_ids": [1]}, *t["rows"][1:]]},
        ["oracle.teacher_sha256", "oracle/teacher.json = bench rows", README],
    ),
    "a locked module no longer mapped": (
        "evidence/start-1/audit/worker.json", _drop_vllm_c,
        ["native.roles (live audit of every process)"],
    ),
    "a failed gate": (
        "evidence/verdicts.json", _failed_gate, ["gates (every verdict recomputed)"],
    ),
    "no verdicts at all": (
        "evidence/verdicts.json", _no_verdicts, ["gates (every verdict recomputed)"],
    ),
    "a cached prefix in a row": (
        "evidence/start-1/rows.json", _cached, [ROWS_1, "gates (every verdict recomputed)", README],
    ),
    "the second start's tokens": (
        "evidence/start-2/rows.json", _one_token,
        ["fresh start 2 reproduces token ids", "gates (every verdict recomputed)", README],
    ),
}  # fmt: skip


def _teacher_rate_doubled(root: Path) -> None:
    """The rate every replay's throughput floor scales, doubled in the teacher, and the lock's
    digest of the teacher made to agree: only recomputing the rate from the rows refuses it."""
    path = root / "oracle/teacher.json"
    teacher = json.loads(path.read_text())
    teacher["conventional_tok_s"] *= 2
    path.write_text(json.dumps(teacher))
    lock = json.loads((root / bundle.LOCK).read_text())
    lock["oracle"]["teacher_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (root / bundle.LOCK).write_text(json.dumps(lock))


def test_a_teacher_rate_that_is_not_the_rows_rate_is_refused(
    bundle_path: Path, tmp_path: Path
) -> None:
    copy = reseal(bundle_path, tmp_path, _teacher_rate_doubled)
    report = verify(copy, TRUSTED)
    assert report.findings == (), "the signature and every digest hold"
    assert "oracle/teacher.json conventional_tok_s" in failed_claims(report)


@pytest.mark.parametrize("case", EVIDENCE_EDITS, ids=list(EVIDENCE_EDITS))
def test_evidence_changed_and_resealed_fails_the_claim_it_backs(
    bundle_path: Path, tmp_path: Path, case: str
) -> None:
    relative, change, claims = EVIDENCE_EDITS[case]
    copy = reseal(bundle_path, tmp_path, lambda root: edit_json(root / relative, change))
    report = verify(copy, TRUSTED)
    assert report.findings == (), "the signature and every digest hold"
    assert failed_claims(report) == claims


def _slower(root: Path) -> None:
    """Every arrival of start 1 slowed until its streaming alone lasts twice the time the
    server was up between ready and teardown: a slower run than the one that happened. That
    time bounds the server's own end-to-end latencies (`/metrics`) and the start's streaming,
    so both contradict it on any CPU, however fast it decoded."""
    start = root / "evidence" / "start-1"
    ready = json.loads((start / "server.json").read_text())["ready_at"]
    began = json.loads((start / "teardown.json").read_text())["began_at"]
    rows = json.loads((start / "rows.json").read_text())
    streamed = sum(max(row["token_offsets_s"]) - min(row["token_offsets_s"]) for row in rows)
    factor = 2 * (began - ready) / streamed
    for row in rows:
        row["token_offsets_s"] = [t * factor for t in row["token_offsets_s"]]
        row["ttft_s"] = row["token_offsets_s"][0]
    (start / "rows.json").write_text(json.dumps(rows))


def test_a_slower_run_than_the_one_that_happened_is_refused(
    bundle_path: Path, tmp_path: Path
) -> None:
    report = verify(reseal(bundle_path, tmp_path, _slower), TRUSTED)
    assert report.findings == (), "the signature and every digest hold"
    assert failed_claims(report) == [
        "oracle/teacher.json conventional_tok_s",
        "oracle.throughput.conventional_median",
        "fresh starts (each one tree, torn down with proof; none a copy of another)",
        ROWS_1,
        "gates (every verdict recomputed)",
        README,
    ]
    details = " ".join(c.detail for c in report.checks if not c.ok)
    assert "vllm:e2e_request_latency_seconds_sum" in details
    assert "between ready_at and teardown's began_at" in details


LOCKED = "lock = the sealed manifest, observations and run"


def _set(*path: str | int, value: object) -> Callable[[dict[str, Any]], None]:
    def change(lock: dict[str, Any]) -> None:
        target: Any = lock
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def _relabelled(lock: dict[str, Any]) -> None:
    """The oracle stated as observed live, the native truth as only declared."""
    lock["oracle"]["evidence"], lock["native"]["evidence"] = "live", "declared"


LOCK_EDITS = {
    "a model file's sha256": (
        _set("models", 0, "files", "model.safetensors", value="0" * 64),
        ["models[target].files", LOCKED, README],
    ),
    "the interpreter": (_set("python", "interpreter", value="3.11.9"), [LOCKED, README]),
    "the launch argv": (
        _set("launch", "argv", value=["{python}", "-m", "vllm.entrypoints.openai.api_server"]),
        [LOCKED, README],
    ),
    "the launch environment": (_set("launch", "env", "LANG", value="C"), [LOCKED, README]),
    "the host's accelerators": (
        _set("host", "facts", "accelerators", value=[{"vendor_device": "8086:e223"}] * 8),
        ["host.facts"],
    ),
    "the bundle's description": (
        _set("bundle", "description", value="a record"),
        [LOCKED, README],
    ),
    "the model's location": (
        _set("models", 0, "location", value="/tmp/evil-model"),
        [LOCKED, README],
    ),
    "the evidence classes": (_relabelled, [LOCKED, README]),
    "the recorded dispatch": (
        lambda lock: _set(
            "native",
            "dispatch",
            0,
            "variant",
            value="vllm._C"
            if lock["native"]["dispatch"][0]["variant"] != "vllm._C"
            else "vllm._C_AVX2",
        )(lock),
        ["native.dispatch (variant and deciding facts)", README],
    ),
}


@pytest.mark.parametrize("case", LOCK_EDITS, ids=list(LOCK_EDITS))
def test_a_lock_that_disagrees_with_the_files_it_was_taken_from_is_refused(
    bundle_path: Path, tmp_path: Path, case: str
) -> None:
    change, claims = LOCK_EDITS[case]
    report = verify(reseal(bundle_path, tmp_path, lock_edit(change)), TRUSTED)
    assert report.findings == (), "the signature and every digest hold"
    assert failed_claims(report) == claims


def test_prefix_cache_hits_in_the_sealed_metrics_fail_the_recomputed_gate(
    bundle_path: Path, tmp_path: Path
) -> None:
    copy = reseal(
        bundle_path,
        tmp_path,
        lambda root: _prefix_cache_hits(root / "evidence/start-1/metrics-after.prom"),
    )
    report = verify(copy, TRUSTED)
    # start 1's read after the suite is also the read before its c4 load
    load = (
        "start-1 rows under load c4 (concurrency 4) = their suite, their counts and their /metrics"
    )
    assert failed_claims(report) == [ROWS_1, load, "gates (every verdict recomputed)", README]
    gates = next(c for c in report.checks if c.claim.startswith("gates"))
    assert "prefix_cache_hit_delta_zero: recomputed fail" in gates.detail


def test_the_model_revision_changed_in_the_manifest_is_refused(
    bundle_path: Path, tmp_path: Path
) -> None:
    def other_revision(root: Path) -> None:
        text = (root / bundle.MANIFEST).read_text()
        revision = tinymodel.revision()
        (root / bundle.MANIFEST).write_text(text.replace(revision, "0" * 40))

    report = verify(reseal(bundle_path, tmp_path, other_revision), TRUSTED)
    assert failed_claims(report) == ["bundle.manifest_sha256", LOCKED, README]


def test_a_package_version_changed_in_the_lock_is_refused_offline_and_on_the_host(
    bundle_path: Path, tmp_path: Path
) -> None:
    def other_torch(root: Path) -> None:
        lock = json.loads((root / bundle.LOCK).read_text())
        lock["python"]["packages"]["torch"] = "2.12.0+cpu"
        (root / bundle.LOCK).write_text(json.dumps(lock))

    report = verify_here(reseal(bundle_path, tmp_path, other_torch), TRUSTED)
    assert failed_claims(report) == ["python.packages"]
    drifts = [(d.kind, d.subject, d.expected, d.observed) for d in report.findings]
    assert drifts == [(DriftKind.CLAIM, "package torch", "2.12.0+cpu", "2.13.0+cpu")]


# --- this host changed: verify --host refuses -------------------------------------------------


@pytest.fixture
def anchored_copy(tmp_path: Path) -> Iterator[Path]:
    """A second place this bundle's manifest resolves on: the same venv, a copy of the model."""
    (tmp_path / "manifests").mkdir()
    (tmp_path / ".venv-serve").symlink_to(SERVE_VENV)
    shutil.copytree(MODEL_DIR, tmp_path / "build" / "tiny-llama")
    yield tmp_path / "manifests"


def test_the_same_bytes_under_another_root_verify(bundle_path: Path, anchored_copy: Path) -> None:
    report = verify_here(bundle_path, TRUSTED, anchor=anchored_copy)
    assert report.ok, [d.subject for d in report.findings]


def test_a_model_file_swapped_for_another_of_the_same_size_is_refused(
    bundle_path: Path, anchored_copy: Path
) -> None:
    weights = anchored_copy.parent / "build" / "tiny-llama" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    report = verify_here(bundle_path, TRUSTED, anchor=anchored_copy)
    (drift,) = report.findings
    assert (drift.kind, drift.subject) == (DriftKind.MODEL_FILE, "{model.target}/model.safetensors")
    pinned = Manifest.from_path(TINY_MANIFEST).models[0].files["model.safetensors"]
    assert drift.expected == f"sha256 {pinned}"
    assert drift.observed.startswith("sha256 ") and drift.observed != drift.expected


def test_an_installed_file_of_a_package_modified_is_refused(bundle_path: Path) -> None:
    installed = (
        SERVE_VENV / "lib" / "python3.11" / "site-packages" / "vllm" / "assets" / "__init__.py"
    )
    original = installed.read_bytes()
    try:
        installed.write_bytes(original + b"# changed\n")
        report = verify_here(bundle_path, TRUSTED)
    finally:
        installed.write_bytes(original)
    (drift,) = report.findings
    assert drift.kind == DriftKind.INSTALLED_FILE
    assert "vllm/assets/__init__.py" in drift.subject


def test_a_library_earlier_on_ld_library_path_shadowing_a_locked_one_is_refused(
    bundle_path: Path,
) -> None:
    # vLLM's children start with LD_LIBRARY_PATH={site}/cv2/../../lib64: (opencv sets it), so a
    # libnuma.so.1 dropped there is found before the system's when the Worker loads vllm/_C.
    shadow_dir = SERVE_VENV / "lib" / "python3.11" / "lib64"
    assert not shadow_dir.exists()
    shadow_dir.mkdir()
    try:
        shutil.copyfile("/lib/x86_64-linux-gnu/libnuma.so.1", shadow_dir / "libnuma.so.1")
        report = verify_here(bundle_path, TRUSTED)
    finally:
        shutil.rmtree(shadow_dir)
    # Only the Worker maps vllm/_C with that search path; the API server has none, and
    # EngineCore does not load vllm/_C at all.
    assert [(d.kind, d.subject) for d in report.findings] == [
        (DriftKind.ORIGIN_DRIFT, "worker: libnuma.so.1")
    ]
    drift = report.findings[0]
    assert drift.expected == "/usr/lib/x86_64-linux-gnu/libnuma.so.1.0.0"
    assert drift.observed.startswith(f"{SERVE_VENV}/lib/python3.11/site-packages/cv2/../../lib64/")
    assert drift.observed.endswith("libnuma.so.1 (LD_LIBRARY_PATH)")


def test_ld_preload_in_the_callers_environment_refuses_the_launch_before_a_start(
    bundle_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libz.so.1")
    with pytest.raises(ForbiddenEnvironment) as refused:
        launch(bundle_path, TRUSTED, runs=tmp_path, signing_key=None)
    assert "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libz.so.1" in refused.value.diagnostics()
    assert not list(tmp_path.glob("*/start-1/server.log"))


# --- the replay ------------------------------------------------------------------------------


def test_a_launch_replays_the_bundle_and_seals_a_run_that_verifies(
    bundle_path: Path, tmp_path: Path
) -> None:
    replay = launch(bundle_path, TRUSTED, runs=tmp_path, signing_key=KEY)
    assert replay.run.passed, [v.summary for v in replay.run.verdicts if not v.passed]
    assert replay.run.plan.profile == "candidate"
    assert replay.sealed is not None
    report = verify(replay.sealed.path, TRUSTED)
    assert report.ok, failed_claims(report)
    statement = Statement.from_json((replay.sealed.path / bundle.STATEMENT).read_bytes(), where="")
    assert statement.sealed_run, "sealed as a run: evidence to verify, not a bundle to hand over"
    assert not bundle.handoff_content(repro_version()) & bundle.content_files(replay.sealed.path)
    lock = json.loads((replay.sealed.path / bundle.LOCK).read_text())
    assert lock["launch"]["profile"] == "candidate"
    teacher = json.loads((bundle_path / bundle.LOCK).read_text())["oracle"]["rows"]
    assert [r["token_ids_sha256"] for r in lock["oracle"]["rows"]] == [
        r["token_ids_sha256"] for r in teacher
    ]


def test_a_missing_model_directory_is_refused_naming_its_path(tmp_path: Path) -> None:
    """Before any server starts, the refusal names the directory this host resolved, not the
    `{model.target}` placeholder a bundle keeps."""
    (tmp_path / "manifests").mkdir()
    (tmp_path / ".venv-serve").symlink_to(SERVE_VENV)
    suite = TINY_MANIFEST.parent / "suites" / "tiny-cpu.json"
    text = TINY_MANIFEST.read_text().replace('"suites/tiny-cpu.json"', json.dumps(str(suite)))
    manifest = tmp_path / "manifests" / "tiny-cpu.toml"
    manifest.write_text(text)
    (tmp_path / "bundles").mkdir()
    with pytest.raises(BuildRefused) as refused:
        build(manifest, KEY, tmp_path / "bundles", tmp_path / "run")
    (drift,) = refused.value.drifts
    assert drift.kind is DriftKind.MODEL_DIRECTORY
    assert drift.expected == f"a directory at {tmp_path / 'build' / 'tiny-llama'}"
    assert list((tmp_path / "bundles").iterdir()) == []
