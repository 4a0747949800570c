"""Source trees: the git work trees a stack runs from, their commit, patches and cleanliness.

This module owns the source facts (`observe_source`) and their pure judgement against a
`[[source]]` (`compare`). The real `git` binary is the judge of every fact; repro parses none of
git's files itself. Observing writes nothing into the repository: the work tree's state is
staged into a temporary index whose new objects go to a temporary object directory (the
repository's own objects are only read, as alternates), and `git status` runs without its
optional index refresh.

The rule for a tree with declared patches: the expected work tree is the commit with the
patches applied in order, so a tree carrying exactly those patches is clean, and a pristine
tree is not (its patches are missing). Concretely, the work tree (tracked files and untracked
ones, ignored files aside, as `git status --untracked-files=all --ignored=no` sees it) is staged
into the temporary index; each patch, last first, is reverse-applied there (`git apply --cached
--reverse`, the chained form of `git apply --check --reverse`: a later patch may touch what an
earlier one wrote); a patch that does not reverse-apply is not applied. What then still differs
from the commit is a change beyond the patches. The index plays no part: the bytes in the work
tree are what runs.

A missing directory, and a directory that is not the top of a git work tree of its own (a plain
directory inside another repository would report that repository's commit), are drift, not
errors: they are facts of this host that disagree with the manifest. A missing or failing `git`
is `NotObservable`.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from repro_serving.builder.documents.manifest import Source
from repro_serving.builder.documents.sources import Change, PatchFacts, SourceFacts
from repro_serving.builder.errors import NotObservable
from repro_serving.builder.hashing import sha256_file
from repro_serving.builder.observe.program import run_program

GIT_TIMEOUT_S: Final = 120.0
# Configuration a repository could use to run a program while it is only being looked at.
_SAFE_CONFIG: Final = ("-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false")
_NOT_A_WORK_TREE: Final = ("not a git repository", "must be run in a work tree")
_CHANGES: Final = {"A": "added", "D": "deleted", "M": "modified", "T": "type changed"}


# --- observing ------------------------------------------------------------------------------------


def observe_source(source: Source, base: Path) -> SourceFacts:
    """The facts of `source`, its paths resolved against `base` (the manifest's directory)."""
    directory = base / source.path
    if not directory.is_dir():
        return SourceFacts(name=source.name, state="missing")
    toplevel = _toplevel(directory)
    if toplevel is None or not Path(toplevel).samefile(directory):
        return SourceFacts(name=source.name, state="not-a-work-tree", toplevel=toplevel)
    commit = _head(directory)
    status = _status(directory)
    patch_files = [base / patch.path for patch in source.patches]
    applied, changes = _against_patches(directory, commit, patch_files, bool(status))
    return SourceFacts(
        name=source.name,
        state="work-tree",
        commit=commit,
        status=status,
        changes=changes,
        patches=tuple(
            PatchFacts(
                path=patch.path,
                sha256=sha256_file(file) if file.is_file() else None,
                applied=is_applied,
            )
            for patch, file, is_applied in zip(source.patches, patch_files, applied, strict=True)
        ),
    )


def _toplevel(directory: Path) -> str | None:
    done = git(directory, "rev-parse", "--show-toplevel", allowed=(128,))
    if done.returncode != 0:
        if any(text in done.stderr for text in _NOT_A_WORK_TREE):
            return None
        raise _git_failed(directory, ("rev-parse", "--show-toplevel"), done)
    return done.stdout.strip()


def _head(directory: Path) -> str | None:
    done = git(directory, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", allowed=(1,))
    return done.stdout.strip() or None


def _status(directory: Path) -> tuple[str, ...]:
    done = git(
        directory,
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--ignored=no",
        "--no-renames",
    )
    return tuple(entry for entry in done.stdout.split("\0") if entry)


def _against_patches(
    directory: Path, commit: str | None, patches: Sequence[Path], dirty: bool
) -> tuple[list[bool], tuple[Change, ...]]:
    """Whether each patch is applied, and what differs beyond them (module docstring)."""
    if commit is None or not (dirty or patches):
        return [False] * len(patches), ()
    objects = git(directory, "rev-parse", "--path-format=absolute", "--git-path", "objects")
    with tempfile.TemporaryDirectory(prefix="repro-git-") as scratch:
        (Path(scratch) / "objects").mkdir()
        env = {
            "GIT_INDEX_FILE": str(Path(scratch) / "index"),
            "GIT_OBJECT_DIRECTORY": str(Path(scratch) / "objects"),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": objects.stdout.strip(),
        }
        git(directory, "read-tree", commit, env=env)
        git(directory, "add", "--all", env=env)
        applied = [file.is_file() and _reverse(directory, file, env) for file in reversed(patches)]
        diff = git(
            directory, "diff", "--cached", "--name-status", "--no-renames", "-z", commit, env=env
        )
    return list(reversed(applied)), _changes(diff.stdout)


def _reverse(directory: Path, patch: Path, env: Mapping[str, str]) -> bool:
    done = git(
        directory, "apply", "--cached", "--reverse", str(patch.absolute()), env=env, allowed=(1,)
    )
    return done.returncode == 0


def _changes(name_status: str) -> tuple[Change, ...]:
    fields = [field for field in name_status.split("\0") if field]
    pairs = zip(fields[::2], fields[1::2], strict=True)
    return tuple(Change(path=path, change=_CHANGES.get(code, code)) for code, path in pairs)


def git(
    directory: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    allowed: Sequence[int] = (),
) -> subprocess.CompletedProcess[str]:
    """Run `git` in `directory` with a clean environment: no inherited `GIT_*` variable may
    redirect it, messages in English, no optional lock taken on the repository's index."""
    argv = ["git", *_SAFE_CONFIG, "-C", str(directory), *args]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    clean |= {"LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0", **(env or {})}
    done = run_program(
        argv,
        timeout=GIT_TIMEOUT_S,
        env=clean,
        cannot="cannot run git",
        where=str(directory),
        hint="install git and check that it runs",
    )
    if done.returncode != 0 and done.returncode not in allowed:
        raise _git_failed(directory, args, done)
    return done


def _git_failed(
    directory: Path, args: Sequence[str], done: subprocess.CompletedProcess[str]
) -> NotObservable:
    return NotObservable(
        f"git {' '.join(args)} failed",
        where=str(directory),
        found=f"exit status {done.returncode}: {done.stderr.strip() or 'no output'}",
        hint="run the same git command in the work tree to see why",
    )
