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


def test_the_verifier_never_imports_the_builder() -> None:
    known = modules()
    assert "builder.build" not in imports(known["builder.verify"], "builder.verify")
    assert not any(
        i.startswith("builder.sealing.seal")
        for i in imports(known["builder.verify"], "builder.verify")
    )
