"""docs/ci.md's recipe names what exists: each bundle it verifies or replays is committed with its
launcher, each option it gives a launcher is one the launcher (or the `repro launch` it hands the
rest to) takes, and every manifest its check job checks passes `repro check`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from repro_serving.builder.cli import main

RECIPE = (REPO_ROOT / "docs" / "ci.md").read_text("utf-8")
LAUNCHED = re.compile(
    r"repro/(?P<bundle>\$\{\{ matrix\.bundle \}\}|[^/\s]+)/launch(?P<options>[^\n]*)"
)
MATRIX = re.compile(r"bundle: \[(?P<names>[^\]]+)\]")


def test_the_recipe_verifies_every_committed_bundle_and_replays_only_committed_ones() -> None:
    matrix = MATRIX.search(RECIPE)
    assert matrix is not None, "the verify job names its bundles in a matrix"
    listed = sorted(name.strip() for name in matrix["names"].split(","))
    committed = sorted(p.name for p in (REPO_ROOT / "repro").iterdir() if (p / "launch").is_file())
    assert listed == committed
    replayed = {m["bundle"] for m in LAUNCHED.finditer(RECIPE)} - {"${{ matrix.bundle }}"}
    assert replayed and replayed <= set(committed)


def test_every_option_the_recipe_gives_a_launcher_is_taken() -> None:
    launcher = (REPO_ROOT / "builder" / "handoff" / "launch.sh").read_text("utf-8")
    usage = launcher.split("\n\n", 1)[0]
    used = {o for m in LAUNCHED.finditer(RECIPE) for o in re.findall(r"--[a-z-]+", m["options"])}
    assert {"--verify-only", "--key", "--work"} <= used, "both jobs' launchers are read"
    passed_on = {"--signing-key"}  # handed to `repro launch`, whose options the README lists
    assert sorted(o for o in used if o not in usage and o not in passed_on) == []


@pytest.mark.parametrize("manifest", sorted((REPO_ROOT / "manifests").glob("*.toml")))
def test_every_manifest_the_check_job_checks_passes(manifest: Path) -> None:
    assert "for manifest in manifests/*.toml; do repro check" in RECIPE
    assert main(["check", str(manifest)]) == 0
