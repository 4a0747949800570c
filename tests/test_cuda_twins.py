"""The CUDA manifests are twins: tiny-cuda-h200.toml is tiny-cuda.toml for the other Hopper card
a host may come as, and tiny-cuda-h200-fp8.toml is that with an FP8 KV cache. Each differs from
its base in what its header says and nothing else, so a record on one card and its FP8 lane
judge the same stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repro_serving.builder.documents.manifest import Manifest

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"


def dumped(name: str) -> dict[str, Any]:
    return Manifest.from_path(MANIFESTS / name).model_dump(mode="json")


def differences(a: Any, b: Any, at: str = "") -> dict[str, tuple[Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        found: dict[str, tuple[Any, Any]] = {}
        for key in sorted(set(a) | set(b)):
            found |= differences(a.get(key), b.get(key), f"{at}.{key}" if at else key)
        return found
    return {} if a == b else {at: (a, b)}


def test_the_h200_twin_differs_in_its_name_and_accelerator_alone() -> None:
    found = differences(dumped("tiny-cuda.toml"), dumped("tiny-cuda-h200.toml"))
    assert set(found) == {"bundle.name", "bundle.description", "host.accelerators"}
    assert found["bundle.name"] == ("tiny-cuda", "tiny-cuda-h200")
    (h100,), (h200,) = found["host.accelerators"]
    assert (h100["vendor_device"], h200["vendor_device"]) == ("10de:2330", "10de:2335")


def test_the_fp8_lane_adds_the_fp8_cache_and_its_gates_alone() -> None:
    found = differences(dumped("tiny-cuda-h200.toml"), dumped("tiny-cuda-h200-fp8.toml"))
    assert set(found) == {
        "bundle.name",
        "bundle.description",
        "launch.argv",
        "oracle.gates.forbidden_log_patterns",
        "oracle.gates.log_markers",
        "oracle.gates.metrics_info",
    }
    base, lane = found["launch.argv"]
    assert [a for a in lane if a not in base] == ["--kv-cache-dtype", "fp8"]
    assert "--calculate-kv-scales" not in lane
    ((info),) = found["oracle.gates.metrics_info"][1]
    assert info["labels"]["cache_dtype"] == "fp8"
