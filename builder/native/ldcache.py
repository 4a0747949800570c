"""`/etc/ld.so.cache`: parse its bytes and look a name up exactly as glibc 2.36's ld.so does.

This module owns the cache format and `_dl_load_cache_lookup`; it does no I/O. The format is
glibc's `glibc-ld.so.cache1.1` (alone, or after an old `ld.so-1.7.0` table, as glibc accepts),
with the extension directory whose glibc-hwcaps section tags entries with a subdirectory name.
A cache holding only the old format is refused: ld.so 2.36 would read it, but no ldconfig of
this century writes it, so it means the wrong file was given.

Lookup (glibc `search_cache`): binary search with `_dl_cache_libcmp` (digit runs compare as
numbers), back up to the first entry of that name, then walk the entries of that name: an entry
counts only when its flags are the executable's cache id; glibc-hwcaps entries come first and the
one of the best usable subdirectory wins (a subdirectory is usable when the loader lists it
as active and the entry's ISA level is supported); otherwise the first plain entry wins.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from repro_serving.builder.errors import BadInput

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"

FLAG_ELF_LIBC6 = 0x0003
FLAG_X8664_LIB64 = 0x0300
X86_64_CACHE_ID = FLAG_X8664_LIB64 | FLAG_ELF_LIBC6
AARCH64_CACHE_ID = 0x0A00 | FLAG_ELF_LIBC6  # FLAG_AARCH64_LIB64

HWCAP_EXTENSION = 1 << 62
ISA_LEVEL_MASK = (1 << 10) - 1
_HWCAP_TLS_MASK = 1 << 63
# x86 (sysdeps/x86/dl-procinfo.h): four platform bits starting at bit 48.
_X86_PLATFORM_MASK = ((1 << 4) - 1) << 48

_EXTENSION_MAGIC = 0xEAA42174
_EXTENSION_TAG_HWCAPS = 1
_ENDIAN_MASK = 3
_ENDIAN_UNSET = 0
_ENDIAN_LITTLE = 2

_OLD_HEADER = struct.Struct("<11sxI")  # magic, nlibs
_OLD_ENTRY_SIZE = 12
_NEW_HEADER = struct.Struct("<20sIIB3xI12x")  # magic+version, nlibs, len_strings, flags, ext
_NEW_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap


@dataclass(frozen=True)
class CachePlatform:
    """What the running ld.so compares cache entries against (all read from the real loader).

    `cache_id`: the only entry flags this ld.so accepts (x86-64: libc6 | x86-64 lib64).
    `hwcaps`: the active glibc-hwcaps subdirectory names, most preferred first.
    `isa_levels`: the x86 ISA level bits this CPU supports (`cpu_features.isa_1`).
    `hwcap`: legacy `dl_hwcap & hwcap_mask`; `platform_bit`: the platform's bit, or None when the
    platform is not one of the legacy named platforms (glibc's -1).
    `os_version`: the running kernel as glibc encodes it (major<<16 | minor<<8 | patch).
    """

    cache_id: int
    hwcaps: tuple[str, ...]
    isa_levels: int
    hwcap: int = 0
    platform_bit: int | None = None
    os_version: int = 0


@dataclass(frozen=True)
class CacheEntry:
    flags: int
    name: str
    path: str
    os_version: int
    hwcap: int
    hwcaps_subdir: str | None

    @property
    def is_hwcaps(self) -> bool:
        return ((self.hwcap >> 32) & ~ISA_LEVEL_MASK) == (HWCAP_EXTENSION >> 32)

    @property
    def isa_level(self) -> int:
        return (self.hwcap >> 32) & ISA_LEVEL_MASK


@dataclass(frozen=True)
class LdCache:
    """The entries of one cache file, in file order, and where it came from.

    A lookup's answer is remembered (the entries never change), so a name asked by every
    object of many closures costs one binary search."""

    source: str
    entries: tuple[CacheEntry, ...]
    _answers: dict[tuple[str, CachePlatform], str | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "/etc/ld.so.cache") -> LdCache:
        start = _new_format_offset(data, source)
        return cls(source=source, entries=_parse_new(data, start, source))

    def lookup(self, name: str, platform: CachePlatform) -> str | None:
        """The path ld.so takes from the cache for `name`, or None (glibc `search_cache`)."""
        key = (name, platform)
        if key not in self._answers:
            self._answers[key] = self._search(name, platform)
        return self._answers[key]

    def _search(self, name: str, platform: CachePlatform) -> str | None:
        first = _first_match(self.entries, name)
        if first is None:
            return None
        best: CacheEntry | None = None
        best_priority = 0
        for entry in self.entries[first:]:
            if libcmp(name, entry.name) != 0:
                break
            if entry.flags != platform.cache_id:
                continue
            named = entry.is_hwcaps
            if named and not _isa_supported(entry, platform):
                continue
            if not named and best is not None:
                break
            if not _usable(entry, platform):
                continue
            if named:
                priority = _hwcaps_priority(entry, platform)
                if priority == 0 or (best is not None and priority >= best_priority):
                    continue
                best_priority = priority
            best = entry
            if not named:
                break
        return None if best is None else best.path


def libcmp(left: str, right: str) -> int:
    """glibc `_dl_cache_libcmp`: runs of digits compare by value, other bytes by code."""
    a, b = _signed(left), _signed(right)
    i = j = 0
    while i < len(a):
        if _digit(a, i):
            if not _digit(b, j):
                return 1
            value_a, i = _number(a, i)
            value_b, j = _number(b, j)
            if value_a != value_b:
                return value_a - value_b
        elif _digit(b, j):
            return -1
        elif j >= len(b) or a[i] != b[j]:
            return a[i] - (b[j] if j < len(b) else 0)
        else:
            i += 1
            j += 1
    return 0 - (b[j] if j < len(b) else 0)


def _signed(text: str) -> list[int]:
    """The bytes of `text` as C's (signed, on x86) `char` values."""
    return [b - 256 if b > 127 else b for b in text.encode("utf-8", errors="surrogateescape")]


def _digit(data: list[int], index: int) -> bool:
    return index < len(data) and 0x30 <= data[index] <= 0x39


def _number(data: list[int], index: int) -> tuple[int, int]:
    value = 0
    while _digit(data, index):
        value = value * 10 + data[index] - 0x30
        index += 1
    return value, index


def _first_match(entries: tuple[CacheEntry, ...], name: str) -> int | None:
    """glibc's binary search, then back to the first entry that compares equal."""
    left, right = 0, len(entries) - 1
    while left <= right:
        middle = (left + right) // 2
        cmp = libcmp(name, entries[middle].name)
        if cmp == 0:
            while middle > 0 and libcmp(name, entries[middle - 1].name) == 0:
                middle -= 1
            return middle
        if cmp < 0:  # ldconfig sorts the table in descending order
            left = middle + 1
        else:
            right = middle - 1
    return None


def _isa_supported(entry: CacheEntry, platform: CachePlatform) -> bool:
    level = 1 << entry.isa_level
    return level & platform.isa_levels == level


def _hwcaps_priority(entry: CacheEntry, platform: CachePlatform) -> int:
    """Zero when unusable, else 1 for the most preferred subdirectory, 2 for the next…"""
    if entry.hwcaps_subdir is None or entry.hwcaps_subdir not in platform.hwcaps:
        return 0
    return int(platform.hwcaps.index(entry.hwcaps_subdir)) + 1


def _usable(entry: CacheEntry, platform: CachePlatform) -> bool:
    """Legacy hwcap bits, required kernel version and legacy platform (glibc's order)."""
    exclude = ~(platform.hwcap | _X86_PLATFORM_MASK | _HWCAP_TLS_MASK) & ((1 << 64) - 1)
    if not entry.is_hwcaps and entry.hwcap & exclude:
        return False
    if platform.os_version and entry.os_version > platform.os_version:
        return False
    platform_bits = entry.hwcap & _X86_PLATFORM_MASK
    return not (platform_bits and platform_bits != platform.platform_bit)


def _new_format_offset(data: bytes, source: str) -> int:
    if data.startswith(NEW_MAGIC):
        return 0
    if data.startswith(OLD_MAGIC) and len(data) >= _OLD_HEADER.size:
        nlibs = int(_OLD_HEADER.unpack_from(data)[1])
        offset = _OLD_HEADER.size + nlibs * _OLD_ENTRY_SIZE
        offset = (offset + 7) & ~7  # ALIGN_CACHE: the new header is 8-byte aligned
        if data[offset : offset + len(NEW_MAGIC)] == NEW_MAGIC:
            return offset
        raise BadInput(
            "ld.so cache in the old format only",
            where=source,
            expected=f"{NEW_MAGIC.decode()} (alone or after the old table)",
            found=f"{OLD_MAGIC.decode()} with {nlibs} entries and no new table after them",
            hint="regenerate it with this host's ldconfig",
        )
    raise BadInput(
        "not an ld.so cache",
        where=source,
        expected=f"file starting with {NEW_MAGIC.decode()!r}",
        found=repr(data[: len(NEW_MAGIC)]),
    )


def _parse_new(data: bytes, start: int, source: str) -> tuple[CacheEntry, ...]:
    if len(data) < start + _NEW_HEADER.size:
        raise _truncated(source, start + _NEW_HEADER.size, len(data), "the header")
    _, nlibs, _, flags, ext_offset = _NEW_HEADER.unpack_from(data, start)
    if flags & _ENDIAN_MASK not in (_ENDIAN_UNSET, _ENDIAN_LITTLE):
        raise BadInput(
            "ld.so cache of another byte order",
            where=source,
            expected="little-endian (flags 0 or 2)",
            found=f"endianness flags {flags & _ENDIAN_MASK}",
        )
    table_end = start + _NEW_HEADER.size + nlibs * _NEW_ENTRY.size
    if len(data) < table_end:
        raise _truncated(source, table_end, len(data), f"{nlibs} entries")
    hwcaps = _hwcaps_names(data, ext_offset)
    return tuple(
        _entry(data, start, start + _NEW_HEADER.size + i * _NEW_ENTRY.size, hwcaps, source)
        for i in range(nlibs)
    )


def _entry(data: bytes, start: int, at: int, hwcaps: tuple[str, ...], source: str) -> CacheEntry:
    flags, key, value, os_version, hwcap = _NEW_ENTRY.unpack_from(data, at)
    entry = CacheEntry(
        flags=flags,
        name=_string(data, start + key, source),
        path=_string(data, start + value, source),
        os_version=os_version,
        hwcap=hwcap,
        hwcaps_subdir=None,
    )
    if not entry.is_hwcaps:
        return entry
    index = hwcap & 0xFFFFFFFF
    subdir = hwcaps[index] if index < len(hwcaps) else None
    return CacheEntry(flags, entry.name, entry.path, os_version, hwcap, subdir)


def _hwcaps_names(data: bytes, ext_offset: int) -> tuple[str, ...]:
    """The glibc-hwcaps section of the extension directory (offsets from the file start).

    Like glibc's `cache_extension_load`, an extension directory that does not check out is
    ignored rather than refused: its entries then match no subdirectory and are never used.
    """
    if ext_offset == 0 or ext_offset % 4 or len(data) < ext_offset + 8:
        return ()
    magic, count = struct.unpack_from("<II", data, ext_offset)
    if magic != _EXTENSION_MAGIC or len(data) < ext_offset + 8 + 16 * count:
        return ()
    for index in range(count):
        tag, _, offset, size = struct.unpack_from("<IIII", data, ext_offset + 8 + 16 * index)
        if offset + size > len(data):
            return ()
        if tag == _EXTENSION_TAG_HWCAPS and size and size % 4 == 0 and offset % 4 == 0:
            indices = struct.unpack_from(f"<{size // 4}I", data, offset)
            return tuple(_c_string(data, i) for i in indices)
    return ()


def _c_string(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    return data[offset : end if end >= 0 else len(data)].decode("utf-8", "surrogateescape")


def _string(data: bytes, offset: int, source: str) -> str:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        raise _truncated(source, offset + 1, len(data), "a string")
    return data[offset:end].decode("utf-8", errors="surrogateescape")


def _truncated(source: str, needed: int, size: int, what: str) -> BadInput:
    return BadInput(
        "truncated ld.so cache",
        where=source,
        expected=f"at least {needed} bytes to hold {what}",
        found=f"{size} bytes",
    )
