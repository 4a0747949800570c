"""The server lifecycle: start, readiness, refusal, teardown with proof.

Quick tests run a small Python HTTP server as the process tree; tests marked `server` run the
real vLLM CPU server of the embedded default on the tiny model.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from conftest import REPO_ROOT, TinyServer, TinyServerSpec

from repro_serving.launch import server as lifecycle
from repro_serving.launch.spec import ServerSpec

SUITE = json.loads((REPO_ROOT / "manifests" / "suites" / "tiny-cpu.json").read_text())

# argv[1]: port; argv[2]: "plain", or "stubborn-child" to first start a child ignoring SIGTERM.
HTTP_SERVER = """
import http.server, subprocess, sys
port, mode = int(sys.argv[1]), sys.argv[2]
if mode == "stubborn-child":
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ignoring', flush=True); time.sleep(600)"], stdout=subprocess.PIPE)
    child.stdout.readline()
http.server.ThreadingHTTPServer(
    ("127.0.0.1", port), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


def http_spec(tmp_path: Path, argv: tuple[str, ...], **bounds: float) -> ServerSpec:
    port = lifecycle.free_port()
    return ServerSpec(
        argv=tuple(arg.format(port=port) for arg in argv),
        env={"PATH": "/usr/bin:/bin"},
        port=port,
        log_path=tmp_path / "logs" / "server.log",
        cwd=tmp_path,
        readiness_path="/",
        **bounds,
    )


def python_spec(tmp_path: Path, script: str, *args: str, **bounds: float) -> ServerSpec:
    return http_spec(tmp_path, (sys.executable, "-c", script, *args), **bounds)


def assert_gone(pids: list[int], port: int) -> None:
    assert lifecycle.living([psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)]) == []
    assert lifecycle.port_is_free("127.0.0.1", port)


def test_a_ready_server_is_torn_down_with_its_whole_tree(tmp_path: Path) -> None:
    spec = python_spec(tmp_path, HTTP_SERVER, "{port}", "plain")
    with lifecycle.serving(spec) as running:
        assert httpx.get(running.base_url + "/", trust_env=False).status_code == 200
        pids = [process.pid for process in lifecycle.tree_members(running.pid)]
        assert lifecycle.port_is_free("127.0.0.1", running.port) is False
    assert pids == [running.pid]
    assert_gone(pids, running.port)


def test_a_child_ignoring_sigterm_is_killed_after_the_bound(tmp_path: Path) -> None:
    spec = python_spec(tmp_path, HTTP_SERVER, "{port}", "stubborn-child", stop_timeout_s=1.0)
    running = lifecycle.start(spec)
    members = lifecycle.tree_members(running.pid)
    children = [process.pid for process in members if process.pid != running.pid]
    teardown = lifecycle.stop(running)
    assert len(children) == 1
    assert teardown.killed == tuple(children)
    assert teardown.pids == tuple(sorted([running.pid, *children]))
    assert_gone(list(teardown.pids), running.port)


def test_a_port_in_use_is_refused_before_anything_starts(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    spec = python_spec(tmp_path, f"open({str(marker)!r}, 'w')")
    with (
        socket.create_server(("127.0.0.1", spec.port)),
        pytest.raises(lifecycle.PortInUse) as caught,
    ):
        lifecycle.start(spec)
    diagnostics = caught.value.diagnostics()
    assert f"port {spec.port} is already in use" in diagnostics
    assert f"127.0.0.1:{spec.port}" in diagnostics
    assert not marker.exists()


def test_a_server_exiting_at_start_raises_with_its_log_tail(tmp_path: Path) -> None:
    script = "import sys; print('model directory missing: /nowhere'); sys.exit(7)"
    with pytest.raises(lifecycle.ServerDidNotStart) as caught:
        lifecycle.start(python_spec(tmp_path, script))
    diagnostics = caught.value.diagnostics()
    assert "exited with status 7 before it was ready" in diagnostics
    assert "model directory missing: /nowhere" in diagnostics
    assert str(tmp_path / "logs" / "server.log") in diagnostics


def test_a_server_never_answering_is_stopped_and_raises(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    )
    spec = python_spec(tmp_path, script, ready_timeout_s=2.0, poll_interval_s=0.2)
    with pytest.raises(lifecycle.ServerDidNotStart) as caught:
        lifecycle.start(spec)
    assert f"did not answer GET {spec.base_url}/ within 2 s" in caught.value.diagnostics()
    assert_gone([int(pid_file.read_text())], spec.port)


def stream_chat(server: TinyServer, messages: list[dict[str, str]]) -> dict[str, Any]:
    """One streamed greedy chat completion: its token ids and its final usage chunk."""
    body = {
        "model": server.model_name,
        "messages": messages,
        "max_tokens": SUITE["max_tokens"],
        "temperature": SUITE["temperature"],
        "seed": SUITE["seed"],
        "stream": True,
        "return_token_ids": True,
        "stream_options": {"include_usage": True},
    }
    token_ids: list[int] = []
    usage: dict[str, Any] = {}
    url = server.base_url + "/v1/chat/completions"
    with httpx.stream("POST", url, json=body, timeout=120.0, trust_env=False) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            for choice in chunk.get("choices", []):
                token_ids.extend(choice.get("token_ids") or [])
            usage = chunk.get("usage") or usage
    return {"token_ids": token_ids, "usage": usage}


@pytest.mark.server
@pytest.mark.parametrize("prompt", SUITE["prompts"], ids=[p["id"] for p in SUITE["prompts"]])
def test_each_suite_prompt_gets_varied_greedy_tokens(
    tiny_server: TinyServer, prompt: dict[str, Any]
) -> None:
    reply = stream_chat(tiny_server, prompt["messages"])
    token_ids = reply["token_ids"]
    assert len(token_ids) == reply["usage"]["completion_tokens"] > 0
    assert 2 * len(set(token_ids)) >= len(token_ids), token_ids
    assert reply["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


@pytest.mark.server
def test_the_tiny_server_tree_has_its_four_processes(tiny_server: TinyServer) -> None:
    members = lifecycle.tree_members(tiny_server.pid)
    titles = sorted(" ".join(process.cmdline()) for process in members)
    assert len(members) == 4, titles
    assert any("VLLM::EngineCore" in title for title in titles), titles
    assert any("VLLM::Worker" in title for title in titles), titles


@pytest.mark.server
def test_a_second_server_on_a_held_port_is_refused_naming_port_and_holder(
    tiny_server: TinyServer, tiny_server_spec_factory: TinyServerSpec, tmp_path: Path
) -> None:
    spec = tiny_server_spec_factory(tiny_server.model_dir, tiny_server.port, tmp_path)
    with pytest.raises(lifecycle.PortInUse) as caught:
        lifecycle.start(spec)
    diagnostics = caught.value.diagnostics()
    assert f"port {tiny_server.port} is already in use" in diagnostics
    assert f"bound by pid {tiny_server.pid}" in diagnostics
    assert not spec.log_path.exists()


@pytest.mark.server
def test_teardown_of_a_real_server_leaves_no_process_and_a_free_port(
    tiny_server_spec_factory: TinyServerSpec, tmp_path: Path
) -> None:
    from repro_serving.builder import tinymodel

    tinymodel.generate(tmp_path / "model")
    spec = tiny_server_spec_factory(tmp_path / "model", lifecycle.free_port(), tmp_path)
    running = lifecycle.start(spec)
    pids = [process.pid for process in lifecycle.tree_members(running.pid)]
    teardown = lifecycle.stop(running)
    assert len(pids) == 4
    assert sorted(pids) == list(teardown.pids)
    assert_gone(pids, spec.port)


@pytest.mark.server
def test_a_real_server_with_a_bad_model_path_raises_with_its_log_tail(
    tiny_server_spec_factory: TinyServerSpec, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-model"
    spec = tiny_server_spec_factory(missing, lifecycle.free_port(), tmp_path)
    with pytest.raises(lifecycle.ServerDidNotStart) as caught:
        lifecycle.start(spec)
    diagnostics = caught.value.diagnostics()
    assert "before it was ready" in diagnostics
    assert str(missing) in diagnostics
    assert lifecycle.port_is_free("127.0.0.1", spec.port)
