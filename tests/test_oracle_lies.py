"""Lies about the oracle of a built bundle, re-sealed with the example key (public on purpose):
the signature and every digest hold, the lock's digests of the teacher and the manifest are made
to agree, so only recomputing the oracle from the sealed bench rows can refuse them.

Each lie is one an attacker reproduced against an earlier verifier: the teacher's rows
relabelled (every replay's gates find a teacher row by its prompt), the teacher of another suite,
a throughput window the rows do not have, and a throughput the rows cannot give at all.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bundle_assets import resealed
from conftest import REPO_ROOT

from repro_serving.builder.sealing import bundle
from repro_serving.builder.sealing.keys import TrustedKeys
from repro_serving.builder.verify import verify

COMMITTED = REPO_ROOT / "repro" / "tiny-cpu"
TRUSTED = TrustedKeys.from_key_file(REPO_ROOT / "keys" / "example.pub")
MANIFEST_SOURCE = "manifests/tiny-cpu.toml"
TEACHER = "oracle/teacher.json"
TEACHER_CLAIM = "oracle/teacher.json = bench rows"


def _lock(root: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((root / bundle.LOCK).read_text())
    return document


def _edit(change: Callable[[Path, dict[str, Any]], None]) -> Callable[[Path], None]:
    """`change` edits the staged bundle and its lock; the lock's digests of the teacher and of
    the manifest are then made to agree with the files, as an attacker's own sealer would."""

    def edit(root: Path) -> None:
        lock = _lock(root)
        change(root, lock)
        lock["oracle"]["teacher_sha256"] = _sha256(root / TEACHER)
        lock["bundle"]["manifest_sha256"] = _sha256(root / bundle.MANIFEST)
        (root / bundle.LOCK).write_text(json.dumps(lock))

    return edit


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _teacher(change: Callable[[dict[str, Any]], None]) -> Callable[[Path, dict[str, Any]], None]:
    def edit(root: Path, _lock: dict[str, Any]) -> None:
        teacher = json.loads((root / TEACHER).read_text())
        change(teacher)
        (root / TEACHER).write_text(json.dumps(teacher))

    return edit


def _swap_prompts(teacher: dict[str, Any]) -> None:
    first, second = teacher["rows"][0], teacher["rows"][1]
    first["prompt_id"], second["prompt_id"] = second["prompt_id"], first["prompt_id"]


def _another_suite(teacher: dict[str, Any]) -> None:
    teacher["suite"] = "another-suite"


def _another_window(_root: Path, lock: dict[str, Any]) -> None:
    lock["oracle"]["throughput"]["tokens"] = 64


def _no_window_the_rows_have(root: Path, lock: dict[str, Any]) -> None:
    """The manifest's window made one token longer than every row: nothing is measurable, and
    the lock keeps the rate it stated, the teacher states none."""
    rows = {len(r["token_ids"]) for r in json.loads((root / TEACHER).read_text())["rows"]}
    manifest = root / bundle.MANIFEST
    text = manifest.read_text()
    window = lock["oracle"]["throughput"]["tokens"]
    assert max(rows) <= window, "every sealed row ends within the window"
    changed = re.sub(
        r"(\[oracle\.gates\.throughput\][^\[]*?tokens = )\d+", rf"\g<1>{window + 1}", text
    )
    assert changed != text
    manifest.write_text(changed)
    _teacher(lambda teacher: teacher.update(conventional_tok_s=None))(root, lock)


LIES = {
    "two teacher rows relabelled": (_teacher(_swap_prompts), TEACHER_CLAIM),
    "the teacher of another suite": (_teacher(_another_suite), TEACHER_CLAIM),
    "another throughput window": (_another_window, "oracle.throughput.tokens"),
    "a throughput the rows cannot give": (_no_window_the_rows_have, "oracle.throughput"),
}


@pytest.mark.parametrize("case", LIES, ids=list(LIES))
def test_an_oracle_lie_resealed_is_refused_naming_it(tmp_path: Path, case: str) -> None:
    change, claim = LIES[case]
    copy = resealed(COMMITTED, tmp_path, _edit(change), MANIFEST_SOURCE)
    report = verify(copy, TRUSTED)
    assert report.findings == (), "the signature and every digest hold"
    failed = {c.claim: c.detail for c in report.checks if not c.ok}
    assert claim in failed, sorted(failed)


def test_the_untouched_copy_resealed_the_same_way_verifies(tmp_path: Path) -> None:
    """The control: the same re-sealing with no lie passes, so each refusal above is the lie's."""
    copy = resealed(COMMITTED, tmp_path, _edit(lambda _root, _lock: None), MANIFEST_SOURCE)
    report = verify(copy, TRUSTED)
    assert [c.claim for c in report.checks if not c.ok] == []
