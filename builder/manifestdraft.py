"""A starting manifest drafted from a running server's facts, for `repro init`: pure.

`draft` turns the facts `builder.observe.server` gathered into the document of a manifest
(`repro.manifest/v1`) and, unless an existing suite is named, a starting oracle suite; `render`
writes the manifest as TOML behind a header of comments saying where it came from, what was left
out and what its reviewer must check before `repro build` seals it. Nothing here reads the host.

The rules, each for a reason:

- `launch.argv` is the server's argv with its interpreter as `{python}`, each model argument as
  `{model.<role>}` (inside a `--speculative-config` JSON object too), the port as `{port}`, any
  other absolute path under the venv or a model in placeholder form, and every literal brace
  doubled. Added where missing, and said so: `--port {port}` (the manifest's port must be the
  one served on), `--enable-prompt-tokens-details` (the cached_tokens gate reads what it
  reports), `--served-model-name` with the repository id a hub model was given by (the model is
  now given by its directory, which would otherwise name it).
- `launch.env` keeps the variables that shape serving: vLLM's, accelerator device selection
  (CUDA, ROCm, oneAPI/Level Zero, NCCL), threading (OMP, KMP, GOMP), the kernel dispatch
  overrides (ATen, oneDNN, MKL), PyTorch's, PYTHONHASHSEED, the hub's offline flags, the
  locale, DO_NOT_TRACK, and the search paths LD_LIBRARY_PATH and PYTHONPATH (each pointed out
  to the reviewer). A variable named like a secret (TOKEN, KEY, SECRET, PASSWORD, ...) is
  never kept, whatever its prefix; PATH, HOME and TMPDIR are each start's own
  (`documents.rundir.RUN_PRIVATE_ENV`); LD_PRELOAD and LD_AUDIT are never launched with (the
  preloads the stack sets for its own children go to `native.preload`). What is left out is
  listed by name with its reason, never with its value.
- A local model directory of repro's own generator is named as the generator names it; any
  other is `local/<directory>` at the git tree id of its files, for the reviewer to correct.
- Paths (`python.venv`, `model.path`, `model.hf_cache`) are relative to the manifest's
  directory when they lie under it, absolute otherwise.
- `native.modules` are the extension modules the live tree maps from the serving packages
  (the distributions that install vLLM and torch, and any distribution named vllm-*), each
  named as the manifest names a dispatched module (`vllm._C` for whichever `vllm._C_AVX2` the
  CPU selected); `native.kernel_sets` the platform sets whose driver libraries the tree maps,
  else the driverless ones (cpu); `native.allowed_roots` the venv, the interpreter's base and
  the loader's system directories that hold a mapped file; `native.preload` what the stack
  preloaded into its children.
- `[python.packages]` pins, at the versions installed, the distributions of vllm, torch,
  transformers and tokenizers (what serves, computes and tokenizes) and of each native module.
- The oracle gates are the strict ones of the embedded default: exact token ids and text,
  no cached prompt token, no prefix-cache hit, two fresh starts reproducing the tokens; and a
  throughput floor of a quarter of the sealed rate, which catches a regression of another
  order (a debug build, a fallback kernel), not run-to-run noise.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import tomli_w

from repro_serving.builder.documents.manifest import (
    ALWAYS_FORBIDDEN_ENV,
    SCHEMA_ID,
    Suite,
    expand,
    placeholder_path,
)
from repro_serving.builder.documents.python import normalize
from repro_serving.builder.documents.rundir import RUN_PRIVATE_ENV
from repro_serving.builder.drift import Drift
from repro_serving.builder.native.dispatch import DispatchKind
from repro_serving.builder.native.kernels import KernelSet
from repro_serving.builder.observe.server import FoundModel, MappedElf, ServerFacts
from repro_serving.builder.placeholders import venv_values
from repro_serving.builder.vllmlog import (
    ModelArgument,
    extension_module,
    flag_name,
    flag_value,
)

SERVING_PACKAGES: Final = ("vllm", "torch", "transformers", "tokenizers")
"""Top-level packages whose distributions are pinned: what serves, computes and tokenizes."""
NATIVE_PACKAGES: Final = ("vllm", "torch")
"""Top-level packages whose mapped extension modules are declared."""
SECRET_NAME: Final = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
SERVING_ENV: Final = re.compile(
    r"^((VLLM|CUDA|NVIDIA|NCCL|HIP|ROCR|ROCM|HSA|ZE|ONEAPI|SYCL|CCL|OMP|KMP|GOMP|MKL|ONEDNN|DNNL"
    r"|ATEN|PYTORCH|TORCH|TORCHINDUCTOR)_[A-Za-z0-9_]+|LC_[A-Z]+|PYTHONHASHSEED|HF_HUB_OFFLINE"
    r"|TRANSFORMERS_OFFLINE|HF_DATASETS_OFFLINE|LANG|LANGUAGE|DO_NOT_TRACK"
    r"|LD_LIBRARY_PATH|PYTHONPATH)$"
)
SEARCH_PATHS: Final = ("LD_LIBRARY_PATH", "PYTHONPATH")
"""Kept, and pointed out: each directory they name is searched before the venv's own."""
PROMPT_DETAILS_FLAG: Final = "--enable-prompt-tokens-details"
NO_PREFIX_CACHING_FLAG: Final = "--no-enable-prefix-caching"
TEACHER: Final = "teacher"
START_TIMEOUT_S: Final = 600
STOP_TIMEOUT_S: Final = 30
SUITE_MAX_TOKENS: Final = 32
THROUGHPUT_FLOOR: Final = 0.25
HOST_RECORDED: Final = ("os_release", "kernel", "cpu_model", "cpu_count", "memory")
STARTING_PROMPTS: Final = (
    ("greeting", "Hello! Who are you?"),
    ("arithmetic", "What is 17 times 23?"),
    ("list", "Name three colours of the rainbow."),
    ("code", "Write a Python function that reverses a string."),
    ("unicode", "Traduis en français : « the cat sleeps »."),
)
_NAME_CHARACTERS: Final = re.compile(r"[^A-Za-z0-9._-]+")
_COMMENT_WIDTH: Final = 98


@dataclass(frozen=True)
class DraftOptions:
    manifest_dir: str
    """The absolute directory the manifest is written to: relative paths resolve against it."""
    suite_path: str
    """The oracle suite, relative to the manifest's directory (or absolute)."""
    existing_suite: Suite | None = None
    """The suite at `suite_path` when one is named instead of written."""
    name: str | None = None
    """The bundle's name; derived from the served model when None."""


@dataclass(frozen=True)
class LeftOut:
    """A variable of the server's environment that the launch does not set, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class Draft:
    manifest: dict[str, Any]
    """The manifest document, as `tomli_w` writes it."""
    suite: dict[str, Any] | None
    """The starting suite to write at `suite_path`; None when an existing one is named."""
    suite_path: str
    kept_env: tuple[str, ...]
    left_out: tuple[LeftOut, ...]
    added: tuple[str, ...]
    """What the launch argv has that the server's had not, with why."""
    review: tuple[str, ...]
    """What the reviewer must check, one point each."""


# --- the whole draft ----------------------------------------------------------------------------


def draft(facts: ServerFacts, options: DraftOptions) -> Draft:
    """The manifest (and starting suite) `facts` describe, written to `options.manifest_dir`."""
    values = placeholder_values(facts)
    argv, added = launch_argv(facts, values)
    env, left_out = launch_env(facts.start.environ, values)
    sets = platform_sets(facts.kernel_sets, facts.mapped)
    modules = native_modules(facts, sets)
    pins = pinned_packages(facts, tuple(modules.values()))
    name = options.name or bundle_name(facts)
    existing = options.existing_suite
    suite = None if existing is not None else starting_suite(name, facts)
    max_tokens = SUITE_MAX_TOKENS if existing is None else existing.max_tokens
    document: dict[str, Any] = {
        "schema": SCHEMA_ID,
        "bundle": {
            "name": name,
            "description": description(facts, pins),
            "evidence": "live",
        },
        "host": host_section(facts),
        "python": python_section(facts, pins, options.manifest_dir),
        "model": [model_section(m, options.manifest_dir) for m in facts.models],
        "native": {
            "modules": list(modules),
            "kernel_sets": [kernel_set.name for kernel_set in sets],
            "allowed_roots": list(allowed_roots(facts)),
            "preload": list(preloads(facts.child_preloads, values)),
        },
        "launch": launch_section(facts, argv, env),
        "oracle": oracle_section(options.suite_path, max_tokens),
    }
    if not document["native"]["preload"]:
        del document["native"]["preload"]
    review = review_points(
        facts, options, pins=pins, values=values, env=env, suite_written=suite is not None
    )
    return Draft(
        manifest=document,
        suite=suite,
        suite_path=options.suite_path,
        kept_env=tuple(env),
        left_out=left_out,
        added=added,
        review=tuple(review),
    )


def placeholder_values(facts: ServerFacts) -> dict[str, str]:
    """The path placeholders of the draft: the venv's, and each model's directory."""
    values = venv_values(facts.venv)
    for model in facts.models:
        values[f"model.{model.role}"] = model.directory
    return values


def escaped(text: str) -> str:
    """`text` as a literal template: every brace doubled."""
    return text.replace("{", "{{").replace("}", "}}")


def template(text: str, values: Mapping[str, str]) -> str:
    """`text` as a template: an absolute path under a placeholder's value in placeholder form
    (only where it expands back to exactly `text`: `/a/b/` stays literal, since the form would
    drop its slash), anything else literal."""
    if text.startswith("/"):
        form = placeholder_path(text, values)
        if form.startswith("{") and expand(form, values) == text:
            return form
    return escaped(text)


# --- [launch] -----------------------------------------------------------------------------------


def launch_argv(facts: ServerFacts, values: Mapping[str, str]) -> tuple[list[str], tuple[str, ...]]:
    """The server's argv as a template, and what was added to it, with why."""
    argv = list(facts.start.argv)
    roles = _argument_roles(facts.arguments)
    model_at = {argument.index: argument for argument in facts.arguments}
    port_at = _port_values(argv, facts.entry.arguments)
    result = ["{python}"]
    for index in range(1, len(argv)):
        if index in model_at:
            result.append(_model_template(argv[index], model_at[index], roles))
        elif index in port_at:
            result.append("--port={port}" if port_at[index] else "{port}")
        else:
            result.append(template(argv[index], values))
    added: list[str] = []
    flags = {flag_name(argument) for argument in argv[facts.entry.arguments :]}
    if not port_at:
        result += ["--port", "{port}"]
        added.append(
            f"--port {{port}}: the server gave no --port (vLLM's default), it served on "
            f"{facts.port}; every start listens on launch.port"
        )
    if PROMPT_DETAILS_FLAG not in flags:
        result.append(PROMPT_DETAILS_FLAG)
        added.append(
            f"{PROMPT_DETAILS_FLAG}: the cached_tokens_zero gate reads the cached tokens it "
            "reports; it changes no token"
        )
    target = next((a for a in facts.arguments if a.role == "target"), None)
    hub = next((m for m in facts.models if m.role == "target" and m.layout == "hf-cache"), None)
    repo = hub.repo if hub is not None else None
    if "--served-model-name" not in flags and target is not None and target.value == repo:
        result += ["--served-model-name", escaped(repo)]
        added.append(
            f"--served-model-name {repo}: the model is now given by its snapshot "
            "directory, which would otherwise be its served name"
        )
    return result, tuple(added)


def _argument_roles(arguments: Sequence[ModelArgument]) -> dict[int, str]:
    """Each model argument's placeholder role: the role of the first argument with its value
    (a `--tokenizer` naming the model's own directory is `{model.target}`)."""
    first: dict[str, str] = {}
    for argument in arguments:
        first.setdefault(argument.value, argument.role)
    return {argument.index: first[argument.value] for argument in arguments}


def _port_values(argv: Sequence[str], start: int) -> dict[int, bool]:
    """The index of each `--port` value in the server's arguments, and whether it is inline."""
    found: dict[int, bool] = {}
    for index in range(start, len(argv)):
        if flag_name(argv[index]) == "--port":
            given = flag_value(argv, index)
            if given is not None:
                found[given[0]] = given[2]
    return found


def _model_template(element: str, argument: ModelArgument, roles: Mapping[int, str]) -> str:
    placeholder = "{model." + roles[argument.index] + "}"
    prefix = element.partition("=")[0] + "=" if argument.inline else ""
    if not argument.in_json:
        return prefix + placeholder
    text = element.partition("=")[2] if argument.inline else element
    return prefix + json_with_model(text, placeholder)


def json_with_model(text: str, placeholder: str) -> str:
    """A JSON object's text as a template whose `model` is `placeholder`, every other brace
    doubled."""
    document = json.loads(text)
    marker = "\x00model\x00"
    rendered = escaped(json.dumps({**document, "model": marker}, ensure_ascii=False))
    return rendered.replace(json.dumps(marker), json.dumps(placeholder))


def launch_env(
    environ: Mapping[str, str], values: Mapping[str, str]
) -> tuple[dict[str, str], tuple[LeftOut, ...]]:
    """The variables of the server's environment a launch sets (as templates), and the ones it
    leaves out, by name, with why."""
    kept: dict[str, str] = {}
    left_out: list[LeftOut] = []
    for name in sorted(environ):
        reason = _left_out_because(name)
        if reason is None:
            kept[name] = template(environ[name], values)
        else:
            left_out.append(LeftOut(name, reason))
    return kept, tuple(left_out)


def _left_out_because(name: str) -> str | None:
    if SECRET_NAME.search(name):
        return "named like a secret: never written"
    if name in ALWAYS_FORBIDDEN_ENV:
        return (
            "no start is launched with it (native.preload allows what the stack preloads into "
            "its own children)"
        )
    if name in RUN_PRIVATE_ENV:
        return "each start sets its own"
    if not SERVING_ENV.match(name):
        return "does not shape serving"
    return None


def launch_section(facts: ServerFacts, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    flags = {flag_name(argument) for argument in facts.start.argv[facts.entry.arguments :]}
    teacher = [] if NO_PREFIX_CACHING_FLAG in flags else [NO_PREFIX_CACHING_FLAG]
    section: dict[str, Any] = {
        "argv": argv,
        "port": facts.port,
        "start_timeout_s": START_TIMEOUT_S,
        "stop_timeout_s": STOP_TIMEOUT_S,
        "env": env,
        "readiness": {"path": "/health", "timeout_s": 2},
        "processes": dict(facts.roles),
        "profiles": {TEACHER: {"argv": teacher} if teacher else {}, "candidate": {}},
    }
    if not env:
        del section["env"]
    return section


# --- [[model]], [python], [host], [bundle] ------------------------------------------------------


def placed(path: str, manifest_dir: str) -> str:
    """`path` relative to the manifest's directory when it lies under it, else absolute."""
    root = posixpath.normpath(manifest_dir)
    normal = posixpath.normpath(path)
    if normal == root or normal.startswith(root.rstrip("/") + "/"):
        return posixpath.relpath(normal, root)
    return normal


def model_section(model: FoundModel, manifest_dir: str) -> dict[str, Any]:
    section: dict[str, Any] = {
        "role": model.role,
        "repo": model.repo or local_repo(model.directory),
        "revision": model.revision,
    }
    if model.hf_cache is not None:
        section["hf_cache"] = placed(model.hf_cache, manifest_dir)
    else:
        section["path"] = placed(model.directory, manifest_dir)
    if model.generator is not None:
        section["generator"] = model.generator
    section["files"] = dict(sorted(model.files.items()))
    return section


def local_repo(directory: str) -> str:
    """A repository id for a local model of unknown origin: `local/<directory name>`."""
    return f"local/{_name(posixpath.basename(posixpath.normpath(directory)), 'model')}"


def _name(text: str, fallback: str) -> str:
    """`text` as a manifest name: letters, digits, '.', '_' and '-', starting with a letter or
    a digit, at most 128 characters."""
    cleaned = _NAME_CHARACTERS.sub("-", text).lstrip("._-")[:128].rstrip("._-")
    return cleaned or fallback


def pinned_packages(facts: ServerFacts, module_owners: Sequence[str]) -> dict[str, str]:
    """Normalized distribution name to its installed version, for the serving packages and the
    owners of the declared native modules, in that order."""
    versions = {normalize(d.name): d.version for d in facts.distributions}
    names = [
        normalize(owner)
        for package in SERVING_PACKAGES
        for owner in facts.package_owners.get(package, ())
    ]
    names += [normalize(owner) for owner in module_owners]
    return {name: versions[name] for name in dict.fromkeys(names) if name in versions}


def python_section(
    facts: ServerFacts, pins: Mapping[str, str], manifest_dir: str
) -> dict[str, Any]:
    return {
        "interpreter": facts.venv.version,
        "venv": placed(str(facts.venv.root), manifest_dir),
        "check_record": True,
        "packages": {name: f"=={version}" for name, version in pins.items()},
    }


def host_section(facts: ServerFacts) -> dict[str, Any]:
    recorded = list(HOST_RECORDED)
    if facts.host.accelerators:
        recorded += ["accelerators", "drivers"]
    return {"arch": facts.host.arch, "os": facts.host.os, "record": recorded}


def bundle_name(facts: ServerFacts) -> str:
    """The served model name, else the target's repository or directory name."""
    argv = facts.start.argv[facts.entry.arguments :]
    for index, argument in enumerate(argv):
        if flag_name(argument) == "--served-model-name":
            given = flag_value(argv, index)
            if given is not None and not given[1].startswith("-"):
                return _name(given[1].lower(), "served-model")
    target = next(m for m in facts.models if m.role == "target")
    base = target.repo.split("/")[-1] if target.repo else posixpath.basename(target.directory)
    return _name(base.lower(), "served-model")


def description(facts: ServerFacts, pins: Mapping[str, str]) -> str:
    target = next(m for m in facts.models if m.role == "target")
    what = target.repo or local_repo(target.directory)
    stack = ", ".join(f"{name} {version}" for name, version in pins.items())
    return f"{what} served by vLLM ({stack})"


# --- [native] -----------------------------------------------------------------------------------


def platform_sets(
    kernel_sets: Sequence[KernelSet], mapped: Sequence[MappedElf]
) -> tuple[KernelSet, ...]:
    """The platform sets whose driver libraries some process maps; none mapped: the platform
    sets without driver libraries (cpu). A set that pins a stack's own binaries is not a
    platform set and is never chosen: it names that stack's source trees."""
    platforms = [s for s in kernel_sets if s.platform.model_dump(exclude_defaults=True)]
    names = {posixpath.basename(elf.path) for elf in mapped}
    with_drivers = [
        kernel_set
        for kernel_set in platforms
        if kernel_set.platform.driver_libraries
        and any(_matches(name, kernel_set.platform.driver_libraries) for name in names)
    ]
    if with_drivers:
        return tuple(with_drivers)
    return tuple(s for s in platforms if not s.platform.driver_libraries)


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _extension_modules(facts: ServerFacts) -> dict[str, str]:
    """Each mapped extension module of site-packages, by its path there, to its module name."""
    site = facts.real_values["site"].rstrip("/") + "/"
    found: dict[str, str] = {}
    for elf in facts.mapped:
        if elf.path.startswith(site):
            relative = elf.path[len(site) :]
            module = extension_module(relative)
            if module is not None:
                found[relative] = module
    return found


def _native_owners(facts: ServerFacts) -> tuple[str, ...]:
    """The distributions whose extension modules are declared: those of `NATIVE_PACKAGES` and
    every distribution named vllm-* (kernel packages of vLLM)."""
    owners = [o for package in NATIVE_PACKAGES for o in facts.package_owners.get(package, ())]
    owners += sorted({d.name for d in facts.distributions if normalize(d.name).startswith("vllm-")})
    return tuple(dict.fromkeys(normalize(owner) for owner in owners))


def native_modules(facts: ServerFacts, sets: Sequence[KernelSet]) -> dict[str, str]:
    """The extension modules of the serving packages the tree maps, each under the name a
    platform set's dispatch chooses it by, to the distribution that installs it; in the order of
    their distributions, then by name."""
    chosen_by = {
        variant: dispatch.name
        for kernel_set in sets
        for dispatch in kernel_set.dispatch
        if dispatch.kind is DispatchKind.MODULE
        for variant in dispatch.names()
    }
    owners = _native_owners(facts)
    ranked: list[tuple[int, str, str]] = []
    for relative, module in _extension_modules(facts).items():
        owner = facts.file_owners.get(relative)
        if owner is not None and normalize(owner) in owners:
            rank = owners.index(normalize(owner))
            ranked.append((rank, chosen_by.get(module, module), normalize(owner)))
    found: dict[str, str] = {}
    for _rank, module, owner in sorted(ranked):
        found.setdefault(module, owner)
    return found


def allowed_roots(facts: ServerFacts) -> tuple[str, ...]:
    """The roots the audit observed, as a manifest names them: the venv and the interpreter's
    base by placeholder, any other environment of the tree as it is, and of the loader's system
    directories those that hold a mapped file not already under another root."""
    by_real = {real.rstrip("/"): name for name, real in facts.real_values.items()}
    system = {d.rstrip("/") for d in facts.system_dirs}
    environments = [root.rstrip("/") for root in facts.roots if root.rstrip("/") not in system]
    named = ["{" + by_real[root] + "}" if root in by_real else root for root in environments]
    used: list[str] = []
    for elf in facts.mapped:
        if any(_under(elf.path, root) for root in environments):
            continue
        holders = [d for d in system if _under(elf.path, d)]
        if holders:
            used.append(max(holders, key=len))
    placeholders = [root for root in named if root.startswith("{")]
    others = [root for root in named if not root.startswith("{")]
    return tuple(dict.fromkeys([*placeholders, *others, *sorted(set(used))]))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def preloads(entries: Sequence[str], values: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(template(entry, values) for entry in entries))


# --- [oracle] and the starting suite -------------------------------------------------------------


def oracle_section(suite_path: str, max_tokens: int) -> dict[str, Any]:
    gates: dict[str, Any] = {
        "exact_token_ids": True,
        "text_sha256": True,
        "cached_tokens_zero": True,
        "prefix_cache_hit_delta_zero": True,
        "fresh_starts": 2,
    }
    tokens = min(SUITE_MAX_TOKENS, max_tokens)
    if tokens >= 2:
        gates["throughput"] = {
            "tokens": tokens,
            "convention": "conventional",
            "floor": THROUGHPUT_FLOOR,
        }
    return {"suite": suite_path, "teacher": TEACHER, "gates": gates}


def starting_suite(name: str, facts: ServerFacts) -> dict[str, Any]:
    """A few short prompts, greedy: the chat API when the target has a chat template (in its
    tokenizer config or given with --chat-template), else the completion API."""
    flags = {flag_name(argument) for argument in facts.start.argv[facts.entry.arguments :]}
    target = next(m for m in facts.models if m.role == "target")
    chat = target.chat_template or "--chat-template" in flags
    prompts = [
        {"id": key, "messages": [{"role": "user", "content": text}]}
        if chat
        else {"id": key, "prompt": text}
        for key, text in STARTING_PROMPTS
    ]
    return {
        "name": f"{name}-v1",
        "api": "chat" if chat else "completion",
        "max_tokens": SUITE_MAX_TOKENS,
        "seed": 0,
        "temperature": 0.0,
        "prompts": prompts,
    }


# --- what the reviewer must check -----------------------------------------------------------------


def review_points(
    facts: ServerFacts,
    options: DraftOptions,
    *,
    pins: Mapping[str, str],
    values: Mapping[str, str],
    env: Mapping[str, str],
    suite_written: bool,
) -> list[str]:
    points = [
        "[bundle] name and description: what the record is called and what it claims.",
    ]
    if suite_written:
        points.append(
            f"oracle.suite {options.suite_path} was written with {len(STARTING_PROMPTS)} "
            "generic prompts: replace them with the prompts this record is about."
        )
    else:
        points.append(f"oracle.suite {options.suite_path} is the suite named with --suite.")
    points.append(
        f"[oracle.gates]: strict exactness and {THROUGHPUT_FLOOR} x the sealed rate as the "
        "throughput floor (a fraction of at most 1 of the rate the build measures); to hold "
        "a replay to the rate this record claims, add throughput.floor_tok_s (tok/s), "
        "throughput.prompt_floor (a fraction every prompt must reach), [oracle.gates.stall] "
        "and [oracle.gates.latency] (p99 bounds in ms)."
    )
    for model in facts.models:
        points += _model_points(model)
    argv = facts.start.argv[facts.entry.arguments :]
    if any(flag_name(a) == "--speculative-config" for a in argv) or any(
        m.role == "draft" for m in facts.models
    ):
        points.append(
            "the server decodes speculatively: add [oracle.gates.spec_decode] with the "
            "acceptance this record claims."
        )
    for distribution in facts.distributions:
        if distribution.editable is not None and normalize(distribution.name) in pins:
            points.append(
                f"{distribution.name} is installed editable from {distribution.editable}: "
                "declare that tree as a [[source]] and name it in the package's `source`."
            )
    if "LD_PRELOAD" in facts.start.environ:
        points.append(
            f"the server itself was started with LD_PRELOAD={facts.start.environ['LD_PRELOAD']}: "
            "no start is launched with it, and a library it preloads is drift in every audit; "
            "serve without it."
        )
    for name in SEARCH_PATHS:
        if name in env:
            points.append(
                f"launch.env {name} = {env[name]!r}: each directory is searched before the "
                "venv's own; keep only what this stack needs."
            )
    relative = [a for a in argv if a.startswith(("./", "../"))]
    if relative:
        points.append(
            "launch.argv has relative paths, which each start resolves in a fresh working "
            "directory: " + ", ".join(relative)
        )
    outside = [a for a in argv if a.startswith("/") and not template(a, values).startswith("{")]
    if outside:
        points.append(
            "launch.argv names absolute paths outside the venv and the models, which another "
            "host may not have: " + ", ".join(outside)
        )
    if "other" in facts.roles:
        points.append(
            f"launch.processes counts {facts.roles['other']} process(es) of no known role "
            "('other'): check what they are."
        )
    if facts.unreadable:
        points.append(
            "processes of the tree could not be read, so their roles and mappings are missing: "
            + "; ".join(facts.unreadable)
        )
    points.append("launch.start_timeout_s is a generous 600 s: lower it to what this stack needs.")
    return points


def _model_points(model: FoundModel) -> list[str]:
    if model.generator is not None:
        return [
            f"model {model.role}: the directory is repro's {model.generator} model, byte for "
            "byte; `repro restore` regenerates it."
        ]
    if model.layout == "hf-cache":
        return [
            f"model {model.role} {model.repo}: snapshot {model.revision} of the hub cache; its "
            f"{len(model.files)} files are all pinned: drop any the release does not include."
        ]
    return [
        f"model {model.role}: repo {local_repo(model.directory)!r} is a made-up name (a local "
        "directory of unknown origin): write the repository it was released as, and as revision "
        "its commit there (now the git tree id of the directory's files)."
    ]


# --- the file ---------------------------------------------------------------------------------


def render(draft_: Draft, facts: ServerFacts, drifts: Sequence[Drift] = ()) -> str:
    """The manifest's TOML behind its header of comments."""
    return header(draft_, facts, drifts) + "\n" + tomli_w.dumps(draft_.manifest, indent=2)


def header(draft_: Draft, facts: ServerFacts, drifts: Sequence[Drift]) -> str:
    roles = ", ".join(f"{role} {count}" for role, count in facts.roles.items())
    lines = [
        f"Drafted by `repro init` from the vLLM server on port {facts.port} (pid "
        f"{facts.start.pid}, {facts.entry.words}; processes: {roles}).",
        "A starting point, not a record: review it, then `repro check` it and `repro build` "
        "it to seal a bundle.",
        "",
        "The reviewer must check:",
        *(f"- {point}" for point in draft_.review),
    ]
    if draft_.added:
        lines += ["", "Added to the server's argv:", *(f"- {item}" for item in draft_.added)]
    if drifts:
        lines += [
            "",
            "The live tree audited under this manifest shows drift; resolve each before a build:",
            *(
                f"- {d.kind.value} {d.subject}: expected {d.expected}; observed {d.observed}"
                for d in drifts
            ),
        ]
    lines += ["", "Left out of [launch.env] (names only, never values):"]
    reasons: dict[str, list[str]] = {}
    for item in draft_.left_out:
        reasons.setdefault(item.reason, []).append(item.name)
    lines += [f"- {', '.join(names)}: {reason}" for reason, names in reasons.items()]
    return "".join(_comment(line) for line in lines)


def _comment(line: str) -> str:
    if not line:
        return "#\n"
    indent = "  " if line.startswith("- ") else ""
    wrapped = textwrap.wrap(
        line,
        width=_COMMENT_WIDTH,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return "".join(f"# {part}\n" for part in wrapped)


def suite_text(suite: Mapping[str, Any]) -> str:
    return json.dumps(suite, indent=2, ensure_ascii=False) + "\n"
