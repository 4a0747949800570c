"""repro: seal, verify and replay LLM serving records; refuse on any drift.

One import package for the whole tool. The folders `builder/` (observe, seal, verify, restore)
and `launch/` (run a stack, judge its gates) of the source tree install as its subpackages
`repro_serving.builder` and `repro_serving.launch` (setuptools' package-dir mapping in
pyproject.toml); the embedded default's manifest and suite (`manifests/`) and the example key
(`keys/`) install beside them as package data. In a checkout, the links of this folder give the
same names to the same files, for the interpreter and the type checker alike.
"""

from typing import Final

DISTRIBUTION: Final = "repro-serving"
"""The distribution name on the package index (`repro` there is another project)."""
WHEEL_NAME: Final = "repro_serving"
"""The distribution name as wheel file names write it (PEP 427)."""
