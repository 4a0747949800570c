"""What a vLLM server's argv and environment say, read as vLLM and huggingface_hub read them.

Pure, over strings: whether an argv starts vLLM's OpenAI server
(`python -m vllm.entrypoints.openai.api_server`, `vllm serve MODEL`,
`python -m vllm.entrypoints.cli.main serve MODEL`) and where its own arguments begin; which of
them name a model (`--model` or the positional of `serve`, `--tokenizer`, `--speculative-model`,
the `model` of a `--speculative-config` JSON object) and at which revision; options as vLLM's
parser reads them (`--max_model_len` is `--max-model-len`); the hub cache a repository id is
looked up in, from the process's environment; a hub snapshot directory's repository and
revision; a `/proc/<pid>/environ` block; an extension module's name from its file; what a
server's log says of it (the arguments it was started with, the vLLM versions it names). The
observer (`builder.observe.server`) and the drafting (`builder.manifestdraft`) read an argv
through these alone, so that the two can never read it differently.
"""

from __future__ import annotations

import ast
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from repro_serving.builder.manifest import ModelRole, flag_values

API_SERVER_MODULE: Final = "vllm.entrypoints.openai.api_server"
CLI_MODULE: Final = "vllm.entrypoints.cli.main"
EXPECTED_SERVER: Final = (
    f"a vLLM OpenAI server: python -m {API_SERVER_MODULE} ..., vllm serve MODEL ..., "
    f"or python -m {CLI_MODULE} serve MODEL ..."
)
REPO_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_INTERPRETER_OPTIONS_WITH_VALUE: Final = frozenset("WX")
_EXTENSION_MODULE: Final = re.compile(
    r"^(?P<stem>[A-Za-z_][A-Za-z0-9_]*)"
    r"(?P<tag>\.(?:cpython-[0-9]+[a-z]*|pypy[0-9]+-pp[0-9]+)(?:-[A-Za-z0-9_]+){2,3}|\.abi3)?\.so$"
)
"""An extension module's file name (`builder.native.modules` reads the same suffixes)."""


@dataclass(frozen=True)
class Entry:
    """How an argv starts vLLM's OpenAI server."""

    words: str
    """The entry point in words, e.g. `python -m vllm.entrypoints.openai.api_server`."""
    arguments: int
    """The index of the server's first own argument."""
    positional_model: bool
    """`serve` takes the model as its first positional argument."""


def vllm_entry(argv: Sequence[str]) -> Entry | None:
    """How `argv` (an interpreter's, as `/proc` shows a Python program) starts vLLM's OpenAI
    server; None when it starts something else."""
    target = _interpreter_target(argv)
    if target is None:
        return None
    kind, name, after = target
    serve = after < len(argv) and argv[after] == "serve"
    if kind == "module" and name == API_SERVER_MODULE:
        return Entry(f"python -m {name}", after, positional_model=False)
    if kind == "module" and name == CLI_MODULE and serve:
        return Entry(f"python -m {name} serve", after + 1, positional_model=True)
    if kind == "script" and posixpath.basename(name) == "vllm" and serve:
        return Entry("vllm serve", after + 1, positional_model=True)
    return None


def _interpreter_target(argv: Sequence[str]) -> tuple[str, str, int] | None:
    """What the interpreter of `argv` runs: ("module", name, index after it) for `-m name`,
    ("script", path, index after it) for a script; None for `-c`, stdin or no argument."""
    index = 1
    while index < len(argv):
        argument = argv[index]
        if argument == "--" or not argument.startswith("-") or argument == "-":
            break
        if argument.startswith("--"):
            index += 2 if argument == "--check-hash-based-pycs" else 1
            continue
        for position, letter in enumerate(argument[1:], start=1):
            rest = argument[position + 1 :]
            if letter == "c":
                return None
            if letter == "m":
                if rest:
                    return ("module", rest, index + 1)
                if index + 1 < len(argv):
                    return ("module", argv[index + 1], index + 2)
                return None
            if letter in _INTERPRETER_OPTIONS_WITH_VALUE:
                index += 0 if rest else 1
                break
        index += 1
    if index < len(argv) and argv[index] == "--":
        index += 1
    if index >= len(argv) or argv[index] == "-":
        return None
    return ("script", argv[index], index + 1)


@dataclass(frozen=True)
class ModelArgument:
    """One argument of the server's argv that names a model."""

    role: ModelRole
    flag: str
    """`--model`, `--tokenizer`, `--speculative-model`, `--speculative-config`, or `serve` for
    the positional model of `vllm serve`."""
    index: int
    """The index in argv of the element that holds the value."""
    value: str
    """The model as given: a directory, or a hub repository id."""
    inline: bool = False
    """Given as `--flag=value`, in the same element as its flag."""
    in_json: bool = False
    """The value is the `model` key of the JSON object the element holds."""
    revision: str | None = None
    """The hub revision the argv asks for (`--revision`, `--tokenizer-revision`, the JSON
    object's `revision`)."""


_FLAG_ROLES: Final[dict[str, ModelRole]] = {
    "--model": "target",
    "--tokenizer": "tokenizer",
    "--speculative-model": "draft",
}
_REVISION_FLAGS: Final[dict[ModelRole, str]] = {
    "target": "--revision",
    "tokenizer": "--tokenizer-revision",
    "draft": "--speculative-model-revision",
}


def flag_name(argument: str) -> str:
    """An option's name as vLLM's parser reads it: underscores are dashes (`--max_model_len`
    is `--max-model-len`), any `=value` dropped."""
    name = argument.partition("=")[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def flag_value(argv: Sequence[str], index: int) -> tuple[int, str, bool] | None:
    """The value of the option at `index`: (index of the element holding it, the value, whether
    it is inline); None for a bare option at the end."""
    argument = argv[index]
    if "=" in argument and argument.startswith("--"):
        return index, argument.partition("=")[2], True
    if index + 1 < len(argv):
        return index + 1, argv[index + 1], False
    return None


def model_arguments(argv: Sequence[str], entry: Entry) -> tuple[ModelArgument, ...]:
    """Every argument of the server's argv that names a model, in argv order, one per role: the
    positional of `serve` before a `--model`, as vLLM itself takes them."""
    found: list[ModelArgument] = []
    revisions = _revisions(argv, entry)
    if entry.positional_model and entry.arguments < len(argv):
        value = argv[entry.arguments]
        if not value.startswith("-"):
            found.append(
                ModelArgument(
                    "target", "serve", entry.arguments, value, revision=revisions.get("target")
                )
            )
    for index in range(entry.arguments, len(argv)):
        name = flag_name(argv[index])
        role = _FLAG_ROLES.get(name)
        given = flag_value(argv, index) if name in (*_FLAG_ROLES, "--speculative-config") else None
        if given is None:
            continue
        at, value, inline = given
        if role is not None:
            found.append(ModelArgument(role, name, at, value, inline, revision=revisions.get(role)))
            continue
        draft = _json_model(value)
        if draft is not None:
            model, revision = draft
            found.append(ModelArgument("draft", name, at, model, inline, True, revision))
    firsts: dict[str, ModelArgument] = {}
    for argument in found:
        firsts.setdefault(argument.role, argument)
    return tuple(sorted(firsts.values(), key=lambda a: a.index))


def _revisions(argv: Sequence[str], entry: Entry) -> dict[ModelRole, str]:
    found: dict[ModelRole, str] = {}
    server = argv[entry.arguments :]
    for role, flag in _REVISION_FLAGS.items():
        values = [v for v in flag_values(server, flag) if v is not None]
        if values:
            found[role] = values[-1]
    return found


def _json_model(text: str) -> tuple[str, str | None] | None:
    """The `model` (and `revision`) of a speculative-decoding JSON object; None when the object
    names no model (ngram, suffix decoding) or the text is no JSON object."""
    try:
        document = json.loads(text)
    except ValueError:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("model"), str):
        return None
    revision = document.get("revision")
    return document["model"], revision if isinstance(revision, str) else None


def hub_cache_root(environ: Mapping[str, str], cwd: str) -> str | None:
    """The hub cache huggingface_hub uses in a process with `environ` and working directory
    `cwd`: HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else
    XDG_CACHE_HOME/huggingface/hub, else HOME/.cache/huggingface/hub; None with none of them."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if environ.get(name):
            return posixpath.normpath(posixpath.join(cwd, environ[name]))
    if environ.get("HF_HOME"):
        return posixpath.normpath(posixpath.join(cwd, environ["HF_HOME"], "hub"))
    cache = environ.get("XDG_CACHE_HOME") or (
        posixpath.join(environ["HOME"], ".cache") if environ.get("HOME") else None
    )
    if cache is None:
        return None
    return posixpath.normpath(posixpath.join(cwd, cache, "huggingface", "hub"))


@dataclass(frozen=True)
class HubSnapshot:
    cache: str
    """The hub cache root (the directory holding `models--<owner>--<name>`)."""
    repo: str
    revision: str


def hub_snapshot(directory: str) -> HubSnapshot | None:
    """The hub cache, repository and revision of a snapshot directory
    (`<cache>/models--<owner>--<name>/snapshots/<revision>`); None for any other directory."""
    parts = posixpath.normpath(directory).split("/")
    if len(parts) < 4 or parts[-2] != "snapshots" or not parts[-3].startswith("models--"):
        return None
    owner, separator, name = parts[-3].removeprefix("models--").partition("--")
    if not separator or not REPO_ID.match(f"{owner}/{name}"):
        return None
    return HubSnapshot("/".join(parts[:-3]) or "/", f"{owner}/{name}", parts[-1])


def parse_environ_block(block: bytes) -> dict[str, str]:
    """Every variable of a `/proc/<pid>/environ` block, its first occurrence as getenv reads it;
    empty items (left by a process that renamed itself) are skipped."""
    environ: dict[str, str] = {}
    for item in block.decode("utf-8", "surrogateescape").split("\0"):
        name, separator, value = item.partition("=")
        if separator and name:
            environ.setdefault(name, value)
    return environ


def extension_module(relative: str) -> str | None:
    """The dotted module name of an extension module file at `relative` (a path inside
    site-packages); None when the file name is not one. An untagged `lib<name>.so` is a shared
    library a package ships beside its modules (torch/lib/libc10.so), not a module."""
    directory, _, name = relative.rpartition("/")
    match = _EXTENSION_MODULE.match(name)
    if match is None or (match.group("tag") is None and name.startswith("lib")):
        return None
    packages = [part for part in directory.split("/") if part]
    if not all(part.isidentifier() for part in packages):
        return None
    return ".".join([*packages, match.group("stem")])


NON_DEFAULT_ARGS: Final = re.compile(r"non-default args: (\{.*\})\s*$", re.MULTILINE)
"""vLLM's API server logs the arguments it was given that differ from its defaults, once, as a
Python dict."""


_ENUM_REPR: Final = re.compile(r"<([A-Za-z_][A-Za-z0-9_.]*): [^<>]*>")
LOGGED_ARGS_LIMIT: Final = 1 << 16
"""The longest `non-default args` line read: beyond any real argv."""


def logged_argument_problems(log: str, argv: Sequence[str], where: str) -> list[str]:
    """The arguments vLLM says it was started with (`non-default args` of its log) against the
    argv that started it: each logged argument whose option the argv spells out holds the
    argv's value (a switch its last spelling, `--x` or `--no-x`; a list every value after it).
    Only options the argv spells are compared (a positional model, a default-changing alias
    and a value with a placeholder are not); a log with no such line says nothing."""
    found = NON_DEFAULT_ARGS.search(log)
    if found is None:
        return []
    try:  # an enum's repr (`<CompilationMode.NONE: 0>`) read as its name
        logged = ast.literal_eval(_ENUM_REPR.sub(r"'\1'", found[1][:LOGGED_ARGS_LIMIT]))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return []  # not a dict as this vLLM writes it: nothing to compare
    if not isinstance(logged, dict):
        return []
    problems = []
    for key, value in logged.items():
        if not isinstance(key, str):
            continue
        option = "--" + key.replace("_", "-")
        given = _given(argv, option)
        if given is None or any("{" in part for part in given):
            continue
        said = _spelled(value)
        if said is not None and said != given:
            problems.append(
                f"{where}: non-default args {key}={value!r}: expected the argv's {option} "
                f"{' '.join(given) or '(a switch)'}"
            )
    return problems


LOGGED_VERSION: Final = re.compile(
    r"vLLM API server version (?P<api>[^\s,;()]+)"
    r"|LLM engine \(v(?P<engine>[^\s()]+)\)"
    r"|vLLM \(v(?P<launch>[^\s()]+)\)"
    "|\u2588"
    r" +version +(?P<banner>\S+)"
    r"|vLLM [Vv]ersion:? +v?(?P<other>[^\s,;()]+)"
)
"""Every phrasing in which vLLM logs its own version: the API server's `vLLM API server version
X` (before its banner), the banner's `█  version X`, the engine core's `Initializing a V1 LLM
engine (vX)` (V0: `Initializing an LLM engine (vX)`), a headless node's `Launching vLLM (vX)
headless multiproc executor`, and `vLLM version X` / `vLLM Version: X`."""


def logged_versions(log: str) -> list[str]:
    """The vLLM versions `log` states, in order, each as often as it states it."""
    return [
        next(value for value in match.groups() if value is not None).rstrip(".")
        for match in LOGGED_VERSION.finditer(log)
    ]


def logged_version_problems(log: str, where: str, pinned: str | None) -> list[str]:
    """Every vLLM version `log` (the file `where`) states is `pinned`, the version the lock pins;
    where none is pinned (vLLM served from a source tree), the log states one version only: one
    server runs one vLLM."""
    stated = sorted(set(logged_versions(log)))
    if pinned is not None:
        return [
            f"{where}: vLLM version {version}: expected {pinned}, the version the lock pins"
            for version in stated
            if version != pinned
        ]
    if len(stated) > 1:
        return [
            f"{where}: vLLM versions {', '.join(stated)}: expected one (one server runs one vLLM)"
        ]
    return []


def _given(argv: Sequence[str], option: str) -> list[str] | None:
    """What the argv gives `option`, as its last spelling: `[]` for a switch on, `["no"]` for
    `--no-…`, else the values after it up to the next option; None when it is not spelled."""
    negated = "--no-" + option.removeprefix("--")
    found = None
    for index, argument in enumerate(argv):
        name = flag_name(argument)
        if name == negated:
            found = ["no"]
        elif name == option:
            if "=" in argument:
                found = [argument.partition("=")[2]]
                continue
            values = []
            for following in argv[index + 1 :]:
                if following.startswith("--"):
                    break
                values.append(following)
            found = values
    return found


def _spelled(value: object) -> list[str] | None:
    """A logged value as the argv would spell it; None for one it cannot (a dict, a None)."""
    if isinstance(value, bool):
        return [] if value else ["no"]
    if isinstance(value, (int, float, str)):
        return [str(value)]
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float, str)) for v in value):
        return [str(v) for v in value]
    return None
