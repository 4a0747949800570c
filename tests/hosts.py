"""The facts of a real H200 host, as its evidence (`evidence/h200/host.json`) recorded them."""

from __future__ import annotations

import json
from pathlib import Path

from repro_serving.builder.documents.host import Accelerator, HostFacts

H200 = Path(__file__).parent / "evidence" / "h200" / "host.json"


def h200_host() -> HostFacts:
    """The observer's facts of the H200 host (an accelerator's vendor_device is not kept)."""
    document = json.loads(H200.read_text())
    accelerators = tuple(
        Accelerator(**{k: v for k, v in a.items() if k != "vendor_device"})
        for a in document.pop("accelerators")
    )
    document["cpu_flags"] = tuple(document["cpu_flags"])
    return HostFacts(**document, accelerators=accelerators)
