"""The committed example bundle `repro/tiny-cpu/`, built on another machine, holds here.

`repro build manifests/tiny-cpu.toml` sealed it once; every fresh clone (CI included) verifies
it offline, verifies it against its own host (same wheel bytes, other paths: the placeholders
carry it), and replays it: the candidate profile must reproduce the sealed teacher exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from builder import tinymodel
from builder.cli import main
from builder.keys import SigningKey, TrustedKeys
from builder.verify import verify
from launch.replay import launch

pytestmark = pytest.mark.server

BUNDLE = REPO_ROOT / "repro" / "tiny-cpu"
ANCHOR = REPO_ROOT / "manifests"
PUBLIC = REPO_ROOT / "keys" / "example.pub"
TRUSTED = TrustedKeys.from_key_file(PUBLIC)


@pytest.fixture(scope="module", autouse=True)
def tiny_model() -> None:
    tinymodel.generate(REPO_ROOT / "build" / "tiny-llama")


def test_the_committed_bundle_verifies_offline_from_the_cli(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["verify", str(BUNDLE), "--key", str(PUBLIC), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0, [c for c in document["claims"] if not c["ok"]]
    assert document["ok"] and document["drifts"] == []


def test_the_committed_bundle_holds_on_this_host() -> None:
    report = verify(BUNDLE, TRUSTED, host=True, anchor=ANCHOR)
    assert report.findings == (), [(d.kind, d.subject, d.observed) for d in report.findings]
    assert report.ok


def test_the_committed_bundle_replays_here(tmp_path: Path) -> None:
    key = SigningKey.from_path(REPO_ROOT / "keys" / "example.key")
    replay = launch(BUNDLE, TRUSTED, runs=tmp_path, signing_key=key, anchor=ANCHOR)
    failed = [v.summary for v in replay.run.verdicts if not v.passed]
    assert replay.run.passed, failed
    assert replay.sealed is not None and verify(replay.sealed.path, TRUSTED).ok
