"""`tools/requirements.txt`: the runtime dependencies of the repro a bundle carries, each pinned
by version and sha256, in the one form repro writes and reads (`ToolRequirements`). Written by
`builder.observe.tools`, held to the bundle's wheel by `builder.handoff.tools`."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from repro_serving.builder.documents.python import normalize
from repro_serving.builder.errors import BadInput
from repro_serving.builder.hashing import SHA256_HEX
from repro_serving.builder.sealing.bundle import REQUIREMENTS_FILE


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Pin(_Frozen):
    name: str
    version: str
    sha256: str


_HEADER = (
    "# The runtime dependencies of repro {repro}, each pinned by version and sha256, for pip's\n"
    "# hash-checking mode: pip install --require-hashes --no-deps -r requirements.txt\n"
    "# python: {python}\n"
    "# platform: {platform}\n"
)
_HEADER_LINE = re.compile(
    r"# The runtime dependencies of repro (?P<repro>\S+), each pinned by version and sha256, "
    r"for pip's"
)
_FIELD = re.compile(r"# (?P<key>python|platform): (?P<value>[A-Za-z0-9._-]+)")
_PIN = re.compile(
    r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)"
    rf" --hash=sha256:(?P<sha256>{SHA256_HEX})"
)


class ToolRequirements(_Frozen):
    """`tools/requirements.txt`: repro's runtime dependencies for one interpreter release series
    (`3.11`) and platform (`linux-x86_64`, as `sysconfig.get_platform()` says), sorted by name."""

    repro: str
    python: str
    platform: str
    pins: tuple[Pin, ...]

    def to_bytes(self) -> bytes:
        header = _HEADER.format(repro=self.repro, python=self.python, platform=self.platform)
        lines = [f"{p.name}=={p.version} --hash=sha256:{p.sha256}\n" for p in self.pins]
        return (header + "".join(lines)).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str) -> ToolRequirements:
        """The file in exactly the form `to_bytes` writes, else `BadInput` naming the line."""
        try:
            lines = data.decode("utf-8").split("\n")
        except UnicodeDecodeError as error:
            raise BadInput(f"{REQUIREMENTS_FILE} is not UTF-8", where=where) from error
        head = _HEADER_LINE.fullmatch(lines[0])
        fields = [_FIELD.fullmatch(line) for line in lines[2:4]]
        if head is None or None in fields or lines[-1] != "":
            raise BadInput(
                f"{REQUIREMENTS_FILE} does not begin as repro writes it",
                where=where,
                expected="the header naming repro's version, python and platform",
            )
        values = {m["key"]: m["value"] for m in fields if m is not None}
        pins = []
        for number, line in enumerate(lines[4:-1], start=5):
            match = _PIN.fullmatch(line)
            if match is None:
                raise BadInput(
                    f"a line of {REQUIREMENTS_FILE} is not a pin",
                    where=f"{where}:{number}",
                    expected="<name>==<version> --hash=sha256:<64 lowercase hex>",
                    found=repr(line[:200]),
                )
            pins.append(Pin(name=match["name"], version=match["version"], sha256=match["sha256"]))
        found = cls(
            repro=head["repro"],
            python=values.get("python", ""),
            platform=values.get("platform", ""),
            pins=tuple(pins),
        )
        if found.to_bytes() != data or sorted(pins, key=pin_key) != pins:
            raise BadInput(
                f"{REQUIREMENTS_FILE} is not in the one form repro writes",
                where=where,
                expected="its header, then one pin per distribution sorted by normalised name",
            )
        if len({normalize(p.name) for p in pins}) != len(pins):
            raise BadInput(f"{REQUIREMENTS_FILE} pins a distribution twice", where=where)
        return found

    def pinned(self) -> dict[str, Pin]:
        """Normalised name → pin."""
        return {normalize(p.name): p for p in self.pins}


def pin_key(pin: Pin) -> str:
    return normalize(pin.name)
