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
from dataclasses import asdict, dataclass
from pathlib import Path

from repro_serving.builder import lock
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.manifest import Accelerator as ManifestAccelerator
from repro_serving.builder.manifest import Host
from repro_serving.builder.native.dispatch import HostCapabilities

# PCI vendor ids of compute accelerators; a server's BMC display (e.g. ASPEED 1a03) is not one.
COMPUTE_VENDORS = {
    "10de": "NVIDIA",
    "1002": "AMD",
    "8086": "Intel",
    "1da3": "Habana",
}
ACCELERATOR_CLASSES = ("0x03", "0x12")


@dataclass(frozen=True)
class Accelerator:
    address: str
    pci_class: str
    vendor: str
    device: str
    vendor_name: str
    driver: str | None
    driver_version: str | None

    @property
    def vendor_device(self) -> str:
        return f"{self.vendor}:{self.device}"

    def locked(self) -> lock.AcceleratorFacts:
        """This accelerator in the lock's vocabulary: every fact sysfs gives, stated."""
        return lock.AcceleratorFacts(
            address=self.address,
            vendor_device=self.vendor_device,
            pci_class=self.pci_class,
            driver=self.driver,
            driver_version=self.driver_version,
        )


@dataclass(frozen=True)
class HostFacts:
    arch: str
    os: str
    os_release: dict[str, str]
    kernel: str
    cpu_model: str | None
    cpu_flags: tuple[str, ...]
    cpu_count: int
    memory_bytes: int | None
    accelerators: tuple[Accelerator, ...]

    def capabilities(self) -> HostCapabilities:
        """What a dispatch reads of this host (`builder.native.dispatch`)."""
        return HostCapabilities(arch=self.arch, cpu_flags=frozenset(self.cpu_flags))

    def locked(self) -> lock.HostFacts:
        """These facts in the lock's vocabulary (`builder.lock.HostFacts`), every one stated:
        what `repro build` locks, `repro verify` recomputes and `repro host --json` prints."""
        return lock.HostFacts(
            arch=self.arch,
            os=self.os,
            os_release=self.os_release,
            kernel=self.kernel,
            cpu_model=self.cpu_model,
            cpu_flags=self.cpu_flags,
            cpu_count=self.cpu_count,
            memory_bytes=self.memory_bytes,
            accelerators=tuple(a.locked() for a in self.accelerators),
        )

    def to_json(self) -> dict[str, object]:
        """Everything observed, with the vendor's name: the form `evidence/observations.json`
        seals (`builder.observations`), read back into these dataclasses. Only their fields:
        `vendor_device` is derived from `vendor` and `device` and read back as a property (a
        key of its own made every sealed document with an accelerator unreadable)."""
        return asdict(self)


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


def compare(expected: Host, observed: HostFacts) -> list[Drift]:
    """The facts `[host]` enforces against this host; recorded-only facts are never drift."""
    drifts = [
        _host_drift(fact, str(value), found)
        for fact, value, found in (
            ("arch", expected.arch, observed.arch),
            ("os", expected.os, observed.os),
            ("os_release", expected.os_release, observed.os_release.get("PRETTY_NAME", "")),
            ("kernel", expected.kernel, observed.kernel),
        )
        if value is not None and value != found
    ]
    for driver, version in sorted(expected.drivers.items()):
        found_versions = {a.driver_version for a in observed.accelerators if a.driver == driver}
        if found_versions != {version}:
            found = ", ".join(sorted(v or "unknown" for v in found_versions)) or "not bound"
            drifts.append(_host_drift(f"driver {driver}", version, found))
    for accelerator in expected.accelerators:
        drifts.extend(_accelerator_drifts(accelerator, observed.accelerators))
    return drifts


def _accelerator_drifts(
    expected: ManifestAccelerator, observed: tuple[Accelerator, ...]
) -> list[Drift]:
    present = [a for a in observed if a.vendor_device == expected.vendor_device]
    addresses = sorted(a.address for a in present)
    subject = f"accelerator {expected.vendor_device}"
    found = f"{len(present)} at {', '.join(addresses)}" if present else "none"
    if expected.addresses and sorted(expected.addresses) != addresses:
        return [_host_drift(subject, f"at {', '.join(sorted(expected.addresses))}", found)]
    if expected.count is not None and expected.count != len(present):
        return [_host_drift(subject, f"{expected.count} present", found)]
    return []


def _host_drift(fact: str, expected: str, observed: str) -> Drift:
    return Drift(
        kind=DriftKind.HOST,
        subject=fact,
        expected=expected,
        observed=observed,
        why="the manifest enforces this host fact",
    )
