"""One test per loader rule: repro predicts, glibc judges by what the kernel maps."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from repro_serving.builder.native.ldcache import LdCache
from repro_serving.builder.native.loader import (
    Closure,
    LoadedObject,
    LoaderConfig,
    Outcome,
    Resolution,
    dlopen_closure,
    executable_closure,
    resolve_dlopen,
)
from repro_serving.builder.native.loaderhost import HostFileSystem, with_environment

from .conftest import Build, predicted, run_judge

FS = HostFileSystem("/")


def closure_of(
    exe: Path, config: LoaderConfig, cache: LdCache | None, env: dict[str, str] | None = None
) -> Closure:
    return executable_closure(
        str(exe), config=with_environment(config, env or {}), cache=cache, fs=FS
    )


def resolution(closure: Closure, need: str) -> Resolution:
    return next(r for r in closure.resolutions if r.need == need)


def assert_glibc_agrees(closure: Closure, exe: Path, env: dict[str, str] | None = None) -> None:
    mapped = run_judge(exe, env)
    assert mapped.returncode == 0, mapped.stderr
    assert predicted(closure, FS) == mapped.files


def rpath_chain(build: Build, **mid: str) -> Path:
    """bin/app -> a/libtop.so -> b/libmid.so (built with `mid`) -> c/libleaf.so; the app's RPATH
    names a, libtop's names b and c."""
    build.lib("c/libleaf.so")
    build.lib("b/libmid.so", needed=["c/libleaf.so"], **mid)
    build.lib("a/libtop.so", needed=["b/libmid.so"], rpath=f"{build.root}/b:{build.root}/c")
    return build.exe("bin/app", needed=["a/libtop.so"], rpath=f"{build.root}/a")


def test_rpath_is_inherited_through_the_loader_chain(build: Build, base_config, cache) -> None:
    exe = rpath_chain(build)

    closure = closure_of(exe, base_config, cache)

    leaf = resolution(closure, "libleaf.so")
    assert leaf.path == f"{build.root}/c/libleaf.so"
    assert leaf.reason == f"RPATH of {build.root}/a/libtop.so (inherited)"
    assert resolution(closure, "libtop.so").reason == f"RPATH of {exe}"
    assert_glibc_agrees(closure, exe)


def test_runpath_of_the_requester_disables_inherited_rpath(
    build: Build, base_config, cache
) -> None:
    build.lib("d/libleaf.so")
    exe = rpath_chain(build, runpath=f"{build.root}/d")

    closure = closure_of(exe, base_config, cache)

    leaf = resolution(closure, "libleaf.so")
    assert leaf.path == f"{build.root}/d/libleaf.so"
    assert leaf.reason == f"RUNPATH of {build.root}/b/libmid.so"
    assert all("RPATH" not in c.source for c in leaf.searched)
    assert_glibc_agrees(closure, exe)


def test_unresolved_need_lists_the_numbered_places_searched(
    build: Build, base_config, cache
) -> None:
    build.lib("c/libleaf.so")
    build.lib("b/libmid.so", needed=["c/libleaf.so"], runpath=f"{build.root}/nowhere")
    exe = build.exe("bin/app", needed=["b/libmid.so"], rpath=f"{build.root}/b:{build.root}/c")

    closure = closure_of(exe, base_config, cache)

    leaf = resolution(closure, "libleaf.so")
    assert leaf.outcome is Outcome.NOT_FOUND and leaf.path is None
    tried = [c.path for c in leaf.searched]
    assert tried[-1] == "/usr/lib/libleaf.so"
    assert f"{build.root}/nowhere/libleaf.so" in tried
    assert f"{build.root}/c/libleaf.so" not in tried
    mapped = run_judge(exe)
    assert mapped.returncode == 127
    assert "libleaf.so: cannot open shared object file" in mapped.stderr


def test_origin_is_the_directory_the_requester_was_found_in_not_its_realpath(
    build: Build, base_config, cache
) -> None:
    build.lib("link/deps/libdep.so")
    build.lib("real/deps/libdep.so")
    build.lib("real/libplug.so", needed=["real/deps/libdep.so"], rpath="$ORIGIN/deps")
    build.symlink("link/libplug.so", "../real/libplug.so")
    exe = build.exe("bin/app", needed=["real/libplug.so"], rpath=f"{build.root}/link")

    closure = closure_of(exe, base_config, cache)

    dep = resolution(closure, "libdep.so")
    assert dep.path == f"{build.root}/link/deps/libdep.so"
    assert dep.element == "$ORIGIN/deps"
    assert_glibc_agrees(closure, exe)


def test_dotdot_after_a_symlinked_directory_is_resolved_physically(
    build: Build, base_config, cache
) -> None:
    build.lib("a/lib/libfoo.so")
    build.lib("b/deep/lib/libfoo.so")
    (build.root / "b/deep/sub").mkdir(parents=True)
    build.symlink("a/sub", f"{build.root}/b/deep/sub")
    exe = build.exe("bin/app", needed=["a/lib/libfoo.so"], rpath=f"{build.root}/a/sub/../lib")

    closure = closure_of(exe, base_config, cache)

    foo = resolution(closure, "libfoo.so")
    assert foo.path == f"{build.root}/a/sub/../lib/libfoo.so"
    assert foo.file_id == FS.file_id(f"{build.root}/b/deep/lib/libfoo.so")
    assert_glibc_agrees(closure, exe)


def test_origin_of_the_executable_is_its_real_directory(build: Build, base_config, cache) -> None:
    build.lib("real/lib/libfoo.so")
    build.lib("elsewhere/lib/libfoo.so")
    exe = build.exe("real/bin/app", needed=["real/lib/libfoo.so"], rpath="$ORIGIN/../lib")
    build.symlink("elsewhere/bin/app", str(exe))

    closure = closure_of(build.root / "elsewhere/bin/app", base_config, cache)

    assert resolution(closure, "libfoo.so").path == f"{build.root}/real/bin/../lib/libfoo.so"
    assert_glibc_agrees(closure, build.root / "elsewhere/bin/app")


@pytest.mark.parametrize(
    ("library_path", "winner"),
    [
        ("{root}/one:{root}/two", "one"),
        ("{root}/two;{root}/one", "two"),
        ("{root}/none::{root}/one", "bin"),  # empty element: the cwd
    ],
)
def test_ld_library_path_order(
    build: Build, base_config, cache, library_path: str, winner: str
) -> None:
    for where in ("one", "two", "three"):
        build.lib(f"{where}/libfoo.so")
    exe = build.exe("bin/app", needed=["three/libfoo.so"], runpath=f"{build.root}/three")
    build.copy(build.root / "two/libfoo.so", "bin/libfoo.so")
    env = {"LD_LIBRARY_PATH": library_path.format(root=build.root)}
    cwd = build.root / "bin"

    fs = HostFileSystem(str(cwd))
    closure = executable_closure(
        str(exe), config=with_environment(base_config, env), cache=cache, fs=fs
    )

    foo = resolution(closure, "libfoo.so")
    assert foo.reason == "LD_LIBRARY_PATH"
    assert fs.file_id(foo.path or "") == fs.file_id(f"{build.root}/{winner}/libfoo.so")
    mapped = run_judge(exe, env, cwd=cwd)
    assert mapped.returncode == 0, mapped.stderr
    assert predicted(closure, fs) == mapped.files


def test_rpath_comes_before_ld_library_path_and_runpath_after(
    build: Build, base_config, cache
) -> None:
    build.lib("env/libfoo.so")
    build.lib("rpath/libfoo.so")
    build.lib("env/libbar.so")
    build.lib("runpath/libbar.so")
    build.lib("run/libuse.so", needed=["runpath/libbar.so"], runpath=f"{build.root}/runpath")
    exe = build.exe(
        "bin/app",
        needed=["rpath/libfoo.so", "run/libuse.so"],
        rpath=f"{build.root}/rpath:{build.root}/run",
    )
    env = {"LD_LIBRARY_PATH": f"{build.root}/env"}

    closure = closure_of(exe, base_config, cache, env)

    assert resolution(closure, "libfoo.so").path == f"{build.root}/rpath/libfoo.so"
    assert resolution(closure, "libbar.so").path == f"{build.root}/env/libbar.so"
    assert_glibc_agrees(closure, exe, env)


def _patched_machine(build: Build, source: Path, path: str) -> Path:
    target = build.copy(source, path)
    data = bytearray(target.read_bytes())
    data[18:20] = (183).to_bytes(2, "little")  # e_machine = EM_AARCH64
    target.write_bytes(bytes(data))
    return target


def _other_class(build: Build, source: Path, path: str) -> Path:
    target = build.root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    c_file = build.root / "src" / "other_class.c"
    c_file.parent.mkdir(parents=True, exist_ok=True)
    c_file.write_text("int repro_fixture_other(void) { return 32; }\n")
    command = ["gcc", "-m32", "-shared", "-nostdlib", "-fPIC", "-o", str(target), str(c_file)]
    subprocess.run(command, check=True, capture_output=True)
    return target


@pytest.mark.parametrize(
    ("make_wrong", "why"),
    [
        (_other_class, "skipped: wrong ELF class: ELFCLASS32"),
        (_patched_machine, "skipped: wrong machine EM_AARCH64, expected EM_X86_64"),
    ],
)
def test_file_of_another_class_or_machine_earlier_on_the_path_is_skipped(
    build: Build, base_config, cache, make_wrong, why: str
) -> None:
    good = build.lib("good/libfoo.so")
    make_wrong(build, good, "wrong/libfoo.so")
    exe = build.exe("bin/app", needed=["good/libfoo.so"])
    env = {"LD_LIBRARY_PATH": f"{build.root}/wrong:{build.root}/good"}

    closure = closure_of(exe, base_config, cache, env)

    foo = resolution(closure, "libfoo.so")
    assert foo.path == str(good)
    assert [(c.path, c.result) for c in foo.skipped] == [(f"{build.root}/wrong/libfoo.so", why)]
    assert_glibc_agrees(closure, exe, env)


def test_glibc_hwcaps_subdirectory_is_preferred_as_this_cpu_allows(
    build: Build, base_config, cache
) -> None:
    levels = [s for s in base_config.subdirs if s.startswith("glibc-hwcaps/")]
    assert levels, "this loader reports no glibc-hwcaps subdirectory"
    build.lib("lib/libfoo.so")
    build.lib(f"lib/{levels[-1]}libfoo.so")  # the least preferred supported level
    exe = build.exe("bin/app", needed=["lib/libfoo.so"], runpath=f"{build.root}/lib")

    closure = closure_of(exe, base_config, cache)

    foo = resolution(closure, "libfoo.so")
    assert foo.path == f"{build.root}/lib/{levels[-1]}libfoo.so"
    assert foo.directory == f"{build.root}/lib/{levels[-1]}"
    assert_glibc_agrees(closure, exe)


def test_absolute_runpath_to_a_byte_identical_copy_maps_the_external_one(
    build: Build, base_config, cache
) -> None:
    sibling = build.lib("app/libkernels.so")
    external = build.copy(sibling, "other-tree/lib/libkernels.so")
    exe = build.exe("app/app", needed=["app/libkernels.so"], runpath=f"{build.root}/other-tree/lib")

    closure = closure_of(exe, base_config, cache)

    kernels = resolution(closure, "libkernels.so")
    assert kernels.path == str(external)
    assert sibling.read_bytes() == external.read_bytes()
    assert kernels.file_id == FS.file_id(str(external)) != FS.file_id(str(sibling))
    assert_glibc_agrees(closure, exe)


def test_ld_preload_loads_first_after_the_executable(build: Build, base_config, cache) -> None:
    build.lib("pre/libdep.so")
    pre = build.lib("pre/libpre.so", needed=["pre/libdep.so"], rpath=f"{build.root}/pre")
    build.lib("env/libname.so")
    build.lib("lib/libfoo.so")
    exe = build.exe("bin/app", needed=["lib/libfoo.so"], rpath=f"{build.root}/lib")
    env = {"LD_PRELOAD": f"{pre} libname.so", "LD_LIBRARY_PATH": f"{build.root}/env"}

    closure = closure_of(exe, base_config, cache, env)

    order = [Path(o.path).name for o in closure.order]
    assert order[:4] == ["app", "libpre.so", "libname.so", "libfoo.so"]
    assert resolution(closure, str(pre)).reason == "LD_PRELOAD: absolute path"
    assert resolution(closure, "libname.so").reason == "LD_PRELOAD: LD_LIBRARY_PATH"
    assert_glibc_agrees(closure, exe, env)
    traced = subprocess.run(
        [str(exe)],
        env={**env, "LD_TRACE_LOADED_OBJECTS": "1"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    glibc_order = [line.split()[0] for line in traced.splitlines() if "linux-vdso" not in line]
    assert glibc_order == [o.names[0] for o in closure.order[1:]]


def test_nodeflib_executable_skips_cache_and_default_dirs(build: Build, base_config, cache) -> None:
    exe = build.exe("bin/app", nodeflib=True)

    closure = closure_of(exe, base_config, cache)

    libc = resolution(closure, "libc.so.6")
    assert libc.outcome is Outcome.NOT_FOUND
    assert any(c.source == "ld.so.cache" and "NODEFLIB" in c.result for c in libc.searched)
    assert all(c.source != "default path" for c in libc.searched)
    mapped = run_judge(exe)
    assert mapped.returncode == 127
    assert "libc.so.6: cannot open shared object file" in mapped.stderr

    env = {"LD_LIBRARY_PATH": base_config.system_dirs[0]}
    with_path = closure_of(exe, base_config, cache, env)
    assert resolution(with_path, "libc.so.6").reason == "LD_LIBRARY_PATH"
    assert_glibc_agrees(with_path, exe, env)


def test_runtime_dlopen_uses_the_callers_runpath(build: Build, base_config, cache) -> None:
    build.lib("plugins/deps/libhelper.so")
    build.lib("plugins/libplug.so", needed=["plugins/deps/libhelper.so"], rpath="$ORIGIN/deps")
    exe = build.exe("bin/app", runpath=f"{build.root}/plugins")
    startup = closure_of(exe, base_config, cache)
    caller = startup.order[0]

    opened = resolve_dlopen(
        "libplug.so", caller, startup.order, config=base_config, cache=cache, fs=FS
    )
    added = dlopen_closure(
        "libplug.so", caller, startup.order, config=base_config, cache=cache, fs=FS
    )

    assert opened.reason == f"RUNPATH of {exe}"
    assert [Path(o.path).name for o in added.order] == ["libplug.so", "libhelper.so"]
    mapped = run_judge(exe, dlopen="libplug.so")
    assert mapped.returncode == 0, mapped.stderr
    everything = Closure(startup.order + added.order, startup.resolutions + added.resolutions)
    assert predicted(everything, FS) == mapped.files


def test_dlopened_object_does_not_inherit_the_rpath_of_its_caller(
    build: Build, base_config, cache
) -> None:
    build.lib("callerlib/libhelper.so")
    build.lib("callerlib/libplug.so", needed=["callerlib/libhelper.so"])
    build.lib("caller/libcaller.so", rpath=f"{build.root}/callerlib", dlopens=True)
    exe = build.exe("bin/app", needed=["caller/libcaller.so"], runpath=f"{build.root}/caller")
    startup = closure_of(exe, base_config, cache)
    caller = next(o for o in startup.order if o.path.endswith("libcaller.so"))

    added = dlopen_closure(
        "libplug.so", caller, startup.order, config=base_config, cache=cache, fs=FS
    )

    assert resolution(added, "libplug.so").reason == f"RPATH of {caller.path}"
    assert resolution(added, "libhelper.so").outcome is Outcome.NOT_FOUND
    mapped = run_judge(exe, {"REPRO_FIXTURE_DLOPEN": "libplug.so"})
    assert "dlopen failed: libhelper.so: cannot open shared object file" in mapped.stderr
    assert predicted(startup, FS) == mapped.files


def test_already_loaded_soname_satisfies_a_need_without_search_path(
    build: Build, base_config, cache
) -> None:
    build.lib("torch/lib/libc10.so")
    extension = build.lib("vllm/_C.abi3.so", needed=["torch/lib/libc10.so"])
    exe = build.exe("bin/python", needed=["torch/lib/libc10.so"], rpath=f"{build.root}/torch/lib")
    running = run_judge(exe)  # the process as a live audit sees it: paths from its maps
    loaded = [
        LoadedObject.from_file(path, FS, executable=path == str(exe))
        for _, path in sorted(running.files)
    ]
    caller = next(o for o in loaded if o.executable)

    alone = executable_closure(str(extension), config=base_config, cache=cache, fs=FS)
    added = dlopen_closure(str(extension), caller, loaded, config=base_config, cache=cache, fs=FS)

    assert resolution(alone, "libc10.so").outcome is Outcome.NOT_FOUND
    c10 = resolution(added, "libc10.so")
    assert c10.reason == "already loaded (soname)"
    assert c10.path == f"{build.root}/torch/lib/libc10.so"
    mapped = run_judge(exe, dlopen=str(extension))
    assert mapped.returncode == 0, mapped.stderr
    everything = Closure((*loaded, *added.order), ())
    assert predicted(everything, FS) == mapped.files


def test_same_file_under_another_name_is_not_loaded_twice(build: Build, base_config, cache) -> None:
    build.lib("lib/libfoo.so.1", soname="libfoo.so.1")
    build.lib("stub/libfoo-alias.so")  # link-time stand-in: libuser records this name
    build.lib("lib/libuser.so", needed=["stub/libfoo-alias.so"])
    build.symlink("lib/libfoo-alias.so", "libfoo.so.1")
    exe = build.exe(
        "bin/app", needed=["lib/libfoo.so.1", "lib/libuser.so"], rpath=f"{build.root}/lib"
    )

    closure = closure_of(exe, base_config, cache)

    alias = resolution(closure, "libfoo-alias.so")
    assert alias.reason.startswith("same file already loaded")
    assert alias.path == f"{build.root}/lib/libfoo.so.1"
    assert len(closure.order) == len({o.file_id for o in closure.order})
    assert_glibc_agrees(closure, exe)


@pytest.mark.parametrize(
    "rpath", ["$ORIGIN/../$LIB", "${ORIGIN}/../${LIB}", "$ORIGIN/../$PLATFORM"]
)
def test_dynamic_string_tokens(build: Build, base_config, cache, rpath: str) -> None:
    subdir = base_config.platform if "PLATFORM" in rpath else base_config.lib
    build.lib(f"{subdir}/libfoo.so")
    exe = build.exe("bin/app", needed=[f"{subdir}/libfoo.so"], rpath=rpath)

    closure = closure_of(exe, base_config, cache)

    assert resolution(closure, "libfoo.so").path == f"{build.root}/bin/../{subdir}/libfoo.so"
    assert_glibc_agrees(closure, exe)
