"""What an imported record's own files state about its run, judged against each other, the
manifest, the suite and the rows: pure functions over the sealed bytes.

`builder.imported` recomputes the rows, the metrics and the gates of a record; the producer's run
directory also states how the run ended and what it ran, and a re-signed bundle whose
statements contradict its evidence must not pass. The layout is the one of the b70 lab's
measurement legs (identity schema `laguna-mwide-measurement-leg-v1`), the only producer format
repro imports: every file of the run directory is one this module names and judges, and one it
does not know is refused, so nothing sealed is read by nothing.

- `status.txt`: exactly `status=PASS`.
- `pre-idle.json`, `post-idle.json`, `failure-post-idle.json` (when present) and the idle
  interval's snapshots: status `passed`, each as its raw capture gives it (bytes and sha256,
  the sanitized rows the raw ones, only the observer on each card, one row per card of the
  runtime lock's count, the xpu-smi it names), observed before the suite (pre) and after it
  (post), and around the bench's requests: a snapshot before the run no later than its first
  request began, one after no earlier than its last ended (the server held the cards while it
  answered, an idle snapshot saw none held; one host's clock, 1 s of slack);
  `idle-interval/summary.txt`: one line per phase whose snapshot count is the number of its
  snapshot files and whose elapsed seconds are their span and cover the interval identity.txt
  says was verified.
- `bench.json` beside its rows: each prompt's sha256 the suite's, its output sha256 and stream
  count its row's, its rate and the summary median recomputed, its request ending after its
  first token and no later than the bench says it was created (its run identity's
  created_at_utc, stamped once its last request ended: 0.5 ms after it in the Laguna record),
  its own validity and final gate passed, its run identity the suite's and the launch's. The
  `/metrics` times against these (the first request's start, the last idle snapshot before the
  run) are `launch.consistency`'s (`builder.imported` states them as `ServerFacts`). The
  teacher's raw bench (`[evidence] teacher_bench`): the sha256 every file names, the teacher
  files' rows, its median recomputed.
- `identity.txt` (`key=value` lines, then `<sha256>  <path>` lines): each key once, its schema
  this one; the commits, model paths, native digests and runtime files those of the producer's
  runtime lock and of the manifest; `model_manifest_sha256` the sha256 of the sealed
  model-directory listing; `teacher_sha256` the source the teacher files name; the speculative
  depth, memory utilisation, local argmax and the kernel selectors those of the argv and of the
  service environment; the graph counts those of every audited capture in the server log; one
  suite invocation per fresh start, no retry, no warm-up. The keys no sealed file restates are
  counted as stated only.
- `exactness-vs-q1.json`: the comparison as the rows and the teacher give it again, row by row
  (place, prompt, token counts, cached tokens, equality), its candidate the bench of this run
  (the directory its service environment names).
- `service-environment.txt`: every `[launch.env]` variable with its value ({venv} expanded), the
  others only those private to the producer's run (caches and homes under its run directory,
  PATH, PWD, SHLVL), and no loader variable (`builder.native.rules.env_drifts`).
- the observed pip freeze: each distribution once, every pinned package at its pin, and the
  producer's runtime lock naming the same versions and the manifest's source commits, its
  interpreter the release of its venv's files, its native files named as files, not paths.

What these cannot see: a statement no other sealed file restates (the keys counted as stated
only); when the server process started (`/metrics` states it, and it may precede the last idle
snapshot: a process that has not yet opened a card is no held card, and the Laguna record's
started 0.5 s before its last prestart snapshot); and a record rewritten coherently in every
file by whoever holds the key.
"""

from __future__ import annotations

import base64
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, ValidationError

from repro_serving.builder.documents.evidence import OracleRow, TeacherRow
from repro_serving.builder.documents.manifest import Manifest, Suite, expand
from repro_serving.builder.documents.translate import problems_of
from repro_serving.builder.freshstarts import log_time_problems
from repro_serving.builder.hashing import SHA256_HEX, sha256_bytes
from repro_serving.builder.native.rules import AuditPolicy, env_drifts
from repro_serving.builder.vllmlog import flag_name, flag_value
from repro_serving.launch.consistency import speculative_config
from repro_serving.launch.throughput import UnmeasurableRow, measure

STATUS: Final = "status.txt"
IDENTITY: Final = "identity.txt"
EXACTNESS: Final = "exactness-vs-q1.json"
ENVIRONMENT: Final = "service-environment.txt"
IDLE_SUMMARY: Final = "idle-interval/summary.txt"
PRE_IDLE: Final = "pre-idle.json"
POST_IDLE: Final = ("post-idle.json", "failure-post-idle.json")
JUDGED_ELSEWHERE: Final = (
    "bench.json",
    "server.log",
    "metrics-before-suite.prom",
    "metrics-after-suite.prom",
    "cleanup-status.txt",
)
"""Read by `builder.imported` (rows, log markers, metrics, cleanup)."""
REQUIRED: Final = (*JUDGED_ELSEWHERE, STATUS, IDENTITY, EXACTNESS, ENVIRONMENT, IDLE_SUMMARY)
REQUIRED_IDLE: Final = (PRE_IDLE, POST_IDLE[0])
OPTIONAL: Final = (POST_IDLE[1],)
SNAPSHOT: Final = re.compile(r"idle-interval/(?P<phase>prestart|poststop)-[0-9]{2}\.json")
IDENTITY_SCHEMA: Final = "laguna-mwide-measurement-leg-v1"
PRIVATE_TO_THE_RUN: Final = frozenset(
    {
        "HOME",
        "TMPDIR",
        "HF_HOME",
        "HF_HUB_CACHE",
        "TRANSFORMERS_CACHE",
        "NUMBA_CACHE_DIR",
        "PYTHONPYCACHEPREFIX",
        "SYCL_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "VLLM_CACHE_ROOT",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
    }
)
"""Directories the producer gave its run under its own run directory; each start here gets its
own (a manifest does not pin them)."""
SOCKET_DIRECTORIES: Final = frozenset({"VLLM_RPC_BASE_PATH"})
"""Where vLLM binds its IPC sockets: an absolute directory of the producer's, short (a socket
path holds at most 107 bytes), so not always under the run directory."""
THE_SHELLS: Final = frozenset({"PATH", "PWD", "SHLVL"})
"""What the producer's shell set; repro gives each start its own PATH and working directory."""
SELECTORS: Final = {
    "exact_max_m": ("VLLM_XPU_LAGUNA_EXACT_MAX_M", "LAGUNA_M"),
    "num_speculative_tokens": ("LAGUNA_SPEC", "LAGUNA_DFLASH_NUM_SPECULATIVE_TOKENS"),
    "prebuilt_exact_attn_metadata": ("VLLM_XPU_LAGUNA_M8_PREBUILT_EXACT_ATTN_METADATA",),
    "draft_breakable_graph": ("VLLM_XPU_LAGUNA_DRAFT_BREAKABLE_GRAPH",),
    "capture_attention_graphs": ("VLLM_XPU_LAGUNA_M8_CAPTURE_ATTENTION_GRAPHS",),
    "inline_attention_graphs": ("VLLM_XPU_LAGUNA_M8_INLINE_ATTENTION_GRAPHS",),
    "mwide_bf16_router_topk": ("VLLM_XPU_LAGUNA_MWIDE_BF16_ROUTER_TOPK",),
    "dflash_context_kv_workspace": ("VLLM_XPU_LAGUNA_DFLASH_CONTEXT_KV_WORKSPACE",),
    "dflash_fp8_w8a16": ("VLLM_XPU_LAGUNA_DFLASH_FP8_W8A16",),
    "m8_shared_elementwise": ("VLLM_XPU_LAGUNA_M8_SHARED_ELEMENTWISE",),
    "m8_qknorm_rope": ("VLLM_XPU_LAGUNA_M8_QKNORM_ROPE",),
    "cluster_iface": ("CCL_KVS_IFACE", "FI_TCP_IFACE"),
}
"""identity.txt's selectors and the service-environment variables that set them."""
GRAPHS: Final = re.compile(r"BreakableCUDAGraphCapture\(graphs=(\d+), eager_breaks=(\d+)\)")
SOURCES: Final = {"vllm_commit": "vllm", "kernel_commit": "kernel_record_tree"}
"""identity.txt's commits and the producer's runtime-lock source each is."""
FA2_MODULE: Final = "vllm_xpu_kernels._vllm_fa2_C"
ATTENTION_LIBRARY: Final = "libattn_kernels_xe_2.so"
MODEL_LISTING: Final = "model-directory-verification.sha256"


@dataclass(frozen=True)
class Judged:
    """A check's contradictions, and how many statements it bound and left as stated only."""

    problems: tuple[str, ...]
    bound: int = 0
    stated_only: tuple[str, ...] = ()


# --- the run directory's files ---------------------------------------------------------------


def inventory_problems(names: Sequence[str]) -> list[str]:
    """Every file the layout needs is there, and every file there is one it judges."""
    present = set(names)
    problems = [
        f"run/{name}: expected the record's {name}, found none"
        for name in (*REQUIRED, *REQUIRED_IDLE)
        if name not in present
    ]
    known = {*REQUIRED, *REQUIRED_IDLE, *OPTIONAL}
    problems += [
        f"run/{name}: a file no check of this record format judges (expected only "
        f"{', '.join(sorted(known))} and idle-interval snapshots)"
        for name in sorted(present)
        if name not in known and SNAPSHOT.fullmatch(name) is None
    ]
    return problems


def status_problems(text: str) -> list[str]:
    if text.splitlines() != ["status=PASS"]:
        return [f"run/{STATUS}: expected the one line status=PASS, found {text[:80]!r}"]
    return []


# --- idle ------------------------------------------------------------------------------------


class _Capture(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    stdout_base64: str
    stdout_bytes: int
    stdout_sha256: str
    stderr_base64: str
    stderr_bytes: int
    stderr_sha256: str


class _ChildIdentity(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    process_id: int


class _Observer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    sha256: str


class _Idle(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    accepted_mode: str
    device_ids: tuple[int, ...]
    row_count: int
    sanitized_payload: dict[str, list[dict[str, object]]]


class _Snapshot(BaseModel):
    """One `xpu-smi ps` of the cards, as the producer's idle check recorded it."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    status: str
    observed_utc: str
    child_identity: _ChildIdentity
    xpu_smi: _Observer
    idle: _Idle
    raw_capture: _Capture


OBSERVER_PID: Final = "<observer-child-pid>"
"""How the sanitized rows name the pid of the observer itself."""
ROWS_KEY: Final = "device_util_by_proc_list"
NAME_MODE: Final = "basename_non_authoritative"
"""How the sanitized rows mark every process name: `xpu-smi` gives a basename, not a path."""


def _snapshot_problems(name: str, snapshot: _Snapshot, observer_sha256: str | None) -> list[str]:
    """What one snapshot states against itself: its raw capture against its digests, its
    sanitized rows against the raw ones, each card once, and (self_observer_rows, the only mode
    that passes) no process on any card but the observer itself."""
    at = f"run/{name}"
    problems = []
    capture = snapshot.raw_capture
    raw: dict[str, bytes] = {}
    for stream in ("stdout", "stderr"):
        try:
            raw[stream] = base64.b64decode(getattr(capture, f"{stream}_base64"), validate=True)
        except ValueError:
            problems.append(f"{at}: raw_capture.{stream}_base64 is no base64")
            continue
        stated = (getattr(capture, f"{stream}_bytes"), getattr(capture, f"{stream}_sha256"))
        if (len(raw[stream]), sha256_bytes(raw[stream])) != stated:
            problems.append(
                f"{at}: raw_capture.{stream}: expected {stated[0]} bytes of sha256 "
                f"{stated[1][:12]}…, found {len(raw[stream])} of {sha256_bytes(raw[stream])[:12]}…"
            )
    if observer_sha256 is not None and snapshot.xpu_smi.sha256 != observer_sha256:
        problems.append(
            f"{at}: xpu_smi.sha256 expected {observer_sha256} (runtime-lock.json host."
            f"xpu_smi_sha256), found {snapshot.xpu_smi.sha256}"
        )
    idle = snapshot.idle
    rows = idle.sanitized_payload.get(ROWS_KEY, [])
    if idle.accepted_mode != "self_observer_rows":
        problems.append(
            f"{at}: idle.accepted_mode expected self_observer_rows, found {idle.accepted_mode!r}"
        )
    cards = sorted(str(r.get("device_id")) for r in rows)
    if idle.row_count != len(rows) or cards != sorted(map(str, idle.device_ids)):
        problems.append(
            f"{at}: idle: expected one row per card of device_ids {list(idle.device_ids)} "
            f"(row_count {idle.row_count}), found {len(rows)} rows"
        )
    problems += [
        f"{at}: idle row of card {r.get('device_id')}: expected only the observer "
        f"({OBSERVER_PID}), found process {r.get('process_id')} ({r.get('process_name')})"
        for r in rows
        if r.get("process_id") != OBSERVER_PID
    ]
    try:
        document = json.loads(raw.get("stdout", b"{}"))
        captured = document.get(ROWS_KEY, []) if isinstance(document, dict) else None
    except ValueError:
        captured = None
    own = snapshot.child_identity.process_id
    again = (
        [
            {
                **row,
                "process_id": OBSERVER_PID
                if row.get("process_id") == own
                else row.get("process_id"),
                "process_name_mode": NAME_MODE,
            }
            for row in captured
            if isinstance(row, dict)
        ]
        if isinstance(captured, list)
        else None
    )
    if again != rows:
        problems.append(
            f"{at}: idle.sanitized_payload expected the raw capture's rows with the observer's "
            f"pid {own} sanitized and each process name marked {NAME_MODE!r}, found other rows"
        )
    return problems


def idle_problems(
    files: Mapping[str, bytes],
    suite_created_utc: str | None,
    verified_interval_s: int | None,
    observer_sha256: str | None = None,
    cards: int | None = None,
    *,
    requests: Sequence[tuple[float, float]] = (),
) -> list[str]:
    """The idle snapshots around the run passed, each as its raw capture gives it, in order
    around the suite and around its `requests` (each one's start and end, the bench's epochs:
    a card no process held while the server answered none; the same host's clock), and the
    interval summary states what the snapshot files are."""
    problems = []
    observed: dict[str, str] = {}
    for name in (PRE_IDLE, *POST_IDLE, *(n for n in files if SNAPSHOT.fullmatch(n))):
        if name not in files:
            continue
        try:
            snapshot = _Snapshot.model_validate_json(files[name])
        except ValidationError as error:
            every = _every_problem(error, _Snapshot, files[name])
            problems.append(f"run/{name}: expected an idle snapshot, found {every}")
            continue
        observed[name] = snapshot.observed_utc
        if snapshot.status != "passed":
            problems.append(f"run/{name}: status expected passed, found {snapshot.status!r}")
        problems += _snapshot_problems(name, snapshot, observer_sha256)
        if cards is not None and len(snapshot.idle.device_ids) != cards:
            problems.append(
                f"run/{name}: idle.device_ids expected the {cards} cards of runtime-lock.json "
                f"host.gpu_count, found {list(snapshot.idle.device_ids)}"
            )
    if suite_created_utc is not None:
        for name, when in observed.items():
            before = name == PRE_IDLE or "/prestart-" in name
            if name not in POST_IDLE and (when < suite_created_utc) != before:
                side = "before" if before else "after"
                problems.append(
                    f"run/{name}: observed_utc expected {side} the suite's {suite_created_utc}, "
                    f"found {when}"
                )
        problems += [
            f"run/{name}: observed_utc expected after the suite's {suite_created_utc}, found "
            f"{observed[name]}"
            for name in POST_IDLE
            if name in observed and not observed[name] > suite_created_utc
        ]
    if requests:
        problems += _around_requests(observed, requests)
    summary = files.get(IDLE_SUMMARY)
    if summary is not None:
        problems += _summary_problems(
            summary.decode(errors="replace"), observed, verified_interval_s
        )
    return problems


def log_dated_problems(log: bytes, files: Mapping[str, bytes], where: str) -> list[str]:
    """The server's log written between the first idle snapshot before the run and the last one
    after it: every line it dates, in one time zone (`freshstarts.log_time_problems`), within
    that window (a snapshot's time is the host's clock; the server's first lines may come a
    little before the last snapshot before the run, which saw no card held yet)."""
    times = []
    for name in (PRE_IDLE, *POST_IDLE, *(n for n in files if SNAPSHOT.fullmatch(n))):
        try:
            stated = json.loads(files[name]).get("observed_utc") if name in files else None
        except (ValueError, AttributeError):
            stated = None
        seconds = utc_seconds(stated) if isinstance(stated, str) else None
        if seconds is not None:
            times.append(seconds)
    if not times:
        return []
    return log_time_problems(log, min(times) - CLOCK_SLACK_S, max(times) + CLOCK_SLACK_S, where)


CLOCK_SLACK_S: Final = 1.0
"""How far two programs reading one host's wall clock may part: its granularity and a small
step. Every time a record's files state is that host's."""


def _around_requests(
    observed: Mapping[str, str], requests: Sequence[tuple[float, float]]
) -> list[str]:
    """Each snapshot of the cards taken before the run no later than the bench's first request
    began, each one after it no earlier than its last ended: while the server answered, it held
    the cards, and an idle snapshot saw none held."""
    first = min(started for started, _ended in requests)
    last = max(ended for _started, ended in requests)
    problems = []
    for name, when in sorted(observed.items()):
        seconds = utc_seconds(when)
        if seconds is None:
            continue
        before = name == PRE_IDLE or "/prestart-" in name
        if before and seconds > first + CLOCK_SLACK_S:
            problems.append(
                f"run/{name}: observed_utc expected no later than the bench's first request "
                f"began ({_utc(first)}: an idle snapshot before the run), found {when}"
            )
        elif not before and seconds < last - CLOCK_SLACK_S:
            problems.append(
                f"run/{name}: observed_utc expected no earlier than the bench's last request "
                f"ended ({_utc(last)}: an idle snapshot after the run), found {when}"
            )
    return problems


def utc_seconds(text: str) -> float | None:
    """An ISO 8601 time as seconds since the epoch (UTC when it names no zone: the files name
    their times `*_utc`); None when it is no time."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


def _utc(seconds: float) -> str:
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return repr(seconds)


_SUMMARY_LINE: Final = re.compile(
    r"(?P<phase>prestart|poststop) elapsed_seconds=(?P<elapsed>[0-9]+) snapshots=(?P<count>[0-9]+)"
)


def _summary_problems(
    text: str, observed: Mapping[str, str], verified_interval_s: int | None
) -> list[str]:
    where = f"run/{IDLE_SUMMARY}"
    phases: dict[str, tuple[int, int]] = {}
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = _SUMMARY_LINE.fullmatch(line)
        if match is None or match["phase"] in phases:
            what = "a phase given twice" if match else repr(line[:80])
            problems.append(
                f"{where}:{number}: expected '<prestart|poststop> elapsed_seconds=N "
                f"snapshots=N' once per phase, found {what}"
            )
            continue
        phases[match["phase"]] = (int(match["elapsed"]), int(match["count"]))
    for phase in ("prestart", "poststop"):
        times = sorted(t for n, t in observed.items() if n.startswith(f"idle-interval/{phase}-"))
        taken = len(times)
        if phase not in phases:
            problems.append(f"{where}: expected a {phase} line, found none")
            continue
        elapsed, count = phases[phase]
        span = _seconds_between(times[0], times[-1]) if len(times) > 1 else None
        if span is not None:
            gap = span / (len(times) - 1)
            if not span <= elapsed + 1 or elapsed > span + gap + 1:
                problems.append(
                    f"{where}: {phase} elapsed_seconds expected the {span:.0f} s its snapshots "
                    f"span (one {gap:.0f} s interval more at most), found {elapsed}"
                )
        if count != taken:
            problems.append(
                f"{where}: {phase} snapshots expected {taken} (the {phase} files), found {count}"
            )
        if verified_interval_s is not None and elapsed < verified_interval_s:
            problems.append(
                f"{where}: {phase} elapsed_seconds expected at least identity.txt's "
                f"verified_idle_interval_seconds {verified_interval_s}, found {elapsed}"
            )
    return problems


def _seconds_between(first: str, last: str) -> float | None:
    try:
        return (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds()
    except ValueError:
        return None


# --- identity.txt ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Statements:
    """identity.txt read: its `key=value` statements and its `<sha256>  <path>` lines."""

    values: dict[str, str]
    files: dict[str, str]
    """Path to the sha256 stated for it."""
    problems: tuple[str, ...]


_FILE_LINE: Final = re.compile(rf"(?P<digest>{SHA256_HEX})  (?P<path>/\S.*)")
_KEY_LINE: Final = re.compile(r"(?P<key>[a-z][a-z0-9_]*)=(?P<value>.*)")


def read_statements(text: str) -> Statements:
    values: dict[str, str] = {}
    files: dict[str, str] = {}
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"run/{IDENTITY}:{number}"
        if (file := _FILE_LINE.fullmatch(line)) is not None:
            if file["path"] in files:
                problems.append(f"{where}: {file['path']} stated twice")
            files[file["path"]] = file["digest"]
        elif (key := _KEY_LINE.fullmatch(line)) is not None:
            if key["key"] in values:
                problems.append(f"{where}: {key['key']} stated twice")
            values[key["key"]] = key["value"]
        else:
            problems.append(
                f"{where}: expected key=value or '<sha256>  <path>', found {line[:80]!r}"
            )
    return Statements(values, files, tuple(problems))


class _Foreign(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class LockSource(_Foreign):
    commit: str


class LockDigest(_Foreign):
    module: str = ""
    path: str = ""
    path_template: str = ""
    sha256: str


class RuntimeLock(_Foreign):
    """The parts of the producer's runtime lock that its other files restate."""

    host: dict[str, object] = {}
    toolchain: dict[str, object] = {}
    python_packages: dict[str, str] = {}
    source: dict[str, LockSource] = {}
    native_modules: tuple[LockDigest, ...] = ()
    mapped_kernel_libraries: tuple[LockDigest, ...] = ()
    runtime_files: tuple[LockDigest, ...] = ()


@dataclass(frozen=True)
class Run:
    """What the other sealed files say, for identity.txt to be judged against."""

    manifest: Manifest
    argv: Sequence[str]
    environment: Mapping[str, str]
    lock: RuntimeLock
    teacher_sources: Mapping[str, str | None]
    """Each teacher file's name to the source sha256 it names."""
    sealed: Mapping[str, bytes]
    """The sealed files beside the run directory, by name (the model listing among them)."""
    server_log: str


def identity_problems(statements: Statements, run: Run) -> Judged:
    """identity.txt's statements against the run's other sealed files."""
    said = statements.values
    problems = list(statements.problems)
    bound: set[str] = set()
    where = f"run/{IDENTITY}"

    def expect(key: str, expected: str | None, source: str) -> None:
        bound.add(key)
        if expected is None:
            problems.append(f"{where}: {key} is bound to {source}, which states none")
        elif said.get(key) != expected:
            problems.append(f"{where}: {key} expected {expected} ({source}), found {said.get(key)}")

    expect("schema", IDENTITY_SCHEMA, "the record format repro reads")
    manifest = run.manifest
    declared = {s.name: s.commit for s in manifest.sources}
    for key, name in SOURCES.items():
        locked = run.lock.source.get(name)
        expect(key, locked.commit if locked else None, f"runtime-lock.json source.{name}")
        expect(key, declared.get(name), f"the manifest's [[source]] {name}")
    paths = {m.role: m.path for m in manifest.models}
    expect("model", paths.get("target"), "the manifest's target model path")
    expect("draft", paths.get("draft"), "the manifest's draft model path")
    listing = run.sealed.get(MODEL_LISTING)
    expect(
        "model_manifest_sha256",
        None if listing is None else sha256_bytes(listing),
        f"the sha256 of the sealed {MODEL_LISTING}",
    )
    fa2 = next((m.sha256 for m in run.lock.native_modules if m.module == FA2_MODULE), None)
    expect("fa2_binary_sha256", fa2, f"runtime-lock.json's native module {FA2_MODULE}")
    attention = next(
        (m.sha256 for m in run.lock.mapped_kernel_libraries if m.path == ATTENTION_LIBRARY), None
    )
    expect("attn_library_sha256", attention, f"runtime-lock.json's {ATTENTION_LIBRARY}")
    for name, source in run.teacher_sources.items():
        expect("teacher_sha256", source, f"{name} source_sha256")
    speculative = speculative_config(run.argv)
    depth = speculative.get("num_speculative_tokens")
    expect("num_speculative_tokens", _shown(depth), "the argv's --speculative-config")
    gate = manifest.oracle.gates.spec_decode
    if gate is not None:
        expect("num_speculative_tokens", str(gate.positions), "the spec_decode gate's positions")
    argmax = speculative.get("use_local_argmax_reduction")
    expect("local_argmax", _shown(argmax), "the argv's use_local_argmax_reduction")
    expect("local_argmax", _flag(run.environment.get("LAGUNA_LOCAL_ARGMAX")), "LAGUNA_LOCAL_ARGMAX")
    bound.add("gpu_memory_utilization")
    problems += _utilisation_problems(said, run, where)
    for key, variables in SELECTORS.items():
        for variable in variables:
            expect(key, run.environment.get(variable), f"the service environment's {variable}")
    problems += _graph_problems(said, run.server_log, where)
    bound |= {"expected_num_graphs", "expected_num_eager_breaks"}
    expect("suite_invocations", str(manifest.oracle.gates.fresh_starts), "the fresh_starts gate")
    expect("retries", "0", "a record run once")
    expect("no_warmup", "true", "a cold suite: the first request is a prompt of the suite")
    bound.add("verified_idle_interval_seconds")  # judged against the idle interval's summary
    problems += _interval_problems(said, where)
    problems += _runtime_file_problems(statements.files, run, where)
    stated_only = tuple(sorted(set(said) - bound)) + tuple(
        path for path in statements.files if not _under_venv(path, run.manifest)
    )
    files = sum(_under_venv(path, run.manifest) for path in statements.files)
    return Judged(tuple(dict.fromkeys(problems)), len(bound & set(said)) + files, stated_only)


def _utilisation_problems(said: Mapping[str, str], run: Run, where: str) -> list[str]:
    stated = said.get("gpu_memory_utilization")
    return [
        f"{where}: gpu_memory_utilization expected {value} ({source}), found {stated}"
        for value, source in (
            (_last(run.argv, "--gpu-memory-utilization"), "the argv's --gpu-memory-utilization"),
            (run.environment.get("LAGUNA_GPU_UTIL"), "LAGUNA_GPU_UTIL"),
        )
        if not _same_number(stated, value)
    ]


def _interval_problems(said: Mapping[str, str], where: str) -> list[str]:
    interval = said.get("verified_idle_interval_seconds")
    if interval is None or interval.isdecimal():
        return []
    return [f"{where}: verified_idle_interval_seconds expected whole seconds, found {interval!r}"]


def verified_interval(statements: Statements) -> int | None:
    value = statements.values.get("verified_idle_interval_seconds", "")
    return int(value) if value.isdecimal() else None


def _graph_problems(said: Mapping[str, str], log: str, where: str) -> list[str]:
    captures = GRAPHS.findall(log)
    if not captures:
        return [f"{where}: expected_num_graphs: no audited capture in run/server.log to bind"]
    expected = (said.get("expected_num_graphs"), said.get("expected_num_eager_breaks"))
    found = sorted(set(captures) - {expected})
    return [
        f"{where}: expected_num_graphs / expected_num_eager_breaks {expected[0]} / "
        f"{expected[1]}, found a capture in run/server.log with graphs={g}, eager_breaks={e}"
        for g, e in found
    ]


def _runtime_file_problems(files: Mapping[str, str], run: Run, where: str) -> list[str]:
    venv = run.manifest.python.venv
    locked = {expand(f.path_template, {"venv": venv}): f.sha256 for f in run.lock.runtime_files}
    problems = []
    for path, digest in files.items():
        if not _under_venv(path, run.manifest):
            continue
        if locked.get(path) != digest:
            problems.append(
                f"{where}: {path} expected {locked.get(path) or 'a runtime file of '}"
                f"{'' if path in locked else 'runtime-lock.json'}, found {digest}"
            )
    return problems


def _under_venv(path: str, manifest: Manifest) -> bool:
    venv = posixpath.normpath(manifest.python.venv)
    return posixpath.normpath(path).startswith(venv + "/")


def _last(argv: Sequence[str], flag: str) -> str | None:
    found = None
    for index, argument in enumerate(argv):
        if flag_name(argument) == flag:
            given = flag_value(argv, index)
            found = None if given is None else given[1]
    return found


def _shown(value: object) -> str | None:
    if isinstance(value, bool):
        return "1" if value else "0"
    return None if value is None else str(value)


def _flag(value: str | None) -> str | None:
    return {"true": "1", "false": "0", "1": "1", "0": "0"}.get((value or "").lower())


def _same_number(stated: str | None, other: str | None) -> bool:
    try:
        return stated is not None and other is not None and float(stated) == float(other)
    except ValueError:
        return False


# --- exactness-vs-q1.json --------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class _ComparedRow(_Strict):
    index: int
    prompt_id: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    cached_zero: bool
    token_ids_equal: bool
    identity_equal: bool
    exact: bool
    first_diff: object = None


class _Rollover(_Strict):
    count: int
    exact_count: int
    rows: tuple[_ComparedRow, ...]


class _LongThenNext(_Strict):
    long_prompt_id: str
    long_completion_tokens: int
    long_exact: bool
    next_prompt_id: str
    next_exact: bool
    passed: bool


class _Comparison(_Strict):
    exact: bool
    exact_count: int
    total: int
    all_cached_zero: bool
    rollover: _Rollover
    long_then_next: _LongThenNext
    rows: tuple[_ComparedRow, ...]


class _Candidate(_Strict):
    candidate: str
    comparison: _Comparison


class _Exactness(_Strict):
    teacher: str
    all_exact: bool
    candidates: tuple[_Candidate, ...]


def exactness_problems(
    data: bytes,
    suite: Suite,
    rows: Sequence[OracleRow],
    teacher: Sequence[TeacherRow],
    run_directory: str | None,
) -> list[str]:
    """The record's own comparison with its teacher, as the rows and the teacher give it."""
    where = f"run/{EXACTNESS}"
    try:
        document = _Exactness.model_validate_json(data)
    except ValidationError as error:
        every = _every_problem(error, _Exactness, data)
        return [f"{where}: expected the comparison of the run with its teacher, found {every}"]
    if len(document.candidates) != 1:
        return [f"{where}: candidates expected one (this run), found {len(document.candidates)}"]
    candidate = document.candidates[0]
    compared = candidate.comparison
    problems = []
    if posixpath.normpath(document.teacher) == posixpath.normpath(candidate.candidate):
        problems.append(
            f"{where}: teacher expected another run's bench than the candidate's, found "
            f"{document.teacher}, the candidate itself"
        )
    if run_directory is not None and posixpath.dirname(candidate.candidate) != run_directory:
        problems.append(
            f"{where}: candidate expected the bench of {run_directory} (the run the service "
            f"environment names), found {candidate.candidate}"
        )
    taught = {row.prompt_id: row.token_ids for row in teacher}
    equal = [taught.get(row.prompt_id) == row.token_ids for row in rows]
    prompts = len(suite.prompts)
    states = {
        "all_exact": (document.all_exact, all(equal) and len(rows) == prompts),
        "comparison.exact": (compared.exact, all(equal) and len(rows) == prompts),
        "comparison.exact_count": (compared.exact_count, sum(equal)),
        "comparison.total": (compared.total, prompts),
        "comparison.all_cached_zero": (
            compared.all_cached_zero,
            all(row.cached_tokens == 0 for row in rows),
        ),
    }
    problems += [
        f"{where}: {key} expected {again} (recomputed from the rows and the teacher), found "
        f"{stated}"
        for key, (stated, again) in states.items()
        if stated != again
    ]
    problems += _compared_rows_problems(compared.rows, rows, equal, f"{where}: comparison.rows")
    by_index = {row.index: row for row in compared.rows}
    rollover = compared.rollover
    for row in rollover.rows:
        if by_index.get(row.index) != row:
            problems.append(
                f"{where}: comparison.rollover row {row.index} ({row.prompt_id}) expected the "
                "same as comparison.rows' row of that index, found another"
            )
    if (rollover.count, rollover.exact_count) != (
        len(rollover.rows),
        sum(r.exact for r in rollover.rows),
    ):
        problems.append(
            f"{where}: comparison.rollover count / exact_count expected "
            f"{len(rollover.rows)} / {sum(r.exact for r in rollover.rows)} (its rows), found "
            f"{rollover.count} / {rollover.exact_count}"
        )
    problems += _long_then_next_problems(compared.long_then_next, rows, equal, where)
    return problems


def _compared_rows_problems(
    compared: Sequence[_ComparedRow], rows: Sequence[OracleRow], equal: Sequence[bool], at: str
) -> list[str]:
    if len(compared) != len(rows):
        return [f"{at}: expected one row for each of the {len(rows)} bench rows, found "
                f"{len(compared)}"]  # fmt: skip
    problems = []
    for place, (stated, row, same) in enumerate(zip(compared, rows, equal, strict=True)):
        again = {
            "index": row.prompt_index,
            "prompt_id": row.prompt_id,
            "prompt_tokens": row.prompt_tokens,
            "completion_tokens": row.completion_tokens,
            "cached_tokens": row.cached_tokens,
            "cached_zero": row.cached_tokens == 0,
            "token_ids_equal": same,
            "exact": same,
            "first_diff": None if same else stated.first_diff,
        }
        problems += [
            f"{at}[{place}] ({row.prompt_id}): {key} expected {value!r} (bench.json and the "
            f"teacher), found {getattr(stated, key)!r}"
            for key, value in again.items()
            if getattr(stated, key) != value
        ]
        if same and not stated.identity_equal:
            problems.append(f"{at}[{place}] ({row.prompt_id}): identity_equal expected true")
    return problems


def _long_then_next_problems(
    stated: _LongThenNext, rows: Sequence[OracleRow], equal: Sequence[bool], where: str
) -> list[str]:
    places = {row.prompt_id: place for place, row in enumerate(rows)}
    long, after = places.get(stated.long_prompt_id), places.get(stated.next_prompt_id)
    at = f"{where}: comparison.long_then_next"
    if long is None or after != long + 1:
        return [
            f"{at}: expected two consecutive prompts of the rows, found "
            f"{stated.long_prompt_id} then {stated.next_prompt_id}"
        ]
    again = {
        "long_completion_tokens": rows[long].completion_tokens,
        "long_exact": equal[long],
        "next_exact": equal[after],
        "passed": equal[long] and equal[after],
    }
    return [
        f"{at}: {key} expected {value!r}, found {getattr(stated, key)!r}"
        for key, value in again.items()
        if getattr(stated, key) != value
    ]


# --- service-environment.txt -----------------------------------------------------------------


def read_environment(text: str) -> tuple[dict[str, str], list[str]]:
    environment: dict[str, str] = {}
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        name, equals, value = line.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            problems.append(f"run/{ENVIRONMENT}:{number}: expected NAME=value, found {line[:80]!r}")
        elif name in environment:
            problems.append(f"run/{ENVIRONMENT}:{number}: {name} given twice")
        else:
            environment[name] = value
    return environment, problems


def run_directory(environment: Mapping[str, str]) -> str | None:
    """The producer's run directory: where its private HOME lies."""
    home = environment.get("HOME")
    return None if not home else posixpath.dirname(posixpath.normpath(home))


def environment_problems(environment: Mapping[str, str], manifest: Manifest) -> list[str]:
    """The record's service environment against the manifest's `[launch.env]` and the loader
    variables repro forbids."""
    where = f"run/{ENVIRONMENT}"
    values = {"venv": manifest.python.venv} | {
        f"model.{m.role}": m.path for m in manifest.models if m.path
    }
    declared = {
        name: expand(value, values)
        for name, value in manifest.launch.env_for(manifest.oracle.teacher).items()
    }
    problems = [
        f"{where}: {name} expected {value!r} ([launch.env]), found "
        + (repr(environment[name]) if name in environment else "it unset")
        for name, value in declared.items()
        if environment.get(name) != value
    ]
    private = run_directory(environment)
    for name, value in environment.items():
        if name in declared or name in THE_SHELLS:
            continue
        if name in SOCKET_DIRECTORIES:
            if not value.startswith("/"):
                problems.append(f"{where}: {name} expected an absolute directory, found {value!r}")
        elif name in PRIVATE_TO_THE_RUN:
            if private is None or not posixpath.normpath(value).startswith(private + "/"):
                problems.append(
                    f"{where}: {name} expected a directory under the run's {private}, found "
                    f"{value!r}"
                )
        elif name not in manifest.native.forbidden_environment:
            problems.append(
                f"{where}: {name}={value[:80]!r} is not in [launch.env] (expected only its "
                "variables and the run's private directories)"
            )
    policy = AuditPolicy(
        allowed_roots=tuple(
            posixpath.normpath(expand(root, values))
            for root in manifest.native.allowed_roots
            if _expandable(root, values)
        ),
        forbidden_env=manifest.native.forbidden_environment,
        preload=tuple(expand(p, values) for p in manifest.native.preload),
    )
    problems += [
        f"{where}: {d.observed}: expected {d.expected} ({d.why})"
        for d in env_drifts(0, "service", environment, policy)
    ]
    return problems


def _expandable(template: str, values: Mapping[str, str]) -> bool:
    try:
        expand(template, values)
    except KeyError:
        return False
    return True


# --- the pip freeze and the runtime lock -----------------------------------------------------


_EGG: Final = re.compile(r"#egg=(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)")
_PINNED: Final = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)")
_DIRECT: Final = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*) @ \S+")


def freeze_problems(
    text: str, where: str, manifest: Manifest, lock: RuntimeLock
) -> tuple[int, list[str]]:
    """A `pip freeze`: each distribution once; every `[python.packages]` pin is its version, and
    the runtime lock names the versions it shows and the manifest's source commits."""
    versions: dict[str, str | None] = {}
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("-e "):
            egg = _EGG.search(line)
            name, version = (egg["name"] if egg else None), None
        elif (pinned := _PINNED.fullmatch(line)) is not None:
            name, version = pinned["name"], pinned["version"]
        elif (direct := _DIRECT.fullmatch(line)) is not None:
            name, version = direct["name"], None
        else:
            name = None
        if name is None:
            problems.append(f"{where}:{number}: expected a pip freeze line, found {line[:80]!r}")
            continue
        key = canonicalize_name(name)
        if key in versions:
            problems.append(f"{where}:{number}: {name} expected once, found again")
        versions[key] = version if name is not None else None
    for name, package in manifest.python.packages.items():
        found = versions.get(canonicalize_name(name))
        if found != package.pinned:
            problems.append(
                f"{where}: {name} expected =={package.pinned} ([python.packages]), found "
                + (f"=={found}" if found else "no pinned version")
            )
    for name, version in lock.python_packages.items():
        if name in ("observed_full_freeze", "warning"):
            continue
        found = versions.get(canonicalize_name(name))
        if found != version:
            problems.append(
                f"runtime-lock.json: python_packages.{name} expected {found} ({where}), found "
                f"{version}"
            )
    problems += _runtime_lock_problems(lock)
    declared = {s.name: s.commit for s in manifest.sources}
    locked = {name: s.commit for name, s in lock.source.items()}
    if locked != declared:
        differing = sorted(n for n in {*locked, *declared} if locked.get(n) != declared.get(n))
        problems += [
            f"runtime-lock.json: source.{n} expected {declared.get(n)} (the manifest's "
            f"[[source]]), found {locked.get(n)}"
            for n in differing
        ]
    return len(versions), problems


def _runtime_lock_problems(lock: RuntimeLock) -> list[str]:
    """The runtime lock against itself: its interpreter the release its venv's files are of,
    its native modules and kernel libraries named as files of their package, not paths."""
    problems = []
    python = lock.toolchain.get("python")
    series = ".".join(str(python).split(".")[:2]) if isinstance(python, str) else None
    for item in lock.runtime_files:
        found = re.search(r"/lib/python(3\.[0-9]+)/", item.path_template)
        if series is not None and found is not None and found[1] != series:
            problems.append(
                f"runtime-lock.json: toolchain.python {python}: expected the release of its "
                f"runtime file {item.path_template}, python{found[1]}"
            )
    problems += [
        f"runtime-lock.json: {item.module or item.path}: expected a file name of its package, "
        f"found the path {item.path!r}"
        for item in (*lock.native_modules, *lock.mapped_kernel_libraries)
        if "/" in item.path or item.path in ("", ".", "..")
    ]
    return problems


def _every_problem(error: ValidationError, model: type[BaseModel], data: bytes) -> str:
    """Every problem of a record file that does not follow `model`, each by key path, line and
    column."""
    problems = problems_of(error, model, text=data.decode(errors="replace"))
    return "; ".join(problem.line() for problem in problems)


# --- the teacher's own bench ------------------------------------------------------------------


@dataclass(frozen=True)
class TeacherBench:
    """The raw bench of the teacher run, as sealed."""

    sha256: str
    rows: Sequence[OracleRow]
    suite: str
    stored_median: float | None
    """Its summary's median of the first tokens' rate (the record's convention, N/span)."""


def teacher_bench_problems(
    bench: TeacherBench | None,
    teacher: Sequence[TeacherRow],
    named: Mapping[str, str | None],
    suite: Suite,
    tokens: int,
) -> tuple[str, list[str]]:
    """The teacher's bench against every file naming it by sha256 (`named`: file → the sha256
    it names, None where it names none) and against the teacher files' rows; its medians
    recomputed over `tokens` streamed tokens. The value a person checks, and the problems."""
    naming = {name: digest for name, digest in named.items() if digest is not None}
    if bench is None:
        if not naming:
            return "not applicable: nothing names a teacher bench", []
        return "none sealed", [
            f"{name}: names its teacher bench {digest}: expected it sealed ([evidence] "
            "teacher_bench), found none"
            for name, digest in naming.items()
        ]
    problems = [
        f"{name}: names the teacher bench {digest}, the sealed one is {bench.sha256}"
        for name, digest in naming.items()
        if digest != bench.sha256
    ]
    if bench.suite != suite.name:
        problems.append(f"{TEACHER_BENCH_NAME}: suite expected {suite.name}, found {bench.suite}")
    if len(bench.rows) != len(teacher):
        problems.append(
            f"{TEACHER_BENCH_NAME}: expected the {len(teacher)} rows of the teacher files, found "
            f"{len(bench.rows)}"
        )
    for place, (row, taught) in enumerate(zip(bench.rows, teacher, strict=False)):
        at = f"{TEACHER_BENCH_NAME}: row {place} ({row.prompt_id})"
        stated = (row.prompt_id, row.prompt_index, row.token_ids, row.text_sha256)
        again = (taught.prompt_id, taught.prompt_index, taught.token_ids, taught.text_sha256)
        problems += [
            f"{at}: {field} expected the teacher files' {mine!r:.80}, found {theirs!r:.80}"
            for field, mine, theirs in zip(
                ("prompt_id", "prompt_index", "token_ids", "text sha256"),
                again,
                stated,
                strict=True,
            )
            if mine != theirs
        ]
    try:
        rate = measure(bench.rows, tokens)
    except UnmeasurableRow as error:
        return "no median", [*problems, f"{TEACHER_BENCH_NAME}: {error.diagnostics()}"]
    historical, conventional = rate.historical_median, rate.conventional_median
    if bench.stored_median is not None and abs(historical - bench.stored_median) > 1e-12:
        problems.append(
            f"{TEACHER_BENCH_NAME}: summary median expected {historical!r} (recomputed, N/span "
            f"over {tokens} tokens), found {bench.stored_median!r}"
        )
    value = (
        f"sha256 {bench.sha256[:12]}…, {len(bench.rows)} rows; median {historical!r} tok/s "
        f"(N/span), {conventional!r} tok/s ((N-1)/span)"
    )
    return value, problems


TEACHER_BENCH_NAME: Final = "teacher-bench.json"


# --- bench.json: what it says beside its rows --------------------------------------------------


class _BenchRowStatement(_Strict):
    prompt_id: str
    prompt_sha256: str
    sha256: str
    stream_token_id_count: int
    tok_s_1_100_after_ttft: float | None = None
    request_started_epoch_s: float
    request_ended_epoch_s: float
    ttft_s: float


class _FinalGate(_Strict):
    passed: bool
    cached_tokens: tuple[int, ...]
    stream_token_id_counts: tuple[int, ...]


class _Validity(_Strict):
    valid: bool
    each_prompt_run_once: bool
    prompts_are_unique: bool
    response_reuse: bool
    history_acceleration: bool
    cached_tokens_all_zero: bool
    prompt_count: int


class _BenchIdentity(_Strict):
    base_url: str
    model: str
    max_tokens: int
    seed: int
    prompt_count: int
    api_mode: str


class BenchStatements(_Strict):
    """What `bench.json` states beside its rows."""

    rows: tuple[_BenchRowStatement, ...]
    output_sha256s: tuple[str, ...]
    prompt_sha256s: tuple[str, ...]
    realistic_final_gate: _FinalGate
    fresh_response_validity: _Validity
    run_identity: _BenchIdentity


BENCH_WHERE: Final = "run/bench.json"


def read_bench(data: bytes) -> BenchStatements | str:
    """What `bench.json` states beside its rows, or why it does not."""
    try:
        return BenchStatements.model_validate_json(data)
    except ValidationError as error:
        every = _every_problem(error, BenchStatements, data)
        return f"{BENCH_WHERE}: expected the record's bench, found {every}"


def bench_problems(
    bench: BenchStatements | str,
    rows: Sequence[OracleRow],
    suite: Suite,
    manifest: Manifest,
    *,
    argv: Sequence[str],
    stored_median: float | None,
    tokens: int,
    created_utc: str | None = None,
) -> list[str]:
    """What the record's bench (`read_bench`) states beside its rows, against the rows, the
    suite and the launch: each prompt's sha256 the suite's, its output and token counts its
    row's, its rate and median recomputed, its request ending after it began and no later than
    the bench says it was created (`created_utc`), its own validity and final gate passed for a
    cold suite run once, its run identity the suite's and the launch's."""
    where = BENCH_WHERE
    if isinstance(bench, str):
        return [bench]
    problems = []
    created = None if created_utc is None else utc_seconds(created_utc)
    if created is not None:
        problems += [
            f"{where}: row {place} ({stated.prompt_id}): request_ended_epoch_s expected no later "
            f"than the bench was created ({created_utc}, run_identity.created_at_utc: once its "
            f"last request ended), found {stated.request_ended_epoch_s!r} "
            f"({_utc(stated.request_ended_epoch_s)})"
            for place, stated in enumerate(bench.rows)
            if stated.request_ended_epoch_s > created + CLOCK_SLACK_S
        ]
    digests = {prompt.id: prompt.sha256 for prompt in suite.prompts}
    for place, (stated, row) in enumerate(zip(bench.rows, rows, strict=False)):
        at = f"{where}: row {place} ({row.prompt_id})"
        checks = {
            "prompt_sha256": (stated.prompt_sha256, digests.get(row.prompt_id), "the suite's"),
            "stream_token_id_count": (
                stated.stream_token_id_count,
                len(row.token_ids),
                "its token ids",
            ),
            "prompt_sha256s[i]": (
                bench.prompt_sha256s[place] if place < len(bench.prompt_sha256s) else None,
                stated.prompt_sha256,
                "its row's",
            ),
            "output_sha256s[i]": (
                bench.output_sha256s[place] if place < len(bench.output_sha256s) else None,
                stated.sha256,
                "its row's",
            ),
        }
        problems += [
            f"{at}: {field} expected {expected} ({source}), found {found}"
            for field, (found, expected, source) in checks.items()
            if found != expected
        ]
        if not 0 <= stated.ttft_s <= stated.request_ended_epoch_s - stated.request_started_epoch_s:
            problems.append(
                f"{at}: expected a request that began, answered its first token, then ended; "
                f"found began {stated.request_started_epoch_s}, ttft {stated.ttft_s} s, ended "
                f"{stated.request_ended_epoch_s}"
            )
        if stated.tok_s_1_100_after_ttft is not None:
            try:
                rate = measure([row], tokens).historical_median
            except UnmeasurableRow:
                rate = None
            if rate is None or abs(rate - stated.tok_s_1_100_after_ttft) > 1e-9:
                problems.append(
                    f"{at}: tok_s_1_100_after_ttft expected {rate!r} (recomputed, N/span), "
                    f"found {stated.tok_s_1_100_after_ttft!r}"
                )
    if len(bench.output_sha256s) != len(rows) or len(bench.prompt_sha256s) != len(rows):
        problems.append(f"{where}: expected one output and prompt sha256 per row")
    try:
        median = measure(rows, tokens).historical_median if rows else None
    except UnmeasurableRow:
        median = None
    if stored_median is not None and (median is None or abs(median - stored_median) > 1e-12):
        problems.append(
            f"{where}: summary median expected {median!r} (recomputed, N/span), found "
            f"{stored_median!r}"
        )
    validity, final = bench.fresh_response_validity, bench.realistic_final_gate
    stated_flags = {
        "fresh_response_validity.valid": (validity.valid, True),
        "fresh_response_validity.each_prompt_run_once": (validity.each_prompt_run_once, True),
        "fresh_response_validity.prompts_are_unique": (validity.prompts_are_unique, True),
        "fresh_response_validity.response_reuse": (validity.response_reuse, False),
        "fresh_response_validity.history_acceleration": (validity.history_acceleration, False),
        "fresh_response_validity.cached_tokens_all_zero": (
            validity.cached_tokens_all_zero,
            all(r.cached_tokens == 0 for r in rows),
        ),
        "fresh_response_validity.prompt_count": (validity.prompt_count, len(suite.prompts)),
        "realistic_final_gate.passed": (final.passed, True),
        "realistic_final_gate.cached_tokens": (
            list(final.cached_tokens),
            [r.cached_tokens for r in rows],
        ),
        "realistic_final_gate.stream_token_id_counts": (
            list(final.stream_token_id_counts),
            [len(r.token_ids) for r in rows],
        ),
    }
    identity = bench.run_identity
    served = _last(argv, "--served-model-name")
    port = _last(argv, "--port")
    stated_flags |= {
        "run_identity.max_tokens": (identity.max_tokens, suite.max_tokens),
        "run_identity.seed": (identity.seed, suite.seed),
        "run_identity.prompt_count": (identity.prompt_count, len(suite.prompts)),
        "run_identity.api_mode": (identity.api_mode, suite.api),
        "run_identity.model": (identity.model, served or identity.model),
        "run_identity.base_url port": (
            identity.base_url.rsplit(":", 1)[-1].rstrip("/"),
            str(manifest.launch.port) if port == "{port}" else port or "",
        ),
    }
    problems += [
        f"{where}: {field} expected {expected!r}, found {found!r}"
        for field, (found, expected) in stated_flags.items()
        if found != expected
    ]
    return problems
