"""The Python environment of a running process, found the way its interpreter found it.

Pure cases on fabricated `/proc` facts and a fabricated file system (`FakeFiles`): how argv[0]
resolves (absolute, relative with a slash, on PATH with empty and relative entries), where
`pyvenv.cfg` is looked for, the base installation from `home`, PYTHONHOME or the executable's
real path, the mapped site-packages that confirm or contradict it, and a tree whose renamed
processes run in their ancestor's. Then real processes of this repository's own virtual
environment, started by its full path and as `python` found on PATH, audited by `repro audit`
without a manifest: the same verdict, no drift; a library injected with LD_PRELOAD is named
with its variable; one of another environment stays outside the roots. Last, the real vLLM
server of the embedded default started both ways (the session's, by full path, and this
module's one server of its own, on PATH): the same audit, no drift once vLLM's own preload of
torch's libgomp is declared.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import SERVE_VENV, TinyServer, tiny_server_spec
from schemas import assert_valid

from repro_serving.builder.cli import main
from repro_serving.builder.native.policy import default_roots
from repro_serving.builder.native.processes import snapshot_tree
from repro_serving.builder.native.pyenv import (
    Environment,
    HostFiles,
    Started,
    environment,
    interpreter_options,
    is_interpreter_file,
    parse_venv_config,
    resolve_argv0,
    search_stdlib,
    site_packages,
    tree_environments,
)
from repro_serving.builder.native.snapshot import ProcessSnapshot, TreeSnapshot
from repro_serving.launch import server as lifecycle

ROLES = ["api_server", "engine_core", "resource_tracker", "worker"]


@dataclass
class FakeFiles:
    """A file system of a few paths: executables, texts, symlinks to real paths, and the
    prefixes that hold a standard library."""

    executables: set[str] = field(default_factory=set)
    texts: dict[str, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    stdlibs: set[str] = field(default_factory=set)

    def is_executable(self, path: str) -> bool:
        return self.realpath(path) in self.executables

    def read_text(self, path: str) -> str | None:
        return self.texts.get(path)

    def realpath(self, path: str) -> str:
        return self.links.get(path, path)

    def holds_stdlib(self, prefix: str) -> bool:
        return prefix in self.stdlibs


VENV_CFG = "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n"


def host_like() -> FakeFiles:
    """A system python3.12 in /usr and a virtual environment /opt/torch/.venv made from it,
    whose `python3` is a symlink to the system interpreter (as on the GPU host)."""
    return FakeFiles(
        executables={"/usr/bin/python3.12"},
        texts={"/opt/torch/.venv/pyvenv.cfg": VENV_CFG},
        links={
            "/opt/torch/.venv/bin/python3": "/usr/bin/python3.12",
            "/opt/torch/.venv/bin/python": "/usr/bin/python3.12",
            "/usr/bin/python3": "/usr/bin/python3.12",
        },
        stdlibs={"/usr"},
    )


def started(argv0: str, *, cwd: str = "/work", path: str | None = None, **more: Any) -> Started:
    return Started(argv=(argv0, "workload.py"), cwd=cwd, path=path, **more)


def found(argv0: str, files: FakeFiles | None = None, **more: Any) -> Environment | None:
    return environment(1, started(argv0, **more), files or host_like())


# --- argv[0] ---------------------------------------------------------------------------------


def test_a_bare_argv0_is_found_on_the_processs_own_path() -> None:
    env = found("python3", path="/opt/torch/.venv/bin:/usr/bin:/bin")
    assert env is not None
    assert (env.venv, env.base) == ("/opt/torch/.venv", ("/usr",))
    assert "argv[0] 'python3' found on its PATH in /opt/torch/.venv/bin" in env.how
    assert "/opt/torch/.venv/pyvenv.cfg" in env.how


def test_the_first_path_entry_holding_it_wins() -> None:
    env = found("python3", path="/usr/bin:/opt/torch/.venv/bin")
    assert env is not None
    assert (env.venv, env.base) == (None, ("/usr",))


def test_the_same_process_started_by_full_path_finds_the_same_environment() -> None:
    by_path = found("python3", path="/opt/torch/.venv/bin:/usr/bin")
    by_name = found("/opt/torch/.venv/bin/python3", path="/usr/bin")
    assert by_path is not None and by_name is not None
    assert (by_path.venv, by_path.base) == (by_name.venv, by_name.base)
    assert by_name.how.startswith("argv[0] is its absolute path")


def test_an_argv0_with_a_slash_is_relative_to_the_working_directory() -> None:
    env = found("./bin/python3", cwd="/opt/torch/.venv")
    assert env is not None and env.venv == "/opt/torch/.venv"
    env = found("../.venv/bin/python", cwd="/opt/torch/work")
    assert env is not None and env.venv == "/opt/torch/.venv"
    assert "argv[0] '../.venv/bin/python' in its working directory /opt/torch/work" in env.how


def test_an_empty_path_entry_is_the_working_directory_and_a_relative_one_is_under_it() -> None:
    files = host_like()
    executable = resolve_argv0("python3", "/nowhere::/usr/bin", "/opt/torch/.venv/bin", files)
    assert executable is not None and executable.path == "/opt/torch/.venv/bin/python3"
    assert "PATH entry ''" in executable.how
    trailing = resolve_argv0("python3", "/nowhere:", "/opt/torch/.venv/bin", files)
    assert trailing is not None and trailing.path == "/opt/torch/.venv/bin/python3"
    relative = resolve_argv0("python3", "bin:/usr/bin", "/opt/torch/.venv", files)
    assert relative is not None and relative.path == "/opt/torch/.venv/bin/python3"


def test_an_argv0_that_names_no_file_finds_nothing() -> None:
    files = host_like()
    assert resolve_argv0("python3", None, "/work", files) is None, "no PATH: nothing is searched"
    assert resolve_argv0("python3", "", "/work", files) is None
    assert resolve_argv0("VLLM::EngineCore", "/usr/bin", "/work", files) is None
    assert resolve_argv0("", "/usr/bin", "/work", files) is None
    assert resolve_argv0("./python3", "/usr/bin", None, files) is None


def test_a_file_without_an_execute_bit_on_path_is_passed_over() -> None:
    files = host_like()
    files.executables.discard("/usr/bin/python3.12")
    files.executables.add("/usr/local/bin/python3")
    executable = resolve_argv0("python3", "/usr/bin:/usr/local/bin", "/", files)
    assert executable is not None and executable.path == "/usr/local/bin/python3"


# --- pyvenv.cfg and the base ------------------------------------------------------------------


def test_pyvenv_cfg_beside_the_executable_makes_a_virtual_environment_too() -> None:
    files = FakeFiles(
        executables={"/usr/bin/python3.12"},
        texts={"/srv/env/bin/pyvenv.cfg": VENV_CFG},
        links={"/srv/env/bin/python": "/usr/bin/python3.12"},
        stdlibs={"/usr"},
    )
    env = found("/srv/env/bin/python", files)
    assert env is not None
    # site.py: sys.prefix is the directory above the executable's, wherever the file was
    assert (env.venv, env.base) == ("/srv/env", ("/usr",))
    assert "/srv/env/bin/pyvenv.cfg" in env.how


@pytest.mark.parametrize(
    ("cfg", "home", "base"),
    [
        pytest.param(
            "/opt/torch/.venv/bin/pyvenv.cfg",
            "/elsewhere",
            "/usr",
            id="one level up is read first for home as getpath does",
        ),
        pytest.param(
            "/opt/torch/.venv/pyvenv.cfg",
            "/opt/python/3.12",
            "/opt/python/3.12",
            id="a symlinked venv python takes its base from home not from the link",
        ),
    ],
)
def test_a_venv_pythons_base_is_read_from_pyvenv_cfg_as_getpath_reads_it(
    cfg: str, home: str, base: str
) -> None:
    """`cfg` written saying `home`, an installation there: `base` is the venv python's base."""
    files = host_like()
    files.texts[cfg] = f"home = {home}/bin\n"
    files.stdlibs.add(home)
    env = found("/opt/torch/.venv/bin/python3", files)
    assert env is not None and env.base == (base,)


def test_without_pyvenv_cfg_the_process_runs_in_the_base_of_its_real_executable() -> None:
    env = found("python3", path="/usr/bin")
    assert env is not None
    assert (env.venv, env.base) == (None, ("/usr",))
    assert "base from the executable's real path /usr/bin/python3.12" in env.how


def test_a_symlinked_python_without_pyvenv_cfg_is_its_target_installation() -> None:
    files = host_like()
    files.links["/home/me/bin/python"] = "/usr/bin/python3.12"
    env = found("/home/me/bin/python", files)
    assert env is not None and (env.venv, env.base) == (None, ("/usr",))


def test_pythonhome_names_the_base_unless_the_interpreter_ignores_the_environment() -> None:
    env = found("/opt/torch/.venv/bin/python3", python_home="/opt/py:/opt/py-exec")
    assert env is not None
    assert (env.venv, env.base) == ("/opt/torch/.venv", ("/opt/py", "/opt/py-exec"))
    assert "base from PYTHONHOME=/opt/py:/opt/py-exec" in env.how
    for option in ("-E", "-I", "-IS"):
        ignoring = Started(
            ("/opt/torch/.venv/bin/python3", option, "x.py"), "/", None, python_home="/opt/py"
        )
        env = environment(1, ignoring, host_like())
        assert env is not None and env.base == ("/usr",), option


def test_the_interpreters_own_options_are_read_before_its_script() -> None:
    assert interpreter_options(("python", "-E", "-X", "dev", "-I", "x.py", "-S")) == {"E", "I"}
    assert interpreter_options(("python", "-Wignore", "-sE", "-m", "mod", "-I")) == {"s", "E"}
    assert interpreter_options(("python", "-c", "code", "-E")) == frozenset()
    assert interpreter_options(("python", "-Ec", "code")) == {"E"}


def test_the_stdlib_is_searched_up_from_home_and_never_at_the_root() -> None:
    files = FakeFiles(stdlibs={"/opt/py", "/"})
    assert search_stdlib("/opt/py/bin", files) == "/opt/py"
    assert search_stdlib("/srv/app/bin", files) is None


def test_a_program_that_is_not_python_is_its_bin_parent() -> None:
    files = FakeFiles(executables={"/usr/local/bin/server"}, stdlibs={"/usr"})
    env = environment(1, Started(("server",), "/", "/usr/local/bin"), files)
    assert env is not None and (env.venv, env.base) == (None, ("/usr/local",))


def test_pyvenv_cfg_keys_are_read_as_cpython_reads_them() -> None:
    assert parse_venv_config("Home = /a/bin\nhome = /b/bin\nnot a key\nversion=3.12\n") == {
        "home": "/a/bin",
        "version": "3.12",
    }


def test_a_fifo_named_pyvenv_cfg_is_no_config_and_never_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pyvenv.cfg")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    files = HostFiles()
    assert files.read_text(str(tmp_path / "pyvenv.cfg")) is None
    env = environment(1, Started((f"{tmp_path}/bin/python",), "/", None), files)
    assert env is not None and env.venv is None


# --- the maps confirm it ------------------------------------------------------------------------

TORCH = "/opt/torch/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so"


def test_mapped_site_packages_in_the_environment_confirm_it() -> None:
    mapped = (TORCH, "/usr/lib/python3/dist-packages/yaml/_yaml.so", "/usr/lib/libc.so.6")
    env = found("python3", path="/opt/torch/.venv/bin", mapped=mapped)
    assert env is not None
    assert env.site_packages == (
        "/opt/torch/.venv/lib/python3.12/site-packages",
        "/usr/lib/python3/dist-packages",
    )
    assert env.outside == ()
    assert env.evidence().endswith("its mapped site-packages confirm it")


def test_mapped_site_packages_of_another_environment_are_named_and_not_allowed() -> None:
    other = "/home/me/other-venv/lib/python3.12/site-packages/numpy/_core/_multiarray.so"
    env = found("python3", path="/opt/torch/.venv/bin", mapped=(TORCH, other))
    assert env is not None
    assert env.outside == ("/home/me/other-venv/lib/python3.12/site-packages",)
    assert env.roots == ("/opt/torch/.venv", "/usr"), "the maps never widen the roots"
    assert "maps site-packages outside it: /home/me/other-venv" in env.evidence()


def test_site_packages_directories_are_cut_at_their_first_package_directory() -> None:
    assert site_packages(["/v/lib/python3.12/site-packages/a/site-packages/b.so", "/x.so"]) == (
        "/v/lib/python3.12/site-packages",
    )


# --- a tree ----------------------------------------------------------------------------------


def snapshot(pid: int, ppid: int, argv0: str, **more: Any) -> ProcessSnapshot:
    return ProcessSnapshot(
        pid=pid,
        ppid=ppid,
        name=argv0,
        role="other",
        cmdline=(argv0,),
        exe=more.pop("exe", "/usr/bin/python3.12"),
        environ={},
        files=(),
        cwd="/work",
        search_path=more.pop("search_path", None),
    )


def test_a_renamed_process_runs_in_its_ancestors_environment_on_the_same_interpreter() -> None:
    tree = TreeSnapshot(
        root_pid=10,
        processes=(
            snapshot(10, 1, "python3", search_path="/opt/torch/.venv/bin:/usr/bin"),
            snapshot(11, 10, "VLLM::EngineCore"),
            snapshot(12, 11, "VLLM::Worker"),
            snapshot(13, 10, "VLLM::Other", exe="/opt/other/bin/python3.12"),
        ),
    )
    found = {env.pid: env for env in tree_environments(tree, host_like())}
    assert [(found[pid].venv, found[pid].base) for pid in (10, 11, 12)] == [
        ("/opt/torch/.venv", ("/usr",))
    ] * 3
    assert found[12].how == (
        "argv[0] 'VLLM::Worker' names no file: as its ancestor pid 10, on the same interpreter"
    )
    # another interpreter: only the installation of its own executable is known
    assert (found[13].venv, found[13].base) == (None, ("/opt/other",))


def test_default_roots_are_each_named_once_by_their_real_path(tmp_path: Path) -> None:
    usr_lib = tmp_path / "usr" / "lib"
    usr_lib.mkdir(parents=True)
    (tmp_path / "lib").symlink_to(usr_lib)
    tree = TreeSnapshot(root_pid=10, processes=(snapshot(10, 1, "/opt/torch/.venv/bin/python3"),))
    files = host_like()
    system = [f"{tmp_path}/lib/", f"{usr_lib}/", str(tmp_path / "lib"), str(usr_lib)]
    roots = default_roots(tree, system, files).roots
    assert roots == ("/opt/torch/.venv", "/usr", str(usr_lib))


# --- real processes of this repository's virtual environment -----------------------------------

VENV = Path(sys.prefix)
"""The virtual environment these tests run in: its `python` a symlink to the base interpreter."""

WORKLOAD = """
import sys, time
import pydantic_core  # an extension module of the environment's site-packages
print("ready", flush=True)
time.sleep(120)
"""


def start(argv0: str, tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    whole = {"PATH": f"{VENV}/bin:/usr/bin:/bin", "HOME": str(tmp_path), **env}
    child = subprocess.Popen(
        [argv0, "-c", WORKLOAD], stdout=subprocess.PIPE, text=True, env=whole, cwd=tmp_path
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


@pytest.fixture
def started_both_ways(tmp_path: Path) -> Iterator[dict[str, int]]:
    assert (VENV / "pyvenv.cfg").is_file(), "the tests run in a virtual environment"
    children = {
        "full path": start(str(VENV / "bin" / "python"), tmp_path),
        "on PATH": start("python", tmp_path),
    }
    yield {way: child.pid for way, child in children.items()}
    for child in children.values():
        child.kill()
        child.wait()


def audit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["audit", *args, "--json"])
    document: dict[str, Any] = assert_valid("audit", capsys.readouterr().out)
    return code, document


def test_a_venv_process_started_either_way_is_explained_without_a_manifest(
    started_both_ways: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    verdicts = {}
    for way, pid in started_both_ways.items():
        code, report = audit(capsys, "--pid", str(pid))
        assert (code, report["drifts"]) == (0, []), way
        (process,) = report["processes"]
        verdicts[way] = sorted((o["path"], o["rule"]) for o in process["objects"])
    assert verdicts["on PATH"] == verdicts["full path"]
    assert any("/site-packages/pydantic_core/" in path for path, _ in verdicts["on PATH"])


def test_both_ways_find_the_same_environment_confirmed_by_the_maps(
    started_both_ways: dict[str, int],
) -> None:
    found = {}
    for way, pid in started_both_ways.items():
        (env,) = tree_environments(snapshot_tree(pid), HostFiles())
        found[way] = (env.venv, env.base, env.outside)
        assert env.site_packages == (f"{VENV}/lib/python3.11/site-packages",), way
    assert found["on PATH"] == found["full path"] == (str(VENV), (sys.base_prefix,), ())


@pytest.fixture
def injected_library(tmp_path: Path) -> Path:
    source = tmp_path / "injected.c"
    source.write_text("int repro_injected_marker(void) { return 42; }\n")
    library = tmp_path / "libinjected.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def test_a_library_injected_into_a_process_started_on_path_is_named_with_its_variable(
    injected_library: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    child = start("python", tmp_path, LD_PRELOAD=str(injected_library))
    try:
        code, report = audit(capsys, "--pid", str(child.pid))
    finally:
        child.kill()
        child.wait()
    assert code == 1
    assert [(d["kind"], d["subject"], d["observed"]) for d in report["drifts"]] == [
        ("forbidden-env", f"pid {child.pid} (other): LD_PRELOAD", f"LD_PRELOAD={injected_library}"),
        (
            "unexpected-mapping",
            f"pid {child.pid} (other): {injected_library}",
            f"{injected_library} (sha256 {report['drifts'][1]['observed'].split()[-1]}",
        ),
    ]


LOADER = """
import ctypes, sys, time
ctypes.CDLL(sys.argv[1])
print("ready", flush=True)
time.sleep(120)
"""


def test_a_library_of_another_environment_is_a_drift_naming_each_root_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The process maps from another environment's site-packages: the maps contradict the
    environment its interpreter found, which stays the one allowed."""
    other = tmp_path / "other-venv" / "lib" / "python3.11" / "site-packages"
    library = other / "fakepkg" / "_native.so"
    library.parent.mkdir(parents=True)
    library.write_bytes(Path("/usr/lib/x86_64-linux-gnu/libz.so.1").resolve().read_bytes())
    child = subprocess.Popen(
        ["python", "-c", LOADER, str(library)],
        stdout=subprocess.PIPE,
        text=True,
        env={"PATH": f"{VENV}/bin:/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        code, report = audit(capsys, "--pid", str(child.pid))
        (env,) = tree_environments(snapshot_tree(child.pid), HostFiles())
    finally:
        child.kill()
        child.wait()
    assert code == 1
    (drift,) = report["drifts"]
    assert (drift["observed"], drift["why"]) == (
        f"{library} (dlopen)",
        "mapped from outside the allowed roots",
    )
    roots = drift["expected"].removeprefix("a library under ").split(", ")
    assert len(roots) == len(set(roots)) == len({os.path.realpath(r) for r in roots})
    assert roots[:2] == [str(VENV.resolve()), str(Path(sys.base_prefix).resolve())]
    assert (env.venv, env.outside) == (str(VENV), (str(other),))


# --- the real vLLM server of the embedded default, started either way ---------------------------


@pytest.fixture(scope="module")
def path_server(
    tiny_server: TinyServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TinyServer]:
    """The session's server (started by the venv's full path) started again as `python`,
    found on the start's PATH, whose first entry is the venv's bin."""
    workdir = tmp_path_factory.mktemp("path-server")
    spec = tiny_server_spec(tiny_server.model_dir, lifecycle.free_port(), workdir)
    assert spec.argv[0] == f"{SERVE_VENV}/bin/python"
    assert spec.env["PATH"].startswith(f"{SERVE_VENV}/bin:")
    with lifecycle.serving(dataclasses.replace(spec, argv=("python", *spec.argv[1:]))) as running:
        assert lifecycle.tree_members(running.pid)[0].cmdline()[0] == "python"
        yield dataclasses.replace(
            tiny_server, base_url=running.base_url, pid=running.pid, port=running.port
        )


def libgomp() -> str:
    """Torch's libgomp, which vLLM's CPU platform puts in LD_PRELOAD for what it spawns."""
    (site,) = (SERVE_VENV / "lib").glob("python3.*/site-packages")
    return str(site / "torch" / "lib" / "libgomp.so.1")


def findings(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The drifts without the pids that differ from one start to the other."""
    return sorted(
        (d["kind"], d["subject"].split(" ", 2)[2], d["observed"]) for d in report["drifts"]
    )


@pytest.mark.server
def test_the_server_started_either_way_gives_the_same_audit_without_a_manifest(
    tiny_server: TinyServer, path_server: TinyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """With vLLM's own preload declared: every mapping of every process explained, no drift,
    the same objects by the same rules. Without it: that preload alone, the same both ways."""
    objects, bare = {}, {}
    for way, running in (("full path", tiny_server), ("on PATH", path_server)):
        code, report = audit(capsys, "--pid", str(running.pid), "--allow-preload", libgomp())
        assert (code, report["drifts"]) == (0, []), way
        assert sorted(p["role"] for p in report["processes"]) == ROLES
        objects[way] = {
            (p["role"], o["path"], o["rule"]) for p in report["processes"] for o in p["objects"]
        }
        code, report = audit(capsys, "--pid", str(running.pid))
        assert code == 1
        bare[way] = findings(report)
    assert objects["on PATH"] == objects["full path"]
    assert any(path.startswith(f"{SERVE_VENV}/lib/") for _, path, _ in objects["on PATH"])
    assert bare["on PATH"] == bare["full path"]
    assert {kind for kind, _, _ in bare["on PATH"]} == {"forbidden-env", "unexpected-mapping"}
    assert all("torch/lib/libgomp.so.1" in observed for _, _, observed in bare["on PATH"])


@pytest.mark.server
def test_each_process_of_the_server_on_path_runs_in_the_venv_its_interpreter_found(
    path_server: TinyServer,
) -> None:
    tree = snapshot_tree(path_server.pid)
    found = {env.pid: env for env in tree_environments(tree, HostFiles())}
    roles = {p.pid: p.role for p in tree.processes}
    assert sorted(roles.values()) == ROLES
    for pid, env in found.items():
        assert (env.venv, env.outside) == (str(SERVE_VENV), ()), roles[pid]
        assert env.site_packages == (libgomp().split("/torch/")[0],), roles[pid]
    api = next(env for pid, env in found.items() if roles[pid] == "api_server")
    assert api.how.startswith(f"argv[0] 'python' found on its PATH in {SERVE_VENV}/bin")
    renamed = [env for pid, env in found.items() if roles[pid] in ("engine_core", "worker")]
    assert all(f"as its ancestor pid {path_server.pid}" in env.how for env in renamed)


@pytest.mark.parametrize(
    ("path", "own"),
    [
        ("{python_prefix}/bin/python3.11", True),
        ("{python_prefix}/lib/libpython3.11.so.1.0", True),
        ("{python_prefix}/lib/python3.11/lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so", True),
        ("{python_prefix}/lib/python3.12/lib-dynload/_ssl.cpython-312-x86_64-linux-gnu.so", False),
        ("{python_prefix}/lib/x86_64-linux-gnu/libc.so.6", False),
        ("{site}/torch/lib/libtorch_cpu.so", False),
        ("/usr/lib/x86_64-linux-gnu/libssl.so.3", False),
    ],
)
def test_the_interpreters_own_files_are_its_executable_library_and_standard_library(
    path: str, own: bool
) -> None:
    """What another admitted release of the interpreter replaces, and nothing else: the
    system's libraries under a /usr prefix stay compared with the lock."""
    assert is_interpreter_file(path, "3.11") is own
