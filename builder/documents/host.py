"""A host's facts as sealed in `evidence/observations.json` and named in the lock, and the
facts a manifest's `[host]` enforces against them. Observed by `builder.observe.host`."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from repro_serving.builder.documents import lock
from repro_serving.builder.documents.manifest import Accelerator as ManifestAccelerator
from repro_serving.builder.documents.manifest import Host
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.native.dispatch import HostCapabilities


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
        """These facts in the lock's vocabulary (`builder.documents.lock.HostFacts`), every one
        stated: what `repro build` locks, `repro verify` recomputes and `repro host --json`
        prints."""
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
        seals (`builder.documents.observations`), read back into these dataclasses. Only their
        fields: `vendor_device` is derived from `vendor` and `device` and read back as a
        property (a key of its own made every sealed document with an accelerator unreadable)."""
        return asdict(self)


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
