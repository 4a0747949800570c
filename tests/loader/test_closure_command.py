"""`repro closure` in-process: the tree, the JSON document, the exit codes, and its cost: every
ELF file parsed once in a run, and nothing imported it does not use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import IO

import pytest

from repro_serving.builder.cli import main
from repro_serving.builder.native import elf, loaderhost
from repro_serving.builder.native.elf import ElfInfo, parse_elf
from repro_serving.builder.native.loaderhost import HostFileSystem

from .conftest import Build, run_judge


def test_json_names_every_resolved_library_with_path_and_reason(
    build: Build, capsys: pytest.CaptureFixture[str]
) -> None:
    build.lib("lib/libfoo.so")
    exe = build.exe("bin/app", needed=["lib/libfoo.so"], runpath="$ORIGIN/../lib")

    code = main(["closure", "--no-env", "--json", str(exe)])

    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert document["version"] == 1
    libraries = {entry["need"]: entry for entry in document["files"][0]["libraries"]}
    assert libraries["libfoo.so"]["path"] == f"{build.root}/bin/../lib/libfoo.so"
    assert libraries["libfoo.so"]["reason"] == f"RUNPATH of {exe}"
    assert libraries["libfoo.so"]["element"] == "$ORIGIN/../lib"
    fs = HostFileSystem("/")
    mapped = run_judge(exe)
    ids = {tuple(o["file_id"]) for o in document["files"][0]["order"]}
    assert ids == mapped.ids
    assert {fs.realpath(o["path"]) for o in document["files"][0]["order"]} == {
        path for _, path in mapped.files
    }


def test_missing_library_exits_1_and_lists_numbered_places(
    build: Build, capsys: pytest.CaptureFixture[str]
) -> None:
    build.lib("gone/libgone.so")
    exe = build.exe("bin/app", needed=["gone/libgone.so"], runpath=f"{build.root}/nowhere")

    code = main(["closure", "--no-env", str(exe)])

    out = capsys.readouterr().out
    assert code == 1
    assert "libgone.so NOT FOUND: not found" in out
    assert f"1. {build.root}/nowhere/" in out
    assert "/usr/lib/libgone.so  (default path: absent)" in out


def test_ld_library_path_option_replaces_the_environment(
    build: Build, capsys: pytest.CaptureFixture[str]
) -> None:
    build.lib("env/libfoo.so")
    exe = build.exe("bin/app", needed=["env/libfoo.so"])

    code = main(["closure", "--no-env", "--ld-library-path", f"{build.root}/env", str(exe)])

    assert code == 0
    assert f"libfoo.so => {build.root}/env/libfoo.so [LD_LIBRARY_PATH]" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "error: no such file"), (b"#!/bin/sh\n", "error: not an ELF file")],
)
def test_bad_input_exits_2_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, message: str
) -> None:
    target = tmp_path / "input"
    if content is not None:
        target.write_bytes(content)

    code = main(["closure", str(target)])

    assert code == 2
    assert capsys.readouterr().err.startswith(f"{message}\n  where:    {target}")


def test_after_resolves_a_need_by_an_already_loaded_soname_as_glibc_does(
    build: Build, capsys: pytest.CaptureFixture[str]
) -> None:
    build.lib("torch/lib/libc10.so")
    torch = build.lib("torch/_C.so", needed=["torch/lib/libc10.so"], runpath="$ORIGIN/lib")
    extension = build.lib("vllm/_C.abi3.so", needed=["torch/lib/libc10.so"])
    exe = build.exe("bin/python", needed=["torch/_C.so"], rpath=f"{build.root}/torch")

    alone = main(["closure", "--no-env", str(extension)])
    capsys.readouterr()
    after = main(["closure", "--no-env", "--json", "--after", str(exe), str(extension)])
    document = json.loads(capsys.readouterr().out)

    assert alone == 1, "like ldd, the extension alone cannot find libc10.so"
    assert after == 0
    (entry,) = document["files"]
    c10 = next(lib for lib in entry["libraries"] if lib["need"] == "libc10.so")
    assert c10["reason"] == "already loaded (name)"
    assert c10["path"] == f"{torch.parent}/lib/libc10.so"
    judged = run_judge(exe, dlopen=str(extension))
    assert judged.returncode == 0, judged.stderr
    assert HostFileSystem("/").realpath(c10["path"]) in {path for _, path in judged.files}


def test_each_elf_file_is_parsed_once_in_a_run_whatever_the_paths_to_it(
    build: Build, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    build.lib("lib/libfoo.so")
    link = build.symlink("links/libfoo.so", "../lib/libfoo.so")
    by_origin = build.exe("bin/app", needed=["lib/libfoo.so"], runpath="$ORIGIN/../lib")
    by_link = build.exe("other/app", needed=["lib/libfoo.so"], rpath=str(link.parent))
    parsed: list[str] = []

    def counting(stream: IO[bytes], path: str) -> ElfInfo:
        parsed.append(os.path.realpath(path))
        return parse_elf(stream, path)

    monkeypatch.setattr(elf, "parse_elf", counting)
    monkeypatch.setattr(loaderhost, "parse_elf", counting)

    code = main(["closure", "--no-env", "--json", str(by_origin), str(by_link), str(by_origin)])

    files = json.loads(capsys.readouterr().out)["files"]
    assert code == 0
    paths = {lib["path"] for f in files for lib in f["libraries"] if lib["need"] == "libfoo.so"}
    assert paths == {f"{build.root}/bin/../lib/libfoo.so", f"{link}"}
    assert [p for p, n in Counter(parsed).items() if n > 1] == []
    assert os.path.realpath(build.root / "lib/libfoo.so") in parsed
    assert os.path.realpath("/lib64/ld-linux-x86-64.so.2") in parsed


def test_closure_imports_only_what_it_runs() -> None:
    closure = "repro_serving.builder.commands.closure"
    probe = f"import sys, {closure}; print('\\n'.join(sorted(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert closure in loaded
    heavy = ("pydantic", "rich", "numpy", "httpx", "elftools")
    own = ("repro_serving.builder.render", "repro_serving.builder.drift")
    assert [m for m in loaded if m.split(".")[0] in heavy or m in own] == []
