"""The format of every typed file a bundle seals, and how a sealed file's tag is judged.

A bundle's statement names each sealed file with its sha256; repro's writer also tags each typed
document with its format (`repro.rows/v2`) in the subject's in-toto `annotations`
(`ANNOTATION`). A reader compares the tags with `FORMATS` before it reads a document, so a
bundle written by another repro is refused as such ("written by an older repro: …; verify it
with the repro it carries") rather than as a file that "does not follow its format".

A format's version rises whenever a document of it written by this repro could not be read by
the repro before (a new required field, a renamed key), or a document the repro before wrote
could not be read now. What is not a repro document (a server log, a `/metrics` text, the README,
the launcher and tools/) carries no tag.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Final

ANNOTATION: Final = "format"
"""The key of a subject's `annotations` that holds its format tag."""


@dataclass(frozen=True)
class Format:
    """One kind of sealed document: its name, its version, and where a bundle seals it (glob
    patterns over bundle paths; `*` crosses directories)."""

    name: str
    version: int
    patterns: tuple[str, ...]

    @property
    def tag(self) -> str:
        return f"{self.name}/v{self.version}"


FORMATS: Final = (
    Format("repro.manifest", 1, ("manifest.toml",)),
    Format("repro.lock", 1, ("lock.json",)),
    Format("repro.suite", 1, ("oracle/suite.json",)),
    Format("repro.teacher", 1, ("oracle/teacher.json",)),
    Format("repro.kernel-set", 1, ("kernels/*.toml",)),
    Format("repro.run", 1, ("evidence/run.json",)),
    Format("repro.verdicts", 2, ("evidence/verdicts.json", "evidence/quality.json")),
    Format("repro.observations", 1, ("evidence/observations.json",)),
    Format("repro.probes", 1, ("evidence/dispatch.json",)),
    Format("repro.nodes", 1, ("evidence/nodes.json",)),
    Format("repro.replay", 1, ("evidence/replay.json",)),
    Format("repro.rows", 2, ("evidence/start-*/rows.json",)),
    Format("repro.server", 1, ("evidence/start-*/server.json",)),
    Format("repro.teardown", 1, ("evidence/start-*/teardown.json",)),
    Format("repro.drifts", 1, ("evidence/start-*/audit/drifts.json",)),
    Format("repro.audit", 1, ("evidence/start-*/audit/*.json",)),
)
"""Every typed document a bundle seals; the first whose pattern matches a path is its format."""


def format_of(path: str) -> Format | None:
    """The format of the document sealed at bundle path `path`; None for a file of no format."""
    return next(
        (f for f in FORMATS if any(fnmatchcase(path, pattern) for pattern in f.patterns)), None
    )


def tags(paths: Iterable[str]) -> dict[str, str]:
    """The format tag of each typed document among `paths`, by path."""
    return {path: found.tag for path in paths if (found := format_of(path)) is not None}


def tag_problems(tagged: Mapping[str, str | None]) -> list[str]:
    """Each sealed file (path to the tag its statement gives, None for none) whose tag is not
    the one this repro writes: typed documents with no tag (one problem for them all, naming
    how many), a tag of another version (naming whether an older or a newer repro wrote it), a
    tag on a file of no format, or of another format."""
    problems = []
    untagged = []
    for path, tag in sorted(tagged.items()):
        expected = format_of(path)
        if expected is None:
            if tag is not None:
                problems.append(f"{path}: tagged {tag!r}, a file of no repro format")
            continue
        if tag is None:
            untagged.append(f"{path} as {expected.tag}")
            continue
        name, _, version = tag.rpartition("/v")
        if name != expected.name or not version.isdigit():
            problems.append(f"{path}: tagged {tag!r}, expected {expected.tag}")
        elif int(version) != expected.version:
            written = "an older" if int(version) < expected.version else "a newer"
            problems.append(
                f"{path}: {tag}: written by {written} repro (this one reads {expected.tag})"
            )
    if untagged:
        typed = sum(format_of(path) is not None for path in tagged)
        whole = "every one" if len(untagged) == typed else f"{len(untagged)} of {typed}"
        problems.insert(
            0,
            f"{whole} of its typed documents carries no format tag: written by a repro older "
            f"than format tags, or its tags removed (this one reads, e.g., {untagged[0]})",
        )
    return problems
