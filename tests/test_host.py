"""Host facts: accelerators from sysfs on a real tree, the H200 evidence, and this machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hosts import h200_host
from schemas import assert_valid

from repro_serving.builder.cli import main
from repro_serving.builder.documents.host import Accelerator, compare
from repro_serving.builder.documents.manifest import Host
from repro_serving.builder.observe.host import accelerators, cpu_info, observe_host, os_release

EVIDENCE = Path(__file__).parent / "evidence" / "h200"


def pci_function(
    sysfs: Path, address: str, pci_class: str, vendor: str, device: str, driver: str | None
) -> None:
    function = sysfs / "bus" / "pci" / "devices" / address
    function.mkdir(parents=True)
    (function / "class").write_text(pci_class + "\n")
    (function / "vendor").write_text(vendor + "\n")
    (function / "device").write_text(device + "\n")
    if driver is not None:
        target = sysfs / "bus" / "pci" / "drivers" / driver
        target.mkdir(parents=True, exist_ok=True)
        (function / "driver").symlink_to(target)


def test_accelerators_are_read_from_pci_class_vendor_and_driver(tmp_path: Path) -> None:
    pci_function(tmp_path, "0000:00:06.0", "0x030200", "0x10de", "0x2335", "nvidia")
    pci_function(tmp_path, "0000:03:00.0", "0x030000", "0x1a03", "0x2000", "ast")  # BMC VGA
    pci_function(tmp_path, "0000:00:01.0", "0x018000", "0x1af4", "0x1042", "virtio-pci")
    pci_function(tmp_path, "0000:4a:00.0", "0x030000", "0x8086", "0xe223", None)
    (tmp_path / "module" / "nvidia").mkdir(parents=True)
    (tmp_path / "module" / "nvidia" / "version").write_text("580.159.04\n")
    assert accelerators(tmp_path) == (
        Accelerator("0000:00:06.0", "0x030200", "10de", "2335", "NVIDIA", "nvidia", "580.159.04"),
        Accelerator("0000:4a:00.0", "0x030000", "8086", "e223", "Intel", None, None),
    )


def test_no_pci_bus_means_no_accelerator(tmp_path: Path) -> None:
    assert accelerators(tmp_path) == ()


def test_the_h200_host_was_observed_as_one_nvidia_h200_on_its_driver() -> None:
    host = json.loads((EVIDENCE / "host.json").read_text())
    (gpu,) = host["accelerators"]
    # nvidia-smi on that host: NVIDIA H200, 00000000:00:06.0, 580.159.04
    assert (gpu["address"], gpu["vendor_device"]) == ("0000:00:06.0", "10de:2335")
    assert (gpu["driver"], gpu["driver_version"]) == ("nvidia", "580.159.04")


def test_this_machine_reports_accelerators_exactly_when_it_has_device_nodes() -> None:
    has_nodes = Path("/dev/nvidia0").exists() or any(Path("/dev/dri").glob("renderD*"))
    assert bool(observe_host().accelerators) == has_nodes


def test_os_release_and_cpuinfo_parsing() -> None:
    assert os_release('NAME="Debian GNU/Linux"\nVERSION_ID=12\n# c\n') == {
        "NAME": "Debian GNU/Linux",
        "VERSION_ID": "12",
    }
    model, flags = cpu_info("processor: 0\nmodel name\t: AMD EPYC\nflags\t\t: sse2 avx2 fpu\n")
    assert model == "AMD EPYC" and flags == ("avx2", "fpu", "sse2")


def test_repro_host_json_carries_the_observed_facts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["host", "--json"]) == 0
    document = assert_valid("host", capsys.readouterr().out)
    assert document["version"] == 1
    assert document["host"] == observe_host().locked().model_dump(mode="json")


def test_the_h200_host_meets_a_manifest_that_enforces_it() -> None:
    host = Host.model_validate(
        {
            "arch": "x86_64",
            "os": "linux",
            "accelerators": [{"vendor_device": "10de:2335", "addresses": ["0000:00:06.0"]}],
            "drivers": {"nvidia": "580.159.04"},
        }
    )
    assert compare(host, h200_host()) == []


def test_each_enforced_host_fact_that_differs_is_one_drift_naming_both_sides() -> None:
    host = Host.model_validate(
        {
            "arch": "aarch64",
            "kernel": "7.0.0-28-generic",
            "accelerators": [
                {"vendor_device": "8086:e223", "count": 4},
                {"vendor_device": "10de:2335", "addresses": ["0000:17:00.0"]},
            ],
            "drivers": {"xe": "1.2.3"},
        }
    )
    drifts = [(d.subject, d.expected, d.observed) for d in compare(host, h200_host())]
    assert drifts == [
        ("arch", "aarch64", "x86_64"),
        ("kernel", "7.0.0-28-generic", "6.18.44-fc-v657-gpu"),
        ("driver xe", "1.2.3", "not bound"),
        ("accelerator 8086:e223", "4 present", "none"),
        ("accelerator 10de:2335", "at 0000:17:00.0", "1 at 0000:00:06.0"),
    ]
