"""The run directory: where one run's evidence lies, and how a partial one is told apart.

This module owns the layout of a run directory and the order it is written in:

```
RUN_DIR/
  status.json            {"status": "running"} first; the final status is written last
  run.json               what was run: manifest, profile, suite, teacher, argv, env, port
  start-1/               one directory per fresh start of the server
    server.log           the server's stdout and stderr
    home/ tmp/           the server's private HOME and TMPDIR
    server.json          its group leader's pid and readiness time
    audit/<role>.json    the live audit of each process of that role (api_server, engine_core, …)
    audit/drifts.json    every drift the audit found
    metrics-before.prom  /metrics before the suite, verbatim
    rows.json            the OracleRows, rewritten after each answered prompt
    metrics-after.prom   /metrics after the suite, verbatim
    load-<name>/         each load of the manifest (`oracle.loads`), asked after the suite:
      rows.json          its OracleRows in suite order, each with its send time
      metrics-after.prom /metrics after it (the read before it is the previous one's after)
    teardown.json        every pid of the tree, those that needed SIGKILL; or why teardown failed
  start-2/ …
  verdicts.json          every gate's Verdict
  quality.json           the quality checks' verdicts, reported apart from the gates
  teacher.json           the captured Teacher, when the run captures one
  nodes.json             each node's facts, for a stack served across nodes
  start-N/rank-R/        rank R (1..) of such a stack: its server.log, audit/, teardown.json
  summary.json           the run's report, as `repro run --json` prints it
```

Every file is written to a temporary sibling and renamed into place, so a file that exists is
whole. A run directory whose `status.json` still says `running` was cut short (the process
running it was killed); any other status was written after every other file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from repro_serving.builder.documents.evidence import OracleRow
from repro_serving.builder.errors import BadInput

STATUS_FILE: Final = "status.json"
RUN_FILE: Final = "run.json"
VERDICTS_FILE: Final = "verdicts.json"
QUALITY_FILE: Final = "quality.json"
SUMMARY_FILE: Final = "summary.json"
TEACHER_FILE: Final = "teacher.json"
LOG_FILE: Final = "server.log"
SERVER_FILE: Final = "server.json"
AUDIT_DIR: Final = "audit"
DRIFTS_FILE: Final = "drifts.json"
METRICS_BEFORE: Final = "metrics-before.prom"
METRICS_AFTER: Final = "metrics-after.prom"
ROWS_FILE: Final = "rows.json"
TEARDOWN_FILE: Final = "teardown.json"
NODES_FILE: Final = "nodes.json"

REPLAY_FILE: Final = "replay.json"
"""A replay's own record (`repro launch`): the bundle it replayed and what differed from it
where the manifest allows (`builder.documents.evidence.ReplayDocument`)."""
RUN_EVIDENCE: Final = (RUN_FILE, VERDICTS_FILE, QUALITY_FILE)
"""What of a run directory's top level is evidence: never `summary.json`, a report derived
from the rest for people, which a bundle would seal for nothing to check."""
START_EVIDENCE: Final = (
    LOG_FILE, SERVER_FILE, METRICS_BEFORE, METRICS_AFTER, ROWS_FILE, TEARDOWN_FILE,
)  # fmt: skip
"""What of each start's directory is evidence (beside its audit/): never the server's private
HOME and TMPDIR."""


LOAD_EVIDENCE: Final = (ROWS_FILE, METRICS_AFTER)
"""What of a load's directory is evidence: its rows and the `/metrics` read after it."""

RUN_PRIVATE_ENV: Final = frozenset({"PATH", "HOME", "TMPDIR"})
"""What a start's environment holds of its own beside the manifest's variables (`launch.spec`):
its PATH, and the HOME and TMPDIR made for it in its start's directory."""

RANK_EVIDENCE: Final = (LOG_FILE, TEARDOWN_FILE)
"""What of a rank's directory (rank 1.. of a stack served across nodes) is evidence, beside
its audit/."""


def start_name(start: int, rank: int = 0) -> str:
    """The directory of start `start` (and of rank `rank`'s evidence of it, for a stack served
    across nodes) relative to its run: `start-2`, `start-2/rank-1`. The one place both are
    spelled, for a run directory and a bundle's evidence/ alike."""
    return f"start-{start}" + (f"/rank-{rank}" if rank else "")


def load_name(load: str) -> str:
    """The directory of load `load`'s evidence inside its start's: `load-c4`."""
    return f"load-{load}"


def phase_name(start: int, load: str | None = None) -> str:
    """The directory of one phase of start `start` relative to its run: the start's own for its
    suite (`start-2`), its load's for load `load` (`start-2/load-c4`)."""
    return start_name(start) + ("" if load is None else f"/{load_name(load)}")


def phases(start: int, loads: Sequence[str]) -> list[tuple[str | None, str, str, str]]:
    """Each phase of start `start` asked of the server, in order: (None for the suite or the
    load's name, its rows, the `/metrics` read before it, the read after it), by path in the
    run directory. A load's read before is the phase before's read after: the client asked
    nothing between them."""
    found: list[tuple[str | None, str, str, str]] = []
    before = f"{start_name(start)}/{METRICS_BEFORE}"
    for load in (None, *loads):
        at = phase_name(start, load)
        after = f"{at}/{METRICS_AFTER}"
        found.append((load, f"{at}/{ROWS_FILE}", before, after))
        before = after
    return found


def rank_dir(start_dir: Path, rank: int) -> Path:
    """Where rank `rank`'s evidence of a start lies: rank 0's is the start's own."""
    return start_dir if rank == 0 else start_dir / f"rank-{rank}"


def evidence_names(
    starts: int,
    roles: Iterable[str],
    ranks: Mapping[int, Iterable[str]] | None = None,
    loads: Sequence[str] = (),
) -> set[str]:
    """Every evidence file of a complete run of `starts` fresh starts whose trees held
    `roles` (and, served across nodes, whose rank R held `ranks[R]`, nodes.json beside), each
    start asked the suite and then each of `loads`, by its path in the run directory (a bundle
    seals them under evidence/)."""
    names = set(RUN_EVIDENCE)
    if ranks:
        names.add(NODES_FILE)
    for number in range(1, starts + 1):
        start = start_name(number)
        names |= {f"{start}/{name}" for name in START_EVIDENCE}
        names |= {f"{phase_name(number, load)}/{n}" for load in loads for n in LOAD_EVIDENCE}
        names |= _audit_names(start, roles)
        for rank, rank_roles in (ranks or {}).items():
            at = start_name(number, rank)
            names |= {f"{at}/{name}" for name in RANK_EVIDENCE} | _audit_names(at, rank_roles)
    return names


def _audit_names(at: str, roles: Iterable[str]) -> set[str]:
    return {f"{at}/{AUDIT_DIR}/{role}.json" for role in roles} | {f"{at}/{AUDIT_DIR}/{DRIFTS_FILE}"}


class RunStatus(StrEnum):
    RUNNING = "running"
    """Written first; still there when the run was cut short."""
    PASSED = "passed"
    FAILED = "failed"
    """A gate failed, or the server did not start, answer or go away as it must."""
    INTERRUPTED = "interrupted"
    """SIGINT or SIGTERM: the server was torn down and the evidence so far kept."""


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary sibling renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def json_bytes(document: Any) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


class RunDirectory:
    """One run's directory; `create` refuses one that already holds anything."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def create(cls, root: Path) -> RunDirectory:
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise BadInput(
                "the run directory is not empty",
                where=str(root),
                expected="a new or empty directory: a run never mixes its evidence with another's",
                found=f"{sum(1 for _ in root.iterdir())} entries" if root.is_dir() else "a file",
                hint="name another --run-dir",
            )
        root.mkdir(parents=True, exist_ok=True)
        directory = cls(root)
        directory.write_status(RunStatus.RUNNING)
        return directory

    def start_dir(self, start: int, rank: int = 0) -> Path:
        return self.root / start_name(start, rank)

    def write_json(self, relative: str | Path, document: Any) -> Path:
        path = self.root / relative
        atomic_write(path, json_bytes(document))
        return path

    def write_text(self, relative: str | Path, text: str) -> Path:
        return self.write_bytes(relative, text.encode())

    def write_bytes(self, relative: str | Path, data: bytes) -> Path:
        path = self.root / relative
        atomic_write(path, data)
        return path

    def write_rows(self, start: int, rows: Sequence[OracleRow], load: str | None = None) -> Path:
        """The suite's rows of `start`, or those of its load `load`."""
        rows_file = f"{phase_name(start, load)}/{ROWS_FILE}"
        return self.write_json(rows_file, [row.model_dump(mode="json") for row in rows])

    def rows(self, start: int, load: str | None = None) -> tuple[OracleRow, ...]:
        """The rows `write_rows` wrote of `start` (or of its load `load`)."""
        return read_rows(self.root / phase_name(start, load) / ROWS_FILE)

    def start_text(self, start: int, name: str) -> str | None:
        """A file of `start` as text, decoded with replacement; None when the run did not get
        as far as writing it."""
        try:
            return (self.start_dir(start) / name).read_bytes().decode(errors="replace")
        except FileNotFoundError:
            return None

    def write_status(
        self,
        status: RunStatus,
        *,
        exit_code: int | None = None,
        error: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        document: dict[str, Any] = {"status": status.value, "exit_code": exit_code}
        if error is not None:
            document["error"] = error
        document.update(extra or {})
        return self.write_json(STATUS_FILE, document)


def read_status(root: Path) -> RunStatus:
    """The status a run directory was left in."""
    document = json.loads((root / STATUS_FILE).read_text())
    return RunStatus(document["status"])


def read_rows(path: Path) -> tuple[OracleRow, ...]:
    """The rows of a `rows.json`."""
    return tuple(OracleRow.model_validate(row) for row in json.loads(path.read_text()))
