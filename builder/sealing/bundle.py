"""The layout of a sealed bundle directory, the rule for the paths in it, and SHA256SUMS.

```
repro/<name>/
  manifest.toml          the input, verbatim
  lock.json              canonical JSON
  oracle/                suite + teacher
  evidence/              server log, metrics, bench rows, maps snapshots, ...
  kernels/               the kernel sets the manifest names, verbatim: their pins and dispatch
                         rules are judged from these copies, never from a repository's
  launch                 executable sh: runs the bundle where repro never was (`builder/handoff`)
  README.md              what the bundle claims, how to run it, how to check it without repro
  tools/                 the repro that sealed it: its wheel, its runtime dependencies pinned by
                         sha256 (requirements.txt), and launch_helper.py, which `launch` runs
  SHA256SUMS             every file above: `sha256sum -c SHA256SUMS` passes inside the bundle
  statement.json         in-toto Statement: one subject per file above and SHA256SUMS
  statement.dsse.json    DSSE envelope whose payload is exactly the bytes of statement.json
  test-result.dsse.json  a sealed run only: DSSE envelope of the in-toto test-result statement
                         of its gates, over the same files as statement.json
```

A path in a bundle is relative, written with `/`, in UTF-8, and has no empty, `.` or `..` part,
no backslash, and no character of Unicode's categories Cc (control), Cf (format, such as U+202E
RIGHT-TO-LEFT OVERRIDE), Zl and Zp (line and paragraph separators) nor any whitespace beyond
ASCII (U+0085 NEXT LINE, U+00A0, ...): SHA256SUMS never needs coreutils' escaping, and a name
shown to a person reads as the bytes it is.
SHA256SUMS has one line `<64 lowercase hex>  <path>` per file (two spaces: text mode, as
`sha256sum` writes), sorted by path in code point order, each ending with a line feed.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path

from repro_serving import WHEEL_NAME
from repro_serving.builder.errors import BadInput
from repro_serving.builder.hashing import SHA256_HEX

MANIFEST = "manifest.toml"
LOCK = "lock.json"
ORACLE_DIR = "oracle"
EVIDENCE_DIR = "evidence"
KERNEL_SETS_DIR = "kernels"
SUITE_FILE = "suite.json"
"""The oracle suite, under oracle/."""
TEACHER_FILE = "teacher.json"
"""The teacher every replay must reproduce, under oracle/."""
SHA256SUMS = "SHA256SUMS"
STATEMENT = "statement.json"
ENVELOPE = "statement.dsse.json"
TEST_RESULT_ENVELOPE = "test-result.dsse.json"
"""A sealed run's gate verdicts as an in-toto test-result statement, signed like the statement."""
LAUNCHER = "launch"
"""The bundle's own launcher, written executable."""
README = "README.md"
TOOLS_DIR = "tools"
REQUIREMENTS_FILE = "requirements.txt"
"""Under tools/: repro's runtime dependencies, each pinned by version and sha256."""
LAUNCH_HELPER = "launch_helper.py"
"""Under tools/: what `launch` asks of python3 (standard library only): the lock's platform,
whether the tools fit this interpreter, and the check of its private environment before each use."""

CONTENT_DIRS = (ORACLE_DIR, EVIDENCE_DIR, KERNEL_SETS_DIR, TOOLS_DIR)
"""The directories whose files a build chooses; every other file of a bundle is named above."""
TOP_CONTENT = (MANIFEST, LOCK, SHA256SUMS, LAUNCHER, README)
"""The files a bundle may hold at its top, beside the content directories and the seal files."""
SEAL_FILES = (STATEMENT, ENVELOPE, TEST_RESULT_ENVELOPE)
"""The files that seal the others: the statements cover every file but these."""
REQUIRED_CONTENT = (MANIFEST, LOCK)

_LINE = re.compile(rf"(?P<digest>{SHA256_HEX})  (?P<path>[^\n]+)")
_BUNDLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def path_problem(path: str) -> str | None:
    """Why `path` cannot name a file inside a bundle, or None when it can."""
    if not path:
        return "an empty path"
    if path.startswith("/"):
        return "an absolute path"
    if "\\" in path:
        return "a backslash"
    readable = path.isascii() and path.isprintable()  # no character to look at one by one
    hidden = None if readable else next((c for c in path if _hidden_kind(c) is not None), None)
    if hidden is not None:
        return f"{_hidden_kind(hidden)} U+{ord(hidden):04X}"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "bytes that are not UTF-8"
    parts = path.split("/")
    if ".." in parts:
        return "a '..' part, which escapes the bundle"
    if "" in parts or "." in parts:
        return "an empty or '.' part"
    return None


_HIDDEN_CATEGORIES = {
    "Cc": "a control character",
    "Cf": "a format character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}


def _hidden_kind(char: str) -> str | None:
    """What `char` is when a person cannot read it as itself in a name, else None."""
    kind = _HIDDEN_CATEGORIES.get(unicodedata.category(char))
    if kind is None and char.isspace() and not char.isascii():
        return "a whitespace character beyond ASCII"
    return kind


def check_bundle_name(name: str) -> str:
    """`name` if it can name a bundle directory (`repro/<name>/`), else `BadInput`."""
    if _BUNDLE_NAME.fullmatch(name) is None:
        raise BadInput(
            "not a bundle name",
            where=repr(name),
            expected="letters, digits, '.', '_' and '-', starting with a letter or digit",
        )
    return name


def content_path_problem(path: str) -> str | None:
    """Why `path` cannot be a sealed file of a bundle, or None when it can."""
    problem = path_problem(path)
    if problem is not None:
        return problem
    if path in TOP_CONTENT:
        return None
    top, _, rest = path.partition("/")
    if top in CONTENT_DIRS and rest:
        return None
    return "a file the layout does not name, outside oracle/, evidence/, kernels/ and tools/"


def fixed_content(kernel_sets: Iterable[str]) -> set[str]:
    """The content every bundle holds whatever its evidence: the oracle's suite and teacher,
    and one file per kernel set its manifest names."""
    return {f"{ORACLE_DIR}/{SUITE_FILE}", f"{ORACLE_DIR}/{TEACHER_FILE}"} | {
        f"{KERNEL_SETS_DIR}/{name}.toml" for name in kernel_sets
    }


def wheel_filename(version: str) -> str:
    """The file name of the wheel of repro `version` (PEP 427: pure Python, any platform)."""
    return f"{WHEEL_NAME}-{version.replace('-', '_')}-py3-none-any.whl"


def handoff_content(repro_version: str) -> set[str]:
    """What lets a bundle run where repro never was, sealed by `repro build` in every bundle (a
    sealed run holds none of it): the launcher, the README, and the tools of the repro that
    sealed it, whose wheel is named by the version the lock records."""
    tools = (wheel_filename(repro_version), REQUIREMENTS_FILE, LAUNCH_HELPER)
    return {LAUNCHER, README} | {f"{TOOLS_DIR}/{name}" for name in tools}


def content_files(root: Path) -> set[str]:
    """Every file under the content directories of the bundle at `root`, and its launcher and
    README when there, by its bundle path."""
    below = {
        path.relative_to(root).as_posix()
        for directory in CONTENT_DIRS
        for path in (root / directory).rglob("*")
        if not path.is_dir()
    }
    return below | {name for name in (LAUNCHER, README) if (root / name).is_file()}


def render_sha256sums(digests: Mapping[str, str]) -> bytes:
    """SHA256SUMS of `digests` (path to sha256 hex), in the one form described above."""
    return "".join(f"{digests[path]}  {path}\n" for path in sorted(digests)).encode("utf-8")


def parse_sha256sums(data: bytes, *, where: str) -> dict[str, str]:
    """Path to sha256 of a SHA256SUMS file in exactly the form `render_sha256sums` writes."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadInput("SHA256SUMS is not UTF-8", where=where, found=str(error)) from error
    if text and not text.endswith("\n"):
        raise BadInput("SHA256SUMS does not end with a line feed", where=where)
    digests: dict[str, str] = {}
    lines = text.split("\n")[:-1]  # not splitlines(): it also breaks at U+2028 and friends
    for number, line in enumerate(lines, start=1):
        match = _LINE.fullmatch(line)
        if match is None:
            raise BadInput(
                "a line of SHA256SUMS is malformed",
                where=f"{where}:{number}",
                expected="<64 lowercase hex>  <path>",
                found=repr(line),
            )
        path = match["path"]
        problem = path_problem(path)
        if problem is not None:
            raise BadInput(
                "a line of SHA256SUMS names a path no bundle can hold",
                where=f"{where}:{number}",
                found=f"{path!r}: {problem}",
            )
        if path in digests:
            raise BadInput("SHA256SUMS names a path twice", where=f"{where}:{number}", found=path)
        digests[path] = match["digest"]
    if render_sha256sums(digests) != data:
        raise BadInput("SHA256SUMS is not sorted by path", where=where)
    return digests
