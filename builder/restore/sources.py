"""Restoring a `[[source]]`: its git work tree cloned at the pinned commit, its patches applied.

The tree is made in a temporary sibling `.<name>.restoring-<random>` of the work tree: `git clone
--no-checkout <url>`, `git checkout --detach <commit>` (fetched by id when no branch of the
repository reaches it), then each declared patch in order through `git apply`. Every patch file
is read once, before the clone, and must hash to its pinned sha256: those very bytes are what
git applies, so a patch file changed meanwhile cannot slip in. The result is proven by the
source observer (`builder.observe.sources`: `observe_source` and `compare`, the patch chain
included, the judgement `verify --host` makes) before it is renamed into place. A work tree that
is there and does not hold the pins is refused, or with `force` replaced by one atomic exchange.
A kill at any point leaves the work tree as it was, or complete, never half-made.

Git runs with a clean environment: no inherited `GIT_*` variable, no system configuration, a
temporary empty `HOME` (no user configuration, no credential helper), no terminal or ssh
prompt, the `ext::` transport off, no hook, messages in English, and a timeout. A git that
fails refuses the step with git's last line of error, never a traceback.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from repro_serving.builder.documents.manifest import Source
from repro_serving.builder.documents.sources import compare
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import ReproError
from repro_serving.builder.hashing import sha256_bytes
from repro_serving.builder.observe.sources import observe_source
from repro_serving.builder.restore.step import (
    Action,
    Progress,
    StepResult,
    no_progress,
    occupied,
    reason,
    remove,
)
from repro_serving.builder.sealing.atomic import move_into_place

GIT_TIMEOUT_S: Final = 600.0
"""A clone of a large repository over a slow link takes minutes; a hung one never ends."""
_KIND: Final = "source"
_SAFE_CONFIG: Final = (
    "-c", "protocol.ext.allow=never",
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "advice.detachedHead=false",
)  # fmt: skip


class _Refused(Exception):
    """A step that cannot go on: `detail` says why, `drifts` are the disagreements found."""

    def __init__(self, detail: str, drifts: Sequence[Drift] = ()) -> None:
        super().__init__(detail)
        self.detail = detail
        self.drifts = tuple(drifts)


def restore_source(
    source: Source,
    work_tree: Path,
    patches_base: Path,
    *,
    progress: Progress = no_progress,
    force: bool = False,
) -> StepResult:
    """Make `work_tree` (`anchor / source.path`) the pinned commit with exactly the declared
    patches applied; patch paths, and a `url` that is a relative path, resolve against
    `patches_base` (the manifest's directory on this host).

    ALREADY when it holds; RESTORED once made and proven; REFUSED, with the drifts that refuse
    it, otherwise. `force` replaces a work tree that holds anything else."""
    try:
        drifts = _judge(source, work_tree, patches_base)
        if not drifts:
            return _result(source, work_tree, Action.ALREADY, f"holds commit {source.commit}")
        if source.url is None:
            raise _Refused(
                "no url to clone this source from: give its [[source]] a url (any URL or path "
                "git clone accepts), or put the work tree at its path",
                drifts,
            )
        if occupied(work_tree) and not force:
            raise _Refused(
                "the work tree does not hold the pinned commit and patches; force replaces it",
                drifts,
            )
        patches = _read_patches(source, patches_base)
        with tempfile.TemporaryDirectory(prefix="repro-git-home-") as home:
            detail = _make(
                source,
                work_tree,
                patches_base,
                patches=patches,
                home=Path(home),
                progress=progress,
                force=force,
            )
    except _Refused as refused:
        return _result(source, work_tree, Action.REFUSED, refused.detail, refused.drifts)
    return _result(source, work_tree, Action.RESTORED, detail)


def _result(
    source: Source,
    work_tree: Path,
    action: Action,
    detail: str,
    drifts: Sequence[Drift] = (),
) -> StepResult:
    return StepResult(
        kind=_KIND,
        subject=source.name,
        target=str(work_tree),
        action=action,
        detail=detail,
        drifts=tuple(drifts),
    )


def _judge(source: Source, work_tree: Path, patches_base: Path) -> list[Drift]:
    """The observer's drifts for `source`, its work tree taken at `work_tree`."""
    at = source.model_copy(update={"path": str(work_tree.absolute())})
    try:
        return compare(source, observe_source(at, patches_base))
    except ReproError as error:
        raise _Refused(reason(error)) from error


# --- patches --------------------------------------------------------------------------------------


def _read_patches(source: Source, patches_base: Path) -> list[bytes]:
    """Every declared patch's bytes, each checked against its pinned sha256; refused at the
    first one that is missing or other, before anything is cloned or applied."""
    contents: list[bytes] = []
    for patch in source.patches:
        file = patches_base / patch.path
        try:
            content = file.read_bytes()
        except OSError as error:
            drift = _patch_drift(source, patch.path, patch.sha256, "missing")
            detail = f"cannot read patch {patch.path} at {file}: {error.strerror or error}"
            raise _Refused(detail, [drift]) from error
        found = sha256_bytes(content)
        if found != patch.sha256:
            drift = _patch_drift(source, patch.path, patch.sha256, f"sha256 {found}")
            detail = f"patch {patch.path} is not the pinned one: nothing was applied"
            raise _Refused(detail, [drift])
        contents.append(content)
    return contents


def _patch_drift(source: Source, path: str, pinned: str, observed: str) -> Drift:
    return Drift(
        kind=DriftKind.SOURCE_PATCH,
        subject=f"source {source.name}: patch {path}",
        expected=f"sha256 {pinned}",
        observed=observed,
        why="the patch file is not the pinned one",
    )


# --- making the tree ------------------------------------------------------------------------------


def _make(
    source: Source,
    work_tree: Path,
    patches_base: Path,
    *,
    patches: Sequence[bytes],
    home: Path,
    progress: Progress,
    force: bool,
) -> str:
    """Clone, check out, patch and prove in a temporary sibling, then rename it into place."""
    url = str(source.url)
    parent = work_tree.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    temp = parent / f".{work_tree.name}.restoring-{secrets.token_hex(8)}"
    try:
        progress(f"cloning {url} into {temp}")
        _git(home, patches_base, "clone", "--quiet", "--no-checkout", "--", url, str(temp))
        progress(f"checking out commit {source.commit}")
        _ensure_commit(source, url, temp, home)
        _git(home, temp, "checkout", "--quiet", "--detach", source.commit)
        for patch, content in zip(source.patches, patches, strict=True):
            progress(f"applying patch {patch.path}")
            try:
                _git(home, temp, "apply", "-", stdin=content)
            except _Refused as refused:
                raise _Refused(f"patch {patch.path}: {refused.detail}") from refused
        progress("proving the work tree against the pins")
        drifts = _judge(source, temp, patches_base)
        if drifts:
            raise _Refused("the tree made does not hold the pinned commit and patches", drifts)
        if occupied(work_tree) and not force:
            raise _Refused("the work tree appeared while it was being made")
        try:
            replaced = move_into_place(temp, work_tree, progress, what="source tree")
        except (ReproError, OSError) as error:
            raise _Refused(reason(error)) from error
        if replaced is not None:
            remove(replaced)
    finally:
        remove(temp)
    patched = ""
    if patches:
        patched = f", {len(patches)} patch{'' if len(patches) == 1 else 'es'} applied"
    return f"cloned from {url} at commit {source.commit}{patched}"


def _ensure_commit(source: Source, url: str, tree: Path, home: Path) -> None:
    """The pinned commit in the clone, fetched by id when no branch reaches it."""
    if _has_commit(tree, source.commit, home):
        return
    _git(home, tree, "fetch", "--quiet", "origin", source.commit, allowed=(1, 128))
    if _has_commit(tree, source.commit, home):
        return
    drift = Drift(
        kind=DriftKind.SOURCE_COMMIT,
        subject=f"source {source.name}",
        expected=f"commit {source.commit} in {url}",
        observed="the repository has no such commit",
        why="the pinned commit cannot be checked out from the source's url",
    )
    raise _Refused(f"{url} has no commit {source.commit}", [drift])


def _has_commit(tree: Path, commit: str, home: Path) -> bool:
    done = _git(home, tree, "cat-file", "-e", f"{commit}^{{commit}}", allowed=(1, 128))
    return done.returncode == 0


def _git(
    home: Path,
    directory: Path,
    *args: str,
    stdin: bytes | None = None,
    allowed: Sequence[int] = (),
) -> subprocess.CompletedProcess[bytes]:
    """Run git in `directory` with the clean environment of the module docstring; a failure
    (or an exit status not in `allowed`) refuses the step with git's last line of error."""
    argv = ["git", *_SAFE_CONFIG, "-C", str(directory), *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env |= {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "",
        "SSH_ASKPASS": "",
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
        "LC_ALL": "C",
    }
    shown = f"git {args[0]}"
    try:
        done = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            env=env,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise _Refused(f"{shown} did not finish within {GIT_TIMEOUT_S:.0f} s") from error
    except OSError as error:
        raise _Refused(f"cannot run git: {error.strerror or error}") from error
    if done.returncode != 0 and done.returncode not in allowed:
        raise _Refused(f"{shown} failed (exit status {done.returncode}): {_last_line(done.stderr)}")
    return done


def _last_line(stderr: bytes) -> str:
    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"
