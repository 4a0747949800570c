"""Which modules the serving path of vLLM imports that this environment lacks, all in one run.

    SERVE_PYTHON imports.py MODULE [MODULE ...]

Imports each module; whenever a top-level module is missing, it is recorded and replaced by a
permissive stub (any attribute, call, subscript or base class works), and the import is tried
again, so that one run names every missing module on the way rather than the first. A failure
of another kind (an incompatible version) is printed with its module and ends that module's
sweep. Exit 1 when anything was missing or failed. Run it before starting a server in an
environment assembled offline: one round trip to the host names all that must be carried.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import traceback
import types
from typing import Any, ClassVar


class _Stub:
    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def __call__(self, *_args: Any, **_kwargs: Any) -> _Stub:
        return _Stub()

    def __getattr__(self, _name: str) -> Any:
        return _Stub()

    def __getitem__(self, _key: Any) -> Any:
        return _Stub

    def __mro_entries__(self, _bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (_Stub,)

    def __or__(self, _other: Any) -> Any:
        return _Stub

    __ror__ = __or__


class _StubModule(types.ModuleType):
    __path__: ClassVar[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Stub


STUBBED: set[str] = set()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".", maxsplit=1)[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def sweep(module: str) -> tuple[list[str], str | None]:
    missing: list[str] = []
    for _ in range(100):
        try:
            importlib.import_module(module)
            return missing, None
        except ModuleNotFoundError as error:
            name = (error.name or "").split(".")[0]
            if not name or name in STUBBED:
                return missing, f"{type(error).__name__}: {error}"
            if name == "vllm":
                return missing, f"no such module: {error.name}"
            missing.append(error.name or name)
            STUBBED.add(name)
            for loaded in [m for m in sys.modules if m == module or m.startswith("vllm")]:
                del sys.modules[loaded]
        except Exception as error:  # every other failure is reported, not raised
            frames = traceback.extract_tb(error.__traceback__)[-3:]
            where = "; ".join(
                f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in frames
            )
            return missing, f"{type(error).__name__}: {error} (at {where})"
    return missing, "gave up after 100 stubs"


def main() -> int:
    sys.meta_path.insert(0, _StubFinder())
    bad = False
    for module in sys.argv[1:]:
        missing, failure = sweep(module)
        bad = bad or bool(missing) or failure is not None
        print(f"{module}: missing {missing or 'nothing'}; {failure or 'imported'}", flush=True)
    print(f"MISSING TOP-LEVEL MODULES: {' '.join(sorted(STUBBED)) or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
