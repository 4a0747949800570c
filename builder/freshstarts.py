"""The fresh starts of a sealed run, each judged whole and told apart from the others.

A start is one tree, spawned, ready, audited, asked, torn down: `server.json` names its group
leader (the root of its sealed audit, a child of the repro that ran it) and when it was spawned
and ready; every audited process was started by the kernel between the spawn and the teardown;
its log names no process but those (vLLM's `pid=`, uvicorn's `process [N]`), and uvicorn's
`Started server process [N]` names the root (or a process of the root's role);
`teardown.json` proves every audited process gone and names no other (a process the audit never
saw ran code nothing judged), and says when it began and ended and how
much of the log was written while the stack served; the log is not empty, and every line it
dates lies within the start, in one time zone (`log_time_problems`). In the zones it fits
(`_log_clock`), no line a process wrote (vLLM's `(Name pid=N)` prefix) is dated before that
process started (its sealed `started_at`, less the second a date is truncated to), and the
stack was not ready (`server.json` ready_at) before the log's `Starting vLLM server on`, less a
second: no probe is answered before the server listens. Two starts are two: start N+1 was
spawned after start N's teardown ended, every one of its processes started after it, no process
(pid and start time) is in both, its rows were not timed at the same instants (within 0.1 ms),
and its log reads in a zone every earlier start's of its host fits (one host, one run: one
zone).

Across nodes, each further rank served while rank 0 did (started before rank 0 was ready, torn
down once rank 0's teardown began); on rank 0's kernel (one nodes.json boot_id: one machine, one
clock) no pid is in both trees, its root is no child of rank 0's, none of its processes started
before rank 0's spawn (`launch.run` reads the spawn time before it spawns any rank, rank 0 last),
and its log reads in a zone rank 0's fits. No two workers of one start, on one node or two, log
the same rank of the torch.distributed world, nor the same data, pipeline, prefill-context and
tensor parallel ranks.

All times are seconds since the epoch on the clock of the host the rank ran on; a process's
start time is the kernel's boot time, which Linux states to the second, plus its start in
clock ticks, so it may read up to a second early (`BOOT_TIME_SLACK_S`), never late.

What this cannot see: two starts fabricated consistently (other pids, later times) by the
holder of the key; that the clock of the host was right; a further rank on another host moved
earlier whole, processes and log alike, which reads as that host's clock set otherwise, so no
bound holds its start to rank 0's spawn there; a line without vLLM's prefix (uvicorn's, a C++
warning) against the process that wrote it. A run across a change of daylight saving time reads
in two zones and is refused.
"""

from __future__ import annotations

import calendar
import itertools
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from repro_serving.builder.documents.audit import ProcessEvidence
from repro_serving.builder.documents.evidence import OracleRow, ServerDocument, TeardownDocument

BOOT_TIME_SLACK_S: Final = 1.05
"""How early a process's start time may read: the boot time is stated to the second."""
CLOCK_SLACK_S: Final = 2.0
"""How far two readings of one interval, on the monotonic and the wall clock, may differ."""
STREAMING_SLACK_S: Final = 0.1
"""How far the suite's streaming, timed by the client, may outlast the interval between ready
and teardown that repro read on the same host's wall clock: its granularity and a small step."""


@dataclass(frozen=True)
class StartEvidence:
    """What one rank of one start sealed."""

    start: int
    rank: int
    where: str
    """Its directory in the bundle (`evidence/start-2`, `evidence/start-1/rank-1`)."""
    root_pid: int
    processes: tuple[ProcessEvidence, ...]
    teardown: TeardownDocument
    log: bytes
    server: ServerDocument | None = None
    """Rank 0's `server.json`; a rank above 0 has none."""
    rows: tuple[OracleRow, ...] = ()
    served_by: tuple[float, ...] = ()
    """`process_start_time_seconds` of each `/metrics` read of the start (before and after the
    suite): the start time of the process that answered, as it states it."""


def start_problems(
    starts: Sequence[StartEvidence],
    *,
    repro_pid: int | None,
    kernels: Mapping[int, str | None] | None = None,
) -> list[str]:
    """Every contradiction within each start and between consecutive starts of one rank.
    `repro_pid`: the pid of the repro that spawned rank 0 of each start on its own host (None
    for a stack served across nodes, whose ranks are spawned by their nodes' actors);
    `kernels`: each rank's kernel boot id, where its node stated one."""
    problems: list[str] = []
    zones: dict[tuple[int, int], frozenset[int]] = {}
    for start in starts:
        problems += _one_start(start, repro_pid)
        found, zones[start.start, start.rank] = _log_clock(start)
        problems += found
    problems += _ranks_problems(starts, kernels or {})
    problems += _assignment_problems(starts)
    problems += _zone_problems(starts, zones, kernels or {})
    by_rank: dict[int, list[StartEvidence]] = {}
    for start in sorted(starts, key=lambda s: (s.rank, s.start)):
        by_rank.setdefault(start.rank, []).append(start)
    for ranks in by_rank.values():
        for earlier, later in itertools.pairwise(ranks):
            problems += _apart(earlier, later)
    return problems


def _ranks_problems(
    starts: Sequence[StartEvidence], kernels: Mapping[int, str | None]
) -> list[str]:
    """Each rank beyond 0 of a start served while rank 0 did: its processes started before
    rank 0 was ready, its teardown began once rank 0's had (rank 0 is torn down first, after the
    suite was answered). Two ranks on one kernel (one boot id) ran side by side: no pid is in
    both trees, and no process of one is the parent of the other's root."""
    problems = []
    leaders = {s.start: s for s in starts if s.rank == 0 and s.server is not None}
    for start in starts:
        leader = leaders.get(start.start)
        if start.rank == 0 or leader is None or leader.server is None:
            continue
        ready = leader.server.ready_at
        if ready is None:
            continue
        problems += _late_processes(start, ready, start.where)
        began, answered = start.teardown.began_at, leader.teardown.began_at
        if began is not None and began < (answered if answered is not None else ready):
            after = "rank 0's teardown began" if answered is not None else "rank 0 was ready"
            problems.append(
                f"{start.where}/teardown.json: began_at {began}: expected once {after}, at "
                f"{answered if answered is not None else ready}"
            )
        kernel = kernels.get(start.rank)
        if kernel is not None and kernel == kernels.get(0):
            problems += _one_kernel(leader, start)
    return problems


def _one_kernel(leader: StartEvidence, rank: StartEvidence) -> list[str]:
    """Two trees that lived side by side on one kernel, read on one clock: rank 0's spawn
    (`server.json` started_at) was read before any rank was spawned (`launch.run` spawns the
    highest rank first, rank 0 last), so no process of a further rank started before it; no pid
    in both, no parent of one the other's, one file at each path both map."""
    problems = []
    opened = leader.server.started_at if leader.server is not None else None
    if opened is not None:
        problems += [
            f"{rank.where}/audit: pid {p.pid} ({p.role}) started_at {p.started_at}: expected "
            f"after rank 0's spawn at {opened} (server.json started_at, read before every rank "
            "was spawned, on the same kernel's clock: nodes.json boot_id)"
            for p in rank.processes
            if p.started_at is not None and p.started_at < opened - BOOT_TIME_SLACK_S
        ]
    theirs = {p.pid for p in leader.processes}
    if shared := sorted(theirs & {p.pid for p in rank.processes}):
        problems.append(
            f"{rank.where}/audit: pids {shared}: expected none of rank 0's tree, which ran on "
            "the same kernel (nodes.json boot_id) at the same time"
        )
    files = {o.path: (o.file_id, o.sha256) for p in leader.processes for o in p.objects}
    other = sorted(
        o.path
        for p in rank.processes
        for o in p.objects
        if o.path in files and files[o.path] != (o.file_id, o.sha256)
    )
    if other:
        problems.append(
            f"{rank.where}/audit: {', '.join(dict.fromkeys(other))}: expected the files rank 0 "
            "maps at those paths on the same kernel, found other files"
        )
    root = next((p for p in rank.processes if p.pid == rank.root_pid), None)
    if root is not None and root.ppid in theirs:
        problems.append(
            f"{rank.where}/audit: pid {root.pid} ppid {root.ppid}: expected the rank's own "
            "spawner, found a process of rank 0's tree, which its audit would have listed"
        )
    return problems


def _one_start(start: StartEvidence, repro_pid: int | None) -> list[str]:
    at, teardown, server = start.where, start.teardown, start.server
    problems = []
    if not teardown.proven or teardown.error is not None:
        problems.append(
            f"{at}/teardown.json: proven: expected true with no error, found "
            f"{teardown.proven} ({teardown.error or 'no error stated'})"
        )
    missing = [
        name for name in ("began_at", "ended_at", "log_bytes") if getattr(teardown, name) is None
    ]
    if missing:
        problems.append(f"{at}/teardown.json: {', '.join(missing)}: expected, found absent")
    negative = [
        f"{name} {value}"
        for name, value in (("seconds", teardown.seconds), ("log_bytes", teardown.log_bytes))
        if value is not None and value < 0
    ]
    if negative:
        problems.append(f"{at}/teardown.json: {', '.join(negative)}: expected not negative")
    audited = {p.pid for p in start.processes}
    if strangers := sorted(_pids_named(start.log) - audited):
        problems.append(
            f"{at}/server.log: expected the log of the audited tree, found pids {strangers} "
            "that it names and the audit never saw"
        )
    problems += _uvicorn_problems(start)
    if not audited <= set(teardown.pids):
        left = sorted(audited - set(teardown.pids))
        problems.append(
            f"{at}/teardown.json: pids: expected every audited pid, found {left} missing"
        )
    if beyond := sorted(set(teardown.pids) - audited):
        # a process of the tree the audit never saw ran code no check judged
        problems.append(
            f"{at}/teardown.json: pids: expected only the audited tree, found {beyond} that the "
            "audit never saw"
        )
    if not set(teardown.killed) <= set(teardown.pids):
        problems.append(f"{at}/teardown.json: killed: expected pids of the tree, found others")
    began, ended = teardown.began_at, teardown.ended_at
    interval = None if began is None or ended is None else ended - began
    if interval is not None and (
        interval < 0 or abs(interval - (teardown.seconds or 0)) > CLOCK_SLACK_S
    ):
        problems.append(
            f"{at}/teardown.json: began_at {began}, ended_at {ended}, seconds "
            f"{teardown.seconds}: expected one interval"
        )
    if not start.log:
        problems.append(f"{at}/server.log: expected what the server wrote, found it empty")
    elif teardown.log_bytes is not None and teardown.log_bytes > len(start.log):
        problems.append(
            f"{at}/server.log: expected at least the {teardown.log_bytes} bytes written before "
            f"teardown (teardown.json log_bytes), found {len(start.log)}"
        )
    if server is not None:
        problems += _server_problems(start, server, repro_pid)
    unstarted = [p.pid for p in start.processes if p.started_at is None]
    if unstarted:
        problems.append(
            f"{at}/audit: started_at: expected each process's start time, found none for pids "
            f"{unstarted}"
        )
    problems += _served_by(start)
    opened = server.started_at if server is not None else None
    for process in start.processes:
        when = process.started_at
        if when is None:
            continue
        if opened is not None and when < opened - BOOT_TIME_SLACK_S:
            problems.append(
                f"{at}/audit: pid {process.pid} ({process.role}) started_at {when}: expected "
                f"after the spawn at {opened} (server.json started_at)"
            )
        if began is not None and when > began + BOOT_TIME_SLACK_S:
            problems.append(
                f"{at}/audit: pid {process.pid} ({process.role}) started_at {when}: expected "
                f"before teardown began at {began}"
            )
    return problems


def _spawned(start: StartEvidence) -> float | None:
    """When the start's rank was spawned: its `server.json` says so for rank 0; a further rank
    was spawned before its first process started (read to the second)."""
    if start.server is not None and start.server.started_at is not None:
        return start.server.started_at
    times = [p.started_at for p in start.processes if p.started_at is not None]
    return min(times) - BOOT_TIME_SLACK_S if times else None


METRICS_PRECISION_S: Final = 0.02
"""How far a start time written in the exposition format (12 significant digits) may round."""


def _served_by(start: StartEvidence) -> list[str]:
    """The process that answered `/metrics` is the root of this start's audit: metrics copied
    from another start name another process."""
    root = next((p for p in start.processes if p.pid == start.root_pid), None)
    if root is None or root.started_at is None:
        return []
    return [
        f"{start.where}/metrics-*.prom: process_start_time_seconds {stated}: expected "
        f"{root.started_at}, the start time of pid {root.pid} ({root.role})"
        for stated in start.served_by
        if abs(stated - root.started_at) > METRICS_PRECISION_S
    ]


def _server_problems(
    start: StartEvidence, server: ServerDocument, repro_pid: int | None
) -> list[str]:
    at = start.where
    problems = []
    if server.pid != start.root_pid:
        problems.append(
            f"{at}/server.json: pid: expected {start.root_pid}, the root of the sealed audit, "
            f"found {server.pid}"
        )
    root = next((p for p in start.processes if p.pid == start.root_pid), None)
    if repro_pid is not None and repro_pid in {p.pid for p in start.processes}:
        problems.append(
            f"{at}/audit: pid {repro_pid}: expected the repro that ran the stack (run.json "
            "repro_pid) outside the tree it audited, found it in the tree"
        )
    if server.ready_after_s < 0:
        problems.append(f"{at}/server.json: ready_after_s {server.ready_after_s}: expected >= 0")
    if repro_pid is not None and root is not None and root.ppid != repro_pid:
        problems.append(
            f"{at}/audit: pid {root.pid} ppid: expected {repro_pid}, the repro that ran it "
            f"(run.json repro_pid), found {root.ppid}"
        )
    opened, ready = server.started_at, server.ready_at
    if opened is None or ready is None:
        problems.append(f"{at}/server.json: started_at, ready_at: expected, found absent")
        return problems
    if ready < opened or abs(ready - opened - server.ready_after_s) > CLOCK_SLACK_S:
        problems.append(
            f"{at}/server.json: ready_at - started_at = {ready - opened:.3f} s: expected "
            f"ready_after_s {server.ready_after_s:.3f} s"
        )
    began = start.teardown.began_at
    if began is not None and began < ready:
        problems.append(
            f"{at}/teardown.json: began_at {began}: expected after ready_at {ready} (server.json)"
        )
    # the suite is asked one prompt at a time, between ready and teardown
    streamed = sum(max(row.token_offsets_s, default=0.0) for row in start.rows)
    if began is not None and streamed > began - ready + STREAMING_SLACK_S:
        problems.append(
            f"{at}/rows.json: {streamed:.3f} s of streaming: expected at most the "
            f"{began - ready:.3f} s between ready_at and teardown's began_at, one prompt at a time"
        )
    problems += _late_processes(start, ready, at)
    return problems


def _late_processes(start: StartEvidence, ready: float, at: str) -> list[str]:
    """The stack was ready once every process of it had started: one started later was
    never what served the suite's first request."""
    return [
        f"{at}/audit: pid {p.pid} ({p.role}) started_at {p.started_at}: expected before the "
        f"stack was ready at {ready}"
        for p in start.processes
        if p.started_at is not None and p.started_at > ready + BOOT_TIME_SLACK_S
    ]


def _apart(earlier: StartEvidence, later: StartEvidence) -> list[str]:
    """`later` is a start of its own, after `earlier`'s teardown, on the same rank."""
    at, problems = later.where, []
    ended = earlier.teardown.ended_at
    if ended is not None:
        if later.server is not None and (later.server.started_at or 0) < ended:
            problems.append(
                f"{at}/server.json: started_at {later.server.started_at}: expected after "
                f"{earlier.where}'s teardown ended at {ended}"
            )
        early = [
            p.pid
            for p in later.processes
            if p.started_at is not None and p.started_at < ended - BOOT_TIME_SLACK_S
        ]
        if early:
            problems.append(
                f"{at}/audit: started_at of pids {early}: expected after {earlier.where}'s "
                f"teardown ended at {ended}"
            )
    named = _pids_named(later.log) & {p.pid for p in earlier.processes}
    if named:
        problems.append(
            f"{at}/server.log: expected the log of its own processes, found pids "
            f"{sorted(named)} of {earlier.where}'s tree"
        )
    shared = {(p.pid, p.started_at) for p in earlier.processes} & {
        (p.pid, p.started_at) for p in later.processes
    }
    if shared:
        pids = sorted(pid for pid, _ in shared)
        problems.append(
            f"{at}/audit: expected processes of its own, found pids {pids} of {earlier.where} "
            "with the same start times"
        )
    if later.rows and _same_timings(later.rows, earlier.rows):
        problems.append(
            f"{at}/rows.json: expected rows timed by a start of their own, found every "
            f"arrival time within {COPY_TOLERANCE_S * 1e6:.0f} µs of {earlier.where}'s"
        )
    return problems


COPY_TOLERANCE_S: Final = 1e-4
"""How close every arrival of two starts may come only by copying: two real starts of the tiny
model part by 7 ms at the median token, 0.2 ms at the closest of 160."""


def _same_timings(rows: Sequence[OracleRow], others: Sequence[OracleRow]) -> bool:
    mine, theirs = _timings(rows), _timings(others)
    if [len(offsets) for _, offsets in mine] != [len(offsets) for _, offsets in theirs]:
        return False
    return all(
        abs(a - b) <= COPY_TOLERANCE_S
        for (ttft, offsets), (their_ttft, their_offsets) in zip(mine, theirs, strict=True)
        for a, b in ((ttft, their_ttft), *zip(offsets, their_offsets, strict=True))
    )


LOG_TIME: Final = re.compile(
    rb"(?:^(?:\((?:[^()\n]*? )?pid=(\d+)\) )?|\) )"
    rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) ",
    re.M,
)
"""How vLLM's logger dates a line (`INFO 12-04 15:14:09 [file.py:12] ...`, after a process
prefix such as `(EngineCore pid=8146) `, whose pid is read): month, day and time to the second,
in the server's local time zone, without a year."""
LISTENING: Final = re.compile(rb"Starting vLLM server on ")
"""vLLM's API server, about to listen (`entrypoints/launchers/api_server/entry.py`): its
readiness probe cannot be answered before this line is written."""
ZONE_STEP_S: Final = 900
"""Every time zone's offset from UTC is a whole number of quarter hours."""
ZONES: Final = range(-12 * 3600, 14 * 3600 + 1, ZONE_STEP_S)
LINE_SECOND_S: Final = 1.0
"""A line is dated to the second it was written in, truncated: what it did happened no
earlier than its date and less than a second after."""

Fields = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class _DatedLog:
    lines: tuple[tuple[int | None, Fields], ...]
    """Each distinct dated line: the pid of its prefix (None without one) and its date."""
    listening: tuple[Fields, ...]
    """The dates of the API server's `Starting vLLM server on` lines."""


def _dated_log(log: bytes) -> _DatedLog:
    lines = sorted(
        {(int(pid) if pid else None, _fields(fields)) for pid, *fields in LOG_TIME.findall(log)},
        key=lambda line: (line[1], line[0] or 0),
    )
    listening = []
    for match in LISTENING.finditer(log):
        dated = LOG_TIME.match(log, log.rfind(b"\n", 0, match.start()) + 1)
        if dated is not None and dated.end() <= match.start():
            listening.append(_fields(dated.groups()[1:]))
    return _DatedLog(tuple(lines), tuple(listening))


def _fields(values: Sequence[bytes]) -> Fields:
    month, day, hour, minute, second = (int(value) for value in values)
    return month, day, hour, minute, second


def _readings(log: _DatedLog, began: float, ended: float) -> list[tuple[int, int]]:
    """Each (year, zone) at which every dated line lies between `began` and `ended` (seconds
    since the epoch), to the second it is written to; a zone is local time minus UTC."""
    dated = sorted({fields for _, fields in log.lines})
    years = sorted({time.gmtime(t).tm_year for t in (began - 86400, ended + 86400)})
    found = []
    for year in years:
        stamps = [_stamp(year, fields) for fields in dated]
        known = [t for t in stamps if t is not None]
        if len(known) < len(stamps):
            continue
        low, high = min(known), max(known)
        found += [
            (year, zone) for zone in ZONES if began - 1 <= low - zone and high - zone <= ended + 1
        ]
    return found


def log_time_problems(log: bytes, began: float, ended: float, where: str) -> list[str]:
    """Every dated line of a start's log lies within the start: at some one time zone's reading
    (the log states none), between the spawn `began` and the teardown's end `ended` (seconds
    since the epoch), to the second it is written to. A log carried over from another start,
    or from another run, is dated outside it in every zone."""
    dated = _dated_log(log)
    if not dated.lines or _readings(dated, began, ended):
        return []
    return [_outside(dated, began, ended, where)]


def _outside(log: _DatedLog, began: float, ended: float, where: str) -> str:
    first, last = log.lines[0][1], log.lines[-1][1]
    return (
        f"{where}: lines dated {_dated(first)} to {_dated(last)} (local time): expected "
        f"within the start, {_utc(began)} to {_utc(ended)} UTC, in some time zone; found in none"
    )


def _log_clock(start: StartEvidence) -> tuple[list[str], frozenset[int]]:
    """The start's log read on its host's clock (`log_time_problems`), then, in the zones it
    fits: no line of a process dated before that process started (its `started_at` in the
    sealed audit, less a second), and the stack not ready (`server.json` ready_at) before the
    log says the API server is about to listen (less a second). The zones it is read in that
    hold every one of these: where none does, the problem that leaves none, read in the first
    zone that holds the others."""
    began, ended = _spawned(start), start.teardown.ended_at
    dated = _dated_log(start.log)
    if began is None or ended is None or not dated.lines:
        return [], frozenset()
    where = f"{start.where}/server.log"
    readings = _readings(dated, began, ended)
    if not readings:
        return [_outside(dated, began, ended, where)], frozenset()
    problems = []
    for judge in (_written_before_started, _ready_before_listening):
        kept = [(year, zone) for year, zone in readings if judge(start, dated, year, zone) is None]
        if kept:
            readings = kept
        else:
            problems.append(judge(start, dated, *readings[0]) or "")
    return problems, frozenset(zone for _, zone in readings)


def _written_before_started(
    start: StartEvidence, log: _DatedLog, year: int, zone: int
) -> str | None:
    started = {p.pid: p for p in start.processes if p.started_at is not None}
    for pid, fields in log.lines:
        process = started.get(pid) if pid is not None else None
        stamp = _stamp(year, fields)
        if process is None or process.started_at is None or stamp is None:
            continue
        if stamp - zone < process.started_at - LINE_SECOND_S:
            return (
                f"{start.where}/server.log: a line of pid {pid} ({process.role}) dated "
                f"{_dated(fields)} ({_utc(stamp - zone)} UTC, read in {_zone(zone)}, the zone the "
                f"start's lines fit): expected no earlier than a second before pid {pid} "
                f"started at {_utc(process.started_at)} UTC (audit started_at "
                f"{process.started_at})"
            )
    return None


def _ready_before_listening(
    start: StartEvidence, log: _DatedLog, year: int, zone: int
) -> str | None:
    ready = start.server.ready_at if start.server is not None else None
    if ready is None:
        return None
    for fields in log.listening:
        stamp = _stamp(year, fields)
        if stamp is not None and ready < stamp - zone - LINE_SECOND_S:
            return (
                f"{start.where}/server.json: ready_at {ready} ({_utc(ready)} UTC): expected no "
                f"earlier than a second before the log's 'Starting vLLM server on' dated "
                f"{_dated(fields)} ({_utc(stamp - zone)} UTC, read in {_zone(zone)}, the zone the "
                "start's lines fit): no probe is answered before the server listens"
            )
    return None


def _zone_problems(
    starts: Sequence[StartEvidence],
    zones: Mapping[tuple[int, int], frozenset[int]],
    kernels: Mapping[int, str | None],
) -> list[str]:
    """One host's logs are read in one time zone through a run: every start of a rank (one
    node) in a zone all its earlier starts fit, and every rank on rank 0's kernel (one boot
    id, one machine) in a zone rank 0's log of the same start fits; unless the two roots were
    started with another TZ."""
    problems = []
    by_rank: dict[int, list[StartEvidence]] = {}
    for start in sorted(starts, key=lambda s: (s.rank, s.start)):
        by_rank.setdefault(start.rank, []).append(start)
    for ranks in by_rank.values():
        common: frozenset[int] | None = None
        first: StartEvidence | None = None
        for start in ranks:
            mine = zones.get((start.start, start.rank), frozenset())
            if not mine:
                continue
            if common is None or first is None or _tz(first) != _tz(start):
                common, first = mine, start
                continue
            if not common & mine:
                problems.append(
                    f"{start.where}/server.log: lines read in {_zone_names(mine)} only: expected "
                    f"{_zone_names(common)}, as {first.where}'s and every earlier start's of the "
                    "same host in this run"
                )
                continue
            common &= mine
    leaders = {s.start: s for s in starts if s.rank == 0}
    for start in starts:
        leader = leaders.get(start.start)
        kernel = kernels.get(start.rank)
        if start.rank == 0 or leader is None or kernel is None or kernel != kernels.get(0):
            continue
        theirs = zones.get((leader.start, 0), frozenset())
        mine = zones.get((start.start, start.rank), frozenset())
        if theirs and mine and not theirs & mine and _tz(leader) == _tz(start):
            problems.append(
                f"{start.where}/server.log: lines read in {_zone_names(mine)} only: expected "
                f"{_zone_names(theirs)}, as {leader.where}'s, on the same kernel (nodes.json "
                "boot_id)"
            )
    return problems


def _tz(start: StartEvidence) -> str | None:
    """The TZ the start's root was started with, where it states one."""
    root = next((p for p in start.processes if p.pid == start.root_pid), None)
    return root.environ.get("TZ") if root is not None else None


def _zone(zone: int) -> str:
    sign = "+" if zone >= 0 else "-"
    return f"UTC{sign}{abs(zone) // 3600:02}:{abs(zone) % 3600 // 60:02}"


def _zone_names(zones: frozenset[int]) -> str:
    return ", ".join(_zone(zone) for zone in sorted(zones))


UVICORN_PID: Final = re.compile(rb"Started server process \[(\d+)\]")
"""uvicorn's `Started server process [N]`: the process that serves HTTP."""


def _uvicorn_problems(start: StartEvidence) -> list[str]:
    """The process uvicorn says serves HTTP is the root of the sealed audit (the API server
    `server.json` names), or one of the root's role (an API server of several)."""
    processes = {p.pid: p for p in start.processes}
    root = processes.get(start.root_pid)
    if root is None:
        return []
    problems = []
    for pid in sorted({int(pid) for pid in UVICORN_PID.findall(start.log)}):
        named = processes.get(pid)
        if named is not None and named.pid != root.pid and named.role != root.role:
            problems.append(
                f"{start.where}/server.log: uvicorn's 'Started server process [{pid}]': "
                f"expected pid {root.pid} ({root.role}), the root of the sealed audit, found pid "
                f"{pid} ({named.role})"
            )
    return problems


ASSIGNED: Final = re.compile(rb"\brank (\d+) in world size (\d+) is assigned as ([^\n]*)")
"""vLLM's `rank R in world size W is assigned as DP rank a, PP rank b, PCP rank c, TP rank t,
...`: a worker's place in the torch.distributed world."""
COORDINATE: Final = re.compile(rb"\b(DP|PP|PCP|TP) rank ([^,\s]+)")
PREFIX_PID: Final = re.compile(rb"\((?:[^()\n]*? )?pid=(\d+)\) ")


def _assignment_problems(starts: Sequence[StartEvidence]) -> list[str]:
    """Every rank of one start's world is held by one worker: no two workers, on one node or
    two, log the same rank of the world, nor the same data, pipeline, prefill-context and
    tensor parallel ranks."""
    problems = []
    by_start: dict[int, list[StartEvidence]] = {}
    for start in starts:
        by_start.setdefault(start.start, []).append(start)
    for ranks in by_start.values():
        held: dict[bytes, tuple[str, int | None]] = {}
        for start in sorted(ranks, key=lambda s: s.rank):
            for match in ASSIGNED.finditer(start.log):
                line = start.log.rfind(b"\n", 0, match.start()) + 1
                prefix = PREFIX_PID.match(start.log, line)
                pid = int(prefix[1]) if prefix is not None else None
                place = b", ".join(b"%s rank %s" % c for c in COORDINATE.findall(match[3]))
                for key, said in (
                    (b"rank " + match[1], f"rank {match[1].decode()}"),
                    (b"place " + place, place.decode(errors="replace")),
                ):
                    if key == b"place ":
                        continue  # no parallel rank read
                    where, other = held.setdefault(key, (start.where, pid))
                    if (where, other) != (start.where, pid):
                        problems.append(
                            f"{start.where}/server.log: pid {pid} assigned {said} of the world: "
                            f"expected each held by one worker, found pid {other} of {where} "
                            "assigned it too"
                        )
    return problems


def _stamp(year: int, fields: tuple[int, ...]) -> float | None:
    """Month, day, hour, minute and second of `year`, read as UTC; None for no such date."""
    month, day, hour, minute, second = fields
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]):
        return None
    if hour > 23 or minute > 59 or second > 60:
        return None
    return calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))


def _dated(fields: tuple[int, ...]) -> str:
    month, day, hour, minute, second = fields
    return f"{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}"


def _utc(when: float) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.gmtime(when))


PID_NAMED = re.compile(rb"\bpid[= ](\d+)|process \[(\d+)\]")
"""How a serving stack's log names a process: vLLM's `(EngineCore pid=8146)`, uvicorn's
`Started server process [8042]`."""


def _pids_named(log: bytes) -> set[int]:
    return {int(a or b) for a, b in PID_NAMED.findall(log)}


def _timings(rows: Sequence[OracleRow]) -> list[tuple[float, tuple[float, ...]]]:
    return [(row.ttft_s, tuple(row.token_offsets_s)) for row in rows]
