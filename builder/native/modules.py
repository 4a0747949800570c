"""The file names a Python extension module is mapped under, whatever interpreter loaded it.

`a.b._C` is `a/b/_C` followed by an extension suffix: the interpreter's own tag
(`.cpython-312-x86_64-linux-gnu.so`, a free-threaded `.cpython-313t-…`, PyPy's
`.pypy310-pp73-…`), the stable ABI's `.abi3.so`, or a bare `.so`. The audited process may run
another Python than repro does, so any interpreter's tag is accepted, not only repro's own
(`importlib.machinery.EXTENSION_SUFFIXES`).
"""

from __future__ import annotations

import re
from functools import cache

_SUFFIX = r"(?:\.(?:cpython-[0-9]+[a-z]*|pypy[0-9]+-pp[0-9]+)(?:-[A-Za-z0-9_]+){2,3}|\.abi3)?\.so"


@cache
def _pattern(module: str) -> re.Pattern[str]:
    return re.compile("/" + re.escape(module.replace(".", "/")) + _SUFFIX + r"\Z")


def is_module_file(path: str, module: str) -> bool:
    """True when `path` is a file extension module `module` is loaded from."""
    return _pattern(module).search(path) is not None


def module_file_description(module: str) -> str:
    """How a file of `module` is named, for a person: `…/a/b/_C.<extension suffix>.so`."""
    return f"/{module.replace('.', '/')}[.<interpreter tag>|.abi3].so"
