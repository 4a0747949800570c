"""Sealing: the layout and bytes of a sealed bundle, `sha256sum -c` for real, refusals, atomic
replacement, and a process killed at every step leaving nothing that verifies at the final path."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from bundle_assets import (
    BUNDLE_NAME,
    MANIFEST,
    RUN,
    content,
    example_key,
    example_trust,
    lock_document,
    seal_example,
)
from killed import killed_at

from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.documents.formats import tags
from repro_serving.builder.errors import BadInput
from repro_serving.builder.hashing import sha256_file
from repro_serving.builder.sealing import atomic, dsse
from repro_serving.builder.sealing import seal as sealing
from repro_serving.builder.sealing.bundle import (
    ENVELOPE,
    LOCK,
    SHA256SUMS,
    STATEMENT,
    TEST_RESULT_ENVELOPE,
)
from repro_serving.builder.sealing.integrity import verify_bundle
from repro_serving.builder.sealing.statement import (
    GateOutcome,
    GateResultsStatement,
    ResourceDescriptor,
    Statement,
    repro_version,
)

SEALED_FILES = [
    "SHA256SUMS",
    "evidence/cleanup-status.txt",
    *sorted(f"evidence/idle-interval/{p.name}" for p in (RUN / "idle-interval").iterdir()),
    "evidence/metrics/after.prom",
    "evidence/metrics/before.prom",
    "evidence/server.log",
    "lock.json",
    "manifest.toml",
    "oracle/teacher-text-sha256-v1.json",
]


def _tree(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_a_sealed_bundle_verifies_and_holds_exactly_its_files(tmp_path: Path) -> None:
    sealed = seal_example(tmp_path / "repro")
    assert sealed.path == tmp_path / "repro" / BUNDLE_NAME
    assert sorted(sealed.digests) == SEALED_FILES
    assert sorted(_tree(sealed.path)) == sorted([*SEALED_FILES, STATEMENT, ENVELOPE])
    assert verify_bundle(sealed.path, example_trust()).findings == ()
    assert sorted(p.name for p in (tmp_path / "repro").iterdir()) == [BUNDLE_NAME]


def test_sealed_files_are_copies_readable_by_all(tmp_path: Path) -> None:
    bundle = seal_example(tmp_path / "repro").path
    assert (bundle / "manifest.toml").read_bytes() == MANIFEST.read_bytes()
    assert (bundle / "evidence/server.log").read_bytes() == (RUN / "server.log").read_bytes()
    assert (bundle / LOCK).read_bytes() == canonical_json(lock_document())
    for path in bundle.rglob("*"):
        expected = 0o755 if path.is_dir() else 0o644
        assert stat.S_IMODE(path.stat().st_mode) == expected, path


def test_sha256sum_checks_the_bundle_for_real(tmp_path: Path) -> None:
    bundle = seal_example(tmp_path / "repro").path
    run = subprocess.run(
        ["sha256sum", "--check", "--strict", SHA256SUMS],
        cwd=bundle,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    checked = [line.removesuffix(": OK") for line in run.stdout.splitlines()]
    assert checked == [name for name in SEALED_FILES if name != SHA256SUMS]


def test_the_statement_is_the_signed_payload_and_names_every_sealed_file(tmp_path: Path) -> None:
    sealed = seal_example(tmp_path / "repro")
    envelope = json.loads((sealed.path / ENVELOPE).read_bytes())
    statement_bytes = (sealed.path / STATEMENT).read_bytes()
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert envelope["signatures"][0]["keyid"] == example_key().key_id
    statement = json.loads(statement_bytes)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"] == [
        {"name": name, "digest": {"sha256": sha256_file(sealed.path / name)}}
        | ({"annotations": {"format": tag}} if (tag := tags([name]).get(name)) else {})
        for name in SEALED_FILES
    ]
    assert any("annotations" in subject for subject in statement["subject"])
    assert statement["predicate"] == {
        "buildDefinition": {
            "buildType": "pkg:pypi/repro-serving#repro_serving/attestation/build-type-bundle-v1.md",
            "externalParameters": {
                "bundle": BUNDLE_NAME,
                "manifest": {
                    "path": "tests/manifests/minimal.toml",
                    "sha256": sha256_file(MANIFEST),
                },
            },
            "resolvedDependencies": [],
        },
        "runDetails": {
            "builder": {
                "id": "pkg:pypi/repro-serving#repro_serving/attestation/builder-v1.md",
                "version": {"repro": repro_version()},
            }
        },
    }
    assert Statement.from_json(statement_bytes, where=STATEMENT).to_json() == statement_bytes


DEPENDENCIES = (
    ResourceDescriptor(
        name="vllm", digest={"gitCommit": "e596ef1543466ae1a05e5bb8091f58872e2b18ba"}
    ),
    ResourceDescriptor(uri="pkg:pypi/torch@2.12.0%2Bxpu"),
)
OUTCOME = GateOutcome(passed=("exact_token_ids", "live_audit:start-1"), failed=("throughput",))


def test_the_dependencies_given_are_the_statement_s_resolved_dependencies(tmp_path: Path) -> None:
    given = dataclasses.replace(content(), dependencies=DEPENDENCIES)
    (tmp_path / "repro").mkdir()
    sealed = sealing.seal(given, example_key(), tmp_path / "repro")
    statement = json.loads((sealed.path / STATEMENT).read_bytes())
    assert statement["predicate"]["buildDefinition"]["resolvedDependencies"] == [
        {"name": "vllm", "digest": {"gitCommit": "e596ef1543466ae1a05e5bb8091f58872e2b18ba"}},
        {"uri": "pkg:pypi/torch@2.12.0%2Bxpu"},
    ]
    assert not (sealed.path / TEST_RESULT_ENVELOPE).exists(), "a bundle carries no test result"


def test_a_sealed_run_carries_its_gates_as_a_signed_test_result_over_the_same_files(
    tmp_path: Path,
) -> None:
    run = dataclasses.replace(content(), run=True, gates=OUTCOME)
    (tmp_path / "repro").mkdir()
    sealed = sealing.seal(run, example_key(), tmp_path / "repro")
    statement = Statement.from_json((sealed.path / STATEMENT).read_bytes(), where=STATEMENT)
    assert statement.sealed_run
    envelope = dsse.Envelope.from_json((sealed.path / TEST_RESULT_ENVELOPE).read_bytes(), where="")
    verified = dsse.verify(envelope, example_trust(), where="")
    assert verified.payload_type == "application/vnd.in-toto+json"
    results = GateResultsStatement.from_json(verified.payload, where="")
    assert results.digests() == statement.digests() == dict(sealed.digests)
    document = json.loads(verified.payload)
    assert document["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    assert document["predicate"] == {
        "result": "FAILED",
        "configuration": [
            {"name": name, "digest": {"sha256": sha256_file(sealed.path / name)}}
            for name in ("manifest.toml", "oracle/teacher-text-sha256-v1.json")
        ],
        "passedTests": ["exact_token_ids", "live_audit:start-1"],
        "warnedTests": [],
        "failedTests": ["throughput"],
    }
    assert verify_bundle(sealed.path, example_trust()).findings == ()
    assert sorted(p.name for p in sealed.path.iterdir() if p.is_file()) == sorted(
        [LOCK, "manifest.toml", SHA256SUMS, STATEMENT, ENVELOPE, TEST_RESULT_ENVELOPE]
    )


@pytest.mark.parametrize(("run", "gates"), [(True, None), (False, OUTCOME)], ids=["run", "bundle"])
def test_gates_go_with_a_sealed_run_and_only_with_one(
    tmp_path: Path, run: bool, gates: GateOutcome | None
) -> None:
    (tmp_path / "repro").mkdir()
    with pytest.raises(BadInput) as refused:
        sealing.seal(
            dataclasses.replace(content(), run=run, gates=gates), example_key(), tmp_path / "repro"
        )
    assert refused.value.what == "a sealed run carries its gates' verdicts, and only a sealed run"
    assert list((tmp_path / "repro").iterdir()) == []


def test_sealing_the_same_files_with_the_same_key_gives_the_same_bytes(tmp_path: Path) -> None:
    first = seal_example(tmp_path / "a").path
    second = seal_example(tmp_path / "b").path
    assert _tree(first) == _tree(second)


def test_an_existing_bundle_is_refused_and_left_untouched(tmp_path: Path) -> None:
    bundle = seal_example(tmp_path / "repro", tag="old").path
    before = _tree(bundle)
    with pytest.raises(BadInput) as refused:
        seal_example(tmp_path / "repro", tag="new")
    assert refused.value.diagnostics() == (
        "error: the bundle already exists\n"
        f"  where:    {bundle}\n"
        "  hint:     pass --force to replace it (atomically), or choose another bundle name"
    )
    assert _tree(bundle) == before
    assert sorted(p.name for p in (tmp_path / "repro").iterdir()) == [BUNDLE_NAME]


def _sealed_tag(bundle: Path) -> str:
    tag = json.loads((bundle / LOCK).read_bytes())["tag"]
    assert isinstance(tag, str)
    return tag


def test_force_replaces_a_bundle_and_leaves_nothing_else(tmp_path: Path) -> None:
    seal_example(tmp_path / "repro", tag="old")
    bundle = seal_example(tmp_path / "repro", tag="new", force=True).path
    assert _sealed_tag(bundle) == "new"
    assert verify_bundle(bundle, example_trust()).findings == ()
    assert sorted(p.name for p in (tmp_path / "repro").iterdir()) == [BUNDLE_NAME]


def test_force_replaces_by_two_renames_where_exchange_is_not_supported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(source: Path, target: Path, flags: int) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    seal_example(tmp_path / "repro", tag="old")
    monkeypatch.setattr(atomic, "renameat2", unsupported)
    steps: list[str] = []
    bundle = seal_example(tmp_path / "repro", tag="new", force=True, progress=steps.append).path
    assert _sealed_tag(bundle) == "new"
    assert verify_bundle(bundle, example_trust()).findings == ()
    assert sorted(p.name for p in (tmp_path / "repro").iterdir()) == [BUNDLE_NAME]
    assert steps[-2:] == ["renamed into place", "removed the replaced bundle"]


def test_a_symlink_among_the_evidence_is_refused_naming_it_and_its_target(tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "server.log").symlink_to("/etc/hostname")
    (tmp_path / "repro").mkdir()
    bundle_content = content()
    bundle_content = sealing.BundleContent(
        name=bundle_content.name,
        manifest=bundle_content.manifest,
        manifest_source=bundle_content.manifest_source,
        lock=bundle_content.lock,
        evidence={"run": evidence},
    )
    with pytest.raises(BadInput) as refused:
        sealing.seal(bundle_content, example_key(), tmp_path / "repro")
    assert refused.value.diagnostics() == (
        "error: a symlink cannot be sealed\n"
        f"  where:    {evidence / 'server.log'}\n"
        "  found:    a symlink to /etc/hostname\n"
        "  hint:     a bundle holds regular files only: copy the file it points to instead"
    )
    assert list((tmp_path / "repro").iterdir()) == []


def test_a_fifo_among_the_evidence_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "repro").mkdir()
    bundle_content = sealing.BundleContent(
        name="b", manifest=MANIFEST, manifest_source="m", lock={}, evidence={"p": tmp_path / "pipe"}
    )
    with pytest.raises(BadInput) as refused:
        sealing.seal(bundle_content, example_key(), tmp_path / "repro")
    assert refused.value.what == "only regular files and directories can be sealed"
    assert refused.value.found == "a FIFO"
    assert list((tmp_path / "repro").iterdir()) == []


@pytest.mark.parametrize(
    ("name", "found"),
    [("../escape", "a '..' part, which escapes the bundle"), ("/abs", "an absolute path")],
)
def test_an_evidence_name_outside_the_bundle_is_refused(
    tmp_path: Path, name: str, found: str
) -> None:
    (tmp_path / "repro").mkdir()
    bundle_content = sealing.BundleContent(
        name="b", manifest=MANIFEST, manifest_source="m", lock={}, evidence={name: MANIFEST}
    )
    with pytest.raises(BadInput) as refused:
        sealing.seal(bundle_content, example_key(), tmp_path / "repro")
    assert refused.value.what == "an oracle or evidence name cannot be a path inside a bundle"
    assert refused.value.found == found
    assert list((tmp_path / "repro").iterdir()) == []


@pytest.mark.parametrize("name", [".hidden", "a/b", "", "bad name"])
def test_a_bundle_name_must_be_one_plain_directory_name(tmp_path: Path, name: str) -> None:
    with pytest.raises(BadInput, match=r"^not a bundle name$"):
        seal_example(tmp_path, name=name)


# --- crash safety -----------------------------------------------------------------------------


def _seal_killed_after(parent: Path, step: int, *, tag: str, force: bool) -> None:
    """Seal in a forked child that SIGKILLs itself right after step number `step`."""
    killed_at(lambda progress: seal_example(parent, tag=tag, force=force, progress=progress), step)


def _steps(tmp_path: Path, *, force: bool) -> list[str]:
    steps: list[str] = []
    parent = tmp_path / "count"
    if force:
        seal_example(parent, tag="old")
    seal_example(parent, tag="new", force=force, progress=steps.append)
    return steps


def _kills(tmp_path: Path, *, force: bool) -> Iterator[tuple[int, str, Path, bool]]:
    """Each step of a seal (at least 20): its number, what it said, the directory a seal killed
    after it works in, and whether the bundle was renamed into place by then."""
    steps = _steps(tmp_path, force=force)
    assert len(steps) >= 20
    renamed = steps.index("renamed into place") + 1
    for step, said in enumerate(steps, start=1):
        yield step, said, tmp_path / f"kill-{step}", step >= renamed


def _leftovers_never_verify(parent: Path) -> None:
    for leftover in parent.iterdir():
        if leftover.name != BUNDLE_NAME:
            assert verify_bundle(leftover, example_trust()).findings != (), leftover


def test_a_seal_killed_at_any_step_leaves_no_bundle_that_verifies(tmp_path: Path) -> None:
    for step, said, parent, renamed in _kills(tmp_path, force=False):
        _seal_killed_after(parent, step, tag="new", force=False)
        final = parent / BUNDLE_NAME
        if not renamed:
            assert not final.exists(), said
        else:
            assert verify_bundle(final, example_trust()).findings == ()
            assert _sealed_tag(final) == "new"
        _leftovers_never_verify(parent)


def test_a_forced_seal_killed_at_any_step_leaves_the_old_or_the_new_bundle(tmp_path: Path) -> None:
    for step, said, parent, renamed in _kills(tmp_path, force=True):
        seal_example(parent, tag="old")
        _seal_killed_after(parent, step, tag="new", force=True)
        final = parent / BUNDLE_NAME
        assert verify_bundle(final, example_trust()).findings == (), said
        assert _sealed_tag(final) == ("new" if renamed else "old")
        _leftovers_never_verify(parent)


def test_two_sources_landing_on_one_path_are_refused(tmp_path: Path) -> None:
    (tmp_path / "repro").mkdir()
    bundle_content = sealing.BundleContent(
        name="b",
        manifest=MANIFEST,
        manifest_source="m",
        lock={},
        evidence={"run": RUN / "idle-interval", "run/summary.txt": MANIFEST},
    )
    with pytest.raises(BadInput) as refused:
        sealing.seal(bundle_content, example_key(), tmp_path / "repro")
    assert refused.value.what == "two oracle or evidence files would land on one path in the bundle"
    assert refused.value.where == "evidence/run/summary.txt"
    assert list((tmp_path / "repro").iterdir()) == []
