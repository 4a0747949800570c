"""Pinning the wheel of each distribution when the index (an offline wheelhouse) serves only
some: the joint download fails, each distribution is then asked for alone, several at once, and
each one's answer is its own."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from repro_serving.builder.documents.python import Distribution
from repro_serving.builder.observe import artifacts


def test_each_distribution_is_asked_alone_at_once_and_answered_by_its_own_download(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    names = [f"pkg{i}" for i in range(12)]
    wanted = [
        Distribution(name=n, version="1.0", dist_info=f"{{site}}/{n}-1.0.dist-info") for n in names
    ]
    running, peak, lock = 0, 0, threading.Lock()
    listings: list[str] = []

    def download(
        python: Path, requirements: Sequence[str], destination: Path
    ) -> subprocess.CompletedProcess[str]:
        nonlocal running, peak
        listings.extend(requirements)
        if len(requirements) > 1:
            return subprocess.CompletedProcess([], 1, "", "ERROR: No matching distribution\n")
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        (name,) = requirements
        return subprocess.CompletedProcess([], 1, "", f"ERROR: none for {name}\n")

    monkeypatch.setattr(artifacts, "download", download)
    monkeypatch.setattr(artifacts, "DOWNLOAD_WORKERS", 4)
    facts = artifacts.resolve_artifacts(Path("/usr/bin/python3"), tmp_path, wanted)
    assert facts.artifacts == {}
    assert facts.unresolved == {
        n: f"the package index serves no wheel of it: ERROR: none for {n}==1.0"
        for n in sorted(names)
    }
    assert sorted(listings) == sorted(
        [*(f"{n}==1.0" for n in names), *(f"{n}==1.0" for n in names)]
    )
    assert 1 < peak <= 4


def test_concurrent_downloads_write_listings_of_their_own(tmp_path: Path) -> None:
    """Each `pip download` reads a requirements file of its own, never one another wrote."""
    seen = []

    def run(command: list[str], **_kwargs: object) -> subprocess.CompletedProcess[str]:
        listing = Path(command[command.index("-r") + 1])
        seen.append((listing, listing.read_text()))
        return subprocess.CompletedProcess(command, 0, "", "")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(artifacts.subprocess, "run", run)
        artifacts.download(Path("/usr/bin/python3"), ["a==1"], tmp_path)
        artifacts.download(Path("/usr/bin/python3"), ["b==2"], tmp_path)
    assert seen[0][0] != seen[1][0]
    assert [text for _path, text in seen] == ["a==1\n", "b==2\n"]
