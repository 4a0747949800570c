"""The manifest models: valid manifests load, and every class of bad input is one exact message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from diagnostics import diagnostic
from pydantic import ValidationError

from repro_serving.builder import tinymodel
from repro_serving.builder.documents.manifest import (
    Manifest,
    Suite,
    expand,
    placeholders_in,
    schema_document,
    shipped_schema,
)
from repro_serving.builder.errors import BadInput, ExitCode

ASSETS = Path(__file__).parent / "manifests"
INVALID = ASSETS / "invalid"
REPO = Path(__file__).parent.parent
TINY_CPU = REPO / "manifests" / "tiny-cpu.toml"
FIX = "fix the manifest; `repro schema` prints every key a manifest accepts"
HINT = f"  hint:     {FIX}"


@pytest.mark.parametrize("path", [ASSETS / "minimal.toml", ASSETS / "full.toml", TINY_CPU])
def test_valid_manifests_load_with_their_suite(path: Path) -> None:
    manifest = Manifest.from_path(path)
    assert manifest.schema_ == "repro.manifest/v1"
    assert manifest.source == str(path)
    assert manifest.load_suite().prompts


def test_omitted_sections_take_the_strict_defaults() -> None:
    manifest = Manifest.from_path(ASSETS / "minimal.toml")
    assert manifest.host.enforced() == ()
    assert manifest.sources == ()
    assert manifest.native.forbidden_environment == ("LD_PRELOAD", "LD_AUDIT")
    gates = manifest.oracle.gates
    assert gates.exact_token_ids and gates.text_sha256 and gates.cached_tokens_zero
    assert gates.prefix_cache_hit_delta_zero
    assert gates.fresh_starts == 1
    assert gates.throughput is None and gates.spec_decode is None


def test_ld_preload_stays_forbidden_when_a_manifest_forbids_more() -> None:
    native = Manifest.from_path(ASSETS / "full.toml").native
    assert native.forbidden_environment == ("LD_PRELOAD", "LD_AUDIT", "PYTHONPATH")


def test_a_package_pin_is_a_version_string_or_a_table() -> None:
    packages = Manifest.from_path(ASSETS / "full.toml").python.packages
    assert packages["torch"].pinned == "2.12.0+xpu"
    assert packages["torch"].source is None
    assert packages["vllm"].pinned == "0.1.dev1"
    assert packages["vllm"].source == "vllm"


def test_relative_paths_resolve_against_the_manifest_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    manifest = Manifest.from_path(TINY_CPU)
    assert manifest.resolve(manifest.python.venv) == TINY_CPU.parent / "../.venv-serve"
    assert manifest.resolve("/abs/venv") == Path("/abs/venv")
    assert manifest.load_suite().name == "tiny-cpu-v1"


def test_model_directories_local_and_hub_cache_snapshot() -> None:
    manifest = Manifest.from_path(ASSETS / "full.toml")
    target, draft = manifest.models
    assert target.directory(Path("/m")) == Path(
        "/m/hub/models--poolside--Laguna-S-2.1-INT4/snapshots/"
        "4bbfc285f2f8b3b6b526274c133b7b17aae6c8cb"
    )
    assert draft.directory(Path("/m")) == Path("/m/drafter")
    assert manifest.model("draft") == draft
    assert manifest.model("tokenizer") is None


def test_profile_argv_and_env_extend_the_launch() -> None:
    launch = Manifest.from_path(ASSETS / "full.toml").launch
    assert launch.argv_for("teacher")[-1] == "--no-enable-prefix-caching"
    assert launch.env_for("candidate") == {
        "ZE_AFFINITY_MASK": "0,1,2,3",
        "VLLM_LOGGING_LEVEL": "INFO",
    }


def test_placeholders_are_named_and_expanded() -> None:
    assert placeholders_in("{python} -m x --port={port}") == ("python", "port")
    assert placeholders_in("{{literal}}") == ()
    assert expand("{venv}/lib:{site}", {"venv": "/v", "site": "/s"}) == "/v/lib:/s"
    for malformed in ("{", "}", "{}", "{python!r}", "{python:>9}"):
        with pytest.raises(ValueError):
            placeholders_in(malformed)


def test_doubled_braces_keep_a_json_argument_literal() -> None:
    candidate = Manifest.from_path(ASSETS / "full.toml").launch.profiles["candidate"]
    assert placeholders_in(candidate.argv[1]) == ("model.draft",)
    assert expand(candidate.argv[1], {"model.draft": "/d"}) == (
        '{"model": "/d", "num_speculative_tokens": 11}'
    )


def test_models_are_frozen() -> None:
    manifest = Manifest.from_path(ASSETS / "minimal.toml")
    with pytest.raises(ValidationError):
        manifest.bundle.name = "other"  # type: ignore[misc]


def test_the_default_pins_exactly_what_the_generator_writes(tmp_path: Path) -> None:
    (target,) = Manifest.from_path(TINY_CPU).models
    assert target.files == tinymodel.generate(tmp_path / "model")


def test_the_shipped_schema_is_what_the_models_produce() -> None:
    """Regenerate with: python -c 'from builder.documents.manifest import schema_document as s;
    open("builder/schemas/manifest.v1.json", "w").write(s())'"""
    assert shipped_schema() == schema_document()
    # the models' own schema, each field described by its docstring
    shipped, described = json.loads(shipped_schema()), 0
    for definition in [shipped, *shipped["$defs"].values()]:
        for field in definition.get("properties", {}).values():
            described += field.pop("description", None) is not None
    assert described > 0
    produced = Manifest.model_json_schema()
    for definition in [produced, *produced["$defs"].values()]:
        for field in definition.get("properties", {}).values():
            assert "description" not in field  # only the docstrings describe a field
    assert shipped == produced


def _diagnostics(path: Path) -> str:
    with pytest.raises(BadInput) as caught:
        Manifest.from_path(path).load_suite()
    assert caught.value.exit_code == ExitCode.BAD_INPUT
    return caught.value.diagnostics()


ONE_PROBLEM = {
    "unknown-key.toml": (
        "unknown key",
        "key launch.profiles.teacher.colour (line 27, column 1)",
        "one of the keys argv, env",
        "key colour",
    ),
    "wrong-type.toml": (
        "wrong type",
        "key launch.port (line 22, column 1)",
        "an integer",
        'a string "18000"',
    ),
    "missing-key.toml": (
        "missing key",
        "key bundle.evidence (line 4, column 1)",
        'one of "live", "sealed", "declared"',
        "nothing",
    ),
    "syntax-error.toml": (
        "TOML syntax error",
        "line 24, column 21",
        "valid TOML",
        "Expected newline or end of document after a statement",
    ),
    "not-utf8.toml": ("not UTF-8 text", "line 5, column 12", "UTF-8", "byte 0xe9"),
    "wrong-schema.toml": (
        "unsupported schema",
        "key schema (line 2, column 1)",
        '"repro.manifest/v1"',
        'a string "repro.manifest/v2"',
    ),
    "unknown-placeholder.toml": (
        "unknown placeholder {model.tokenizer}",
        "key launch.profiles.teacher.argv[1] (line 27, column 1)",
        "placeholders among {python}, {venv}, {site}, {python_prefix}, {model.target}, {port}",
        'a string "{model.tokenizer}"',
    ),
    "unknown-teacher.toml": (
        "unknown profile",
        "key oracle.teacher (line 31, column 1)",
        "a profile of launch.profiles: teacher",
        'a string "reference"',
    ),
    "bad-revision.toml": (
        "invalid value",
        "key model[0].revision (line 16, column 1)",
        "a git commit id: 40 lowercase hex digits",
        'a string "main"',
    ),
    "bad-file-name.toml": (
        "invalid key",
        'key model[0].files."../model.safetensors" (line 18, column 1)',
        "a relative file name inside the model directory, without '.' or '..' parts",
        'a string "../model.safetensors"',
    ),
    "forbidden-env.toml": (
        "forbidden environment variable",
        "key launch.env.LD_PRELOAD (line 23, column 1)",
        "no variable of native.forbidden_env nor LD_PRELOAD or LD_AUDIT",
        'a string "LD_PRELOAD"',
    ),
    "throughput-beyond-suite.toml": (
        "more tokens than the suite generates",
        "key oracle.gates.throughput.tokens",
        "at most the suite's max_tokens (16)",
        "an integer 64",
    ),
}


@pytest.mark.parametrize("name", sorted(ONE_PROBLEM))
def test_each_class_of_bad_manifest_is_one_exact_message(name: str) -> None:
    what, where, expected, found = ONE_PROBLEM[name]
    assert _diagnostics(INVALID / name) == diagnostic(
        f"invalid manifest: {what}",
        f"{INVALID / name}, {where}",
        expected=expected,
        found=found,
        hint=FIX,
    )


def test_every_problem_of_a_manifest_is_listed_at_once() -> None:
    path = INVALID / "many-problems.toml"
    assert _diagnostics(path) == "\n".join(
        [
            "error: invalid manifest: 3 problems",
            f"  where:    {path}",
            "  - key bundle.evidence (line 6, column 1): invalid value",
            '      expected: one of "live", "sealed", "declared"',
            '      found:    a string "measured"',
            "  - key bundle.colour (line 7, column 1): unknown key",
            "      expected: one of the keys name, description, evidence",
            "      found:    key colour",
            "  - key launch.port (line 23, column 1): invalid value",
            "      expected: greater than or equal to 1",
            "      found:    an integer 0",
            HINT,
        ]
    )


def test_a_missing_manifest_file_is_bad_input() -> None:
    path = INVALID / "absent.toml"
    assert _diagnostics(path) == diagnostic(
        "invalid manifest: cannot read the manifest file",
        path,
        expected="a readable file",
        found="No such file or directory",
        hint=FIX,
    )


def test_a_suite_error_names_the_suite_and_the_manifest_key() -> None:
    path = INVALID / "suite-prompt-mismatch.toml"
    suite = INVALID / "mismatched-suite.json"
    assert _diagnostics(path) == "\n".join(
        [
            "error: invalid oracle suite: prompt does not fit api 'chat'",
            f"  where:    {suite} (named by {path}, key oracle.suite), "
            "key prompts[0] (line 7, column 15)",
            "  expected: key messages only",
            "  found:    key prompt",
            "  hint:     fix the suite: a JSON object of name, api, max_tokens, seed, "
            "temperature, prompts",
        ]
    )


def test_a_missing_suite_file_names_the_manifest_key() -> None:
    path = INVALID / "missing-suite.toml"
    message = _diagnostics(path)
    assert f"{INVALID / 'suites' / 'absent.json'} (named by {path}, key oracle.suite)" in message
    assert "No such file or directory" in message


def test_a_suite_with_a_json_syntax_error_gives_line_and_column() -> None:
    with pytest.raises(BadInput) as caught:
        Suite.from_json('{"name": "x",\n  "api": }', source="s.json")
    assert caught.value.diagnostics().splitlines()[:4] == [
        "error: invalid oracle suite: JSON syntax error",
        "  where:    s.json, line 2, column 10",
        "  expected: valid JSON",
        "  found:    Expecting value",
    ]


def test_from_toml_names_its_source_in_errors() -> None:
    with pytest.raises(BadInput) as caught:
        Manifest.from_toml('schema = "repro.manifest/v1"\n', source="inline.toml")
    message = caught.value.diagnostics()
    assert message.startswith("error: invalid manifest: 5 problems\n  where:    inline.toml\n")
    assert "  - key bundle: missing key\n      expected: a table\n" in message


def test_a_toml_date_is_refused_where_any_value_is_expected() -> None:
    text = (ASSETS / "minimal.toml").read_text().replace('description = ""', "")
    text = text.replace('evidence = "declared"', 'evidence = "declared"\ndescription = 2026-01-01')
    with pytest.raises(BadInput) as caught:
        Manifest.from_toml(text, source="dated.toml")
    assert caught.value.diagnostics().splitlines()[1:4] == [
        "  where:    dated.toml, key bundle.description (line 7, column 1)",
        "  expected: no TOML date or time",
        '  found:    a string "2026-01-01"',
    ]


def test_an_unknown_key_close_to_a_known_one_is_named(tmp_path: Path) -> None:
    text = TINY_CPU.read_text()
    text = text.replace("fresh_starts = 2", "fresh_start = 2").replace(
        "description =", "descripton ="
    )
    path = tmp_path / "typos.toml"
    path.write_text(text)
    found = _diagnostics(path)
    assert "      found:    key fresh_start (did you mean fresh_starts?)" in found
    assert "      found:    key descripton (did you mean description?)" in found
