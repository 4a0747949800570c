"""The sealed observations of a host with an accelerator read back as they were written.

`HostFacts.to_json` once added `vendor_device` (a derived property) to each accelerator, which
the document's own reader refuses as an unexpected key: `repro build` on a GPU host sealed a
bundle its staged verify could not read (seen on an H100, bench/gpu, docs/gpu.md)."""

from __future__ import annotations

from repro_serving.builder.documents.host import Accelerator, HostFacts
from repro_serving.builder.documents.lock import WheelArtifact
from repro_serving.builder.documents.observations import ObservationsDocument

H100 = Accelerator(
    address="0000:00:05.0",
    pci_class="0x030200",
    vendor="10de",
    device="2330",
    vendor_name="NVIDIA",
    driver="nvidia",
    driver_version="580.159.04",
)


def host() -> HostFacts:
    return HostFacts(
        arch="x86_64", os="linux", os_release={"ID": "ubuntu"}, kernel="6.18.44",
        cpu_model="Intel Xeon", cpu_flags=("avx2",), cpu_count=16, memory_bytes=1 << 37,
        accelerators=(H100,),
    )  # fmt: skip


def test_an_accelerator_survives_the_sealed_observations_round_trip() -> None:
    document = ObservationsDocument(
        values={}, host=host(), models=(), sources=(), python=None,
        artifacts={"pinned": dict[str, WheelArtifact](), "unresolved": {}},  # type: ignore[arg-type]
    )  # fmt: skip
    again = ObservationsDocument.from_bytes(document.to_bytes(), where="observations.json")
    assert again.host == host()
    assert again.host.accelerators[0].vendor_device == "10de:2330"
    assert again.host_facts() == document.host_facts()
