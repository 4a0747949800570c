"""One start of the manifest's vLLM server by hand, before `repro build`: does the stack serve,
how long does it take to be ready, which processes does it run, and what does repro's live
audit say of it (the cuda kernel set, the roots of the processes' own environments).

    PYTHONPATH=CODE TOOLS_PY smoke.py MANIFEST OUTDIR

Writes OUTDIR/smoke.json (times, the answer, the roles and the audit's drifts), smoke-audit.json
(`repro audit --port --kernel-set cuda --json`), smoke-server.log and smoke-observe.json (the
drifts `repro build` would refuse before it starts anything: RECORD checks of the serving venv
and the rest of the manifest's pins). The server's environment is whole, as `repro launch`
makes it: PATH, a private HOME and TMPDIR, and the manifest's variables.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from repro_serving.builder.documents.manifest import Manifest, expand
from repro_serving.builder.documents.observations import drifts
from repro_serving.builder.observations import observe
from repro_serving.builder.placeholders import path_values


def get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status, answer.read()
    except OSError:
        return 0, b""


def main() -> int:  # noqa: PLR0915 - one start, told step by step
    manifest_path, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    manifest = Manifest.from_path(manifest_path)
    summary: dict[str, object] = {}

    began = time.monotonic()
    observed = observe(manifest)
    found = drifts(manifest, observed)
    summary["observe_s"] = round(time.monotonic() - began, 1)
    summary["observe_drifts"] = len(found)
    (out / "smoke-observe.json").write_text(
        json.dumps([d.model_dump(mode="json") for d in found[:200]], indent=1)
    )

    values = {**path_values(manifest), "port": str(manifest.launch.port)}
    argv = [expand(a, values) for a in manifest.node_argv(0, "candidate")]
    work = Path(tempfile.mkdtemp(prefix="smoke-", dir="/root"))
    (work / "home").mkdir()
    env = {
        "PATH": f"{values['venv']}/bin:/usr/bin:/bin",
        "HOME": str(work / "home"),
        "TMPDIR": tempfile.mkdtemp(prefix="smk-", dir="/tmp"),
        **{k: expand(v, values) for k, v in manifest.node_env(0, "candidate").items()},
    }
    log = (out / "smoke-server.log").open("wb")
    started = time.monotonic()
    server = subprocess.Popen(
        argv, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{manifest.launch.port}"
    ready = None
    while time.monotonic() - started < manifest.launch.start_timeout_s:
        if server.poll() is not None:
            break
        if get(base + "/health")[0] == 200:
            ready = time.monotonic() - started
            break
        time.sleep(0.5)
    summary["ready_s"] = None if ready is None else round(ready, 1)
    summary["exit_before_ready"] = server.poll()
    try:
        if ready is not None:
            prompt = json.loads(manifest.resolve(manifest.oracle.suite).read_text())["prompts"][0]
            body = json.dumps(
                {"model": "tiny", "messages": prompt["messages"], "max_tokens": 32,
                 "temperature": 0.0, "seed": 0}
            ).encode()  # fmt: skip
            request = urllib.request.Request(
                base + "/v1/chat/completions", body, {"Content-Type": "application/json"}
            )
            asked = time.monotonic()
            with urllib.request.urlopen(request, timeout=60) as answer:
                summary["answer"] = json.loads(answer.read())
            summary["answer_s"] = round(time.monotonic() - asked, 3)
            summary["metrics_lines"] = [
                line
                for line in get(base + "/metrics")[1].decode().splitlines()
                if line.startswith(("vllm:num_requests", "vllm:generation_tokens_total"))
            ]
            audited = subprocess.run(
                [sys.executable, "-m", "repro_serving", "audit", "--port",
                 str(manifest.launch.port), "--kernel-set", "cuda", "--json"],
                capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            (out / "smoke-audit.json").write_text(audited.stdout)
            summary["audit_exit"] = audited.returncode
            summary["audit_stderr"] = audited.stderr[-2000:]
            try:
                document = json.loads(audited.stdout)
                body_ = document.get("body", document)
                processes = body_.get("processes", [])
                summary["roles"] = dict(Counter(p.get("role") for p in processes))
                summary["audit_files"] = body_.get("files")
                summary["audit_drifts"] = [
                    f"{d.get('kind')} {d.get('subject')} | {d.get('observed')}"
                    for d in body_.get("drifts", [])
                ][:60]
            except (ValueError, AttributeError) as error:
                summary["audit_parse_error"] = str(error)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        summary["stopped_s"] = round(time.monotonic() - started, 1)
        (out / "smoke.json").write_text(json.dumps(summary, indent=1))
        print(json.dumps({k: v for k, v in summary.items() if k != "answer"}, indent=1))
    return 0 if ready is not None else 1


if __name__ == "__main__":
    sys.exit(main())
