"""Hostile inputs, as an attacker measured them on copies of the committed bundle `repro/tiny-cpu`:
each is refused with exit 2 (bad input) or 3 (not observable), or reported as drift (exit 1),
never with a traceback, never by hanging, and never by reading what need not be read.

A tampered copy is re-sealed with the example key (`reseal`: new SHA256SUMS, statement and
envelope, as `builder.sealing.seal` writes them), so what is judged is the hostile content
itself, not a broken signature. Whatever could hang (a FIFO, /dev/zero) runs in a child process
with a timeout.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from bundle_assets import BUNDLE_NAME, EXAMPLE_KEY, EXAMPLE_PUB, REPO_ROOT, example_key
from bundle_assets import seal_example as seal_laguna_mini
from schemas import assert_valid, assert_valid_error

from repro_serving.builder import readers
from repro_serving.builder.cli import main
from repro_serving.builder.commands import host as host_command
from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.errors import BadInput, NotObservable
from repro_serving.builder.hashing import sha256_file
from repro_serving.builder.sealing import dsse
from repro_serving.builder.sealing.bundle import (
    ENVELOPE,
    SHA256SUMS,
    STATEMENT,
    path_problem,
    render_sha256sums,
)
from repro_serving.builder.sealing.statement import Statement, statement_for

COMMITTED = REPO_ROOT / "repro" / "tiny-cpu"
TINY_MANIFEST = REPO_ROOT / "manifests" / "tiny-cpu.toml"
HANG_TIMEOUT_S = 30
"""A child that blocks on a FIFO or reads /dev/zero never ends: any bound proves it ended. One
that refuses takes about 1.5 s; the rest is room for a loaded machine of two cores."""


# --- helpers ----------------------------------------------------------------------------------


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A copy of the committed bundle under its own name, so that only the tampering differs."""
    copy = tmp_path / "repro" / COMMITTED.name
    shutil.copytree(COMMITTED, copy)
    return copy


def reseal(bundle: Path) -> None:
    """Seal `bundle` again as it now is: SHA256SUMS, the statement and its envelope, signed with
    the example key; the statement keeps the bundle's name, manifest source and dependencies."""
    old = Statement.from_json((bundle / STATEMENT).read_bytes(), where=STATEMENT)
    digests = {
        path.relative_to(bundle).as_posix(): sha256_file(path)
        for path in sorted(bundle.rglob("*"))
        if path.is_file() and path.name not in (SHA256SUMS, STATEMENT, ENVELOPE)
    }
    (bundle / SHA256SUMS).write_bytes(render_sha256sums(digests))
    digests[SHA256SUMS] = sha256_file(bundle / SHA256SUMS)
    statement = statement_for(
        old.bundle_name, old.manifest.path, digests, dependencies=old.dependencies
    ).to_json()
    (bundle / STATEMENT).write_bytes(statement)
    (bundle / ENVELOPE).write_bytes(dsse.sign(statement, example_key()).to_json())


def run(argv: Sequence[str]) -> tuple[int, str, str]:
    """`repro ARGV` in this process; no traceback may reach either stream."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    assert "Traceback" not in out.getvalue() + err.getvalue()
    return code, out.getvalue(), err.getvalue()


def run_child(argv: Sequence[str]) -> tuple[int, str, str]:
    """`repro ARGV` in a child process that must end within `HANG_TIMEOUT_S`."""
    done = subprocess.run(
        [sys.executable, "-m", "repro_serving", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
        check=False,
    )
    assert "Traceback" not in done.stdout + done.stderr
    return done.returncode, done.stdout, done.stderr


def error_document(out: str, code: int) -> dict[str, Any]:
    """The `--json` document of an error: version first, ok false, the error with its code."""
    document: dict[str, Any] = assert_valid_error(json.loads(out))
    assert list(document)[:2] == ["version", "ok"]
    assert (document["version"], document["ok"]) == (1, False)
    assert set(document["error"]) == {"what", "where", "expected", "found", "exit_code"}
    assert document["error"]["exit_code"] == code
    return document


def verify_args(bundle: Path, *extra: str) -> list[str]:
    return ["verify", str(bundle), "--key", str(EXAMPLE_PUB), *extra]


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


# --- the bounded reader -------------------------------------------------------------------------


def test_a_file_above_its_limit_is_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as stream:
        stream.truncate(50 * 2**30)  # sparse: reading it whole would take minutes
    with pytest.raises(BadInput) as refused:
        readers.read_bytes(huge, limit=readers.MANIFEST_LIMIT, what="a file")
    assert (refused.value.what, refused.value.expected, refused.value.found) == (
        "a file is too large",
        f"at most {readers.MANIFEST_LIMIT} bytes",
        f"{50 * 2**30} bytes",
    )


def test_a_file_that_grows_while_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "growing"
    path.write_bytes(b"x" * 64)
    real_fstat = os.fstat

    def stale_fstat(descriptor: int) -> os.stat_result:
        """The size as it was when the file was looked at, before it grew to 64 bytes."""
        info = real_fstat(descriptor)
        return os.stat_result((info.st_mode, *tuple(info)[1:6], 8, *tuple(info)[7:10]))

    monkeypatch.setattr(readers.os, "fstat", stale_fstat)
    with pytest.raises(BadInput) as refused:
        readers.read_bytes(path, limit=16, what="a file")
    assert refused.value.found == "more than 16 bytes: it grew while read"


def test_a_symlink_is_followed_on_the_command_line_but_never_inside_a_bundle(
    tmp_path: Path,
) -> None:
    (tmp_path / "target").write_bytes(b"data")
    (tmp_path / "link").symlink_to("target")
    assert readers.read_bytes(tmp_path / "link", limit=16, what="a file") == b"data"
    with pytest.raises(BadInput) as refused:
        readers.read_bytes(tmp_path / "link", limit=16, what="a file", follow_symlinks=False)
    assert (refused.value.what, refused.value.found) == (
        "a file is not a regular file",
        "a symlink",
    )


def test_a_file_that_cannot_be_read_is_not_observable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root, chmod does not stop a read: the one os call is made to refuse instead."""
    path = tmp_path / "secret"
    path.write_bytes(b"x")

    def refused_open(name: str, flags: int, mode: int = 0o777) -> int:
        raise PermissionError(errno.EACCES, "Permission denied", name)

    monkeypatch.setattr(readers.os, "open", refused_open)
    with pytest.raises(NotObservable) as refused:
        readers.read_bytes(path, limit=16, what="a file")
    assert (refused.value.where, refused.value.found) == (str(path), "Permission denied")


@pytest.mark.parametrize(
    ("document", "found"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "100000 levels"),
        (b'{"a":' * 65 + b"1" + b"}" * 65, "65 levels"),
        (b"[" + b"1" * 5000 + b"]", "an integer of 5000 digits"),
        (b"[NaN]", "NaN"),
        (b"[-Infinity]", "-Infinity"),
        (b"[1e400]", "1e400, which is inf"),
    ],
    ids=["deep-array", "deep-object", "long-integer", "nan", "infinity", "overflow"],
)
def test_json_beyond_its_bounds_is_refused_before_it_is_parsed(document: bytes, found: str) -> None:
    with pytest.raises(BadInput) as refused:
        readers.parse_json(document, where="doc.json")
    assert (refused.value.where, refused.value.found) == ("doc.json", found)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = b'{"a":"' + b"[{" * 1000 + b'\\"]","b":["x\\\\",1]}'
    assert readers.json_depth(text) == 2
    assert readers.parse_json(text, where="doc.json")["b"] == ["x\\", 1]
    assert readers.json_depth(b'["unterminated [[[[') == 1  # linear, and left to the parser


@pytest.mark.parametrize(
    ("document", "what"),
    [
        ("x = " + "[" * 5000 + "]" * 5000, "a document nests too deep"),
        ("x = " + "{a = " * 5000 + "1" + "}" * 5000, "a document nests too deep"),
        ("[" + ".".join(["a"] * 5000) + "]", "a document nests too deep"),
        ("x = " + "1" * 5000, "a document holds a number repro does not read"),
        ("x = " + "1" * 400, "a document holds a number repro does not read"),
        ("x = nan", "a document holds a number repro does not read"),
    ],
    ids=["inline-arrays", "inline-tables", "dotted-tables", "int-4300+", "int-400", "nan"],
)
def test_toml_beyond_its_bounds_is_refused(document: str, what: str) -> None:
    with pytest.raises(BadInput) as refused:
        readers.parse_toml(document, where="doc.toml")
    assert (refused.value.what, refused.value.where) == (what, "doc.toml")


# --- the DSSE envelope and the sealed documents ------------------------------------------------


def test_an_envelope_nested_100k_deep_is_refused_before_any_signature_check(bundle: Path) -> None:
    """A tampered envelope is drift (exit 1), like any envelope that does not verify."""
    (bundle / ENVELOPE).write_bytes(b"{" * 100_000 + b"}" * 100_000)
    code, out, _ = run(verify_args(bundle, "--json"))
    drifts = assert_valid("verify", out)["drifts"]
    assert code == 1
    assert [(d["kind"], d["subject"], d["observed"]) for d in drifts] == [
        ("signature", ENVELOPE, "100000 levels")
    ]


SEALED_DOCUMENTS = {
    "lock-deep": ("lock.json", b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}\n"),
    "lock-long-integer": ("lock.json", b'{"a":' + b"1" * 5000 + b"}\n"),
    "lock-type-confused": ("lock.json", b"[]\n"),
    "manifest-deep": ("manifest.toml", b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n"),
    "manifest-long-integer": ("manifest.toml", b"x = " + b"1" * 5000 + b"\n"),
    "suite-deep": ("oracle/suite.json", b"[" * 5000 + b"]" * 5000),
    "suite-type-confused": ("oracle/suite.json", b"[]"),
}


def verified_with(bundle: Path, name: str, data: bytes) -> tuple[int, str, str]:
    """`repro verify --json` of `bundle` with `name` holding `data`, sealed again."""
    (bundle / name).write_bytes(data)
    reseal(bundle)
    return run(verify_args(bundle, "--json"))


@pytest.mark.parametrize("case", sorted(SEALED_DOCUMENTS))
def test_a_sealed_document_nested_deep_long_or_type_confused_is_bad_input(
    bundle: Path, case: str
) -> None:
    name, data = SEALED_DOCUMENTS[case]
    code, out, err = verified_with(bundle, name, data)
    assert code == 2, err
    assert name in error_document(out, 2)["error"]["where"]


EVIDENCE_READ_BY_VERIFY = {
    "observations-deep": ("evidence/observations.json", b"[" * 100_000 + b"]" * 100_000),
    "audit-type-confused": ("evidence/start-1/audit/worker.json", b'{"processes": 5}'),
}


@pytest.mark.parametrize("case", sorted(EVIDENCE_READ_BY_VERIFY))
def test_sealed_evidence_nested_deep_or_type_confused_never_shows_a_traceback(
    bundle: Path, case: str
) -> None:
    """Evidence `builder.verify` parses itself: a claim it cannot recompute fails (exit 1), a
    refusal is exit 2, what escapes reaches at worst the last guard (exit 4, one line); never a
    traceback, and always a document that says it failed."""
    code, out, err = verified_with(bundle, *EVIDENCE_READ_BY_VERIFY[case])
    assert code in (1, 2, 3, 4), err
    if code == 1:
        assert assert_valid("verify", out)["ok"] is False
    else:
        error_document(out, code)


# --- repro check, and files that are not regular files -------------------------------------------


def test_check_of_a_manifest_nested_5000_deep_is_bad_input(tmp_path: Path) -> None:
    manifest = tmp_path / "deep.toml"
    manifest.write_text('schema = "repro.manifest/v1"\nx = ' + "[" * 5000 + "]" * 5000 + "\n")
    code, out, err = run(["check", str(manifest), "--json"])
    assert code == 2
    assert "a document nests too deep" in err
    assert error_document(out, 2)["error"]["where"] == str(manifest)


def test_check_of_dev_zero_is_refused_without_reading_it() -> None:
    code, _, err = run_child(["check", "/dev/zero"])
    assert code == 2
    assert "found:    a character device" in err


def test_a_dev_zero_key_is_refused_without_reading_it(bundle: Path) -> None:
    code, _, err = run_child(["verify", str(bundle), "--key", "/dev/zero"])
    assert code == 2
    assert "a public key file is not a regular file" in err
    code, _, err = run_child(
        ["build", str(TINY_MANIFEST), "--signing-key", "/dev/zero", "--out", str(bundle.parent)]
    )
    assert code == 2
    assert "a private key file is not a regular file" in err


def _trusted_keys_fifo(tmp_path: Path) -> list[str]:
    fifo(tmp_path / "k.pub")
    return ["verify", str(COMMITTED), "--trusted-keys", str(tmp_path)]


def _suite_fifo(tmp_path: Path) -> list[str]:
    manifest = tmp_path / "tiny-cpu.toml"
    shutil.copy(TINY_MANIFEST, manifest)
    (tmp_path / "suites").mkdir()
    fifo(tmp_path / "suites" / "tiny-cpu.json")
    return ["check", str(manifest)]


FIFO_ARGUMENTS: dict[str, Callable[[Path], list[str]]] = {
    "trusted-key": lambda d: ["verify", str(COMMITTED), "--key", str(fifo(d / "k.pub"))],
    "trusted-keys-dir": _trusted_keys_fifo,
    "manifest": lambda d: ["check", str(fifo(d / "m.toml"))],
    "suite": _suite_fifo,
    "diff": lambda d: ["diff", str(fifo(d / "lock.json")), str(COMMITTED)],
    "diff-bundle": lambda d: ["diff", str(COMMITTED), str(fifo(d / "lock.json").parent)],
    "closure": lambda d: ["closure", str(fifo(d / "lib.so"))],
    "signing-key": lambda d: ["build", str(TINY_MANIFEST), "--signing-key", str(fifo(d / "k"))],
    "teacher": lambda d: ["run", str(TINY_MANIFEST), "--teacher", str(fifo(d / "t.json"))],
}


@pytest.mark.parametrize("case", sorted(FIFO_ARGUMENTS))
def test_a_fifo_named_as_an_input_is_refused_without_waiting_for_a_writer(
    tmp_path: Path, case: str
) -> None:
    code, _, err = run_child(FIFO_ARGUMENTS[case](tmp_path))
    assert code == 2, err
    assert "a FIFO" in err


# --- the bundle directory -------------------------------------------------------------------------


def test_a_bundle_directory_that_cannot_be_searched_is_not_observable(
    bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory readable but not searchable lists its names and refuses to look at them. As
    root, chmod stops nothing: the one os call that looks at an entry is made to refuse."""
    real_lstat = os.lstat
    unsearchable = str(bundle / "evidence")

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if os.fspath(path).startswith(unsearchable + "/"):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    code, out, err = run(verify_args(bundle, "--json"))
    assert code == 3
    assert "cannot look at a bundle entry" in err
    assert error_document(out, 3)["error"]["found"] == "Permission denied"


@pytest.mark.parametrize(("argument", "found"), [("/", "the root directory"), ("", "an empty")])
def test_the_root_directory_or_an_empty_argument_is_not_a_bundle(argument: str, found: str) -> None:
    code, out, err = run(["verify", argument, "--key", str(EXAMPLE_PUB), "--json"])
    assert code == 2
    assert "not a bundle directory" in err
    assert error_document(out, 2)["error"]["found"].startswith(found)


def test_an_extra_file_of_50_gb_is_reported_without_being_read(bundle: Path) -> None:
    extra = bundle / "evidence" / "extra.bin"
    with extra.open("wb") as stream:
        stream.truncate(50 * 10**9)  # sparse: nothing on disk, 50 GB to read
    # a parent that only waits: its RUSAGE_CHILDREN is the verifier's own peak
    measure = (
        "import json, resource, subprocess, sys, time\n"
        "began = time.monotonic()\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=60)\n"
        "print(json.dumps({'code': done.returncode, 'out': done.stdout, 'err': done.stderr,\n"
        "    'seconds': time.monotonic() - began,\n"
        "    'rss_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))\n"
    )
    verifier = [sys.executable, "-m", "repro_serving", *verify_args(bundle, "--json")]
    done = subprocess.run(
        [sys.executable, "-c", measure, *verifier],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )
    child = json.loads(done.stdout)
    assert child["code"] == 1, child["err"]
    drifts = assert_valid("verify", child["out"])["drifts"]
    assert [(d["kind"], d["subject"], d["observed"]) for d in drifts] == [
        ("extra-file", "evidence/extra.bin", f"a file of {50 * 10**9} bytes")
    ]
    assert child["seconds"] < 8
    assert child["rss_kib"] < 100 * 1024


# --- names in a bundle ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("char", "problem"),
    [
        ("\u0085", "a control character U+0085"),
        ("\u202e", "a format character U+202E"),
        ("\u200b", "a format character U+200B"),
        ("\u2028", "a line separator U+2028"),
        ("\u2029", "a paragraph separator U+2029"),
        ("\u00a0", "a whitespace character beyond ASCII U+00A0"),
        ("\u3000", "a whitespace character beyond ASCII U+3000"),
        ("\x7f", "a control character U+007F"),
    ],
)
def test_a_name_that_does_not_read_as_itself_is_refused_naming_the_code_point(
    char: str, problem: str
) -> None:
    assert path_problem(f"evidence/log{char}txt") == problem


@pytest.mark.parametrize(("char", "code_point"), [("\u0085", "U+0085"), ("\u202e", "U+202E")])
def test_a_bundle_file_named_with_nel_or_rlo_is_drift_naming_the_code_point(
    bundle: Path, char: str, code_point: str
) -> None:
    (bundle / "evidence" / f"server{char}gol.txt").write_bytes(b"")
    code, out, _ = run(verify_args(bundle, "--json"))
    drifts = assert_valid("verify", out)["drifts"]
    assert code == 1
    assert [(d["kind"], d["observed"].rsplit(" ", 1)[-1]) for d in drifts] == [
        ("unsafe-path", code_point)
    ]


# --- what commands write ------------------------------------------------------------------------


def test_build_out_naming_a_regular_file_is_bad_input(tmp_path: Path) -> None:
    out_file = tmp_path / "out"
    out_file.write_text("not a directory")
    code, _, err = run(
        ["build", str(TINY_MANIFEST), "--signing-key", str(EXAMPLE_KEY), "--out", str(out_file)]
    )
    assert code == 2
    assert f"where:    {out_file}" in err
    assert "found:    a regular file" in err


def test_build_out_naming_a_dangling_symlink_is_bad_input(tmp_path: Path) -> None:
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere")
    code, _, err = run(
        ["build", str(TINY_MANIFEST), "--signing-key", str(EXAMPLE_KEY), "--out", str(link)]
    )
    assert code == 2
    assert "--out is a dangling symlink" in err
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("suffix", ["", "/", "/.", "/.."])
def test_keygen_out_that_names_no_file_is_bad_input(tmp_path: Path, suffix: str) -> None:
    directory = tmp_path / "keys"
    directory.mkdir()
    prefix = "" if suffix == "" else f"{directory}{suffix}"
    code, out, err = run(["keygen", "--out", prefix, "--json"])
    assert code == 2
    assert "the key prefix names no file" in err
    error_document(out, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys"]
    assert not any(directory.iterdir())


# --- every error is a document with --json, and no traceback reaches a user -----------------------


def test_a_usage_error_with_json_is_a_document(tmp_path: Path) -> None:
    code, out, err = run(["verify", "--json"])
    assert code == 2
    assert "the following arguments are required: BUNDLE" in err
    error_document(out, 2)


@pytest.fixture
def failing_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[BaseException], None]]:
    def fail_with(error: BaseException) -> None:
        def execute(args: Any) -> int:
            raise error

        monkeypatch.setattr(host_command, "execute", execute)

    yield fail_with


@pytest.mark.parametrize(
    "error", [RecursionError("maximum recursion depth exceeded"), MemoryError(), TypeError("x")]
)
def test_an_internal_error_is_one_line_and_exit_4(
    failing_host: Callable[[BaseException], None], error: BaseException
) -> None:
    failing_host(error)
    code, out, err = run(["host"])
    assert code == 4
    shown = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    assert err == f"repro: internal error: {shown} (run with -v for the traceback)\n"
    assert out == ""


def test_an_internal_error_with_json_is_a_document(
    failing_host: Callable[[BaseException], None],
) -> None:
    failing_host(RecursionError("deep"))
    code, out, _ = run(["host", "--json"])
    assert code == 4
    assert error_document(out, 4)["error"]["found"] == "RecursionError: deep"


@pytest.mark.parametrize("flag_first", [True, False])
def test_verbose_shows_the_traceback_of_an_internal_error(
    failing_host: Callable[[BaseException], None],
    capsys: pytest.CaptureFixture[str],
    flag_first: bool,
) -> None:
    failing_host(RecursionError("deep"))
    assert main(["-v", "host"] if flag_first else ["host", "--verbose"]) == 4
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.endswith("repro: internal error: RecursionError: deep\n")


# --- sealing: what killed seals leave ---------------------------------------------------------


@contextlib.contextmanager
def _held(directory: Path) -> Iterator[None]:
    """A live seal's hold on its temporary directory."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def test_the_next_seal_removes_what_killed_seals_of_its_name_left_and_nothing_else(
    tmp_path: Path,
) -> None:
    parent = tmp_path / "repro"
    parent.mkdir()
    killed = [f".{BUNDLE_NAME}.sealing-abc123_x", f".{BUNDLE_NAME}.sealing-q9"]
    for name in killed:
        (parent / name / "evidence").mkdir(parents=True)
        (parent / name / "lock.json").write_text("{}")
    others = [
        f".{BUNDLE_NAME}.sealing-live",  # held by a seal still running
        f".{BUNDLE_NAME}.sealing-x.sealing-abc",  # bundle `laguna-mini.sealing-x`'s
        f".{BUNDLE_NAME}al.sealing-abc",  # bundle `laguna-minial`'s
        ".other.sealing-abc",
        f"{BUNDLE_NAME}.sealing-abc",  # not hidden: nothing a seal makes
    ]
    for name in others:
        (parent / name).mkdir()
    (parent / f".{BUNDLE_NAME}.sealing-file").write_text("a file, not a directory")
    steps: list[str] = []
    with _held(parent / others[0]):
        seal_laguna_mini(parent, progress=steps.append)
    assert [step for step in steps if "interrupted seal" in step] == [
        f"removed {name}, left by an interrupted seal" for name in sorted(killed)
    ]
    assert sorted(p.name for p in parent.iterdir()) == sorted(
        [BUNDLE_NAME, *others, f".{BUNDLE_NAME}.sealing-file"]
    )


# --- the manifest -----------------------------------------------------------------------------


def _with_fresh_starts(count: int) -> str:
    text = TINY_MANIFEST.read_text()
    assert "fresh_starts = 2" in text
    return text.replace("fresh_starts = 2", f"fresh_starts = {count}")


def test_fresh_starts_has_an_upper_bound() -> None:
    Manifest.from_toml(_with_fresh_starts(16), source="sixteen-starts.toml")
    with pytest.raises(BadInput) as refused:
        Manifest.from_toml(_with_fresh_starts(17), source="many-starts.toml")
    assert (
        refused.value.where
        == "many-starts.toml, key oracle.gates.fresh_starts (line 109, column 1)"
    )
    assert refused.value.expected == "less than or equal to 16"
