"""Host facts: OS release, kernel, architecture, CPU, memory and accelerators.

Accelerators come from sysfs, never from a vendor tool: every PCI function whose class is a
display controller (0x03) or a processing accelerator (0x12) from a vendor of compute devices,
with its address, vendor:device, the kernel driver bound to it and that driver module's
version. Every reader takes the root it reads under (`/` by default), so a test can hand it a
tree of its own.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from repro_serving.builder.documents.host import Accelerator, HostFacts

# PCI vendor ids of compute accelerators; a server's BMC display (e.g. ASPEED 1a03) is not one.
COMPUTE_VENDORS = {
    "10de": "NVIDIA",
    "1002": "AMD",
    "8086": "Intel",
    "1da3": "Habana",
}
ACCELERATOR_CLASSES = ("0x03", "0x12")


def observe_host(root: Path = Path("/")) -> HostFacts:
    cpu_model, cpu_flags = cpu_info((root / "proc/cpuinfo").read_text(errors="replace"))
    return HostFacts(
        arch=platform.machine(),
        os=platform.system().lower(),
        os_release=os_release(_read(root / "etc/os-release") or ""),
        kernel=platform.release(),
        cpu_model=cpu_model,
        cpu_flags=cpu_flags,
        cpu_count=os.cpu_count() or 0,
        memory_bytes=mem_total(_read(root / "proc/meminfo") or ""),
        accelerators=accelerators(root / "sys"),
    )


def accelerators(sysfs: Path) -> tuple[Accelerator, ...]:
    """Every PCI accelerator under `sysfs`, by address; none when there is no PCI bus there."""
    devices = sysfs / "bus" / "pci" / "devices"
    if not devices.is_dir():
        return ()
    found = []
    for function in sorted(devices.iterdir()):
        pci_class = _read(function / "class")
        vendor = _hex_id(_read(function / "vendor"))
        if pci_class is None or vendor not in COMPUTE_VENDORS:
            continue
        if not pci_class.startswith(ACCELERATOR_CLASSES):
            continue
        driver = _driver(function)
        found.append(
            Accelerator(
                address=function.name,
                pci_class=pci_class,
                vendor=vendor,
                device=_hex_id(_read(function / "device")),
                vendor_name=COMPUTE_VENDORS[vendor],
                driver=driver,
                driver_version=_read(sysfs / "module" / driver / "version") if driver else None,
            )
        )
    return tuple(found)


def os_release(text: str) -> dict[str, str]:
    """`/etc/os-release` as a mapping; quotes removed as the format allows."""
    release = {}
    for line in text.splitlines():
        key, separator, value = line.partition("=")
        if separator and key and not key.startswith("#"):
            release[key.strip()] = value.strip().strip('"').strip("'")
    return release


def cpu_info(text: str) -> tuple[str | None, tuple[str, ...]]:
    """The first processor's model name and flags from `/proc/cpuinfo`."""
    model: str | None = None
    flags: tuple[str, ...] = ()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = tuple(sorted(value.split()))
    return model, flags


def mem_total(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            kib = line.split()[1]
            return int(kib) * 1024 if kib.isdigit() else None
    return None


def _driver(function: Path) -> str | None:
    link = function / "driver"
    return link.readlink().name if link.is_symlink() else None


def _hex_id(text: str | None) -> str:
    return (text or "").lower().removeprefix("0x")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None
