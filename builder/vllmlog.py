"""What a vLLM server's argv and environment say, read as vLLM and huggingface_hub read them.

Pure, over strings: whether an argv starts vLLM's OpenAI server
(`python -m vllm.entrypoints.openai.api_server`, `vllm serve MODEL`,
`python -m vllm.entrypoints.cli.main serve MODEL`) and where its own arguments begin; which of
them name a model (`--model` or the positional of `serve`, `--tokenizer`, `--speculative-model`,
the `model` of a `--speculative-config` JSON object) and at which revision; options as vLLM's
parser reads them (`--max_model_len` is `--max-model-len`); the hub cache a repository id is
looked up in, from the process's environment; a hub snapshot directory's repository and
revision; a `/proc/<pid>/environ` block; an extension module's name from its file; what a
server's log says of it (`read_server_log`: the arguments it was started with, its engine's
config, its context length, where it listens, the model its banner names, its place in a
distributed world; the vLLM versions it names), each against the argv. The
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

from repro_serving.builder.documents.manifest import ModelRole, flag_values

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


NON_DEFAULT_ARGS: Final = re.compile(r"non-default args: ([^\n]*)")
"""vLLM's API server logs the arguments it was given that differ from its defaults, once, as a
Python dict (`api_utils.log_non_default_args`): every line that says so is read, whatever
follows it."""
ENGINE_CONFIG: Final = re.compile(r"LLM engine \(v[^()\s]*\) with config: ([^\n]*)")
"""The engine core's `Initializing a V1 LLM engine (vX) with config: key=value, ...`."""
MAX_MODEL_LEN: Final = re.compile(r"Using max model len (\S+)")
"""`ModelConfig.get_and_verify_max_len`: the context length of each model a process
configures, the target's first (a draft model's own follows it)."""
LISTENING: Final = re.compile(r"(?:Starting vLLM server on|Uvicorn running on) (\S+)")
"""Where the API server listens: vLLM's `Starting vLLM server on http://HOST:PORT`, uvicorn's
`Uvicorn running on http://HOST:PORT`."""
SERVED_MODEL: Final = re.compile(
    "\u2588 +model +(\\S[^\\n]*?)[ \\t\\r]*$|serving model (\\S[^\\n]*?)[ \\t\\r]*$", re.MULTILINE
)
"""The model the API server's banner names (`█  model   X`; without the logo: `vLLM server
version V, serving model X`): its `args.model`."""
HEAD_ADDRESS: Final = re.compile(
    r"headless multiproc executor, with head node address (\S+) for torch\.distributed"
)
"""A headless rank's `Launching vLLM (vX) headless multiproc executor, with head node address
HOST:PORT for torch.distributed process group.`"""
WORLD: Final = re.compile(
    r"\bworld_size=(\d+) rank=(\d+) local_rank=\d+ distributed_init_method=(\S+)"
    r"|\brank (\d+) in world size (\d+) is assigned as"
)
"""Each worker's place in the torch.distributed world: `world_size=W rank=R local_rank=L
distributed_init_method=M` as it joins, `rank R in world size W is assigned as ...` once it
has."""
PROCESS_PREFIX: Final = re.compile(r"\((?:[^()\n]*? )?pid=(\d+)\) ")
"""vLLM's prefix of a line a process of the stack wrote: `(EngineCore pid=8146) `."""


@dataclass(frozen=True)
class Said:
    """One statement of a server's log: the line it is on, the pid of the process that wrote
    it (None for a line without vLLM's prefix) and what it says."""

    line: int
    pid: int | None
    text: str
    more: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerLog:
    """What a vLLM server's log says of how it ran, every statement in the order it is
    written (`read_server_log`)."""

    arguments: tuple[Said, ...]
    """The text after each `non-default args: `."""
    configs: tuple[Said, ...]
    """The text after each engine core's `with config: `."""
    max_model_lens: tuple[Said, ...]
    listening: tuple[Said, ...]
    models: tuple[Said, ...]
    head_addresses: tuple[Said, ...]
    worlds: tuple[Said, ...]
    """Each worker's world: its text the world size, `more` its rank and, as it joins, its
    distributed_init_method."""


def read_server_log(log: str) -> ServerLog:
    """Every statement of `log` this module compares with the argv, each found once."""
    return ServerLog(
        arguments=_found(NON_DEFAULT_ARGS, log),
        configs=_found(ENGINE_CONFIG, log),
        max_model_lens=_found(MAX_MODEL_LEN, log),
        listening=_found(LISTENING, log),
        models=_found(SERVED_MODEL, log),
        head_addresses=_found(HEAD_ADDRESS, log),
        worlds=tuple(
            Said(s.line, s.pid, s.more[0] or s.more[4], (s.more[1] or s.more[3], s.more[2]))
            for s in _found(WORLD, log, groups=True)
        ),
    )


def _found(pattern: re.Pattern[str], log: str, *, groups: bool = False) -> tuple[Said, ...]:
    found = []
    line, counted = 1, 0
    for match in pattern.finditer(log):
        line += log.count("\n", counted, match.start())
        counted = match.start()
        prefix = PROCESS_PREFIX.match(log, log.rfind("\n", 0, match.start()) + 1)
        pid = int(prefix[1]) if prefix is not None else None
        values = tuple(value or "" for value in match.groups())
        if groups:
            found.append(Said(line, pid, "", values))
        else:
            found.append(Said(line, pid, next((v for v in values if v), "")))
    return tuple(found)


_ENUM_REPR: Final = re.compile(r"<([A-Za-z_][A-Za-z0-9_.]*): [^<>]*>")
LOGGED_ARGS_LIMIT: Final = 1 << 16
"""The longest `non-default args` or engine config line read: beyond any real one (the
committed logs' are 1 to 6 KiB); a longer one is refused, not read in part."""


def logged_argument_problems(log: str, argv: Sequence[str], where: str) -> list[str]:
    """What the server's log (the file `where`) says vLLM ran with, against the argv that
    started it:

    - every `non-default args` line is a dict as vLLM writes it (literals, reprs of enums and
      dataclasses), all the same; each logged argument whose option the argv spells out holds
      the argv's value (a switch its last spelling, `--x` or `--no-x`; a list every value after
      it), and no argument is logged that the argv never gave (`serve` sets `SERVE_SETS`
      itself; `--x.y` gives `x`; `_LONG_ALIASES`);
    - every engine config line parses as `key=value, ...`, and its model, tokenizer, revisions,
      dtype, max_seq_len, parallel sizes, seed, served model name, kv cache dtype,
      enforce_eager and trust_remote_code hold what the argv spells (tensor and pipeline
      parallel sizes 1 where it spells none);
    - each process's first `Using max model len` holds `--max-model-len` (a later one is a draft
      model's, where the argv names one);
    - `Starting vLLM server on` / `Uvicorn running on` name the argv's `--host` and `--port`;
    - the banner's model is the argv's model;
    - across nodes (`--nnodes` > 1), a headless rank's head node address and every worker's
      `distributed_init_method` are `--master-addr`:`--master-port`; every worker's world size
      is the product of the tensor, pipeline and prefill-context parallel sizes (data parallel
      size 1), and its rank one of its node's (`--node-rank`).

    Only options the argv spells are compared, and vLLM's defaults only where certain: where
    the argv starts vLLM through an entry this module knows (or an interpreter's `-c` program
    given the server's options) and spells no short alias (`-tp`, `-O3`) nor `--config` file,
    whose options are not read here. A value with a placeholder is not compared (a further
    rank's argv in the lock). What this cannot see: an option vLLM or its platform overrides
    after the argv (prefix caching, chunked prefill, quantization are therefore not compared);
    a statement the log leaves out (a log without a `non-default args` line says nothing of
    them); a line written with vLLM's colour codes (its banner then is not read); a log line
    rewritten consistently everywhere it appears."""
    said = read_server_log(log)
    known = _known_arguments(argv)
    return [
        *_non_default_problems(said.arguments, argv, known, where),
        *_config_problems(said.configs, argv, known, where),
        *_max_model_len_problems(said.max_model_lens, argv, where),
        *_listening_problems(said.listening, argv, where),
        *_model_problems(said.models, argv, where),
        *_distributed_problems(said, argv, known, where),
    ]


def _known_arguments(argv: Sequence[str]) -> bool:
    """The argv starts vLLM's server through an entry this module reads (or is an interpreter's
    `-c` program given the server's options) and spells no option this module cannot name:
    a short alias (`-tp 2`, `-O3`) or a `--config` file. Then an option it does not spell holds
    vLLM's default, and an argument it never gave is none vLLM was given."""
    entry = _server_entry(argv)
    if entry is not None:
        arguments = argv[entry.arguments :]
    elif len(argv) > 2 and argv[1] == "-c":
        arguments = argv[3:]
    else:
        return False
    return not any(
        (argument.startswith("-") and not argument.startswith("--"))
        or flag_name(argument) == "--config"
        for argument in arguments
    )


def _server_entry(argv: Sequence[str]) -> Entry | None:
    """How `argv` starts vLLM's server: as an interpreter's argv (`vllm_entry`), or as a
    manifest spells the console script itself (`{venv}/bin/vllm serve MODEL`)."""
    entry = vllm_entry(argv)
    if entry is None and argv[1:2] == ["serve"] and posixpath.basename(argv[0]) == "vllm":
        return Entry("vllm serve", 2, positional_model=True)
    return entry


def _logged_dict(text: str) -> dict[object, object] | str:
    """A `non-default args` dict as vLLM writes it: Python literals, an enum's repr
    (`<CompilationMode.NONE: 0>`) read as its name, a dataclass's or other object's repr
    (`LoRAModulePath(name=...)`, `torch.float16`) kept as its text; for anything else, what
    does not parse."""
    if len(text) > LOGGED_ARGS_LIMIT:
        return f"{len(text)} characters, beyond any real argv's"
    source = _ENUM_REPR.sub(r"'\1'", text.strip())
    try:
        value = _literal(ast.parse(source, mode="eval").body)
    except SyntaxError as error:
        at = max((error.offset or 1) - 1, 0) if error.lineno == 1 else 0
        return f"{source[at : at + 40]!r} at column {at + 1} ({error.msg})"
    except (ValueError, MemoryError, RecursionError, TypeError) as error:
        return str(error)[:80] or type(error).__name__
    return value if isinstance(value, dict) else f"a {type(value).__name__}, not a dict"


@dataclass(frozen=True)
class _Repr:
    """An object's repr in a logged dict: compared with nothing."""

    text: str


def _literal(node: ast.expr) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise ValueError("a ** in a dict")
        return {
            _hashable(_literal(k)): _literal(v)
            for k, v in zip(node.keys, node.values, strict=True)
            if k is not None
        }
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_literal(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Set):
        return {_hashable(_literal(e)) for e in node.elts}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _literal(node.operand)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Call) and _dotted(node.func) and not node.args:
        for keyword in node.keywords:
            if keyword.arg is None:
                raise ValueError("a ** in a repr")
            _literal(keyword.value)
        return _Repr(ast.unparse(node))
    if _dotted(node):
        return _Repr(ast.unparse(node))
    raise ValueError(f"{ast.unparse(node)[:40]!r}, neither a literal nor a repr")


def _dotted(node: ast.expr) -> bool:
    """A name (`inf`, `LoRAModulePath`) or a dotted one (`torch.float16`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _hashable(value: object) -> object:
    if isinstance(value, (dict, list, set)):
        raise ValueError("an unhashable key")
    return value


def _non_default_problems(
    lines: Sequence[Said], argv: Sequence[str], known: bool, where: str
) -> list[str]:
    problems = []
    texts = sorted({said.text.strip() for said in lines})
    if len(texts) > 1:
        problems.append(
            f"{where}: {len(texts)} different non-default args lines (lines "
            f"{', '.join(str(s.line) for s in lines)}): expected one, the arguments vLLM was "
            "started with"
        )
    positional = (entry := _server_entry(argv)) is not None and entry.positional_model
    read: set[str] = set()
    for said in lines:
        text = said.text.strip()
        if text in read:
            continue
        read.add(text)
        logged = _logged_dict(text)
        if isinstance(logged, str):
            problems.append(
                f"{where}:{said.line}: non-default args: expected a dict as vLLM writes it "
                f"(literals, reprs of enums and dataclasses), found one that does not parse: "
                f"{logged}"
            )
            continue
        for key, value in logged.items():
            if not isinstance(key, str):
                problems.append(
                    f"{where}:{said.line}: non-default args key {key!r}: expected an argument's "
                    "name"
                )
                continue
            option = "--" + key.replace("_", "-")
            given = next(
                (
                    found
                    for spelling in (option, *_LONG_ALIASES.get(key, ()))
                    if (found := _given(argv, spelling)) is not None
                ),
                None,
            )
            if given is None:
                if known and not _spells(argv, key, option, positional=positional):
                    problems.append(
                        f"{where}:{said.line}: non-default args {key}={value!r}: expected only "
                        f"arguments the argv gives, found {option} that it never spells"
                    )
                continue
            if any("{" in part for part in given):
                continue
            spelled = _spelled(value)
            if spelled is not None and spelled != given:
                problems.append(
                    f"{where}:{said.line}: non-default args {key}={value!r}: expected the argv's "
                    f"{option} {' '.join(given) or '(a switch)'}"
                )
    return problems


_LONG_ALIASES: Final = {"gpu_memory_utilization": ("--device-memory-utilization",)}
"""The arguments vLLM's parser also reads under another long option (`engine/arg_utils.py`
of vLLM 0.32: the only one)."""
SERVE_SETS: Final = frozenset({"model", "model_tag", "api_server_count"})
"""What `vllm serve` gives the arguments before its API server logs them: the positional
`model_tag`, copied to `model`; `api_server_count`, its default for the data parallel layout."""


def _spells(argv: Sequence[str], key: str, option: str, *, positional: bool) -> bool:
    """The argv gives the logged argument `key` otherwise than as `option VALUE`: through
    `serve` (`SERVE_SETS`), or as a key of its JSON value (`--compilation-config.mode=3`)."""
    if positional and key in SERVE_SETS:
        return True
    return any(flag_name(argument).startswith(option + ".") for argument in argv)


_DTYPES: Final = {
    "half": "float16",
    "float16": "float16",
    "float": "float32",
    "float32": "float32",
    "bfloat16": "bfloat16",
}
"""vLLM's `--dtype` names and the torch dtype each is (`config.model._STR_DTYPE_TO_TORCH_DTYPE`);
`auto` is the model's, not read here."""
_CONFIG_OPTIONS: Final = {
    "tokenizer": "--tokenizer",
    "revision": "--revision",
    "tokenizer_revision": "--tokenizer-revision",
    "trust_remote_code": "--trust-remote-code",
    "dtype": "--dtype",
    "max_seq_len": "--max-model-len",
    "tensor_parallel_size": "--tensor-parallel-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "data_parallel_size": "--data-parallel-size",
    "enforce_eager": "--enforce-eager",
    "seed": "--seed",
    "served_model_name": "--served-model-name",
    "kv_cache_dtype": "--kv-cache-dtype",
}
"""The engine config's keys compared with the option of the argv that sets them (`model` is
the argv's model, positional or `--model`)."""
_ONE_BY_DEFAULT: Final = ("tensor_parallel_size", "pipeline_parallel_size")


def _config_problems(
    lines: Sequence[Said], argv: Sequence[str], known: bool, where: str
) -> list[str]:
    problems = []
    for said in lines:
        items = _config_items(said.text)
        if items is None:
            problems.append(
                f"{where}:{said.line}: engine config {said.text[:120]!r}: expected key=value, "
                "... as vLLM writes it, found a line that does not parse"
            )
            continue
        for key, value in items:
            expected = _config_expected(key, argv, known)
            if expected is None:
                continue
            wanted, source = expected
            found = _config_value(key, value)
            if found != wanted:
                problems.append(
                    f"{where}:{said.line}: engine config {key}={value}: expected {wanted}, {source}"
                )
    return problems


def _config_expected(key: str, argv: Sequence[str], known: bool) -> tuple[str, str] | None:
    """What the argv says the engine config's `key` holds, and where it says so; None where
    it does not say."""
    if key == "model":
        model = _target(argv)
        return None if model is None else (model, f"the argv's model {model}")
    option = _CONFIG_OPTIONS.get(key)
    if option is None:
        return None
    given = _given(argv, option)
    if given is None:
        if known and key in _ONE_BY_DEFAULT:
            return "1", f"vLLM's default: the argv spells no {option}"
        return None
    if any("{" in part for part in given):
        return None
    spelling = f"the argv's {option} {' '.join(given) or '(a switch)'}"
    if key in ("enforce_eager", "trust_remote_code"):
        return str(given != ["no"]), spelling
    if len(given) != 1:
        return None
    value = given[0]
    if key == "dtype":
        dtype = _DTYPES.get(value.lower())
        return None if dtype is None else (f"torch.{dtype}", spelling)
    if key in ("max_seq_len", *_ONE_BY_DEFAULT, "data_parallel_size"):
        return (value, spelling) if value.isdigit() and int(value) > 0 else None
    return value, spelling


def _config_value(key: str, value: str) -> str:
    """An engine config value as the argv would spell it: quotes dropped."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _target(argv: Sequence[str]) -> str | None:
    """The model the argv serves, where it spells one without a placeholder."""
    entry = _server_entry(argv)
    if entry is not None:
        target = next((a for a in model_arguments(argv, entry) if a.role == "target"), None)
        model = target.value if target is not None else None
    else:
        given = _given(argv, "--model")
        model = given[0] if given is not None and len(given) == 1 else None
    return None if model is None or "{" in model else model


_CONFIG_TOKEN: Final = re.compile(
    r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|[()\[\]{},'\"]|[^'\"()\[\]{},]+"
)
"""A quoted string, a bracket, a comma, a quote left open, or text without any of them."""
_OPENING: Final = {")": "(", "]": "[", "}": "{"}


def _config_items(text: str) -> list[tuple[str, str]] | None:
    """`key=value, key=value, ...` split where no bracket nor quote is open, each key an
    identifier; None for a line that is not such a list (brackets unbalanced, an item
    without a key, longer than any real one)."""
    if len(text) > LOGGED_ARGS_LIMIT:
        return None
    items: list[tuple[str, str]] = []
    depth: list[str] = []
    current: list[str] = []
    for match in _CONFIG_TOKEN.finditer(text.rstrip()):
        token = match[0]
        if token in ("(", "[", "{"):
            depth.append(token)
        elif token in _OPENING:
            if not depth or depth.pop() != _OPENING[token]:
                return None
        elif token in ("'", '"'):
            return None
        elif token == "," and not depth:
            if (item := _config_item("".join(current))) is None:
                return None
            items.append(item)
            current = []
            continue
        current.append(token)
    if depth:
        return None
    if "".join(current).strip():
        if (item := _config_item("".join(current))) is None:
            return None
        items.append(item)
    return items


def _config_item(text: str) -> tuple[str, str] | None:
    key, separator, value = text.strip().partition("=")
    return (key, value.strip()) if separator and key.isidentifier() else None


def _max_model_len_problems(lines: Sequence[Said], argv: Sequence[str], where: str) -> list[str]:
    given = _given(argv, "--max-model-len")
    if given is None or len(given) != 1 or not given[0].isdigit():
        return []
    drafted = any(
        _given(argv, option) is not None
        for option in ("--speculative-config", "--speculative-model")
    )
    problems, seen = [], set()
    for said in lines:
        first = said.pid not in seen
        seen.add(said.pid)
        if (first or not drafted) and said.text != given[0]:
            problems.append(
                f"{where}:{said.line}: Using max model len {said.text}: expected "
                f"{given[0]}, the argv's --max-model-len"
                + ("" if first else " (no draft model configured)")
            )
    return problems


_URL: Final = re.compile(r"https?://(\[[^\]]*\]|[^:/\[\]]*):(\d+)/?")


def _listening_problems(lines: Sequence[Said], argv: Sequence[str], where: str) -> list[str]:
    if _given(argv, "--uds") is not None:
        return []
    host, port = _given(argv, "--host"), _given(argv, "--port")
    problems = []
    for said in lines:
        url = _URL.fullmatch(said.text)
        if url is None:
            problems.append(
                f"{where}:{said.line}: listening on {said.text}: expected http://HOST:PORT"
            )
            continue
        if port is not None and len(port) == 1 and port[0].isdigit() and url[2] != port[0]:
            problems.append(
                f"{where}:{said.line}: listening on {said.text}: expected port {port[0]}, the "
                "argv's --port"
            )
        if host is not None and len(host) == 1 and "{" not in host[0]:
            spelled = f"[{host[0]}]" if ":" in host[0] else host[0]
            if url[1] != (spelled or "0.0.0.0"):
                problems.append(
                    f"{where}:{said.line}: listening on {said.text}: expected host {spelled}, "
                    "the argv's --host"
                )
    return problems


def _model_problems(lines: Sequence[Said], argv: Sequence[str], where: str) -> list[str]:
    model = _target(argv)
    return [
        f"{where}:{said.line}: the banner's model {said.text}: expected {model}, the argv's model"
        for said in lines
        if model is not None and said.text != model
    ]


def _distributed_problems(
    said: ServerLog, argv: Sequence[str], known: bool, where: str
) -> list[str]:
    problems = []
    nodes = _number(argv, "--nnodes", known)
    address, port = _given(argv, "--master-addr"), _given(argv, "--master-port")
    head = None
    if (
        nodes is not None
        and nodes > 1
        and address is not None
        and port is not None
        and len(address) == len(port) == 1
        and "{" not in address[0] + port[0]
    ):
        host = f"[{address[0]}]" if ":" in address[0] else address[0]
        head = f"{host}:{port[0]}"
    for line in said.head_addresses:
        if head is not None and line.text != head:
            problems.append(
                f"{where}:{line.line}: head node address {line.text}: expected {head}, the "
                "argv's --master-addr and --master-port"
            )
    sizes = [
        _number(argv, option, known)
        for option in (
            "--tensor-parallel-size",
            "--pipeline-parallel-size",
            "--prefill-context-parallel-size",
        )
    ]
    data = _number(argv, "--data-parallel-size", known)
    world = None
    if data == 1 and all(size is not None for size in sizes):
        world = 1
        for size in sizes:
            world *= size or 1
    rank = _number(argv, "--node-rank", known, default=0)
    for line in said.worlds:
        stated, (at, method) = line.text, line.more
        if world is not None and stated != str(world):
            problems.append(
                f"{where}:{line.line}: world size {stated}: expected {world}, the argv's "
                "tensor, pipeline and prefill-context parallel sizes multiplied"
            )
        elif world is not None and nodes and rank is not None and world % nodes == 0:
            local = world // nodes
            if not rank * local <= int(at) < (rank + 1) * local:
                problems.append(
                    f"{where}:{line.line}: rank {at} in world size {stated}: expected one of "
                    f"node rank {rank}'s ranks {rank * local} to {(rank + 1) * local - 1} "
                    f"(the argv's --node-rank and --nnodes)"
                )
        if head is not None and method and method != f"tcp://{head}":
            problems.append(
                f"{where}:{line.line}: distributed_init_method={method}: expected tcp://{head}, "
                "the argv's --master-addr and --master-port"
            )
    return problems


def _number(argv: Sequence[str], option: str, known: bool, default: int = 1) -> int | None:
    """The integer the argv gives `option` (at least `default`); `default`, vLLM's, where it
    spells none and that default holds (`known`); None where it cannot be told."""
    given = _given(argv, option)
    if given is None:
        return default if known else None
    if len(given) == 1 and given[0].isdigit() and int(given[0]) >= default:
        return int(given[0])
    return None


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


_GIB: Final = 1 << 30
_BOUND_CPUS: Final = re.compile(
    r"VLLM_CPU_OMP_THREADS_BIND='auto', auto_setup=True.*?\n(?P<lines>(?:[^\n]*"
    r"(?:core ids|reserved_cpus)=\[[0-9, ]*\][^\n]*\n?)+)",
    re.DOTALL,
)
_CPU_IDS: Final = re.compile(r"(?:core ids|reserved_cpus)=\[(?P<ids>[0-9, ]*)\]")
_NODE_MEMORY: Final = re.compile(
    r"\((?P<size>[0-9.]+)/(?P<total>[0-9.]+)\) GiB (?:for KV cache )?on node [0-9]+"
)
_AVAILABLE_RAM: Final = re.compile(r"Available RAM: (?P<available>[0-9.]+) GiB")


def logged_host_problems(
    log: str, where: str, cpu_count: int | None, memory_bytes: int | None
) -> list[str]:
    """What a vLLM CPU server's log says of its host, against the host facts sealed for it.

    A log bounds the facts from below only: a process sees no more CPUs than the host has (its
    affinity and a cgroup may give it fewer) and no more memory. So: the CPUs vLLM's automatic
    OpenMP binding names (`core ids=[…]`, `reserved_cpus=[…]`, taken from the process's allowed
    CPUs) are at most `cpu_count`; the node total of `(used/total) GiB … on node N` (the NUMA
    node's MemTotal or a lower cgroup limit, `round(bytes / GiB, 2)`) and `Available RAM: X GiB`
    (`%.2f`) at most `memory_bytes` in GiB, rounded alike."""
    problems = []
    if cpu_count is not None:
        for block in _BOUND_CPUS.finditer(log):
            ids = {
                int(cpu)
                for found in _CPU_IDS.finditer(block["lines"])
                for cpu in found["ids"].replace(" ", "").split(",")
                if cpu
            }
            if len(ids) > cpu_count:
                problems.append(
                    f"{where}: vLLM's automatic CPU binding names {len(ids)} CPUs "
                    f"({', '.join(map(str, sorted(ids)))}): expected at most {cpu_count}, "
                    "the host's cpu_count"
                )
    if memory_bytes is not None:
        ceiling = round(memory_bytes / _GIB, 2) + 0.005
        stated = [(m["total"], "a NUMA node's memory") for m in _NODE_MEMORY.finditer(log)]
        stated += [(m["available"], "available RAM") for m in _AVAILABLE_RAM.finditer(log)]
        problems += [
            f"{where}: {what} {value} GiB: expected at most {memory_bytes / _GIB:.2f} GiB, "
            "the host's memory_bytes"
            for value, what in stated
            if float(value) > ceiling
        ]
    return problems


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
