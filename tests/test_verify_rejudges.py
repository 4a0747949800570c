"""A PASS means every sealed observation was judged again: hostile bundles, re-sealed with the
public example key, whose sealed files contradict each other or say the run failed.

Each case copies a committed bundle, edits what an attacker would (with repro's own functions
where an attacker would use them: the lock's mappings derived again from the edited audit, so
that only judging the audit again can refuse), seals it again with the example key and runs
`repro verify --json` in this process. It must exit 1, and the named check must say what it
found where. The untouched copy passes.
"""

from __future__ import annotations

import calendar
import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bundle_assets import EXAMPLE_PUB, REPO_ROOT, resealed
from cases import by_name
from schemas import assert_valid

from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.claims import environments_claim, roles_claim
from repro_serving.builder.cli import main
from repro_serving.builder.documents.audit import AuditDocument
from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.documents.rundir import read_rows
from repro_serving.builder.native.kernels import KernelSet
from repro_serving.builder.vllmlog import (
    logged_argument_problems,
    logged_version_problems,
    logged_versions,
)
from repro_serving.launch.gates import load_verdict

TINY = REPO_ROOT / "repro" / "tiny-cpu"
TWO_NODES = REPO_ROOT / "repro" / "tiny-cpu-2node"
MANIFESTS = {TINY: "manifests/tiny-cpu.toml", TWO_NODES: "manifests/tiny-cpu-2node.toml"}
Edit = Callable[[Path], None]


def verify_json(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["verify", str(path), "--key", str(EXAMPLE_PUB), "--json"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, assert_valid("verify", captured.out)


def sealed_again(tmp_path: Path, source: Path, edit: Edit) -> Path:
    """`source` copied, edited, sealed again as the repro that sealed it would."""
    return resealed(source, tmp_path, edit, MANIFESTS[source])


def hostile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Edit, source: Path = TINY
) -> dict[str, Any]:
    """`edit` applied to a copy of `source`, the lock's mappings derived again from its start-1
    audit, sealed again: verify must refuse it."""

    def attack(root: Path) -> None:
        edit(root)
        _derive_lock_again(root)

    path = sealed_again(tmp_path, source, attack)
    code, document = verify_json(path, capsys)
    assert code == 1, [c for c in document["claims"] if not c["ok"]]
    return document


def failed(document: dict[str, Any], claim: str) -> str:
    """The detail of the failed check whose name starts with `claim`."""
    found = [c for c in document["claims"] if c["claim"].startswith(claim)]
    assert found, f"no check named {claim!r}"
    assert not all(c["ok"] for c in found), f"{claim!r} holds"
    return " ".join(c["detail"] for c in found if not c["ok"])


Lie = tuple[Edit, str, str | tuple[str, ...]]
"""A row of a table of lies: the edit, the claim that must fail, what its detail must name."""


def assert_refused(
    lie: Lie, tmp_path: Path, capsys: pytest.CaptureFixture[str], source: Path = TINY
) -> None:
    """`lie` told in a copy of `source`: its claim fails, naming each part it must."""
    edit, claim, named = lie
    detail = failed(hostile(tmp_path, capsys, edit, source), claim)
    for part in (named,) if isinstance(named, str) else named:
        assert part in detail, detail


def _derive_lock_again(root: Path) -> None:
    """What an attacker's sealer does: the lock's roles and environments from the audit."""
    lock_path = root / "lock.json"
    lock = json.loads(lock_path.read_text())
    values = json.loads((root / "evidence" / "observations.json").read_text())["values"]
    processes = [p for document in _audit(root, 1) for p in document.processes]
    kernels = root / "kernels"
    kernel_sets = [KernelSet.load(name, kernels) for name in lock["native"]["kernel_sets"]]
    roles = roles_claim(processes, values, kernel_sets=kernel_sets)
    lock["native"]["roles"] = {
        role: [o.model_dump(mode="json") for o in objects] for role, objects in roles.items()
    }
    lock["native"]["environments"] = environments_claim(processes, values)
    lock_path.write_bytes(canonical_json(lock))


def _audit(root: Path, start: int, rank: str = "") -> list[AuditDocument]:
    directory = root / "evidence" / f"start-{start}" / rank / "audit"
    return [
        AuditDocument.from_bytes(p.read_bytes(), where=str(p))
        for p in sorted(directory.glob("*.json"))
        if p.name != "drifts.json"
    ]


def _edit_role(role: str, change: Callable[[dict[str, Any]], None], start: int = 1) -> Edit:
    def edit(root: Path) -> None:
        path = root / "evidence" / f"start-{start}" / "audit" / f"{role}.json"
        document = json.loads(path.read_text())
        change(document)
        path.write_text(json.dumps(document))

    return edit


def _worker(change: Callable[[dict[str, Any]], None]) -> Edit:
    return _edit_role("worker", lambda document: change(document["processes"][0]))


def _json(relative: str, change: Callable[[Any], Any]) -> Edit:
    def edit(root: Path) -> None:
        path = root / relative
        document = json.loads(path.read_text())
        path.write_text(json.dumps(change(document) or document))

    return edit


def test_the_untouched_copy_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = sealed_again(tmp_path, TINY, _derive_lock_again)
    code, document = verify_json(path, capsys)
    assert code == 0, [c for c in document["claims"] if not c["ok"]]


# --- the live audit, judged again ------------------------------------------------------------


def _preloaded_from_tmp(process: dict[str, Any]) -> None:
    process["objects"].append(
        {
            "file_id": "fe:0/999999",
            "path": "/tmp/libevil.so",
            "reason": "LD_PRELOAD: absolute path",
            "requester": None,
            "rule": "preload",
            "sha256": "ab" * 32,
        }
    )


def _count_files(document: dict[str, Any]) -> None:
    document["files"] += 1


def _preload(root: Path) -> None:
    """A library from /tmp preloaded into the worker, the tree's file count kept right."""
    _worker(_preloaded_from_tmp)(root)
    for role in _roles(root):
        _edit_role(role, _count_files)(root)


def _not_passed(root: Path) -> None:
    for role in _roles(root):
        _edit_role(role, lambda d: d.__setitem__("passed", False))(root)


AUDIT_LIES: dict[str, tuple[Edit, str]] = {
    "a preloaded library from /tmp": (_preload, "/tmp/libevil.so"),
    "LD_PRELOAD of /tmp in the worker's environment": (
        _worker(lambda p: p["environ"].__setitem__("LD_PRELOAD", "/tmp/libevil.so")),
        "LD_PRELOAD=/tmp/libevil.so",
    ),
    "LD_LIBRARY_PATH of /tmp in the api server's environment": (
        _edit_role(
            "api_server",
            lambda d: d["processes"][0]["environ"].__setitem__("LD_LIBRARY_PATH", "/tmp/lib"),
        ),
        "LD_LIBRARY_PATH: expected directories under",
    ),
    "an unknown rule": (
        _worker(lambda p: p["objects"][1].__setitem__("rule", "trusted")),
        "rule: expected executable | startup",
    ),
    "a null sha256": (
        _worker(lambda p: p["objects"][1].__setitem__("sha256", None)),
        "sha256: expected 64 hex digits, found None",
    ),
    "a parent outside the tree": (
        _worker(lambda p: p.__setitem__("ppid", 1)),
        "have a parent outside the tree",
    ),
    "an executable that is not the venv's python": (
        _worker(
            lambda p: (
                p.__setitem__("exe", "/tmp/python3.11"),
                p["objects"][0].__setitem__("path", "/tmp/python3.11"),
            )
        ),
        "exe: expected",
    ),
    "passed: false with no drift": (
        _not_passed,
        "passed: expected true exactly when no drift is listed",
    ),
    "a file id with two paths": (
        _worker(lambda p: p["objects"][2].__setitem__("file_id", p["objects"][1]["file_id"])),
        "file_id: expected one path and digest",
    ),
}


def _roles(root: Path) -> list[str]:
    audit = root / "evidence" / "start-1" / "audit"
    return [p.stem for p in audit.glob("*.json") if p.stem != "drifts"]


def _second_worker(root: Path) -> None:
    def change(document: dict[str, Any]) -> None:
        twin = json.loads(json.dumps(document["processes"][0]))
        twin["pid"] += 100000
        document["processes"].append(twin)

    _edit_role("worker", change)(root)


AUDIT_LIES["a second worker"] = (_second_worker, "role worker")


def _mapped_twice(process: dict[str, Any]) -> None:
    """One path mapped again with other bytes, the tree's file count kept right."""
    twin = json.loads(json.dumps(process["objects"][-1]))
    twin["file_id"], twin["sha256"] = "9:999999", "ab" * 32
    process["objects"].append(twin)


def _preload_unnamed(root: Path) -> None:
    def change(document: dict[str, Any]) -> None:
        root_process = next(p for p in document["processes"] if p["pid"] == document["root_pid"])
        root_process["objects"][-1]["rule"] = "preload"

    _edit_role("api_server", change)(root)


def _other_release(process: dict[str, Any]) -> None:
    prefix = process["exe"].rsplit("/bin/", 1)[0]
    process["exe"] = process["objects"][0]["path"] = f"{prefix}/bin/python3.12"


def _mapped_twice_counted(root: Path) -> None:
    _worker(_mapped_twice)(root)
    for role in _roles(root):
        _edit_role(role, _count_files)(root)


AUDIT_LIES["one path mapped with two digests"] = (
    _mapped_twice_counted,
    "one file mapped at a path",
)
AUDIT_LIES["an engine core named as a worker"] = (
    _edit_role("engine_core", lambda d: d["processes"][0].__setitem__("name", "VLLM::Worker")),
    "a name of role engine_core",
)
AUDIT_LIES["a preload no LD_PRELOAD names"] = (_preload_unnamed, "preload named by LD_PRELOAD")
AUDIT_LIES["an interpreter of another release in the base's bin"] = (
    _worker(_other_release),
    "exe: expected",
)


def _no_worker(root: Path) -> None:
    _edit_role("worker", lambda d: d.__setitem__("processes", []))(root)


AUDIT_LIES["a role with no process"] = (_no_worker, "role worker")


VARIANTS = ("/vllm/_C.abi3.so", "/vllm/_C_AVX512.abi3.so", "/vllm/_C_AVX2.abi3.so")


def _other_variant(root: Path) -> None:
    """The processes map another variant of vllm._C than the sealed host selects."""

    def renamed(path: str) -> str:
        for mapped, other in zip(VARIANTS, (*VARIANTS[1:], VARIANTS[0]), strict=True):
            if path.endswith(mapped):
                return path.removesuffix(mapped) + other
        return path

    def change(process: dict[str, Any]) -> None:
        for obj in process["objects"]:
            obj["path"] = renamed(obj["path"])
            if obj["requester"]:
                obj["requester"] = renamed(obj["requester"])

    for role in _roles(root):
        _edit_role(role, lambda d: [change(p) for p in d["processes"]] and None)(root)


AUDIT_LIES["another kernel variant mapped"] = (_other_variant, "vllm._C")


def _mapped(path: str) -> Callable[[dict[str, Any]], None]:
    """One more library mapped by the process, at `path`, as a dependency of the executable."""

    def change(process: dict[str, Any]) -> None:
        process["objects"].append(
            {
                "file_id": "fe:0/999991",
                "path": path,
                "reason": "DT_NEEDED",
                "requester": process["exe"],
                "rule": "dlopen",
                "sha256": "cd" * 32,
            }
        )

    return change


def _counted(edit: Edit) -> Edit:
    """`edit`, the tree's file count kept right in every role's document."""

    def both(root: Path) -> None:
        edit(root)
        for role in _roles(root):
            _edit_role(role, _count_files)(root)

    return both


def _venv_of(root: Path) -> str:
    return json.loads((root / "evidence" / "observations.json").read_text())["values"]["venv"]


def _under_venv(suffix: str) -> Edit:
    return lambda root: _counted(_worker(_mapped(_venv_of(root) + suffix)))(root)


def _unexplained(process: dict[str, Any]) -> None:
    process["objects"][1].update(rule="unexplained", reason="")


def _libc_elsewhere(process: dict[str, Any]) -> None:
    """The worker's libc another file than the api server's, at the same path."""
    libc = next(o for o in process["objects"] if o["path"].endswith("/libc.so.6"))
    libc.update(sha256="ef" * 32, file_id="fe:0/999992")


AUDIT_LIES["a path climbing out of the venv with '..'"] = (
    _under_venv("/../../../tmp/evil/libevil.so"),
    "expected an absolute path in canonical form",
)
AUDIT_LIES["a path under the venv with '//' and '/./'"] = (
    _under_venv("//lib/./python3.11/site-packages/evil/libevil.so"),
    "expected an absolute path in canonical form",
)
AUDIT_LIES["a mapping left unexplained with no drift saying why"] = (
    _worker(_unexplained),
    "expected a mapping the loader rules explain",
)
AUDIT_LIES["one path, two files, in two processes of the tree"] = (
    _counted(_worker(_libc_elsewhere)),
    "libc.so.6: path: expected one file in the tree",
)
AUDIT_LIES["an inductor kernel in a temporary directory the worker does not have"] = (
    _counted(_worker(_mapped("/tmp/torchinductor_root/ab/evil.so"))),
    "/tmp/torchinductor_root/ab/evil.so (dlopen)",
)
AUDIT_LIES["a torch kernel cache under another directory than the worker's HOME"] = (
    _counted(_worker(_mapped("/srv/evil/.cache/torch/kernels/evil.so"))),
    "/srv/evil/.cache/torch/kernels/evil.so (dlopen)",
)


@pytest.mark.parametrize(("edit", "named"), by_name(AUDIT_LIES))
def test_a_sealed_audit_is_judged_again(
    edit: Edit, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = hostile(tmp_path, capsys, edit)
    assert named in failed(document, "live audit of start-1 judged again")
    # the gate the run sealed as passed is recomputed as failed
    assert "live_audit:start-1" in failed(document, "gates")


def test_a_root_started_with_another_environment_than_run_json_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No loader rule forbids a bigger KV cache; run.json says the stack ran without it."""

    def bigger(document: dict[str, Any]) -> None:
        root = next(p for p in document["processes"] if p["pid"] == document["root_pid"])
        root["environ"]["VLLM_CPU_KVCACHE_SPACE"] = "64"

    document = hostile(tmp_path, capsys, _edit_role("api_server", bigger, start=2))
    detail = failed(document, "live audit of start-2 judged again")
    assert "VLLM_CPU_KVCACHE_SPACE: expected '1' (run.json env), found '64'" in detail


def test_a_process_adding_a_code_path_to_its_environment_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The worker imports from /tmp: no loader rule sees PYTHONPATH, run.json never set it."""
    document = hostile(
        tmp_path, capsys, _worker(lambda p: p["environ"].__setitem__("PYTHONPATH", "/tmp/evil"))
    )
    detail = failed(document, "live audit of start-1 judged again")
    assert "PYTHONPATH: expected unset (run.json env), found '/tmp/evil'" in detail


CODE_STEERING = {
    "ATEN_CPU_CAPABILITY": "default",  # the sealed kernel set's override: another code path
    "PYTHONPYCACHEPREFIX": "/tmp/pyc",
    "PYTHONPLATLIBDIR": "../../../../tmp/evil",
    "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F",
    "LD_ORIGIN_PATH": "/tmp/evil",
    "LD_HWCAP_MASK": "0",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "DNNL_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "MKL_CBWR": "COMPATIBLE",
    "PYTHONOPTIMIZE": "2",
    "TEMP": "/srv/x",  # moves the worker's JIT directory where the run put none
}


@pytest.mark.parametrize("name", sorted(CODE_STEERING))
def test_a_process_adding_a_variable_that_changes_which_code_runs_is_refused(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    value = CODE_STEERING[name]
    document = hostile(tmp_path, capsys, _worker(lambda p: p["environ"].__setitem__(name, value)))
    detail = failed(document, "live audit of start-1 judged again")
    assert f"{name}: expected unset (run.json env), found {value!r}" in detail


def _root_environ(start: int, name: str, value: str) -> Edit:
    def change(document: dict[str, Any]) -> None:
        for process in document["processes"]:
            if process["pid"] == document["root_pid"] or process["role"] == "resource_tracker":
                process["environ"][name] = value

    def edit(root: Path) -> None:
        for role in _roles(root):
            _edit_role(role, change, start=start)(root)

    return edit


def _start_2_with_start_1s_private_dirs(root: Path) -> None:
    first = json.loads((root / "evidence/start-1/audit/api_server.json").read_text())
    environ = first["processes"][0]["environ"]
    for name in ("HOME", "TMPDIR"):
        _root_environ(2, name, environ[name])(root)


def _requester_outside(process: dict[str, Any]) -> None:
    obj = next(o for o in process["objects"] if o["rule"] == "dependency" and o["requester"])
    obj.update(requester="/tmp/evil/loader.so", reason="RUNPATH of /tmp/evil/loader.so")


PRIVATE_LIES: dict[str, tuple[Edit, str]] = {
    "a root whose temporary directory is not where run.json's was made": (
        _root_environ(1, "TMPDIR", "/dev/shm/evil"),
        "TMPDIR: expected a directory of its own in '/tmp'",
    ),
    "start 2's root with start 1's private directories": (
        _start_2_with_start_1s_private_dirs,
        "expected a directory of its own, found",
    ),
    "a root whose HOME is not its start's under the run": (
        _root_environ(2, "HOME", "/root"),
        "HOME: expected",
    ),
    "a dependency loaded for an object no process maps": (
        _worker(_requester_outside),
        "requester: expected an object this process maps",
    ),
}


@pytest.mark.parametrize(("edit", "named"), by_name(PRIVATE_LIES))
def test_private_directories_and_requesters_are_the_trees_own(
    edit: Edit, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failures = [c["detail"] for c in hostile(tmp_path, capsys, edit)["claims"] if not c["ok"]]
    assert named in " ".join(failures)


def test_a_later_start_mapping_other_files_than_the_lock_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lock's mappings are start 1's; start 2's worker maps one file of other bytes."""

    def other_bytes(document: dict[str, Any]) -> None:
        mapped = document["processes"][0]["objects"][-1]
        mapped["sha256"] = "0" * 64

    document = hostile(tmp_path, capsys, _edit_role("worker", other_bytes, start=2))
    assert "start 2 maps other files or environments" in failed(document, "native.roles")


def test_a_drift_removed_from_drifts_json_alone_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(root: Path) -> None:
        drift = {
            "kind": "unexpected-mapping",
            "subject": "/tmp/x.so",
            "expected": "a library under the roots",
            "observed": "/tmp/x.so",
            "why": "mapped from outside the allowed roots",
        }
        (root / "evidence/start-2/audit/drifts.json").write_text(json.dumps([drift]))

    assert_refused((edit, "live audit of start-2 judged again", "drifts.json"), tmp_path, capsys)


def test_a_kernel_set_rewritten_to_allow_everything_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(root: Path) -> None:
        path = root / "kernels" / "cpu.toml"
        path.write_text(path.read_text() + "\n# every mapping allowed\n")

    assert_refused(
        (edit, "kernels/ = ", "kernels/cpu.toml: expected the bytes of"), tmp_path, capsys
    )


# --- fresh starts, teardown, server, logs -----------------------------------------------------


def _copy_start(root: Path) -> None:
    evidence = root / "evidence"
    shutil.rmtree(evidence / "start-2")
    shutil.copytree(evidence / "start-1", evidence / "start-2")


def _copy_rows(root: Path) -> None:
    evidence = root / "evidence"
    shutil.copy(evidence / "start-1/rows.json", evidence / "start-2/rows.json")


def _pids(root: Path, start: int) -> dict[str, int]:
    """Each role's pid in `start`'s audit."""
    found = {}
    for path in (root / "evidence" / f"start-{start}" / "audit").glob("*.json"):
        if path.name != "drifts.json":
            for process in json.loads(path.read_text())["processes"]:
                found[process["role"]] = process["pid"]
    return found


def _role_pids(root: Path, at: str) -> dict[str, int]:
    """Each role's pid in the audit of `at` (`start-1`, `start-1/rank-1`)."""
    return {
        process["role"]: process["pid"]
        for path in sorted((root / "evidence" / at / "audit").glob("*.json"))
        if path.name != "drifts.json"
        for process in json.loads(path.read_text())["processes"]
    }


def _processes(root: Path, at: str) -> dict[str, dict[str, Any]]:
    return {
        process["role"]: process
        for path in sorted((root / "evidence" / at / "audit").glob("*.json"))
        if path.name != "drifts.json"
        for process in json.loads(path.read_text())["processes"]
    }


# What the committed bundles sealed, that a refusal names.
PIDS_1, PIDS_2 = _pids(TINY, 1), _pids(TINY, 2)
STARTED_1 = {role: p["started_at"] for role, p in _processes(TINY, "start-1").items()}
SERVER_1 = json.loads((TINY / "evidence/start-1/server.json").read_text())
POSTED_1 = sum(
    len(json.loads(p.read_text())) for p in (TINY / "evidence/start-1").glob("**/rows.json")
)
TWO_NODES_SERVER = json.loads((TWO_NODES / "evidence/start-1/server.json").read_text())
RANK_1_HEADLESS = _processes(TWO_NODES, "start-1/rank-1")["headless"]


def _log_of_start_1_renamed(root: Path) -> None:
    """Start 2's log start 1's, every pid it names replaced by start 2's of the same role."""
    first, second = _pids(root, 1), _pids(root, 2)
    log = (root / "evidence/start-1/server.log").read_bytes()
    for role, pid in first.items():
        log = re.sub(rb"\b%d\b" % pid, b"%d" % second[role], log)
    (root / "evidence/start-2/server.log").write_bytes(log)


def _rows_of_start_1_shifted(root: Path) -> None:
    """Start 2's rows start 1's, every arrival a microsecond later."""
    rows = json.loads((root / "evidence/start-1/rows.json").read_text())
    for row in rows:
        row["token_offsets_s"] = [t + 1e-6 for t in row["token_offsets_s"]]
        row["ttft_s"] += 1e-6
    (root / "evidence/start-2/rows.json").write_text(json.dumps(rows))


def _log(start: int, text: bytes, *, replace: bool = False) -> Edit:
    def edit(root: Path) -> None:
        path = root / "evidence" / f"start-{start}" / "server.log"
        data = path.read_bytes()
        path.write_bytes(text if replace else text + data)

    return edit


def _while_serving(start: int, *lines: str, rank: str = "") -> Edit:
    """`lines` written to the start's (rank's) log while it served: before its first answered
    suite request (its first line on a rank that answers none), teardown's log_bytes moved on."""

    def edit(root: Path) -> None:
        directory = root / "evidence" / f"start-{start}" / rank
        log = (directory / "server.log").read_bytes()
        post = log.find(b'"POST /v1/chat/completions HTTP/1.1" 200')
        at = log.index(b"\n") + 1 if post < 0 else log.rindex(b"\n", 0, post) + 1
        added = "".join(f"{line}\n" for line in lines).encode()
        (directory / "server.log").write_bytes(log[:at] + added + log[at:])
        _json(
            f"evidence/start-{start}/{rank}/teardown.json".replace("//", "/"),
            lambda d: d.update(log_bytes=d["log_bytes"] + len(added)),
        )(root)

    return edit


def _after_read(start: int, change: Callable[[str], str]) -> Edit:
    def edit(root: Path) -> None:
        path = root / "evidence" / f"start-{start}" / "metrics-after.prom"
        path.write_text(change(path.read_text()))

    return edit


def _created_after_teardown(root: Path) -> None:
    ended = json.loads((root / "evidence/start-1/teardown.json").read_text())["ended_at"]
    chat = 'http_requests_created{handler="/v1/chat/completions",method="POST",status="2xx"}'
    _after_read(
        1, lambda t: re.sub(rf"^{re.escape(chat)} \S+$", f"{chat} {ended + 3600}", t, flags=re.M)
    )(root)


MODELS_COUNTED = 'http_requests_total{handler="/v1/models",method="GET",status="2xx"} 1.0'
FAILED_ELSEWHERE = 'http_requests_total{handler="/v1/completions",method="POST",status="5xx"} 3.0'
ANSWERED = 'INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" {}'


def _streamed_just_past_the_window(root: Path) -> None:
    """Start 1's streaming a fifth of a second longer than the stack was up between ready and
    teardown: any repro's wall clock reads both ends of that interval on the same host."""
    start = root / "evidence" / "start-1"
    ready = json.loads((start / "server.json").read_text())["ready_at"]
    began = json.loads((start / "teardown.json").read_text())["began_at"]
    rows = json.loads((start / "rows.json").read_text())
    streamed = sum(max(row["token_offsets_s"]) for row in rows)
    factor = (began - ready + 0.2) / streamed
    for row in rows:
        row["token_offsets_s"] = [t * factor for t in row["token_offsets_s"]]
        row["first_token_after_s"] *= factor
        row["ttft_s"] *= factor
    (start / "rows.json").write_text(json.dumps(rows))


def _log_said(start: int, old: str, new: str, *, rank: str = "") -> Edit:
    """The start's (rank's) log saying `new` wherever it said `old`; teardown.json's log_bytes
    kept where the log served up to."""

    def edit(root: Path) -> None:
        directory = root / "evidence" / f"start-{start}" / rank
        log = (directory / "server.log").read_bytes()
        assert old.encode() in log, old
        teardown = json.loads((directory / "teardown.json").read_text())
        served = log[: teardown["log_bytes"]].replace(old.encode(), new.encode())
        rest = log[teardown["log_bytes"] :].replace(old.encode(), new.encode())
        (directory / "server.log").write_bytes(served + rest)
        teardown["log_bytes"] = len(served)
        (directory / "teardown.json").write_text(json.dumps(teardown))

    return edit


def _reads(start: int, change: Callable[[str], str]) -> Edit:
    """Both `/metrics` reads of `start` changed alike."""

    def edit(root: Path) -> None:
        for name in ("metrics-before.prom", "metrics-after.prom"):
            path = root / "evidence" / f"start-{start}" / name
            path.write_text(change(path.read_text()))

    return edit


def _line_added(start: int, marker: str, change: Callable[[str], str], *, rank: str = "") -> Edit:
    """After the first line of the start's (rank's) log holding `marker`, a line: that one as
    `change` writes it."""

    def edit(root: Path) -> None:
        log = (root / "evidence" / f"start-{start}" / rank / "server.log").read_text()
        line = next(line for line in log.splitlines() if marker in line)
        _log_said(start, line + "\n", f"{line}\n{change(line)}\n", rank=rank)(root)

    return edit


def _chat_counted_early(root: Path) -> None:
    """The suite's handler first counted 2 s after the server was spawned, long before ready."""
    spawned = json.loads((root / "evidence/start-1/server.json").read_text())["started_at"]
    created = r'^(http_\S+_created\{handler="/v1/chat/completions"[^}]*\}) \S+$'
    _after_read(1, lambda t: re.sub(created, lambda m: f"{m[1]} {spawned + 2.0!r}", t, flags=re.M))(
        root
    )


def _vllm_created_at_spawn(root: Path) -> None:
    """Every vLLM counter created 1 s after the API server was spawned, before its engine core
    (started 15 s later, the sealed audit says) existed."""
    spawned = json.loads((root / "evidence/start-1/server.json").read_text())["started_at"]
    created = r"^(vllm:\S+_created(?:\{[^}]*\})?) \S+$"
    _reads(1, lambda t: re.sub(created, lambda m: f"{m[1]} {spawned + 1.0!r}", t, flags=re.M))(root)


def _bytes_replaced(relative: str, *changes: tuple[bytes, bytes]) -> Edit:
    """The file at `relative` with each change's old bytes replaced by its new ones, in turn."""

    def edit(root: Path) -> None:
        path = root / relative
        data = path.read_bytes()
        for old, new in changes:
            data = data.replace(old, new)
        path.write_bytes(data)

    return edit


def _log_replaced(start: int, old: bytes, new: bytes) -> Edit:
    """`old` replaced by `new` in what start `start`'s server logged while it served (teardown's
    log_bytes moved by the difference)."""

    def edit(root: Path) -> None:
        path = root / "evidence" / f"start-{start}" / "server.log"
        data = path.read_bytes()
        assert data.count(old) == 1, old
        path.write_bytes(data.replace(old, new))
        _json(
            f"evidence/start-{start}/teardown.json",
            lambda d: d.update(log_bytes=d["log_bytes"] + len(new) - len(old)),
        )(root)

    return edit


VLLM_DATE = re.compile(
    rb"((?:^|\) )(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) )(\d\d-\d\d \d\d:\d\d:\d\d) "
)


def _dated_later(start: int, seconds: int, *, rank: str = "", only: str = "") -> Edit:
    """Every line of the start's (rank's) log that vLLM dated, and that holds `only`, dated
    `seconds` later."""

    def later(match: re.Match[bytes]) -> bytes:
        when = time.strptime(f"2026-{match[2].decode()}", "%Y-%m-%d %H:%M:%S")
        moved = time.gmtime(calendar.timegm(when) + seconds)
        return match[1] + time.strftime("%m-%d %H:%M:%S", moved).encode() + b" "

    def edit(root: Path) -> None:
        path = root / "evidence" / f"start-{start}" / rank / "server.log"
        lines = path.read_bytes().split(b"\n")
        path.write_bytes(
            b"\n".join(
                VLLM_DATE.sub(later, line) if only.encode() in line else line for line in lines
            )
        )

    return edit


def _worker_logging_before_it_started(root: Path) -> None:
    """Start 1's worker's lines dated half the time from the spawn to the worker's start
    earlier: inside the start, before the worker was."""
    started = _processes(root, "start-1")["worker"]["started_at"]
    spawned = json.loads((root / "evidence/start-1/server.json").read_text())["started_at"]
    earlier = max(2, int((started - spawned) / 2))
    _dated_later(1, -earlier, only=f"pid={_pids(root, 1)['worker']})")(root)


def _uvicorn_naming_the_worker(root: Path) -> None:
    pids = _pids(root, 2)
    _log_said(
        2,
        f"Started server process [{pids['api_server']}]",
        f"Started server process [{pids['worker']}]",
    )(root)


def _the_same_ids_for_two_prompts(rows: list[dict[str, Any]]) -> None:
    rows[1]["token_ids"] = list(rows[0]["token_ids"])


OTHER_PYTHON = (
    'minor="11",patchlevel="7",version="3.11.7"',
    'minor="12",patchlevel="1",version="3.12.1"',
)
BIGGER_KV_CACHE = ('kv_cache_memory_bytes="1073741824"', 'kv_cache_memory_bytes="68719476736"')
ERROR_AT = "(APIServer pid=11746) ERROR 12-06 01:27:58 [serving_chat.py:1301] "


def _paused(start: int, prompt: str, seconds: float) -> Edit:
    """Start `start`'s answer to `prompt` as if the server paused `seconds` before the read
    that brought its 17th token (every later token as much later)."""

    def change(rows: list[dict[str, Any]]) -> None:
        row = next(r for r in rows if r["prompt_id"] == prompt)
        first = row["token_reads"].index(row["token_reads"][17])
        row["token_offsets_s"] = [
            t + (seconds if i >= first else 0.0) for i, t in enumerate(row["token_offsets_s"])
        ]

    return _json(f"evidence/start-{start}/rows.json", change)


START_LIES: dict[str, Lie] = {
    "a replay's answer that paused 2 s": (
        _paused(2, "code", 2.0),
        "gates",
        "stall: 1 stall(s): start 2 prompt 'code' token",
    ),
    "start 2 a byte copy of start 1": (_copy_start, "fresh starts", "start-2"),
    "start 2's rows a copy of start 1's": (_copy_rows, "fresh starts", "every arrival time"),
    "start 2's rows start 1's, a microsecond later": (
        _rows_of_start_1_shifted,
        "fresh starts",
        "every arrival time within 100 µs of evidence/start-1's",
    ),
    "start 2's log start 1's with its pids renamed": (
        _log_of_start_1_renamed,
        "fresh starts",
        "start-2/server.log: lines dated",
    ),
    "a teardown not proven": (
        _json("evidence/start-1/teardown.json", lambda d: d.__setitem__("proven", False)),
        "fresh starts",
        "proven: expected true",
    ),
    "a pid killed that the tree never held": (
        _json("evidence/start-1/teardown.json", lambda d: d.__setitem__("killed", [1])),
        "fresh starts",
        "killed: expected pids of the tree",
    ),
    "an audited pid the teardown never saw": (
        _json("evidence/start-2/teardown.json", lambda d: d.__setitem__("pids", d["pids"][:1])),
        "fresh starts",
        "pids: expected every audited pid",
    ),
    "a process the audit never saw": (
        _json(
            "evidence/start-1/teardown.json",
            lambda d: d.__setitem__("pids", [*d["pids"], max(d["pids"]) + 7]),
        ),
        "fresh starts",
        "that the audit never saw",
    ),
    "rows streamed for longer than the stack served": (
        _json(
            "evidence/start-1/rows.json",
            lambda rows: (
                [
                    row.update(
                        token_offsets_s=[t * 400 for t in row["token_offsets_s"]],
                        first_token_after_s=row["first_token_after_s"] * 400,
                        ttft_s=row["ttft_s"] * 400,
                    )
                    for row in rows
                ]
                and None
            ),
        ),
        "fresh starts",
        "s of streaming: expected at most",
    ),
    "rows streamed a fifth of a second longer than the stack served": (
        _streamed_just_past_the_window,
        "fresh starts",
        "s of streaming: expected at most",
    ),
    "start 2 ending a row otherwise on the same tokens": (
        _json(
            "evidence/start-2/rows.json",
            lambda rows: rows[0].update(
                finish_reason="stop" if rows[0]["finish_reason"] == "length" else "length"
            ),
        ),
        "every start's rows",
        "finish_reason",
    ),
    "a log of another vLLM than the lock pins": (
        _bytes_replaced("evidence/start-2/server.log", (b"(v0.32.0)", b"(v0.31.0)")),
        "fresh starts",
        "vLLM version 0.31.0: expected 0.32.0",
    ),
    "a log saying the stack ran with another dtype": (
        _bytes_replaced(
            "evidence/start-1/server.log", (b"'dtype': 'float32'", b"'dtype': 'bfloat16'")
        ),
        "fresh starts",
        "non-default args dtype='bfloat16': expected the argv's --dtype float32",
    ),
    "a log naming a process the audit never saw": (
        _log(1, b"(EngineCore pid=31337) INFO starting\n"),
        "fresh starts",
        "the audit never saw",
    ),
    "server.json naming another pid": (
        _json("evidence/start-1/server.json", lambda d: d.__setitem__("pid", d["pid"] + 1)),
        "fresh starts",
        "server.json: pid: expected",
    ),
    "start 2's metrics a copy of start 1's": (
        lambda root: (
            [
                shutil.copy(root / f"evidence/start-1/{name}", root / f"evidence/start-2/{name}")
                for name in ("metrics-before.prom", "metrics-after.prom")
            ]
            and None
        ),
        "fresh starts",
        "process_start_time_seconds",
    ),
    "an empty server log": (
        _log(1, b"", replace=True),
        "gates",
        "server_log:start-1",
    ),
    "a traceback while serving": (
        _log(2, b"Traceback (most recent call last):\n  File 'x'\nRuntimeError: boom\n"),
        "gates",
        "server_log:start-2",
    ),
    "SIGILL while serving": (
        _log(1, b"(EngineCore pid=1) worker died: SIGILL\n"),
        "gates",
        "server_log:start-1",
    ),
    "a worker dying while serving": (
        _while_serving(
            1,
            "(EngineCore pid=22843) ERROR 12-04 15:14:44 [multiproc_executor.py:250] Worker proc "
            "VllmWorker-0 died unexpectedly, shutting down executor.",
        ),
        "gates",
        "server_log:start-1: 1 crash line(s) while serving; first: line 109 'died unexpectedly'",
    ),
    "a suite request answered 500 while serving": (
        _while_serving(2, ANSWERED.format("500 Internal Server Error")),
        "gates",
        "server_log:start-2: 1 suite request(s) answered otherwise than 2xx while serving; "
        "first: line 109 POST /v1/chat/completions 500",
    ),
    "two suite requests logged beyond the rows": (
        _while_serving(1, ANSWERED.format("200 OK"), ANSWERED.format("200 OK")),
        "gates",
        f"server_log:start-1: {POSTED_1 + 2} suite requests logged while serving, expected the "
        f"{POSTED_1} answered",
    ),
    "a log naming another vLLM as its API server's version": (
        _while_serving(
            1,
            "(APIServer pid=22825) INFO 12-04 15:14:09 [api_server.py:1] vLLM API server version "
            "0.31.0",
        ),
        "fresh starts",
        "evidence/start-1/server.log: vLLM version 0.31.0: expected 0.32.0, the version the lock "
        "pins",
    ),
    "failed requests counted that the access log does not hold": (
        _after_read(
            2, lambda t: t.replace(MODELS_COUNTED, f"{MODELS_COUNTED}\n{FAILED_ELSEWHERE}")
        ),
        "start-2 rows",
        "evidence/start-2/server.log: access lines of http_requests_total"
        '{handler="/v1/completions",method="POST",status="5xx"}: expected at least the 3 '
        "requests it counted",
    ),
    "a counter created after teardown began": (
        _created_after_teardown,
        "start-1 rows",
        'http_requests_created{handler="/v1/chat/completions",method="POST",status="2xx"}: '
        "expected a time no later than the read, taken before",
    ),
    "logged arguments that do not parse": (
        _log_said(1, "'dtype': 'float32',", "'dtype': 'float32', 'loader': <object at 0x7f00>,"),
        "fresh starts",
        "start-1/server.log:12: non-default args: expected a dict as vLLM writes it (literals, "
        'reprs of enums and dataclasses), found one that does not parse: "<object at 0x7f00>,',
    ),
    "a second line of logged arguments": (
        _line_added(
            1,
            "non-default args:",
            lambda line: line.replace("'dtype': 'float32'", "'dtype': 'bfloat16'"),
        ),
        "fresh starts",
        "start-1/server.log: 2 different non-default args lines (lines 12, 13): expected one",
    ),
    "a logged argument the argv never gave": (
        _log_said(
            1,
            "'enable_prefix_caching': False}",
            "'enable_prefix_caching': False, 'trust_remote_code': True}",
        ),
        "fresh starts",
        "start-1/server.log:12: non-default args trust_remote_code=True: expected only arguments "
        "the argv gives, found --trust-remote-code that it never spells",
    ),
    "an engine of another dtype": (
        _log_said(2, "dtype=torch.float32", "dtype=torch.bfloat16"),
        "fresh starts",
        "start-2/server.log:24: engine config dtype=torch.bfloat16: expected torch.float32, the "
        "argv's --dtype float32",
    ),
    "an engine that compiled although the argv enforced eager mode": (
        _log_said(1, "enforce_eager=True", "enforce_eager=False"),
        "fresh starts",
        "start-1/server.log:24: engine config enforce_eager=False: expected True, the argv's "
        "--enforce-eager (a switch)",
    ),
    "an engine of another seed": (
        _log_said(1, " seed=0,", " seed=1234,"),
        "fresh starts",
        "start-1/server.log:24: engine config seed=1234: expected 0, the argv's --seed 0",
    ),
    "another max model len logged": (
        _log_said(1, "Using max model len 2048", "Using max model len 4096"),
        "fresh starts",
        "start-1/server.log:15: Using max model len 4096: expected 2048, the argv's "
        "--max-model-len",
    ),
    "a server listening on another port": (
        _log_said(
            2,
            "Starting vLLM server on http://127.0.0.1:18431",
            "Starting vLLM server on http://127.0.0.1:9999",
        ),
        "fresh starts",
        "start-2/server.log:64: listening on http://127.0.0.1:9999: expected port 18431, the "
        "argv's --port",
    ),
    "a banner naming another model": (
        _log_said(1, "model   /work/main/build/tiny-llama", "model   /tmp/evil-model"),
        "fresh starts",
        "start-1/server.log:9: the banner's model /tmp/evil-model: expected "
        "/work/main/build/tiny-llama, the argv's model",
    ),
    "a worker logging before it started": (
        _worker_logging_before_it_started,
        "fresh starts",
        (
            f"start-1/server.log: a line of pid {PIDS_1['worker']} (worker) dated ",
            "the zone the start's lines fit): expected no earlier than a second before pid "
            f"{PIDS_1['worker']} started at",
        ),
    ),
    "a stack ready before its server listened": (
        _json(
            "evidence/start-1/server.json",
            lambda d: d.update(ready_at=d["ready_at"] - 8, ready_after_s=d["ready_after_s"] - 8),
        ),
        "fresh starts",
        (
            f"start-1/server.json: ready_at {SERVER_1['ready_at'] - 8!r} (",
            "UTC): expected no earlier than a second before the log's 'Starting vLLM server on' "
            "dated ",
        ),
    ),
    "start 2's log read in another time zone than start 1's": (
        _dated_later(2, 3600),
        "fresh starts",
        "start-2/server.log: lines read in UTC+01:00 only: expected UTC+00:00, as "
        "evidence/start-1's",
    ),
    "uvicorn serving from the worker": (
        _uvicorn_naming_the_worker,
        "fresh starts",
        f"start-2/server.log: uvicorn's 'Started server process [{PIDS_2['worker']}]': expected "
        f"pid {PIDS_2['api_server']} (api_server), the root of the sealed audit, found pid "
        f"{PIDS_2['worker']} (worker)",
    ),
    "two prompts answered with the same ids and other texts": (
        _json("evidence/start-1/rows.json", _the_same_ids_for_two_prompts),
        "every start's rows",
        "row greeting's for the same token ids",
    ),
    "a suite request counted before the server was ready": (
        _chat_counted_early,
        "start-1 rows",
        "expected a time no earlier than evidence/start-1/server.json ready_at "
        f"({SERVER_1['ready_at']!r}): the suite's first request came after it",
    ),
    "vLLM's counters created before its engine core started": (
        _vllm_created_at_spawn,
        "start-1 rows",
        "expected a time no earlier than the engine core's started_at in evidence/start-1/audit "
        f"({STARTED_1['engine_core']!r}; 1 s of slack)",
    ),
    "python_info of another interpreter than the observations state": (
        _reads(2, lambda t: t.replace(*OTHER_PYTHON)),
        "start-2 rows",
        "python_info version: expected '3.11.7' (the interpreter evidence/observations.json "
        "python.version states), found '3.12.1'",
    ),
    "a KV cache of other bytes than VLLM_CPU_KVCACHE_SPACE gives": (
        _reads(1, lambda t: t.replace(*BIGGER_KV_CACHE)),
        "start-1 rows",
        'vllm:cache_config_info{engine="0"} kv_cache_memory_bytes: expected 1073741824 '
        "(VLLM_CPU_KVCACHE_SPACE=1 GiB in evidence/run.json env, the CPU platform's KV cache), "
        "found 68719476736",
    ),
    "a readiness probe answered 503 only": (
        _log_replaced(
            1, b'"GET /health HTTP/1.1" 200 OK', b'"GET /health HTTP/1.1" 503 Service Unavailable'
        ),
        "start-1 rows",
        "evidence/start-1/server.log: the readiness probe GET /health: expected its access line "
        "answered 2xx before the suite's first POST",
    ),
    "a POST to a route the suite never posts to": (
        _while_serving(
            2, 'INFO:     127.0.0.1:54025 - "POST /v1/load_lora_adapter HTTP/1.1" 200 OK'
        ),
        "start-2 rows",
        "evidence/start-2/server.log:109: access line: expected only the suite's POSTs to "
        "/v1/chat/completions (its client posts nothing else), found POST /v1/load_lora_adapter",
    ),
    "a stream that failed while serving": (
        _while_serving(1, ERROR_AT + "Error in chat completion stream generator."),
        "gates",
        "server_log:start-1: 1 crash line(s) while serving; first: line 109 'Error in chat "
        "completion stream generator'",
    ),
    "the output handler failing while serving": (
        _while_serving(2, ERROR_AT + "AsyncLLM output_handler failed."),
        "gates",
        "server_log:start-2: 1 crash line(s) while serving; first: line 109 'output_handler "
        "failed'",
    ),
    "an exception escaping the application while serving": (
        _while_serving(1, "ERROR:    Exception in ASGI application"),
        "gates",
        "server_log:start-1: 1 crash line(s) while serving; first: line 109 'Exception in ASGI "
        "application'",
    ),
    "a bare exception line while serving": (
        _while_serving(
            1,
            "(Worker pid=11776) ERROR 12-06 01:27:58 [cpu_model_runner.py:1] RuntimeError: "
            "Expected all tensors to be on the same device",
        ),
        "gates",
        "server_log:start-1: 1 crash line(s) while serving; first: line 109 'RuntimeError'",
    ),
    "the shell reporting a process killed while serving": (
        _while_serving(2, "Killed"),
        "gates",
        "server_log:start-2: 1 crash line(s) while serving; first: line 109 'Killed'",
    ),
}


@pytest.mark.parametrize(
    ("line", "version"),
    [
        ("(APIServer pid=1) INFO [api_server.py:1] vLLM API server version 0.31.0", "0.31.0"),
        ("(APIServer pid=1) INFO [api_utils.py:347]  ▄▄ ▄█ █  ▀▄▀ █  version 0.32.0", "0.32.0"),
        ("(EngineCore pid=2) INFO Initializing a V1 LLM engine (v0.32.0) with config:", "0.32.0"),
        ("INFO [llm_engine.py:1] Initializing an LLM engine (v0.6.3) with config:", "0.6.3"),
        ("(MainProcess pid=3) INFO Launching vLLM (v0.32.0) headless multiproc executor", "0.32.0"),
        ("vLLM Version: 0.31.0.", "0.31.0"),
    ],
)  # fmt: skip
def test_every_phrasing_in_which_vllm_logs_its_version_is_read(line: str, version: str) -> None:
    assert logged_versions(line) == [version]
    assert logged_version_problems(line, "server.log", "0.32.0") == (
        []
        if version == "0.32.0"
        else [f"server.log: vLLM version {version}: expected 0.32.0, the version the lock pins"]
    )


def test_a_log_of_vllm_from_a_source_tree_names_one_version() -> None:
    """No distribution pins it (an imported record): the log names one version, whatever it is."""
    banner = "█  version 0.1.dev1267+g6ae34833d.d20260726\n"
    assert logged_version_problems(banner * 2, "run/server.log", None) == []
    assert logged_version_problems(
        banner + "vLLM API server version 0.11.0\n", "run/server.log", None
    ) == [
        "run/server.log: vLLM versions 0.1.dev1267+g6ae34833d.d20260726, 0.11.0: expected one "
        "(one server runs one vLLM)"
    ]


SERVE = ["/venv/bin/python", "/venv/bin/vllm", "serve", "/models/m", "--max-model-len", "4096"]


@pytest.mark.parametrize(
    ("argv", "log"),
    [
        (  # the positional model of `serve`, and the API server count it sets, as vLLM logs them
            SERVE,
            "non-default args: {'model_tag': '/models/m', 'model': '/models/m', "
            "'max_model_len': 4096, 'api_server_count': 1}",
        ),
        (  # a long alias
            [*SERVE, "--device-memory-utilization", "0.5"],
            "non-default args: {'gpu_memory_utilization': 0.5}",
        ),
        (  # a dataclass's repr, an enum's
            [*SERVE, "--lora-modules", "a=/l", "--compilation-config.mode=0"],
            "non-default args: {'lora_modules': [LoRAModulePath(name='a', path='/l')], "
            "'compilation_config': {'mode': <CompilationMode.NONE: 0>}, 'max_model_len': 4096}",
        ),
        (  # a short alias: whatever the argv gives, this module cannot name every option
            [*SERVE, "-tp", "2"],
            "non-default args: {'tensor_parallel_size': 2}\n"
            "(EngineCore pid=2) INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine "
            "(v0.32.0) with config: model='/models/m', tensor_parallel_size=2, max_seq_len=4096",
        ),
        (  # a draft model's own context length, after the target's
            [*SERVE, "--speculative-config", '{"method": "ngram"}'],
            "(APIServer pid=1) INFO Using max model len 4096\n"
            "(APIServer pid=1) INFO Using max model len 262144",
        ),
        (
            [*SERVE, "--host", "::1", "--port", "8001"],
            "Starting vLLM server on http://[::1]:8001\n\u2588  model   /models/m",
        ),
    ],
)  # fmt: skip
def test_what_vllm_logs_of_an_argv_it_was_given_is_no_problem(argv: list[str], log: str) -> None:
    assert logged_argument_problems(log, argv, "server.log") == []


def test_a_later_max_model_len_without_a_draft_model_is_refused() -> None:
    log = "(APIServer pid=1) INFO Using max model len 4096\n(APIServer pid=1) Using max model len 8"
    assert logged_argument_problems(log, SERVE, "server.log") == [
        "server.log:2: Using max model len 8: expected 4096, the argv's --max-model-len "
        "(no draft model configured)"
    ]


LOAD_ROWS = "evidence/start-1/load-c4/rows.json"


def _load_gap_lengthened(root: Path, seconds: float) -> None:
    """Start 1's first answer under the c4 load as if one inter-token time were `seconds`
    longer: every token from the 17th's read on that much later."""
    path = root / LOAD_ROWS
    rows = json.loads(path.read_text())
    row = rows[0]
    first = row["token_reads"].index(row["token_reads"][17])
    row["token_offsets_s"] = [
        t + (seconds if i >= first else 0.0) for i, t in enumerate(row["token_offsets_s"])
    ]
    path.write_text(json.dumps(rows))


def _load_verdict_recomputed(root: Path) -> None:
    """What a liar holding the key does next: the load's verdict made to match the lie."""
    manifest = Manifest.from_toml(
        (root / "manifest.toml").read_text(),
        source="manifest.toml",
        base_dir=REPO_ROOT / "manifests",
    )
    (load,) = manifest.oracle.gates.loads
    starts = [
        (n, read_rows(root / f"evidence/start-{n}/load-{load.name}/rows.json")) for n in (1, 2)
    ]
    path = root / "evidence" / "verdicts.json"
    verdicts = json.loads(path.read_text())
    index = next(i for i, v in enumerate(verdicts) if v["gate"] == f"load:{load.name}")
    verdicts[index] = load_verdict(load, starts).model_dump(mode="json")
    path.write_text(json.dumps(verdicts))


def test_a_lie_in_one_inter_token_time_under_load_is_refused_by_the_recomputed_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = hostile(tmp_path, capsys, lambda root: _load_gap_lengthened(root, 0.3))
    assert "load:c4: recomputed" in failed(document, "gates")


def test_a_lie_in_one_inter_token_time_under_load_with_its_verdict_is_refused_by_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The verdict made to agree, the lengthened answer still outlasts what the server timed."""

    def edit(root: Path) -> None:
        _load_gap_lengthened(root, 0.3)
        _load_verdict_recomputed(root)

    document = hostile(tmp_path, capsys, edit)
    detail = failed(document, "start-1 rows under load c4")
    pair = "evidence/start-1/metrics-after.prom → evidence/start-1/load-c4/metrics-after.prom"
    assert f"{pair}: http_request_duration_seconds_bucket" in detail
    assert "one observation a row, inside the client's times" in detail


def test_a_load_row_sent_while_four_others_were_in_flight_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(root: Path) -> None:
        path = root / LOAD_ROWS
        rows = json.loads(path.read_text())
        for row in rows[:4]:
            row["sent_at_s"] = 0.0
        rows[4]["sent_at_s"] = 1e-6
        path.write_text(json.dumps(rows))

    document = hostile(tmp_path, capsys, edit)
    assert "expected at most 3 others under concurrency 4" in failed(
        document, "start-1 rows under load c4"
    )


def test_junk_bytes_in_a_teardown_record_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(root: Path) -> None:
        (root / "evidence/start-2/teardown.json").write_bytes(b"\x00\xffjunk")

    assert_refused((edit, "fresh starts", "teardown.json"), tmp_path, capsys)


def test_a_sealed_file_nothing_reads_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(root: Path) -> None:
        (root / "evidence" / "summary.json").write_text('{"status": "passed"}')

    assert_refused((edit, "content", "evidence/summary.json"), tmp_path, capsys)


# --- several nodes ------------------------------------------------------------------------------


def _rank1(role: str, change: Callable[[dict[str, Any]], None]) -> Edit:
    return _json(f"evidence/start-1/rank-1/audit/{role}.json", change)


def _rank1_copy_of_rank0(root: Path) -> None:
    start = root / "evidence" / "start-1"
    shutil.rmtree(start / "rank-1" / "audit")
    shutil.copytree(start / "audit", start / "rank-1" / "audit")


def _rank1_facts_of_rank0(document: dict[str, Any]) -> None:
    """Rank 1's node facts a copy of rank 0's, its rank and address kept."""
    rank0 = next(n for n in document["nodes"] if n["rank"] == 0)
    rank1 = next(n for n in document["nodes"] if n["rank"] == 1)
    rank1.update({k: v for k, v in rank0.items() if k not in ("rank", "address")})


def _rank_torn_down_early(root: Path) -> None:
    ready = json.loads((root / "evidence/start-1/server.json").read_text())["ready_at"]
    _json(
        "evidence/start-1/rank-1/teardown.json",
        lambda d: d.update(began_at=ready - 20, ended_at=ready - 20 + d["seconds"]),
    )(root)


def _rank_torn_down_serving(root: Path) -> None:
    """Rank 1's teardown begun a tenth of a second after rank 0 was ready: before the suite,
    which needs every rank for every token, could have been answered."""
    ready = json.loads((root / "evidence/start-1/server.json").read_text())["ready_at"]
    _json(
        "evidence/start-1/rank-1/teardown.json",
        lambda d: d.update(began_at=ready + 0.1, ended_at=ready + 0.1 + d["seconds"]),
    )(root)


def _rank1_processes(change: Callable[[dict[str, Any]], None]) -> Edit:
    """`change` made to every process rank 1's audit documents."""

    def edit(root: Path) -> None:
        for path in (root / "evidence/start-1/rank-1/audit").glob("*.json"):
            if path.name == "drifts.json":
                continue
            document = json.loads(path.read_text())
            for process in document["processes"]:
                change(process)
            path.write_text(json.dumps(document))

    return edit


def _rank1_everywhere(name: str, value: str) -> Edit:
    return _rank1_processes(lambda process: process["environ"].__setitem__(name, value))


def _one_kernel(root: Path) -> None:
    """Both nodes stating one boot id, as two nodes on one machine do."""
    _json(
        "evidence/nodes.json",
        lambda d: (
            [n.update(boot_id="0b0b0b0b-1111-2222-3333-444455556666") for n in d["nodes"]] and None
        ),
    )(root)


def _same_pid_on_one_kernel(root: Path) -> None:
    _one_kernel(root)
    pid = _pids(root, 1)["worker"]
    old = json.loads((root / "evidence/start-1/rank-1/audit/worker.json").read_text())
    before = old["processes"][0]["pid"]
    _rank1("worker", lambda d: d["processes"][0].__setitem__("pid", pid))(root)
    _json(
        "evidence/start-1/rank-1/teardown.json",
        lambda d: d.__setitem__("pids", [pid if p == before else p for p in d["pids"]]),
    )(root)


def _child_of_rank0_on_one_kernel(root: Path) -> None:
    _one_kernel(root)
    parent = _pids(root, 1)["api_server"]
    _rank1("headless", lambda d: d["processes"][0].__setitem__("ppid", parent))(root)


def _boot_id_dropped(root: Path) -> None:
    _json(
        "evidence/nodes.json",
        lambda d: next(n for n in d["nodes"] if n["rank"] == 1).__setitem__("boot_id", None),
    )(root)


def _one_kernel_other_cpus(root: Path) -> None:
    _json(
        "evidence/nodes.json",
        lambda d: next(n for n in d["nodes"] if n["rank"] == 1)["host"].__setitem__(
            "cpu_count", 64
        ),
    )(root)


def _rank1_libc_other_file(root: Path) -> None:
    def change(document: dict[str, Any]) -> None:
        for process in document["processes"]:
            for obj in process["objects"]:
                if obj["path"].endswith("/libc.so.6"):
                    obj.update(sha256="ef" * 32, file_id="fe:0/999993")

    for path in (root / "evidence/start-1/rank-1/audit").glob("*.json"):
        if path.name != "drifts.json":
            document = json.loads(path.read_text())
            change(document)
            path.write_text(json.dumps(document))


def _rank1_started_earlier(seconds: int) -> Edit:
    """Rank 1's processes, and its log, `seconds` earlier."""

    def earlier(process: dict[str, Any]) -> None:
        process["started_at"] = round(process["started_at"] - seconds, 2)

    def edit(root: Path) -> None:
        _rank1_processes(earlier)(root)
        _dated_later(1, -seconds, rank="rank-1")(root)

    return edit


def _rank1_said(old: str, new: str) -> Edit:
    return _log_said(1, old, new, rank="rank-1")


NODE_LIES: dict[str, Lie] = {
    "a node on a loopback address stating no boot id": (
        _boot_id_dropped,
        "nodes",
        "expected one for the nodes on loopback addresses",
    ),
    "rank 1 on rank 0's kernel with another CPU count": (
        _one_kernel_other_cpus,
        "nodes",
        "host cpu_count: expected rank 0's",
    ),
    "rank 1 mapping another libc at the path rank 0 maps it, on one kernel": (
        _rank1_libc_other_file,
        "fresh starts",
        "expected the files rank 0 maps at those paths on the same kernel",
    ),
    "rank 1's node facts a copy of rank 0's": (
        _json("evidence/nodes.json", _rank1_facts_of_rank0),
        "nodes",
        "one Ray node each",
    ),
    "a forbidden variable in rank 1's node environment": (
        _json(
            "evidence/nodes.json",
            lambda d: next(n for n in d["nodes"] if n["rank"] == 1)["forbidden"].update(
                LD_PRELOAD="/tmp/libevil.so"
            ),
        ),
        "nodes",
        "LD_PRELOAD=/tmp/libevil.so",
    ),
    "rank 1's audit a copy of rank 0's": (
        _rank1_copy_of_rank0,
        "live audit of start-1 rank 1",
        "role api_server",
    ),
    "a forbidden variable on rank 1": (
        _rank1(
            "worker",
            lambda d: d["processes"][0]["environ"].__setitem__("LD_PRELOAD", "/tmp/libevil.so"),
        ),
        "live audit of start-1 rank 1",
        "LD_PRELOAD=/tmp/libevil.so",
    ),
    "run.json naming the stack's own root as the repro that ran it": (
        lambda root: _json(
            "evidence/run.json",
            lambda d: d.__setitem__(
                "repro_pid", json.loads((root / "evidence/start-1/server.json").read_text())["pid"]
            ),
        )(root),
        "fresh starts",
        "found a process of its audited tree",
    ),
    "rank 1 torn down before rank 0 was ready": (
        _rank_torn_down_early,
        "fresh starts",
        "expected once rank 0's teardown began",
    ),
    "rank 1 torn down while rank 0 still served the suite": (
        _rank_torn_down_serving,
        "fresh starts",
        "expected once rank 0's teardown began",
    ),
    "rank 1 adding a code path to every process's environment": (
        _rank1_everywhere("PYTHONPATH", "/tmp/evil"),
        "live audit of start-1 rank 1",
        "PYTHONPATH: expected unset (lock nodes[rank 1].env), found '/tmp/evil'",
    ),
    "rank 1 started with another hash seed than its node's environment": (
        _rank1_everywhere("PYTHONHASHSEED", "1"),
        "live audit of start-1 rank 1",
        "PYTHONHASHSEED: expected '0' (lock nodes[rank 1].env), found '1'",
    ),
    "rank 1's worker holding a pid of rank 0's tree on the same kernel": (
        _same_pid_on_one_kernel,
        "fresh starts",
        "expected none of rank 0's tree",
    ),
    "rank 1's root a child of rank 0's tree on the same kernel": (
        _child_of_rank0_on_one_kernel,
        "fresh starts",
        "found a process of rank 0's tree",
    ),
    "rank 1's log naming another vLLM as the version it launched": (
        _bytes_replaced(
            "evidence/start-1/rank-1/server.log",
            (b"Launching vLLM (v0.32.0)", b"Launching vLLM (v0.31.0)"),
        ),
        "fresh starts",
        "evidence/start-1/rank-1/server.log: vLLM version 0.31.0: expected 0.32.0",
    ),
    "a worker dying on rank 1 while it served": (
        _while_serving(
            1,
            "(Worker_TP1 pid=26240) ERROR 12-04 17:57:00 [multiproc_executor.py:250] Worker proc "
            "VllmWorker-1 died unexpectedly, shutting down executor.",
            rank="rank-1",
        ),
        "gates",
        "server_log:start-1:rank-1: 1 crash line(s) while serving; first: line 2",
    ),
    "rank 1 joining another head node": (
        _rank1_said("head node address 127.0.0.2:29517", "head node address 10.9.9.9:29999"),
        "fresh starts",
        "rank-1/server.log:13: head node address 10.9.9.9:29999: expected 127.0.0.2:29517, the "
        "argv's --master-addr and --master-port",
    ),
    "rank 1 in a world of four": (
        _rank1_said("world_size=2 rank=1", "world_size=4 rank=3"),
        "fresh starts",
        "rank-1/server.log:28: world size 4: expected 2, the argv's tensor, pipeline and "
        "prefill-context parallel sizes multiplied",
    ),
    "rank 1 of another max model len": (
        _rank1_said("Using max model len 2048", "Using max model len 8192"),
        "fresh starts",
        "rank-1/server.log:3: Using max model len 8192: expected 2048, the argv's --max-model-len",
    ),
    "rank 1 logging arguments of another dtype": (
        _line_added(
            1,
            "Resolved architecture",
            lambda line: (
                line.split(" [", 1)[0]
                + " [api_utils.py:286] non-default args: {'dtype': 'bfloat16'}"
            ),
            rank="rank-1",
        ),
        "fresh starts",
        "rank-1/server.log:3: non-default args dtype='bfloat16': expected the argv's --dtype "
        "float32",
    ),
    "rank 1 joining the process group on another port": (
        _rank1_said(
            "distributed_init_method=tcp://127.0.0.2:29517",
            "distributed_init_method=tcp://127.0.0.2:40000",
        ),
        "fresh starts",
        "rank-1/server.log:28: distributed_init_method=tcp://127.0.0.2:40000: expected "
        "tcp://127.0.0.2:29517, the argv's --master-addr and --master-port",
    ),
    "rank 1's log read in another time zone on rank 0's kernel": (
        _dated_later(1, 3600, rank="rank-1"),
        "fresh starts",
        "rank-1/server.log: lines read in UTC+01:00 only: expected UTC+00:00, as "
        "evidence/start-1's, on the same kernel (nodes.json boot_id)",
    ),
    "rank 1 started two hours before rank 0 was spawned": (
        _rank1_started_earlier(7200),
        "fresh starts",
        f"rank-1/audit: pid {RANK_1_HEADLESS['pid']} (headless) started_at "
        f"{round(RANK_1_HEADLESS['started_at'] - 7200, 2)!r}: expected after rank 0's spawn at "
        f"{TWO_NODES_SERVER['started_at']!r}",
    ),
    "rank 1's worker logging itself tensor parallel rank 0": (
        _bytes_replaced(
            "evidence/start-1/rank-1/server.log",
            (b"Worker_TP1", b"Worker_TP0"),
            (b"TP rank 1", b"TP rank 0"),
        ),
        "fresh starts",
        f"rank-1/server.log: pid {_role_pids(TWO_NODES, 'start-1/rank-1')['worker']} assigned DP "
        "rank 0, PP rank 0, PCP rank 0, TP rank 0 of the world: expected each held by one worker, "
        f"found pid {_role_pids(TWO_NODES, 'start-1')['worker']} of evidence/start-1",
    ),
    "rank 1's teardown not proven": (
        _json(
            "evidence/start-1/rank-1/teardown.json",
            lambda d: {"proven": False, "error": None},
        ),
        "fresh starts",
        "rank-1/teardown.json: proven",
    ),
}


# --- the observations and the run record --------------------------------------------------------


def _model_file_of_other_bytes(root: Path) -> None:
    """The observed model file hashes otherwise; the lock's pin taken from the observations."""
    other = "f" * 64
    _json("evidence/observations.json", lambda d: d["models"][0]["files"][0].update(sha256=other))(
        root
    )
    name = json.loads((root / "evidence/observations.json").read_text())["models"][0]["files"][0]
    _json("lock.json", lambda d: d["models"][0]["files"].__setitem__(name["name"], other))(root)


def _record_mismatch(root: Path) -> None:
    """A RECORD mismatch observed; the lock's list of checked distributions taken from it."""
    mismatch = {"path": "{site}/torch/__init__.py", "recorded": "sha256=x", "observed": "sha256=y"}

    def observe(document: dict[str, Any]) -> None:
        record = next(r for r in document["python"]["records"] if r["distribution"] == "torch")
        record["mismatches"] = [mismatch]

    _json("evidence/observations.json", observe)(root)
    _json(
        "lock.json",
        lambda d: d["python"].__setitem__(
            "record_checked", [n for n in d["python"]["record_checked"] if n != "torch"]
        ),
    )(root)


def _record_dropped(root: Path) -> None:
    """The RECORD check of one distribution left out; the lock's list taken from it."""
    _json(
        "evidence/observations.json",
        lambda d: d["python"].__setitem__(
            "records", [r for r in d["python"]["records"] if r["distribution"] != "torch"]
        ),
    )(root)
    _json(
        "lock.json",
        lambda d: d["python"].__setitem__(
            "record_checked", [n for n in d["python"]["record_checked"] if n != "torch"]
        ),
    )(root)


OBSERVATION_LIES: dict[str, Lie] = {
    "every RECORD checked with no file of it": (
        _json(
            "evidence/observations.json",
            lambda d: [r.__setitem__("files", 0) for r in d["python"]["records"]] and None,
        ),
        "observations.json judged again",
        "no check of its files recorded",
    ),
    "a model file of other bytes than the manifest pins": (
        _model_file_of_other_bytes,
        "observations.json judged again",
        "model-file",
    ),
    "a RECORD mismatch observed": (
        _record_mismatch,
        "observations.json judged again",
        "torch/__init__.py",
    ),
    "a distribution whose RECORD was never checked": (
        _record_dropped,
        "observations.json judged again",
        "no check of its files recorded",
    ),
    "an interpreter of another release than its venv": (
        _json(
            "evidence/observations.json",
            lambda d: d["python"].__setitem__("version", "3.12.7"),
        ),
        "observations.json judged again",
        "python.configured_version",
    ),
    "a site directory of another venv": (
        _json(
            "evidence/observations.json",
            lambda d: d["values"].__setitem__("site", "/tmp/site-packages"),
        ),
        "observations.json judged again",
        "values.site",
    ),
    "a wheel pinned at another version than installed": (
        _json(
            "evidence/observations.json",
            lambda d: d["artifacts"]["pinned"]["torch"].__setitem__("version", "2.0.0"),
        ),
        "observations.json judged again",
        "artifacts.pinned.torch",
    ),
    "a wheel file of another distribution": (
        _json(
            "evidence/observations.json",
            lambda d: d["artifacts"]["pinned"]["torch"].__setitem__(
                "filename", "evil-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"
            ),
        ),
        "observations.json judged again",
        "artifacts.pinned.torch",
    ),
    "a host of fewer CPUs than vLLM bound its threads to": (
        _json("evidence/observations.json", lambda d: d["host"].__setitem__("cpu_count", 1)),
        "fresh starts",
        "start-1/server.log: vLLM's automatic CPU binding names 2 CPUs (0, 1): expected at most 1",
    ),
    "a host of less memory than vLLM found on its NUMA node": (
        _json(
            "evidence/observations.json",
            lambda d: d["host"].__setitem__("memory_bytes", 8 << 30),
        ),
        "fresh starts",
        "GiB: expected at most 8.00 GiB, the host's memory_bytes",
    ),
    "run.json of another suite": (
        _json("evidence/run.json", lambda d: d.__setitem__("suite", "other-v1")),
        "lock = the sealed manifest",
        "run.json bundle, suite, fresh_starts",
    ),
    "run.json on another port than the server": (
        _json("evidence/run.json", lambda d: d.__setitem__("port", d["port"] + 1)),
        "lock = the sealed manifest",
        "run.json",
    ),
    "run.json naming another repro than the server's parent": (
        _json("evidence/run.json", lambda d: d.__setitem__("repro_pid", d["repro_pid"] + 1)),
        "fresh starts",
        "run.json repro_pid",
    ),
}


# --- the tables of lies, each told in a sealed copy ---------------------------------------------

LIE_TABLES: dict[str, tuple[dict[str, Lie], Path]] = {
    # every start is judged whole and apart
    "start": (START_LIES, TINY),
    # every node is judged again
    "node": (NODE_LIES, TWO_NODES),
    # the observations and the run record are judged again
    "observation": (OBSERVATION_LIES, TINY),
}


@pytest.mark.parametrize(
    ("lie", "source"),
    [
        pytest.param(lies[name], source, id=f"{table}: {name}")
        for table, (lies, source) in LIE_TABLES.items()
        for name in sorted(lies)
    ],
)
def test_a_lie_told_in_a_sealed_copy_is_refused_by_the_claim_it_contradicts(
    lie: Lie, source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_refused(lie, tmp_path, capsys, source)


def _stated_twice(path: str, honest: str, hostile_first: str) -> Edit:
    """`honest` (a line of the sealed file) preceded by `hostile_first`, the same key again."""

    def edit(root: Path) -> None:
        file = root / path
        text = file.read_text()
        assert text.count(honest) == 1, honest
        file.write_text(text.replace(honest, f"{hostile_first}\n{honest}"))

    return edit


@pytest.mark.parametrize(
    ("path", "honest", "hostile_first", "key"),
    [
        (
            "evidence/start-1/audit/api_server.json",
            '  "passed": true,',
            '  "passed": false,',
            "passed",
        ),
        (
            "evidence/start-1/audit/api_server.json",
            '        "HOME": "/tmp/sealrun/start-1/home",',
            '        "LD_PRELOAD": "/tmp/evil.so", "HOME": "/x",',
            "HOME",
        ),
    ],
)
def test_a_sealed_json_key_stated_twice_is_refused_whatever_its_last_value(
    path: str,
    honest: str,
    hostile_first: str,
    key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The model keeps the last value, another reader (or a person) the first: neither is the
    document's, which is refused naming the key."""
    copy = sealed_again(tmp_path, TINY, _stated_twice(path, honest, hostile_first))
    code, document = verify_json(copy, capsys)
    assert code != 0
    shown = json.dumps(document)
    assert f"duplicate key {key!r}" in shown, shown[:2000]
