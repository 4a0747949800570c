"""An imported record forged as a holder of the example key would forge it: one statement of
the record's files changed, then the record's own checksum list, the lock, the README and the
seal all derived again with repro's own functions. Only the recomputation can refuse it, and it
must, naming the claim the changed statement contradicts; `repro build` refuses the same record
before sealing it.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bundle_assets import as_its_sealer
from prometheus import a_month_earlier, revalued

from repro_serving.builder import imported
from repro_serving.builder.build import BuildRefused, build, seal_record
from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.handoff.readme import render_readme
from repro_serving.builder.hashing import sha256_file
from repro_serving.builder.sealing import bundle
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys
from repro_serving.builder.sealing.seal import Handoff
from repro_serving.builder.verify import JudgedBundle, recompute, verify

REPO = Path(__file__).resolve().parent.parent
COMMITTED = REPO / "repro" / "laguna-102tps"
KEY = SigningKey.from_path(REPO / "keys" / "example.key")
TRUSTED = TrustedKeys.from_key_file(REPO / "keys" / "example.pub")

Edit = Callable[[Path], None]
"""A change to a copy of records/laguna-102tps (its root)."""

FILES = "the record's files: each one judged, status=PASS"
ROWS = "bench rows = their suite, their counts and their /metrics"
IDLE = "idle snapshots around the run passed, in order"
IDENTITY = "identity.txt = the runtime lock, the manifest, the argv, the environment, the log"
EXACTNESS = "exactness-vs-q1.json = the rows and the teacher"
ENVIRONMENT = "service-environment.txt = [launch.env], no loader override"
FREEZE = "pip freeze = the pinned packages and the runtime lock"
TEACHER = "the teacher's bench = the sha256 every file names, the teacher files"
LOG = "server.log: no crash while serving, the argv it logs, every suite request logged"


def _laid_out(
    tmp_path: Path, edit: Edit, manifest_edit: Callable[[str], str] = lambda text: text
) -> Path:
    """A copy of the record, edited, its checksum list derived again, beside a copy of the
    manifest (edited by `manifest_edit`) as the repository lays them out; the manifest's path."""
    record = tmp_path / "records" / "laguna-102tps"
    shutil.copytree(REPO / "records" / "laguna-102tps", record)
    edit(record)
    run = record / "evidence" / "record-run"
    (record / "evidence" / "record-run.sha256").write_text(
        "".join(
            f"{sha256_file(p)}  record-run/{p.relative_to(run).as_posix()}\n"
            for p in sorted(run.rglob("*"))
            if p.is_file()
        )
    )
    manifest = tmp_path / "manifests" / "laguna-102tps.toml"
    manifest.parent.mkdir()
    manifest.write_text(manifest_edit((REPO / "manifests" / "laguna-102tps.toml").read_text()))
    shutil.copytree(REPO / "manifests" / "suites", manifest.parent / "suites")
    return manifest


def _readme(staged: Path) -> bytes:
    """The README a forger writes: the claims as recomputed, failing ones included."""
    opened = JudgedBundle.read(staged)
    return render_readme(opened.lock, recompute(opened, handoff=False))


def forged(
    tmp_path: Path, edit: Edit, manifest_edit: Callable[[str], str] = lambda text: text
) -> Path:
    manifest_path = _laid_out(tmp_path, edit, manifest_edit)
    manifest = Manifest.from_path(manifest_path)
    assert manifest.evidence is not None
    files = imported.ImportedFiles.of_manifest(manifest, manifest.evidence)
    tools = COMMITTED / bundle.TOOLS_DIR
    handoff = Handoff(
        launcher=COMMITTED / bundle.LAUNCHER,
        tools={path.name: path for path in tools.iterdir()},
        readme=_readme,
    )
    (tmp_path / "out").mkdir()
    with as_its_sealer(COMMITTED):
        sealed, _lock = seal_record(
            manifest,
            manifest_path,
            files,
            imported.load_record(files),
            key=KEY,
            parent=tmp_path / "out",
            workdir=tmp_path / "work",
            force=False,
            handoff=handoff,
        )
    return sealed.path


def failed(path: Path) -> dict[str, str]:
    report = verify(path, TRUSTED)
    assert report.findings == (), "the signature and every digest hold"
    return {check.claim: check.detail for check in report.checks if not check.ok}


# --- edits -----------------------------------------------------------------------------------


def _run(name: str, change: Callable[[str], str]) -> Edit:
    def edit(record: Path) -> None:
        path = record / "evidence" / "record-run" / name
        path.write_bytes(change(path.read_bytes().decode()).encode())

    return edit


def _json(name: str, change: Callable[[dict[str, object]], None]) -> Edit:
    def rewrite(text: str) -> str:
        document = json.loads(text)
        change(document)
        return json.dumps(document)

    return _run(name, rewrite)


def _line(name: str, pattern: str, replacement: str) -> Edit:
    def change(text: str) -> str:
        changed, count = re.subn(pattern, replacement, text, count=1, flags=re.MULTILINE)
        assert count == 1, f"{pattern!r} not in {name}"
        return changed

    return _run(name, change)


def _manifests(name: str, change: Callable[[str], str]) -> Edit:
    def edit(record: Path) -> None:
        path = record / "manifests" / name
        path.write_text(change(path.read_text()))

    return edit


def _counter(sample: str, change: Callable[[float], float]) -> Edit:
    """One sample of the metrics read after the suite changed."""
    pattern = re.escape(sample) + r" (\S+)$"

    def rewrite(text: str) -> str:
        def replaced(match: re.Match[str]) -> str:
            return f"{sample} {change(float(match[1]))}"

        changed, count = re.subn(pattern, replaced, text, count=1, flags=re.MULTILINE)
        assert count == 1, f"{sample} not read"
        return changed

    return _run("metrics-after-suite.prom", rewrite)


def _first_row(change: Callable[[dict[str, object]], None]) -> Callable[[dict[str, object]], None]:
    def rows(document: dict[str, object]) -> None:
        candidates = document["candidates"]
        assert isinstance(candidates, list)
        change(candidates[0]["comparison"]["rows"][0])

    return rows


def _set(key: str, value: object) -> Callable[[dict[str, object]], None]:
    return lambda document: document.__setitem__(key, value)


def _drop_last_bench_row(document: dict[str, object]) -> None:
    rows = document["rows"]
    assert isinstance(rows, list)
    rows.pop()


def _tokens_without_ids(document: dict[str, object]) -> None:
    rows = document["rows"]
    assert isinstance(rows, list)
    rows[0]["usage"]["completion_tokens"] -= 1


def _teacher_bench(change: Callable[[dict[str, Any]], None]) -> Edit:
    def edit(record: Path) -> None:
        path = record / "teacher-q1-canonical-bench.json"
        document = json.loads(path.read_text())
        change(document)
        path.write_text(json.dumps(document))

    return edit


def _other_teacher_token(document: dict[str, Any]) -> None:
    document["rows"][0]["token_ids"][5] += 1


def _faster_teacher(document: dict[str, Any]) -> None:
    document["summary"]["tok_s_1_100_after_ttft"]["median"] *= 2


def _observed_process(document: dict[str, Any]) -> None:
    """A card held by another process while the idle check still says passed."""
    rows = document["idle"]["sanitized_payload"]["device_util_by_proc_list"]
    rows[0].update(process_id=4242, process_name="python3", mem_size=24000)


def _first_bench_row(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return lambda document: change(document["rows"][0])


def _extra_file(record: Path) -> None:
    (record / "evidence" / "record-run" / "notes.txt").write_text("nothing checks me\n")


LABELS = '{engine="0",model_name="laguna-s-2.1-int4"}'
POSITION_0 = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",' + (
    'model_name="laguna-s-2.1-int4",position="0"}'
)


def _both_reads(change: Callable[[str], str]) -> Edit:
    def edit(record: Path) -> None:
        for name in ("metrics-before-suite.prom", "metrics-after-suite.prom"):
            _run(name, change)(record)

    return edit


def _a_day_earlier(document: dict[str, Any]) -> None:
    for row in document["rows"]:
        for key in ("request_started_epoch_s", "request_ended_epoch_s", "first_text_epoch_s"):
            row[key] -= 86400


def _timed_within_10_ms(text: str) -> str:
    highr = "http_request_duration_highr_seconds"
    text = revalued(text, rf'{highr}_bucket\{{le="[^"]+"\}}', lambda _: 13.0)
    return revalued(text, rf"{highr}_sum", lambda _: 0.1)


CHAT_SIZES = (
    'http_request_size_bytes_count{handler="/v1/chat/completions"} 13.0',
    'http_response_size_bytes_count{handler="/v1/chat/completions"} 13.0',
)
OTHER_PYTHON = (
    'minor="12",patchlevel="13",version="3.12.13"',
    'minor="11",patchlevel="9",version="3.11.9"',
)
LAST_POST = r"^(.*127\.0\.0\.1:49022 - \"POST /v1/chat/completions HTTP/1\.1\" 200 OK)$"


def _dated_days_earlier(text: str) -> str:
    """Every line vLLM dated moved five days before the run (07-26 to 07-21)."""
    dated = r"((?:^|\) )(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) )07-26 "
    return re.sub(dated, r"\g<1>07-21 ", text, flags=re.M)


def _caught_by(claims: set[str], forgeries: dict[str, Edit]) -> dict[str, tuple[Edit, set[str]]]:
    """Each forgery with the claims that must refuse it."""
    return {name: (edit, claims) for name, edit in forgeries.items()}


# The forgeries, by the claims that must refuse them.
_LOG_FORGERIES: dict[str, Edit] = {
    "the server's log dated five days before the run": _run("server.log", _dated_days_earlier),
    "a crash while serving": _line(
        "server.log",
        r"^(.*Prepared Laguna DFlash.*)$",
        r"\1\nTraceback (most recent call last):",
    ),
    "a worker dying while serving": _line(
        "server.log",
        r"^(.*Prepared Laguna DFlash.*)$",
        r"\1\n(EngineCore pid=162906) ERROR 07-26 17:48:00 [multiproc_executor.py:250] Worker "
        r"proc VllmWorker-2 died unexpectedly, shutting down executor.",
    ),
    "a fourteenth request answered while serving": _line(
        "server.log",
        r"^(.*127\.0\.0\.1:49022 - \"POST /v1/chat/completions HTTP/1\.1\" 200 OK)$",
        r"\1\n\1",
    ),
    "a suite request answered 500 while serving": _line(
        "server.log",
        r"^(.*127\.0\.0\.1:49022 - \"POST /v1/chat/completions HTTP/1\.1\" )200 OK$",
        r"\g<1>500 Internal Server Error",
    ),
    "a log naming another vLLM than the one it ran": _line(
        "server.log",
        r"^(.*Resolved architecture: LagunaForCausalLM)$",
        r"\1\n(APIServer pid=162700) INFO 07-26 17:45:22 [api_server.py:1] vLLM API server "
        r"version 0.11.0",
    ),
    "a log saying the stack served four sequences at once": _run(
        "server.log", lambda t: t.replace("'max_num_seqs': 1,", "'max_num_seqs': 4,", 1)
    ),
    "logged arguments that do not parse": _run(
        "server.log",
        lambda t: t.replace("'dtype': 'bfloat16',", "'dtype': 'bfloat16', 'x': <object>,", 1),
    ),
    "an engine of two tensor parallel ranks": _run(
        "server.log", lambda t: t.replace("tensor_parallel_size=4", "tensor_parallel_size=2", 1)
    ),
    "a target of another max model len": _run(
        "server.log",
        lambda t: t.replace("Using max model len 8192", "Using max model len 4096", 1),
    ),
    "vLLM's output handler failing while serving": _line(
        "server.log",
        r"^(.*Prepared Laguna DFlash.*)$",
        r"\1\n(APIServer pid=162700) ERROR 07-26 17:48:00 [async_llm.py:700] AsyncLLM "
        r"output_handler failed.",
    ),
}

_FILES_FORGERIES: dict[str, Edit] = {
    "status.txt says the run failed": _run("status.txt", lambda _: "status=FAIL\n"),
    "a file of the run directory that nothing judges": _extra_file,
}

_IDLE_FORGERIES: dict[str, Edit] = {
    "a failure after the idle check": _json("failure-post-idle.json", _set("status", "failed")),
    "the idle check before the start taken after the suite": _json(
        "pre-idle.json", _set("observed_utc", "2026-07-26T22:00:00+00:00")
    ),
    "the idle summary counting snapshots that are not there": _line(
        "idle-interval/summary.txt",
        r"^prestart (.*) snapshots=13$",
        r"prestart \1 snapshots=14",
    ),
    "a card held by another process before the start": _json("pre-idle.json", _observed_process),
    "an idle check whose raw capture is of other bytes": _json(
        "post-idle.json", lambda d: d["raw_capture"].__setitem__("stdout_bytes", 1)
    ),
    "an idle row whose process name is not marked as a basename": _json(
        "idle-interval/prestart-11.json",
        lambda d: d["idle"]["sanitized_payload"]["device_util_by_proc_list"][3].pop(
            "process_name_mode"
        ),
    ),
}

_IDENTITY_FORGERIES: dict[str, Edit] = {
    "identity.txt naming another vLLM commit": _line(
        "identity.txt", r"^vllm_commit=.*$", "vllm_commit=" + "0" * 40
    ),
    "identity.txt naming another teacher": _line(
        "identity.txt", r"^teacher_sha256=.*$", "teacher_sha256=" + "1" * 64
    ),
    "identity.txt drafting 12 tokens": _line(
        "identity.txt", r"^num_speculative_tokens=11$", "num_speculative_tokens=12"
    ),
    "identity.txt with another interpreter binary": _line(
        "identity.txt", r"^202c17d1671602a4", "302c17d1671602a4"
    ),
    "identity.txt with a key given twice": _line(
        "identity.txt", r"^retries=0$", "retries=0\nretries=3"
    ),
    "a verified idle interval that is no number": _line(
        "identity.txt",
        r"^verified_idle_interval_seconds=60$",
        "verified_idle_interval_seconds=60s",
    ),
}

_EXACTNESS_FORGERIES: dict[str, Edit] = {
    "exactness-vs-q1.json counting a row it does not have": _json(
        "exactness-vs-q1.json",
        _first_row(_set("completion_tokens", 511)),
    ),
    "exactness-vs-q1.json from another run": _json(
        "exactness-vs-q1.json",
        lambda d: d["candidates"][0].__setitem__("candidate", "/elsewhere/bench.json"),  # type: ignore[index]
    ),
    "exactness-vs-q1.json saying the run was not exact": _json(
        "exactness-vs-q1.json", _set("all_exact", False)
    ),
    "the run compared with itself": _json(
        "exactness-vs-q1.json",
        lambda d: d.__setitem__("teacher", d["candidates"][0]["candidate"]),  # type: ignore[index]
    ),
}

_ENVIRONMENT_FORGERIES: dict[str, Edit] = {
    "a preload from /tmp in the service environment": _line(
        "service-environment.txt", r"^LD_PRELOAD=$", "LD_PRELOAD=/tmp/evil.so"
    ),
    "LD_LIBRARY_PATH led through /tmp": _line(
        "service-environment.txt", r"^LD_LIBRARY_PATH=", "LD_LIBRARY_PATH=/tmp/lib:"
    ),
    "a serving variable [launch.env] does not state": _line(
        "service-environment.txt", r"^LANG=", "VLLM_ATTENTION_BACKEND=TORCH_SDPA\nLANG="
    ),
    "a [launch.env] value other than the record's": _line(
        "service-environment.txt", r"^OMP_NUM_THREADS=1$", "OMP_NUM_THREADS=8"
    ),
}

_FREEZE_FORGERIES: dict[str, Edit] = {
    "another torch in the freeze": _manifests(
        "pip-freeze-observed.txt", lambda t: t.replace("torch==2.12.0+xpu", "torch==2.12.0+cpu")
    ),
    "one distribution frozen twice": _manifests(
        "pip-freeze-observed.txt", lambda t: t + "torch==2.13.0\n"
    ),
    "the runtime lock naming another source commit": _manifests(
        "runtime-lock.json",
        lambda t: t.replace("906190641d708b8028018c5dde653e265c835348", "0" * 40, 1),
    ),
    "a runtime lock of another interpreter than its venv's files": _manifests(
        "runtime-lock.json", lambda t: t.replace('"python": "3.12.13"', '"python": "3.11.9"', 1)
    ),
}

_ROWS_FORGERIES: dict[str, Edit] = {
    "position 0 accepting more than there were drafts": _counter(POSITION_0, lambda v: v + 2000),
    "more tokens accepted than were generated": _counter(
        "vllm:spec_decode_num_accepted_tokens_total" + LABELS, lambda v: v + 7000
    ),
    "no draft, yet tokens accepted": _counter(
        "vllm:spec_decode_num_drafts_total" + LABELS, lambda v: v - 1609
    ),
    "a row's completion_tokens not its token ids": _json("bench.json", _tokens_without_ids),
    "a row dropped": _json("bench.json", _drop_last_bench_row),
    "every request's first token in the 1 ms bucket": _run(
        "metrics-after-suite.prom",
        lambda t: revalued(t, r"vllm:time_to_first_token_seconds_bucket\{[^}]*\}", lambda _: 13.0),
    ),
    "a decode time the inter-token latencies do not sum to": _counter(
        "vllm:request_decode_time_seconds_sum" + LABELS, lambda v: v + 1.0
    ),
    "failed requests counted that the access log does not hold": _run(
        "metrics-after-suite.prom",
        lambda t: t.replace(
            'http_requests_total{handler="/v1/chat/completions",method="POST",status="2xx"} 13.0',
            'http_requests_total{handler="/v1/chat/completions",method="POST",status="2xx"} '
            "13.0\n"
            'http_requests_total{handler="/v1/completions",method="POST",status="5xx"} 3.0',
        ),
    ),
    "the bench's median doubled": _json(
        "bench.json",
        lambda d: d["summary"]["tok_s_1_100_after_ttft"].__setitem__("median", 205.9),
    ),  # type: ignore[index]
    "the bench's own final gate failed": _json(
        "bench.json", lambda d: d["realistic_final_gate"].__setitem__("passed", False)
    ),  # type: ignore[index]
    "a row's prompt another than the suite's": _json(
        "bench.json", _first_bench_row(lambda row: row.__setitem__("prompt_sha256", "0" * 64))
    ),
    "a POST to a route the suite never posts to": _line(
        "server.log",
        LAST_POST,
        r'\1\n(APIServer pid=162700) INFO:     127.0.0.1:39515 - "POST /v1/load_lora_adapter '
        r'HTTP/1.1" 200 OK',
    ),
    "an access log without the reads of /metrics": _run(
        "server.log",
        lambda t: "".join(x for x in t.splitlines(keepends=True) if "GET /metrics" not in x),
    ),
    "prefix caching on in the read before the suite": _run(
        "metrics-before-suite.prom",
        lambda t: t.replace('enable_prefix_caching="False"', 'enable_prefix_caching="True"'),
    ),
    "requests running before the suite": _run(
        "metrics-before-suite.prom",
        lambda t: t.replace(
            'vllm:num_requests_running{engine="0",model_name="laguna-s-2.1-int4"} 0.0',
            'vllm:num_requests_running{engine="0",model_name="laguna-s-2.1-int4"} 2.0',
        ),
    ),
    "sizes of requests never counted": _run(
        "metrics-after-suite.prom",
        lambda t: t.replace(CHAT_SIZES[0], CHAT_SIZES[0][:-4] + "20.0").replace(
            CHAT_SIZES[1], CHAT_SIZES[1][:-4] + "20.0"
        ),
    ),
    "requests timed within 10 ms while they streamed for seconds": _run(
        "metrics-after-suite.prom", _timed_within_10_ms
    ),
    "python_info of another interpreter than the runtime lock's": _both_reads(
        lambda t: t.replace(*OTHER_PYTHON)
    ),
    "every counter created a month before the run": _both_reads(a_month_earlier),
    "requests that ended after the bench was created": _json(
        "bench.json",
        lambda d: d["run_identity"].__setitem__(  # type: ignore[index]
            "created_at_utc", "2026-07-26T21:49:00+00:00"
        ),
    ),
}

_TEACHER_FORGERIES: dict[str, Edit] = {
    "a teacher bench of another run": _teacher_bench(_other_teacher_token),
    "a teacher bench stating twice its median": _teacher_bench(_faster_teacher),
}

_ROWS_IDLE_FORGERIES: dict[str, Edit] = {
    "the bench's requests a day before the run": _json("bench.json", _a_day_earlier),
}

FORGERIES: dict[str, tuple[Edit, set[str]]] = {
    **_caught_by({LOG}, _LOG_FORGERIES),
    **_caught_by({FILES}, _FILES_FORGERIES),
    **_caught_by({IDLE}, _IDLE_FORGERIES),
    **_caught_by({IDENTITY}, _IDENTITY_FORGERIES),
    **_caught_by({EXACTNESS}, _EXACTNESS_FORGERIES),
    **_caught_by({ENVIRONMENT}, _ENVIRONMENT_FORGERIES),
    **_caught_by({FREEZE}, _FREEZE_FORGERIES),
    **_caught_by({ROWS}, _ROWS_FORGERIES),
    **_caught_by({TEACHER}, _TEACHER_FORGERIES),
    **_caught_by({ROWS, IDLE}, _ROWS_IDLE_FORGERIES),
}


SAID: dict[str, str] = {
    "a worker dying while serving": (
        "run/server.log: 1 crash line(s) while serving; first: line 140 'died unexpectedly'"
    ),
    "a fourteenth request answered while serving": (
        "run/server.log: 14 suite requests logged while serving, expected the 13 answered"
    ),
    "a suite request answered 500 while serving": (
        "run/server.log: 1 suite request(s) answered otherwise than 2xx while serving; first: "
        "line 278 POST /v1/chat/completions 500"
    ),
    "a log naming another vLLM than the one it ran": (
        "run/server.log: vLLM versions 0.1.dev1267+g6ae34833d.d20260726, 0.11.0: expected one"
    ),
    "logged arguments that do not parse": (
        "run/server.log:7: non-default args: expected a dict as vLLM writes it (literals, reprs "
        'of enums and dataclasses), found one that does not parse: "<object>,'
    ),
    "an engine of two tensor parallel ranks": (
        "run/server.log:37: engine config tensor_parallel_size=2: expected 4, the argv's "
        "--tensor-parallel-size 4"
    ),
    "a target of another max model len": (
        "run/server.log:22: Using max model len 4096: expected 8192, the argv's --max-model-len"
    ),
    "every request's first token in the 1 ms bucket": (
        "vllm:time_to_first_token_seconds_sum" + LABELS + ": expected a rise between 0 and 0.013 "
        "(each of the 13 observations between the reads between the bounds of its bucket), found "
        "81.50771450996399"
    ),
    "a decode time the inter-token latencies do not sum to": (
        "vllm:inter_token_latency_seconds_sum: expected a rise of 62.35968477500137 "
        "(vllm:request_decode_time_seconds_sum: the same intervals of the engine's clock"
    ),
    "failed requests counted that the access log does not hold": (
        'run/server.log: access lines of http_requests_total{handler="/v1/completions",'
        'method="POST",status="5xx"}: expected at least the 3 requests it counted between the '
        "reads"
    ),
    "vLLM's output handler failing while serving": (
        "run/server.log: 1 crash line(s) while serving; first: line 140 'output_handler failed'"
    ),
    "a POST to a route the suite never posts to": (
        "run/server.log:279: access line: expected only the suite's POSTs to "
        "/v1/chat/completions (its client posts nothing else), found POST /v1/load_lora_adapter "
        "answered 200"
    ),
    "an access log without the reads of /metrics": (
        "run/server.log: the read before the suite GET /metrics: expected its access line "
        "answered 2xx before the suite's first POST /v1/chat/completions"
    ),
    "prefix caching on in the read before the suite": (
        "vllm:cache_config_info: expected the same information in both reads of one server "
        "process, found enable_prefix_caching='True' before, 'False' after"
    ),
    "requests running before the suite": (
        'vllm:num_requests_running{engine="0",model_name="laguna-s-2.1-int4"}: expected no '
        "request running or waiting when the suite began"
    ),
    "sizes of requests never counted": (
        'http_request_size_bytes_count{handler="/v1/chat/completions"}: expected 13 (the '
        "requests http_requests_total counts for the handler"
    ),
    "requests timed within 10 ms while they streamed for seconds": (
        'http_request_duration_highr_seconds_bucket{le="0.1"}: expected 0 (the requests '
        "http_request_duration_seconds counts within the same bound"
    ),
    "python_info of another interpreter than the runtime lock's": (
        "python_info version: expected '3.12.13' (the interpreter the runtime lock's "
        "toolchain.python states), found '3.11.9'"
    ),
    "every counter created a month before the run": (
        "expected a time no earlier than run/idle-interval/prestart-12.json observed_utc (the "
        "last idle snapshot before)"
    ),
    "the bench's requests a day before the run": (
        "run/idle-interval/prestart-00.json: observed_utc expected no later than the bench's "
        "first request began (2026-07-25T21:47:37.666626+00:00: an idle snapshot before the run)"
    ),
    "requests that ended after the bench was created": (
        "run/bench.json: row 7 (rust-stream-parser): request_ended_epoch_s expected no later "
        "than the bench was created (2026-07-26T21:49:00+00:00, run_identity.created_at_utc: "
        "once its last request ended), found 1785102549.8788676 (2026-07-26T21:49:09.878868+00:00)"
    ),
}
"""What the refusal of a forgery says, where a test states it."""


def test_the_forger_reproduces_the_committed_bundle_when_it_changes_nothing(
    tmp_path: Path,
) -> None:
    """Without this, a refusal below could come from the forger, not from the statement."""
    assert failed(forged(tmp_path, lambda _: None)) == {}


@pytest.mark.parametrize("case", FORGERIES, ids=list(FORGERIES))
def test_a_forged_statement_is_refused_by_the_claim_it_contradicts(
    tmp_path: Path, case: str
) -> None:
    edit, claims = FORGERIES[case]
    found = failed(forged(tmp_path, edit))
    assert claims <= set(found), found
    assert all(found[claim] for claim in claims), "each refusal says what it found"
    if case in SAID:
        assert any(SAID[case] in found[claim] for claim in claims), found


def test_the_teacher_bench_is_recomputed_and_its_median_stated() -> None:
    shown = {c.claim: (c.ok, c.value) for c in verify(COMMITTED, TRUSTED).checks}
    assert shown[TEACHER] == (
        True,
        "sha256 d41d3d5e2471…, 13 rows; median 12.961404009912233 tok/s (N/span), "
        "12.83178996981311 tok/s ((N-1)/span)",
    )


def test_a_teacher_named_by_sha256_and_not_sealed_is_refused(tmp_path: Path) -> None:
    """The teacher files and identity.txt name their source; a manifest that leaves the
    teacher bench out seals a claim nobody can check."""

    def without(text: str) -> str:
        kept = [line for line in text.splitlines() if not line.startswith("teacher_bench =")]
        return "\n".join(kept) + "\n"

    found = failed(forged(tmp_path, lambda _: None, without))
    assert set(found) == {TEACHER}
    assert "expected it sealed ([evidence] teacher_bench), found none" in found[TEACHER]


def test_a_build_of_a_record_whose_status_says_failed_is_refused_before_sealing(
    tmp_path: Path,
) -> None:
    manifest = _laid_out(tmp_path, _run("status.txt", lambda _: "status=FAIL\n"))
    with pytest.raises(BuildRefused) as refused:
        build(manifest, KEY, tmp_path, tmp_path / "work")
    assert [(d.subject, d.observed) for d in refused.value.drifts] == [
        (FILES, "run/status.txt: expected the one line status=PASS, found 'status=FAIL\\n'")
    ]
    assert not (tmp_path / "laguna-102tps").exists()
