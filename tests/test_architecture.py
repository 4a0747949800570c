"""The layers of docs/ARCHITECTURE.md hold: no module imports from a layer above its own.

The table is read from the document itself, so the picture and the code cannot drift apart; every
module of `builder` and `launch` must fall in a layer, and every import of one of them, at any
depth of a function, is checked.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"


def layers() -> dict[str, tuple[int, str]]:
    """Module prefix → (layer number, layer name), from the `layers` block."""
    block = re.search(r"```layers\n(.*?)```", ARCHITECTURE.read_text(), re.DOTALL)
    assert block is not None, "docs/ARCHITECTURE.md has a ```layers block"
    table = {}
    for line in block.group(1).splitlines():
        number, name, *prefixes = line.split()
        for prefix in prefixes:
            table[prefix] = (int(number), name)
    return table


def layer_of(module: str, table: dict[str, tuple[int, str]]) -> tuple[int, str] | None:
    matches = [p for p in table if module == p or module.startswith(p + ".")]
    return table[max(matches, key=len)] if matches else None


def modules() -> dict[str, Path]:
    found = {}
    for package in ("builder", "launch"):
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(path: Path, module: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    # `builder` and `launch` install as subpackages of repro_serving: named as the layers name them
    names = {name.removeprefix("repro_serving.") for name in names}
    return {name for name in names if name.split(".")[0] in ("builder", "launch")} - {module}


def test_every_module_is_in_a_declared_layer() -> None:
    table = layers()
    assert [m for m in modules() if layer_of(m, table) is None] == []


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    table, known = layers(), modules()
    upward = []
    for module, path in sorted(known.items()):
        own = layer_of(module, table)
        assert own is not None
        for imported in sorted(imports(path, module)):
            # `from builder import tinymodel` names a module; `from x import name` a name in x.
            target = imported if imported in known else imported.rsplit(".", 1)[0]
            theirs = layer_of(target, table)
            if theirs is not None and theirs[0] > own[0]:
                upward.append(f"{module} ({own[1]}) imports {target} ({theirs[1]})")
    assert upward == []


# What `repro verify` must never run, even indirectly: an observer of this host or of a serving
# stack, a module that starts or stops processes or talks to a server, a sealer or a writer of
# bundles, the flows that do any of these.
PRODUCERS = (
    "builder.observe",
    "builder.observations",
    "builder.hostcheck",
    "builder.build",
    "builder.replay",
    "builder.restore",
    "builder.sealing.seal",
    "builder.sealing.atomic",
    "builder.sealing.archive",
    "builder.native.processes",
    "builder.native.loaderhost",
    "builder.native.policy",
    "launch.server",
    "launch.run",
    "launch.cluster",
    "launch.oracle",
    "launch.timedpost",
)
# What starts a process or opens a connection, named by the standard library or a dependency.
PROCESS_MODULES = ("subprocess", "multiprocessing", "socket", "httpx", "h11", "psutil", "ray")


def closure(start: str) -> dict[str, str]:
    """Every module of builder/ and launch/ that importing `start` can import, at any depth of a
    function, each with the module that first imports it."""
    known = modules()
    reached, todo = {start: ""}, [start]
    while todo:
        module = todo.pop()
        for imported in imports(known[module], module):
            target = imported if imported in known else imported.rsplit(".", 1)[0]
            if target in known and target not in reached:
                reached[target] = module
                todo.append(target)
    return reached


def external_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_verifier_reaches_no_producer() -> None:
    """`builder.verify` reads sealed files and recomputes: nothing it imports, however deep,
    observes a host, starts a process or seals (`hostcheck.verify_here` adds `--host`)."""
    reached = closure("builder.verify")
    found = [
        f"{module} (imported by {by})"
        for module, by in sorted(reached.items())
        if any(module == p or module.startswith(p + ".") for p in PRODUCERS)
    ]
    assert found == []
    known = modules()
    starting = [
        f"{module} imports {name}"
        for module in sorted(reached)
        for name in sorted(external_imports(known[module]) & set(PROCESS_MODULES))
    ]
    assert starting == []


def test_the_closure_follows_imports_inside_functions() -> None:
    """The closure is no weaker than a run: a module imported only inside a function is found
    (`repro verify` imports the host check inside `execute`, for `--host` alone)."""
    source = modules()["builder.commands.verify"].read_text()
    assert "import verify_here" in source.split("def execute", 1)[1]
    assert "hostcheck" not in source.split("def execute", 1)[0]
    reached = closure("builder.commands.verify")
    assert reached["builder.hostcheck"] == "builder.commands.verify"
    assert "builder.observe.host" in reached
