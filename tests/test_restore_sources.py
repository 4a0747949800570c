"""Restoring sources for real: git repositories made here are cloned at the pinned commit, the
declared patches checked and applied, the result proven by the source observer; and a restore
SIGKILLed at every step leaving nothing at the target that a restore calls ALREADY."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from drifts import drift_of
from gitrepo import ENGINE, commit_all, run_git
from killed import killed_at

from repro_serving.builder.documents.manifest import Source
from repro_serving.builder.documents.sources import compare
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.observe.sources import observe_source
from repro_serving.builder.restore.sources import restore_source
from repro_serving.builder.restore.step import Action, Progress, StepResult, no_progress

MISSING = "0123456789abcdef0123456789abcdef01234567"

_commit = drift_of(DriftKind.SOURCE_COMMIT, subject="source engine")
_patch_file = drift_of(
    DriftKind.SOURCE_PATCH,
    subject="source engine: patch patches/fix.patch",
    why="the patch file is not the pinned one",
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Upstream:
    """A repository to clone from, with two commits; `first` is what the sources pin."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.repo = base / "upstream"
        self.repo.mkdir()
        run_git(self.repo, "init", "--quiet")
        (self.repo / "engine.py").write_text(ENGINE)
        (self.repo / ".gitignore").write_text("build/\n")
        self.first = commit_all(self.repo, "first")
        (self.repo / "README").write_text("engine\n")
        self.second = commit_all(self.repo, "second")

    def patch(self, name: str, old: str, new: str) -> Path:
        """A patch of engine.py as the first commit has it, made by git."""
        scratch = self.base / f"scratch-{name}"
        run_git(self.base, "clone", "--quiet", str(self.repo), str(scratch))
        run_git(scratch, "checkout", "--quiet", "--detach", self.first)
        (scratch / "engine.py").write_text(ENGINE.replace(old, new))
        patch = self.base / "patches" / name
        patch.parent.mkdir(exist_ok=True)
        patch.write_text(run_git(scratch, "diff") + "\n")
        return patch

    def source(self, *patches: Path, commit: str | None = None, url: str | None = "") -> Source:
        return Source.model_validate(
            {
                "name": "engine",
                "path": "engine",
                "commit": commit or self.first,
                **({"url": url or str(self.repo)} if url is not None else {}),
                "patches": [
                    {"path": str(p.relative_to(self.base)), "sha256": sha256(p)} for p in patches
                ],
            }
        )


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path)


def _work_tree(upstream: Upstream) -> Path:
    return upstream.base / "work" / "engine"


def _restore(
    upstream: Upstream, pins: Source, *, progress: Progress = no_progress, force: bool = False
) -> StepResult:
    return restore_source(pins, _work_tree(upstream), upstream.base, progress=progress, force=force)


def _drifts(upstream: Upstream, pins: Source) -> list[Drift]:
    """What the source observer finds at the work tree; restore_source calls [] ALREADY."""
    at = pins.model_copy(update={"path": str(_work_tree(upstream))})
    return compare(pins, observe_source(at, upstream.base))


def _tree(root: Path) -> dict[str, tuple[int, int, bytes]]:
    return {
        path.relative_to(root).as_posix(): (
            path.lstat().st_ino,
            path.lstat().st_mtime_ns,
            path.read_bytes() if path.is_file() and not path.is_symlink() else b"",
        )
        for path in sorted(root.rglob("*"))
    }


def _siblings(upstream: Upstream) -> list[str]:
    return sorted(p.name for p in (upstream.base / "work").iterdir())


# --- cloning at the pinned commit -----------------------------------------------------------------


def test_a_source_is_cloned_at_the_pinned_commit_and_proven(upstream: Upstream) -> None:
    pins = upstream.source()
    said: list[str] = []
    result = _restore(upstream, pins, progress=said.append)
    assert result == StepResult(
        kind="source",
        subject="engine",
        target=str(_work_tree(upstream)),
        action=Action.RESTORED,
        detail=f"cloned from {upstream.repo} at commit {upstream.first}",
    )
    tree = _work_tree(upstream)
    assert run_git(tree, "rev-parse", "HEAD") == upstream.first
    assert run_git(tree, "status", "--porcelain", "--untracked-files=all") == ""
    assert not (tree / "README").exists()  # of the second commit only
    assert _drifts(upstream, pins) == []
    assert [message.split(" ")[0] for message in said] == [
        "cloning", "checking", "proving", "renamed",
    ]  # fmt: skip
    assert _siblings(upstream) == ["engine"]


def test_a_second_restore_is_already_and_touches_nothing(upstream: Upstream) -> None:
    pins = upstream.source()
    _restore(upstream, pins)
    before = _tree(upstream.base / "work")
    said: list[str] = []
    result = _restore(upstream, pins, progress=said.append)
    assert (result.action, result.detail) == (Action.ALREADY, f"holds commit {upstream.first}")
    assert said == []
    assert _tree(upstream.base / "work") == before


def test_an_existing_empty_directory_is_restored_into(upstream: Upstream) -> None:
    _work_tree(upstream).mkdir(parents=True)
    assert _restore(upstream, upstream.source()).action is Action.RESTORED
    assert _siblings(upstream) == ["engine"]


def test_a_relative_url_resolves_against_the_manifests_directory(upstream: Upstream) -> None:
    pins = upstream.source(url="upstream")
    result = _restore(upstream, pins)
    assert result.action is Action.RESTORED, result.detail
    assert run_git(_work_tree(upstream), "rev-parse", "HEAD") == upstream.first


def test_a_commit_the_repository_lacks_is_refused_naming_url_and_commit(
    upstream: Upstream,
) -> None:
    result = _restore(upstream, upstream.source(commit=MISSING))
    assert result.action is Action.REFUSED
    assert result.detail == f"{upstream.repo} has no commit {MISSING}"
    assert result.drifts == (
        _commit(
            f"commit {MISSING} in {upstream.repo}",
            "the repository has no such commit",
            "the pinned commit cannot be checked out from the source's url",
        ),
    )
    assert _siblings(upstream) == []


def test_a_url_git_cannot_clone_is_refused_with_gits_last_line(upstream: Upstream) -> None:
    nowhere = upstream.base / "nowhere"
    result = _restore(upstream, upstream.source(url=str(nowhere)))
    assert result.action is Action.REFUSED
    assert result.detail == (
        f"git clone failed (exit status 128): fatal: repository '{nowhere}' does not exist"
    )
    assert _siblings(upstream) == []


def test_a_source_without_url_is_refused(upstream: Upstream) -> None:
    result = _restore(upstream, upstream.source(url=None))
    assert result.action is Action.REFUSED
    assert result.detail.startswith("no url to clone this source from: ")
    assert [d.kind for d in result.drifts] == [DriftKind.SOURCE_TREE]
    assert not (upstream.base / "work").exists()


def test_a_work_tree_at_another_commit_is_refused_and_force_replaces_it(
    upstream: Upstream,
) -> None:
    tree = _work_tree(upstream)
    _restore(upstream, upstream.source(commit=upstream.second))
    before = _tree(upstream.base / "work")
    pins = upstream.source()
    refused = _restore(upstream, pins)
    assert refused.action is Action.REFUSED
    assert refused.detail == (
        "the work tree does not hold the pinned commit and patches; force replaces it"
    )
    assert refused.drifts == (
        _commit(
            f"commit {upstream.first}",
            f"commit {upstream.second}",
            "the work tree is checked out at another commit",
        ),
    )
    assert _tree(upstream.base / "work") == before
    forced = _restore(upstream, pins, force=True)
    assert forced.action is Action.RESTORED
    assert run_git(tree, "rev-parse", "HEAD") == upstream.first
    assert _siblings(upstream) == ["engine"]  # the old tree removed
    assert _restore(upstream, pins).action is Action.ALREADY


def test_a_work_tree_with_a_change_is_refused_and_left(upstream: Upstream) -> None:
    pins = upstream.source()
    _restore(upstream, pins)
    (_work_tree(upstream) / "engine.py").write_text("local edit\n")
    result = _restore(upstream, pins)
    assert result.action is Action.REFUSED
    assert [d.kind for d in result.drifts] == [DriftKind.SOURCE_DIRTY]
    assert (_work_tree(upstream) / "engine.py").read_text() == "local edit\n"


# --- patches --------------------------------------------------------------------------------------


def test_a_pinned_patch_is_applied_and_proven(upstream: Upstream) -> None:
    patch = upstream.patch("fix.patch", "x + 1", "x + 2")
    pins = upstream.source(patch)
    said: list[str] = []
    result = _restore(upstream, pins, progress=said.append)
    assert result.action is Action.RESTORED
    assert result.detail == (
        f"cloned from {upstream.repo} at commit {upstream.first}, 1 patch applied"
    )
    assert "applying patch patches/fix.patch" in said
    assert (_work_tree(upstream) / "engine.py").read_text() == ENGINE.replace("x + 1", "x + 2")
    assert _drifts(upstream, pins) == []
    assert _restore(upstream, pins).action is Action.ALREADY


def test_chained_patches_are_applied_in_their_order(upstream: Upstream) -> None:
    first = upstream.patch("1.patch", "x + 1", "x + 2")
    scratch = upstream.base / "scratch-1.patch"
    run_git(scratch, "commit", "--quiet", "-am", "one")
    (scratch / "engine.py").write_text(ENGINE.replace("x + 1", "x + 3"))
    second = upstream.base / "patches" / "2.patch"
    second.write_text(run_git(scratch, "diff") + "\n")
    pins = upstream.source(first, second)
    assert _restore(upstream, pins).action is Action.RESTORED
    assert (_work_tree(upstream) / "engine.py").read_text() == ENGINE.replace("x + 1", "x + 3")
    assert _drifts(upstream, pins) == []


def test_a_patch_file_with_other_bytes_is_refused_before_anything_is_cloned(
    upstream: Upstream,
) -> None:
    patch = upstream.patch("fix.patch", "x + 1", "x + 2")
    pins = upstream.source(patch)
    patch.write_text("Reviewed-by: nobody\n" + patch.read_text())  # git would still apply it
    said: list[str] = []
    result = _restore(upstream, pins, progress=said.append)
    assert result.action is Action.REFUSED
    assert result.detail == "patch patches/fix.patch is not the pinned one: nothing was applied"
    assert result.drifts == (
        _patch_file(f"sha256 {pins.patches[0].sha256}", f"sha256 {sha256(patch)}"),
    )
    assert said == []
    assert not (upstream.base / "work").exists()


def test_a_missing_patch_file_is_refused(upstream: Upstream) -> None:
    patch = upstream.patch("fix.patch", "x + 1", "x + 2")
    pins = upstream.source(patch)
    patch.unlink()
    result = _restore(upstream, pins)
    assert result.action is Action.REFUSED
    assert result.drifts == (_patch_file(f"sha256 {pins.patches[0].sha256}", "missing"),)
    assert not (upstream.base / "work").exists()


def test_a_pinned_patch_that_does_not_apply_is_refused_naming_it(upstream: Upstream) -> None:
    patch = upstream.patch("fix.patch", "x + 1", "x + 2")
    pins = upstream.source(patch, commit=upstream.second)
    run_git(upstream.repo, "rm", "--quiet", "engine.py")
    third = commit_all(upstream.repo, "third")
    result = _restore(upstream, upstream.source(patch, commit=third))
    assert result.action is Action.REFUSED
    assert result.detail.startswith("patch patches/fix.patch: git apply failed (exit status 1): ")
    assert "engine.py" in result.detail
    assert _siblings(upstream) == []
    assert _restore(upstream, pins).action is Action.RESTORED  # it applies at the second


# --- killed at every step -------------------------------------------------------------------------


def _restore_killed_at(upstream: Upstream, pins: Source, step: int, *, force: bool) -> None:
    """Restore in a forked child that SIGKILLs itself right after progress message `step`."""
    killed_at(lambda progress: _restore(upstream, pins, progress=progress, force=force), step)


def _reset(upstream: Upstream, existing: str | None) -> None:
    work = upstream.base / "work"
    if work.exists():
        subprocess.run(["rm", "-rf", str(work)], check=True)
    if existing is not None:
        _restore(upstream, upstream.source(commit=existing))


@pytest.mark.parametrize("force", [False, True], ids=["new", "forced"])
def test_a_restore_killed_at_any_step_leaves_nothing_a_restore_calls_already(
    upstream: Upstream, force: bool
) -> None:
    pins = upstream.source(upstream.patch("fix.patch", "x + 1", "x + 2"))
    existing = upstream.second if force else None
    _reset(upstream, existing)
    steps: list[str] = []
    _restore(upstream, pins, progress=steps.append, force=force)
    assert len(steps) == 5
    renamed = steps.index("renamed into place") + 1
    for step in range(1, len(steps) + 1):
        _reset(upstream, existing)
        _restore_killed_at(upstream, pins, step, force=force)
        held = _drifts(upstream, pins) == []
        assert held == (step >= renamed), steps[step - 1]
        if not held and existing is None:
            assert not _work_tree(upstream).exists()
        if not held and existing is not None:
            assert run_git(_work_tree(upstream), "rev-parse", "HEAD") == existing
        after = _restore(upstream, pins, force=force)
        assert after.action is (Action.ALREADY if held else Action.RESTORED)
