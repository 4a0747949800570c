"""The source observer on real git repositories made here, with git itself as the judge."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from drifts import drift_of
from gitrepo import ENGINE, commit_all, run_git

from repro_serving.builder.documents.manifest import Source
from repro_serving.builder.documents.sources import SourceFacts, compare
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import NotObservable
from repro_serving.builder.observe.sources import observe_source


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """The manifest's directory: the work tree `engine/` and the patches live under it."""
    tree = tmp_path / "engine"
    tree.mkdir()
    run_git(tree, "init", "--quiet")
    (tree / "engine.py").write_text(ENGINE)
    (tree / ".gitignore").write_text("build/\n")
    commit_all(tree, "first")
    (tree / "README").write_text("engine\n")
    commit_all(tree, "second")
    return tmp_path


def head(base: Path) -> str:
    return run_git(base / "engine", "rev-parse", "HEAD")


def write_patch(base: Path, name: str, old: str, new: str) -> Path:
    """A patch made by git from an edit of engine.py as it is now (staged first, so that the
    patch holds this edit alone), the edit then undone."""
    tree = base / "engine"
    run_git(tree, "add", "engine.py")
    original = (tree / "engine.py").read_text()
    (tree / "engine.py").write_text(original.replace(old, new))
    patch = base / "patches" / name
    patch.parent.mkdir(exist_ok=True)
    patch.write_text(run_git(tree, "diff") + "\n")
    (tree / "engine.py").write_text(original)
    return patch


def apply(base: Path, patch: Path) -> None:
    run_git(base / "engine", "apply", str(patch))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source(base: Path, *patches: Path, commit: str | None = None, clean: bool = True) -> Source:
    return Source.model_validate(
        {
            "name": "engine",
            "path": "engine",
            "commit": commit or head(base),
            "clean": clean,
            "patches": [{"path": str(p.relative_to(base)), "sha256": sha256(p)} for p in patches],
        }
    )


def observe(base: Path, pins: Source) -> tuple[SourceFacts, list[Drift]]:
    facts = observe_source(pins, base)
    return facts, compare(pins, facts)


_dirty = drift_of(
    DriftKind.SOURCE_DIRTY,
    expected="as the commit with the declared patches has it",
    why="the work tree holds a change beyond the declared patches",
)
_patch = drift_of(DriftKind.SOURCE_PATCH, subject="source engine: patch patches/fast.patch")
_patch_file = drift_of(
    DriftKind.SOURCE_PATCH,
    subject="source engine: patch patches/fast.patch",
    why="the patch file is not the pinned one",
)
_commit = drift_of(
    DriftKind.SOURCE_COMMIT,
    subject="source engine",
    why="the work tree is checked out at another commit",
)
_no_tree = drift_of(
    DriftKind.SOURCE_TREE, subject="source engine", expected="the top directory of a git work tree"
)


def dirty(path: str, change: str) -> Drift:
    return _dirty(f"source engine: {path}", change)


# --- commit and cleanliness -----------------------------------------------------------------------


def test_a_clean_tree_at_the_pinned_commit_gives_no_drift(base: Path) -> None:
    (base / "engine" / "build").mkdir()
    (base / "engine" / "build" / "engine.so").write_bytes(b"\x7fELF")  # ignored: not a change

    facts, drifts = observe(base, source(base))

    assert drifts == []
    assert facts.commit == head(base)
    assert len(facts.commit) == 40
    assert facts.status == ()


def test_a_tree_at_another_commit_is_drift_naming_both(base: Path) -> None:
    first = run_git(base / "engine", "rev-parse", "HEAD~1")
    second = head(base)
    run_git(base / "engine", "checkout", "--quiet", first)

    _, drifts = observe(base, source(base, commit=second))

    assert drifts == [_commit(f"commit {second}", f"commit {first}")]


def test_a_modified_tracked_file_is_drift(base: Path) -> None:
    (base / "engine" / "README").write_text("engine, edited\n")

    facts, drifts = observe(base, source(base))

    assert facts.status == (" M README",)
    assert drifts == [dirty("README", "modified")]


def test_an_untracked_file_is_drift(base: Path) -> None:
    (base / "engine" / "sub").mkdir()
    (base / "engine" / "sub" / "fast_path.py").write_text("x = 1\n")

    facts, drifts = observe(base, source(base))

    assert facts.status == ("?? sub/fast_path.py",)
    assert drifts == [dirty("sub/fast_path.py", "added")]


def test_a_deleted_file_is_drift(base: Path) -> None:
    (base / "engine" / "README").unlink()

    _, drifts = observe(base, source(base))

    assert drifts == [dirty("README", "deleted")]


def test_changes_are_recorded_but_not_drift_when_clean_is_not_required(base: Path) -> None:
    (base / "engine" / "README").write_text("engine, edited\n")

    facts, drifts = observe(base, source(base, clean=False))

    assert drifts == []
    assert [(c.path, c.change) for c in facts.changes] == [("README", "modified")]


# --- patches --------------------------------------------------------------------------------------


def test_a_tree_carrying_exactly_its_declared_patch_is_clean(base: Path) -> None:
    patch = write_patch(base, "fast.patch", "x + 1", "x + 2")
    apply(base, patch)

    facts, drifts = observe(base, source(base, patch))

    assert drifts == []
    assert facts.status == (" M engine.py",)
    assert [(p.path, p.applied) for p in facts.patches] == [("patches/fast.patch", True)]


def test_chained_patches_over_the_same_lines_are_applied_in_order(base: Path) -> None:
    first = write_patch(base, "1.patch", "x + 1", "x + 2")
    apply(base, first)
    second = write_patch(base, "2.patch", "x + 2", "x + 3")
    apply(base, second)

    _, drifts = observe(base, source(base, first, second))

    assert drifts == []


def test_a_declared_patch_not_applied_is_drift(base: Path) -> None:
    patch = write_patch(base, "fast.patch", "x + 1", "x + 2")

    facts, drifts = observe(base, source(base, patch))

    assert facts.changes == ()
    assert drifts == [
        _patch(
            "applied in the work tree",
            "not applied: it does not reverse-apply",
            "a declared patch is not in the work tree",
        )
    ]


def test_a_change_beside_the_applied_patch_is_drift_and_the_patch_is_not(base: Path) -> None:
    patch = write_patch(base, "fast.patch", "x + 1", "x + 2")
    apply(base, patch)
    tree = base / "engine"
    (tree / "engine.py").write_text((tree / "engine.py").read_text().replace("2 * x", "3 * x"))

    facts, drifts = observe(base, source(base, patch))

    assert [p.applied for p in facts.patches] == [True]
    assert drifts == [dirty("engine.py", "modified")]


def test_a_modified_patch_file_is_drift_naming_both_hashes(base: Path) -> None:
    patch = write_patch(base, "fast.patch", "x + 1", "x + 2")
    apply(base, patch)
    pins = source(base, patch)
    pinned = sha256(patch)
    patch.write_text("Reviewed-by: nobody\n" + patch.read_text())  # git still applies it

    _, drifts = observe(base, pins)

    assert drifts == [_patch_file(f"sha256 {pinned}", f"sha256 {sha256(patch)}")]


def test_a_missing_patch_file_is_one_drift(base: Path) -> None:
    patch = write_patch(base, "fast.patch", "x + 1", "x + 2")
    pins = source(base, patch)
    patch.unlink()

    _, drifts = observe(base, pins)

    assert drifts == [_patch_file(f"sha256 {pins.patches[0].sha256}", "missing")]


def test_observing_writes_nothing_into_the_repository(base: Path) -> None:
    patch = write_patch(base, "fast.patch", "x + 1", "x + 2")
    apply(base, patch)
    (base / "engine" / "new.py").write_text("new = True\n")
    git_dir = base / "engine" / ".git"
    before = {p: p.read_bytes() for p in git_dir.rglob("*") if p.is_file()}

    observe(base, source(base, patch))

    assert {p: p.read_bytes() for p in git_dir.rglob("*") if p.is_file()} == before


# --- no work tree ---------------------------------------------------------------------------------


def test_a_missing_tree_is_drift(base: Path) -> None:
    pins = source(base)
    (base / "engine").rename(base / "elsewhere")

    assert observe(base, pins)[1] == [_no_tree("no directory", "the source tree is missing")]


def test_a_directory_that_is_no_git_tree_is_drift(base: Path) -> None:
    pins = source(base)
    shutil.rmtree(base / "engine" / ".git")

    assert observe(base, pins)[1] == [
        _no_tree(
            "not a git work tree", "only a work tree of its own has a commit and a state to judge"
        )
    ]


def test_a_plain_directory_inside_another_work_tree_is_drift_naming_that_tree(
    base: Path,
) -> None:
    (base / "engine" / "vendored").mkdir()
    (base / "engine" / "vendored" / "lib.py").write_text("x = 1\n")
    commit_all(base / "engine", "vendor")
    pins = Source.model_validate(
        {"name": "engine", "path": "engine/vendored", "commit": head(base)}
    )

    facts, drifts = observe(base, pins)

    assert facts.state == "not-a-work-tree"
    assert drifts == [
        _no_tree(
            f"a directory inside the work tree {base / 'engine'}",
            "only a work tree of its own has a commit and a state to judge",
        )
    ]


def test_without_git_the_source_cannot_be_observed(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pins = source(base)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))

    with pytest.raises(NotObservable) as raised:
        observe_source(pins, base)

    assert raised.value.what == "cannot run git"
    assert raised.value.hint == "install git and check that it runs"
