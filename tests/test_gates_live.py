"""The cold-prompt gates on a real server: prefix caching on and a long prompt repeated.

vLLM's prefix cache holds 128-token blocks here, so a prompt shorter than a block is never
reused; a 400-byte prompt (one token per byte with the tiny model's tokenizer) asked twice is,
and both the per-row gate and the metrics gate must say so.
"""

from __future__ import annotations

import json

import pytest
from conftest import TinyServer

from repro_serving.builder.documents.evidence import VerdictStatus
from repro_serving.builder.documents.manifest import Suite
from repro_serving.launch import gates, metrics
from repro_serving.launch.oracle import OracleRequest, answer_prompt, client_for, read_metrics

pytestmark = pytest.mark.server

LONG = " ".join(f"line {n}: the quick brown fox jumps over the lazy dog." for n in range(8))


def test_a_repeated_long_prompt_is_caught_by_both_cold_gates(tiny_server: TinyServer) -> None:
    suite = Suite.from_json(
        json.dumps(
            {
                "name": "repeated-long-prompt",
                "api": "chat",
                "max_tokens": 8,
                "seed": 0,
                "temperature": 0.0,
                "prompts": [{"id": "long", "messages": [{"role": "user", "content": LONG}]}],
            }
        )
    )
    request = OracleRequest(suite=suite, model=tiny_server.model_name)
    (prompt,) = suite.prompts
    with client_for(tiny_server.base_url) as client:
        before = read_metrics(client)
        first = answer_prompt(client, request, 0, prompt)
        again = answer_prompt(client, request, 1, prompt)
        after = read_metrics(client)
    assert first.prompt_tokens > 256
    assert first.cached_tokens == 0
    assert again.cached_tokens is not None and again.cached_tokens >= 256
    assert again.token_ids == first.token_ids, "a cached prefix changes nothing greedy here"

    per_row = gates.cached_tokens_zero([first, again])
    assert per_row.status is VerdictStatus.FAIL
    assert str(again.cached_tokens) in per_row.summary
    hits = gates.prefix_cache_hit_delta_zero(metrics.delta(before, after))
    assert hits.status is VerdictStatus.FAIL
