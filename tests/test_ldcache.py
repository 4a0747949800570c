"""The ld.so.cache parser on the host's real cache and on caches written by this host's ldconfig."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from diagnostics import diagnostic, refusal
from hypothesis import given
from hypothesis import strategies as st

from repro_serving.builder.errors import BadInput
from repro_serving.builder.native.ldcache import NEW_MAGIC, OLD_MAGIC, LdCache, libcmp
from repro_serving.builder.native.loaderhost import host_config, read_cache

_LDCONFIG_LINE = re.compile(r"^\s+(\S+) \(([^)]*)\) => (\S+)$")


def ldconfig_print(cache: Path) -> list[tuple[str, str, str]]:
    """`ldconfig -p -C cache` as (name, description, path), in its order."""
    out = subprocess.run(
        ["ldconfig", "-p", "-C", str(cache)], capture_output=True, text=True, check=True
    ).stdout
    return [m.groups() for m in map(_LDCONFIG_LINE.match, out.splitlines()) if m]


@pytest.fixture(scope="module")
def platform():  # type: ignore[no-untyped-def]
    return host_config({}).cache_platform


def test_every_lookup_on_the_real_cache_matches_ldconfig(platform) -> None:
    cache = read_cache()
    assert cache is not None
    expected: dict[str, str] = {}
    for name, description, path in ldconfig_print(Path("/etc/ld.so.cache")):
        if description == "libc6,x86-64":
            expected.setdefault(name, path)
    assert expected, "ldconfig printed no x86-64 entry"
    assert {name: cache.lookup(name, platform) for name in expected} == expected
    assert len(cache.entries) == len(ldconfig_print(Path("/etc/ld.so.cache")))


@pytest.fixture(scope="module")
def hwcaps_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache written by ldconfig for a directory holding glibc-hwcaps builds of one library."""
    root = tmp_path_factory.mktemp("hwcaps")
    source = root / "foo.c"
    source.write_text("int foo(void) { return 1; }\n")
    for where in ("lib", "lib/glibc-hwcaps/x86-64-v2", "lib/glibc-hwcaps/x86-64-v3"):
        (root / where).mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "gcc",
                "-shared",
                "-fPIC",
                "-Wl,-soname,librepro-hw.so.1",
                "-o",
                str(root / where / "librepro-hw.so.1"),
                str(source),
            ],
            check=True,
        )
    (root / "ld.so.conf").write_text(f"{root}/lib\n")
    cache = root / "ld.so.cache"
    subprocess.run(["ldconfig", "-X", "-C", str(cache), "-f", str(root / "ld.so.conf")], check=True)
    return cache


def test_hwcaps_entries_are_parsed_as_ldconfig_prints_them(hwcaps_cache: Path) -> None:
    cache = LdCache.from_bytes(hwcaps_cache.read_bytes(), str(hwcaps_cache))

    ours = {
        (e.name, e.hwcaps_subdir, e.path) for e in cache.entries if e.name == "librepro-hw.so.1"
    }
    theirs = set()
    for name, description, path in ldconfig_print(hwcaps_cache):
        match = re.search(r'hwcap: "([^"]+)"', description)
        if name == "librepro-hw.so.1":
            theirs.add((name, match.group(1) if match else None, path))
    assert ours == theirs
    assert len(ours) == 3


def test_lookup_prefers_the_best_active_hwcaps_subdirectory(hwcaps_cache: Path, platform) -> None:
    cache = LdCache.from_bytes(hwcaps_cache.read_bytes(), str(hwcaps_cache))
    lib = hwcaps_cache.parent / "lib"
    best = next(level for level in platform.hwcaps if level in ("x86-64-v3", "x86-64-v2"))

    assert (
        cache.lookup("librepro-hw.so.1", platform) == f"{lib}/glibc-hwcaps/{best}/librepro-hw.so.1"
    )
    only_v2 = replace(platform, hwcaps=("x86-64-v2",))
    assert (
        cache.lookup("librepro-hw.so.1", only_v2)
        == f"{lib}/glibc-hwcaps/x86-64-v2/librepro-hw.so.1"
    )
    baseline = replace(platform, hwcaps=())
    assert cache.lookup("librepro-hw.so.1", baseline) == f"{lib}/librepro-hw.so.1"
    other_abi = replace(platform, cache_id=0x0003)
    assert cache.lookup("librepro-hw.so.1", other_abi) is None


def test_new_format_after_the_old_table_is_read_as_glibc_does(platform) -> None:
    real = Path("/etc/ld.so.cache").read_bytes()
    combined = OLD_MAGIC + b"\0" + (0).to_bytes(4, "little") + real
    cache = LdCache.from_bytes(combined, "combined")
    reference = read_cache()
    assert reference is not None
    assert cache.lookup("libc.so.6", platform) == reference.lookup("libc.so.6", platform)


def test_old_format_alone_is_refused_with_what_was_found() -> None:
    data = OLD_MAGIC + b"\0" + (2).to_bytes(4, "little") + bytes(24) + b"libx.so\0"
    assert refusal(BadInput, LdCache.from_bytes, data, "/tmp/old.cache") == diagnostic(
        "ld.so cache in the old format only",
        "/tmp/old.cache",
        expected="glibc-ld.so.cache1.1 (alone or after the old table)",
        found="ld.so-1.7.0 with 2 entries and no new table after them",
        hint="regenerate it with this host's ldconfig",
    )


def test_truncated_cache_is_refused_with_sizes() -> None:
    data = NEW_MAGIC + (1000).to_bytes(4, "little") + bytes(24)
    assert refusal(BadInput, LdCache.from_bytes, data, "/tmp/short.cache") == diagnostic(
        "truncated ld.so cache",
        "/tmp/short.cache",
        expected="at least 24048 bytes to hold 1000 entries",
        found="48 bytes",
    )


def test_other_file_is_not_a_cache() -> None:
    with pytest.raises(BadInput) as raised:
        LdCache.from_bytes(b"hello", "/tmp/x")
    assert raised.value.what == "not an ld.so cache"


@pytest.mark.parametrize(
    ("left", "right", "sign"),
    [
        ("libfoo.so.10", "libfoo.so.9", 1),
        ("libfoo.so.01", "libfoo.so.1", 0),
        ("libfoo.so", "libfoo.so.1", -1),
        ("liba.so", "libb.so", -1),
        ("lib1", "liba", 1),
    ],
)
def test_libcmp_compares_digit_runs_as_numbers(left: str, right: str, sign: int) -> None:
    result = libcmp(left, right)
    assert (result > 0) - (result < 0) == sign


@given(st.text(alphabet="ab.01239", max_size=8), st.text(alphabet="ab.01239", max_size=8))
def test_libcmp_is_antisymmetric(left: str, right: str) -> None:
    a, b = libcmp(left, right), libcmp(right, left)
    assert (a > 0) - (a < 0) == -((b > 0) - (b < 0))
