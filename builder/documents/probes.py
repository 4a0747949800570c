"""The dispatch probes sealed under evidence/: what the stack said of each code path it chose.
Asked by `builder.observe.dispatch`."""

from __future__ import annotations

from typing import Final

from pydantic import ConfigDict, RootModel

DISPATCH_FILE: Final = "dispatch.json"
"""Under evidence/: `Probes`, what the stack reported of each code path it chose."""


class Probes(RootModel[dict[str, str]]):
    """Dispatch name → the variant the stack reported choosing (`probe_code_paths`)."""

    model_config = ConfigDict(frozen=True, strict=True)
