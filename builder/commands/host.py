"""This host's facts: OS, kernel, CPU, memory and every accelerator on its PCI bus.

`repro host` prints what the host observer sees, the same facts `repro build` records and
`repro verify --host` compares (`--json`: in the lock's vocabulary,
`builder.documents.lock.HostFacts`); an accelerator is read from sysfs (PCI class,
vendor:device, address, bound driver and its module version), never from a vendor tool.
"""

from __future__ import annotations

import argparse
from typing import Literal

from repro_serving.builder.documents import lock
from repro_serving.builder.documents.host import Accelerator, HostFacts
from repro_serving.builder.errors import ExitCode
from repro_serving.builder.observe.host import observe_host
from repro_serving.builder.render import Report, console, table, write_report


class HostOutput(Report):
    """`repro host --json`: this host's facts, as a built lock states them."""

    ok: Literal[True] = True
    host: lock.HostFacts


REPORT = HostOutput
"""The document `--json` prints (its schema: `repro schema host`)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable facts")


def execute(args: argparse.Namespace) -> int:
    facts = observe_host()
    if args.json:
        write_report(HostOutput(host=facts.locked()))
    else:
        _print(facts)
    return int(ExitCode.PASS)


def _print(facts: HostFacts) -> None:
    out = console()
    memory = f"{facts.memory_bytes / 2**30:.1f} GiB" if facts.memory_bytes else "unknown"
    rows = (
        ("arch", facts.arch),
        ("os", facts.os_release.get("PRETTY_NAME", facts.os)),
        ("kernel", facts.kernel),
        ("cpu", f"{facts.cpu_model}, {facts.cpu_count} cores"),
        ("memory", memory),
    )
    out.print(table("host", ("fact", "value"), rows))
    if not facts.accelerators:
        out.print("no accelerator")
        return
    columns = ("address", "vendor:device", "vendor", "class", "driver", "driver version")
    out.print(table("accelerators", columns, (_row(a) for a in facts.accelerators)))


def _row(a: Accelerator) -> tuple[str, ...]:
    driver, version = a.driver or "-", a.driver_version or "-"
    return (a.address, a.vendor_device, a.vendor_name, a.pci_class, driver, version)
