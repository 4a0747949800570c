"""What a bundle's `launch` asks of python3: run as `tools/launch_helper.py` of the bundle.

The standard library only, for it runs before anything is installed, under the python3 the
launcher found (`python3 -I -B tools/launch_helper.py COMMAND ...`):

- `facts LOCK`: the machine architecture the lock was sealed for, the directory the manifest's
  relative paths resolve against inside the launcher's work tree, the bundle's name, and whether
  it is a record imported from its evidence (`imported`) or built (`built`), one a line.
- `fits REQUIREMENTS`: whether this interpreter is of the release series and platform the
  bundle's tools were pinned for (exit 1, saying what differs, when not).
- `check-env ENV REQUIREMENTS WHEEL`: the private environment at ENV is exactly what the
  launcher installed from the bundle's `tools/requirements.txt` and repro wheel, and nothing
  else: exit 1 naming each difference.

The check of an environment trusts nothing in it. Its `wheels/` must hold exactly the bundle's
repro wheel and one wheel per pin of `requirements.txt`, each with its sha256. Every file
of its site-packages must then be a file one of those wheels installs, with the hash the wheel's
own RECORD gives (never the RECORD pip wrote into the environment, which the environment could
change with the file); pip and setuptools, which `python3 -m venv` installs, are checked the same
way against the wheels this interpreter's ensurepip holds. No other file may be there (a `.pth`
file runs at every start). Bytecode caches are removed first: nothing checks them, and the
launcher never writes them (`-B`, PYTHONDONTWRITEBYTECODE). `bin/python` must lead to this
interpreter; `pyvenv.cfg`, which says where the standard library is and whether the system's
site-packages are seen, is written anew before every use; nothing but what `python -m venv`
makes may sit beside it (no `bin/pyvenv.cfg`, `lib64` the link to `lib`), and the data files
of the wheels (fontTools' manual page under `share/`): each with its RECORD hash, and nothing
else in the directories only they make.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import platform
import posixpath
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) --hash=sha256:([0-9a-f]{64})")
_FIELD = re.compile(r"# (python|platform): (\S+)")
_BOOKKEEPING = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
"""Files pip writes into a dist-info directory itself, never run."""
_MAX_SHOWN = 20


VENV_ENTRIES = frozenset({"bin", "include", "lib", "lib64", "pyvenv.cfg"})


def main(argv: list[str]) -> int:
    command, *arguments = argv or ["help"]
    if command == "facts" and len(arguments) == 1:
        print("\n".join(facts(Path(arguments[0]))))
        return 0
    if command == "fits" and len(arguments) == 1:
        problem = fits(Path(arguments[0]))
        return _report([problem] if problem else [])
    if command == "preflight" and len(arguments) == 1:
        problems, chosen = preflight(Path(arguments[0]), HostView.here())
        if chosen:
            print(chosen)
        return _report(problems)
    if command == "check-env" and len(arguments) == 3:
        env, requirements, wheel = (Path(argument) for argument in arguments)
        return _report(check_env(env, requirements, wheel))
    sys.stderr.write(
        "usage: launch_helper.py facts LOCK | fits REQUIREMENTS | preflight BUNDLE"
        " | check-env ENV REQUIREMENTS WHEEL\n"
    )
    return 2


def _report(problems: list[str]) -> int:
    for problem in problems[:_MAX_SHOWN]:
        sys.stderr.write(f"  {problem}\n")
    if len(problems) > _MAX_SHOWN:
        sys.stderr.write(f"  ... and {len(problems) - _MAX_SHOWN} more\n")
    return 1 if problems else 0


# --- facts of the lock ---------------------------------------------------------------------------


def facts(lock_path: Path) -> list[str]:
    """The sealed lock's architecture, the anchor's place in a work tree, the bundle's name, its
    kind.

    The anchor mirrors the build: the manifest's directory as the build was given it (such as
    `manifests`), so its relative paths (`../.venv-serve`) land inside the work tree; a manifest
    named by an absolute path or from above keeps only its directory's name."""
    lock = json.loads(lock_path.read_text(encoding="utf-8"))
    host = lock["host"]
    arch = host.get("enforced", {}).get("arch") or host.get("facts", {}).get("arch") or ""
    parent = posixpath.dirname(posixpath.normpath(lock["bundle"]["manifest_path"]))
    if posixpath.isabs(parent) or parent == ".." or parent.startswith("../"):
        parent = posixpath.basename(parent)
    kind = "imported" if lock.get("record") is not None else "built"
    return [str(arch), parent or ".", str(lock["bundle"]["name"]), kind]


# --- the interpreter against the tools ----------------------------------------------------------


def fits(requirements: Path) -> str | None:
    fields = dict(_FIELD.findall(requirements.read_text(encoding="utf-8")))
    series = f"{sys.version_info[0]}.{sys.version_info[1]}"
    here = (series, sysconfig.get_platform())
    pinned = (fields.get("python", "?"), fields.get("platform", "?"))
    if here == pinned:
        return None
    return (
        f"the bundle's tools are pinned for Python {pinned[0]} on {pinned[1]}; "
        f"{sys.executable} is Python {here[0]} on {here[1]}"
    )


# --- this host against the bundle, before anything is installed ----------------------------------


@dataclass(frozen=True)
class HostView:
    """What the preflight reads of a host: `observe_host`'s facts, as far as the standard
    library reads them."""

    arch: str
    os: str
    os_release: str
    """PRETTY_NAME of /etc/os-release."""
    kernel: str
    cpu_flags: frozenset[str]
    pci: tuple[tuple[str, str, str | None, str | None], ...]
    """Each PCI function: its address, vendor:device, bound driver and that driver's version."""

    @classmethod
    def here(cls, root: Path = Path("/")) -> HostView:
        uname = os.uname()
        flags: frozenset[str] = frozenset()
        for line in _read(root / "proc" / "cpuinfo").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags":
                flags = frozenset(value.split())
                break
        release = {}
        for line in _read(root / "etc" / "os-release").splitlines():
            key, separator, value = line.partition("=")
            if separator:
                release[key.strip()] = value.strip().strip("\"'")
        pci = []
        devices = root / "sys" / "bus" / "pci" / "devices"
        for function in sorted(devices.iterdir()) if devices.is_dir() else ():
            ids = [_read(function / n).lower().removeprefix("0x") for n in ("vendor", "device")]
            link = function / "driver"
            driver = link.readlink().name if link.is_symlink() else None
            version = _read(root / "sys" / "module" / driver / "version") if driver else ""
            pci.append((function.name, ":".join(ids), driver, version or None))
        return cls(
            arch=uname.machine,
            os=uname.sysname.lower(),
            os_release=release.get("PRETTY_NAME", ""),
            kernel=uname.release,
            cpu_flags=flags,
            pci=tuple(pci),
        )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def preflight(bundle: Path, host: HostView) -> tuple[list[str], str | None]:
    """Every refusal `host` earns against the bundle without installing anything, and the
    interpreter the serving venv will be made with (None for an imported record, which pins no
    venv). The choice of code first: on a CPU that selects other kernels nothing else matters."""
    lock = json.loads((bundle / "lock.json").read_text(encoding="utf-8"))
    manifest = tomllib.loads((bundle / "manifest.toml").read_text(encoding="utf-8"))
    problems = dispatch_problems(lock, bundle / "kernels", host)
    if problems:
        return problems, None
    problems += host_problems(manifest.get("host", {}), host)
    if lock.get("record") is not None:
        return problems, None
    if not manifest.get("node"):
        problems += _port_problems(int(manifest["launch"]["port"]))
    chosen, problem = serving_interpreter(
        manifest["python"]["interpreter"], lock["python"]["interpreter"]
    )
    return [*problems, *([problem] if problem else [])], chosen


def predict(rule: dict[str, Any], arch: str, flags: frozenset[str], env: dict[str, str]) -> str:
    """The variant a kernel set's `[[dispatch]]` rule selects (`builder.native.dispatch.predict`,
    which the tests hold this equal to): the override variable's, else the first variant whose
    architectures and CPU flags this host has."""
    override = rule.get("override_env")
    if override and override in env:
        for variant in rule["variants"]:
            if variant.get("override") == env[override]:
                return str(variant["name"])
    for variant in rule["variants"]:
        when = variant.get("when", {})
        if when.get("arch") and arch not in when["arch"]:
            continue
        if all(flag in flags for flag in when.get("cpu_flags", ())):
            return str(variant["name"])
    return "no variant"


def dispatch_problems(lock: dict[str, Any], kernels: Path, host: HostView) -> list[str]:
    """Each choice of code the lock records against the one this host's CPU makes, with what to
    do instead when they differ."""
    problems = []
    env = lock.get("launch", {}).get("env", {})
    for claim in lock.get("native", {}).get("dispatch", ()):
        path = kernels / f"{claim['kernel_set']}.toml"
        rules = tomllib.loads(path.read_text(encoding="utf-8")).get("dispatch", ())
        rule = next((r for r in rules if r["name"] == claim["name"]), None)
        if rule is None:
            problems.append(f"{claim['name']}: no dispatch rule in {path.name}")
            continue
        here = predict(rule, host.arch, host.cpu_flags, env)
        if here == claim["variant"]:
            continue
        sealed = claim["facts"]
        facts = {k: _fact(k, host, env) for k in sealed}
        differ = ", ".join(
            f"{k}={facts[k]}" for k in sorted(sealed) if facts[k] != _shown(sealed[k])
        )
        problems.append(
            f"{claim['name']}: this CPU selects {here}; the bundle ran {claim['variant']} "
            f"({_facts(sealed)}). This host differs in {differ or 'the facts above'}: the "
            f"bundle replays on a host where those are as sealed. To make a bundle of this "
            f"host's code, build its manifest here, from a checkout of repro: repro build "
            f"{lock['bundle']['manifest_path']} --signing-key KEY"
        )
    return problems


def _fact(name: str, host: HostView, env: dict[str, str]) -> str:
    kind, _, value = name.partition(":")
    if name == "arch":
        return host.arch
    if kind == "cpu":
        return _shown(value in host.cpu_flags)
    return env.get(value, "unset")


def _facts(facts: dict[str, object]) -> str:
    return ", ".join(f"{k}={_shown(v)}" for k, v in sorted(facts.items()))


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def host_problems(enforced: dict[str, Any], host: HostView) -> list[str]:
    """The facts the manifest's `[host]` enforces (`builder.observe.host.compare`)."""
    problems = [
        f"{fact}: the manifest's [host] enforces {value!r}; this host has {found!r}"
        for fact, value, found in (
            ("arch", enforced.get("arch"), host.arch),
            ("os", enforced.get("os"), host.os),
            ("os_release", enforced.get("os_release"), host.os_release),
            ("kernel", enforced.get("kernel"), host.kernel),
        )
        if value is not None and value != found
    ]
    for accelerator in enforced.get("accelerators", ()):
        ids = accelerator["vendor_device"].lower()
        present = sorted(address for address, found, _, _ in host.pci if found == ids)
        wanted = sorted(accelerator.get("addresses", ()))
        count = accelerator.get("count")
        if (wanted and wanted != present) or (count is not None and count != len(present)):
            expected = f"at {', '.join(wanted)}" if wanted else f"{count} present"
            found = f"{len(present)} at {', '.join(present)}" if present else "none"
            problems.append(f"accelerator {ids}: the manifest enforces {expected}; found {found}")
    for driver, version in sorted(enforced.get("drivers", {}).items()):
        versions = sorted({v or "unknown" for _, _, d, v in host.pci if d == driver})
        if versions != [version]:
            problems.append(
                f"driver {driver}: the manifest enforces {version}; found "
                f"{', '.join(versions) or 'not bound'}"
            )
    return problems


def _port_problems(port: int) -> list[str]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            return [
                f"port {port} on 127.0.0.1 (the manifest's [launch] port) cannot be bound: "
                f"{error.strerror}; stop what listens there"
            ]
    return []


def serving_interpreter(pin: str, release: str) -> tuple[str | None, str | None]:
    """The interpreter `repro restore` will make the serving venv with (`builder.restore.python.
    base_interpreter`): the sealed `release` where found, else the newest release the manifest's
    `pin` admits; and the refusal, saying how to get one, when none is here."""
    series = ".".join(release.split(".")[:2])
    home = Path(os.environ.get("HOME", "/nonexistent"))
    places = [Path(sys.executable)]
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if directory:
            places += [Path(directory) / f"python{series}", Path(directory) / "python3"]
    places.append(home / ".pyenv" / "versions" / release / "bin" / f"python{series}")
    places += sorted((home / ".local/share/uv/python").glob(f"cpython-{release}-*/bin/python3"))
    seen: dict[str, str] = {}
    for place in places:
        found = _version_of(place) if place.is_file() else None
        if found is None or found[1] in seen:
            continue
        version, real = found
        if version == release:
            return real, None
        seen[real] = version
    wanted = pin.split(".")
    admitted = [(p, v) for p, v in seen.items() if v.split(".")[: len(wanted)] == wanted]
    if admitted:
        newest = max(
            admitted, key=lambda pv: [int(x) if x.isdigit() else -1 for x in pv[1].split(".")]
        )
        return newest[0], None
    listed = "; ".join(f"{p}: Python {v}" for p, v in seen.items()) or "none"
    how = (
        f"install it (pyenv install {pin}, or uv python install {pin})"
        if len(wanted) > 2
        else f"install one (Debian and Ubuntu: apt install python{pin} python{pin}-venv)"
    )
    return None, (
        f'the serving venv needs Python {pin} ([python] interpreter = "{pin}"; sealed with '
        f"{release}); found {listed}: {how}, and put it on PATH"
    )


def _release_key(version: str) -> list[int]:
    return [int(part) if part.isdigit() else -1 for part in version.split(".")]


def _version_of(python: Path) -> tuple[str, str] | None:
    """The release `python` reports and the real path of the interpreter it runs (a pyenv shim
    is a script that runs another)."""
    code = "import os, sys; print(sys.version.split()[0], os.path.realpath(sys.executable))"
    try:
        done = subprocess.run(
            [str(python), "-I", "-S", "-c", code],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    version, _, real = done.stdout.strip().partition(" ")
    return (version, real) if done.returncode == 0 and version and real else None


# --- the private environment ---------------------------------------------------------------------


def check_env(env: Path, requirements: Path, wheel: Path) -> list[str]:
    venv, wheels = env / "venv", env / "wheels"
    pins = _pins(requirements, wheel)
    problems = _check_wheels(wheels, pins)
    if problems:
        return problems
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    expected, data = _expected_files(sorted(wheels.iterdir()))
    problems += _check_interpreter(venv)
    problems += _check_venv_entries(venv, data)
    if not site.is_dir() or site.is_symlink():
        return [*problems, f"{site}: no site-packages directory"]
    _remove_bytecode(site)
    installed = _installed_distributions(site)
    for dist_info in sorted(installed - {name for name, _ in expected.values()}):
        problems += _ensurepip_files(dist_info, expected)
    problems += _check_site(site, {path: digest for path, (_, digest) in expected.items()})
    problems += _check_data(venv, data)
    return problems


def _pins(requirements: Path, wheel: Path) -> dict[str, str]:
    """sha256 → what it pins: each line of requirements.txt, and the repro wheel."""
    text = requirements.read_text(encoding="utf-8")
    pins = {sha: f"{name}=={version}" for name, version, sha in _PIN.findall(text)}
    pins[_sha256(wheel)] = wheel.name
    return pins


def _check_wheels(wheels: Path, pins: dict[str, str]) -> list[str]:
    if not wheels.is_dir() or wheels.is_symlink():
        return [f"{wheels}: not a directory"]
    problems, found = [], set()
    for path in sorted(wheels.iterdir()):
        if path.is_symlink() or not path.is_file():
            problems.append(f"{path}: not a regular file")
            continue
        digest = _sha256(path)
        if digest not in pins:
            problems.append(f"{path}: sha256 {digest} is no pin of the bundle's tools")
        found.add(digest)
    problems += [f"{pins[d]}: its wheel is not in {wheels}" for d in sorted(pins.keys() - found)]
    return problems


def _check_interpreter(venv: Path) -> list[str]:
    problems = []
    here = os.path.realpath(sys.executable)
    for name in ("python", "python3"):
        path = venv / "bin" / name
        if os.path.realpath(path) != here:
            found = os.path.realpath(path) if path.exists() else "nothing"
            problems.append(f"{path}: leads to {found}, not to {here}")
    # getpath finds the standard library from pyvenv.cfg's `home`, site.py decides from it
    # whether the system's site-packages are seen: both are written here, before every use,
    # to what this interpreter needs, instead of trusting what the cache holds.
    config = venv / "pyvenv.cfg"
    if config.is_symlink() or not config.is_file():
        problems.append(f"{config}: not the file python -m venv writes")
    else:
        config.write_text(
            f"home = {Path(here).parent}\ninclude-system-site-packages = false\n"
            f"version = {platform.python_version()}\nexecutable = {here}\n",
            encoding="utf-8",
        )
    return problems


def _check_venv_entries(venv: Path, data: dict[str, str]) -> list[str]:
    problems = []
    for stray in sorted({p.name for p in venv.iterdir()} - VENV_ENTRIES - _data_tops(data)):
        problems.append(f"{venv / stray}: not made by python -m venv")
    if os.path.lexists(venv / "bin" / "pyvenv.cfg"):  # the interpreter would read it first
        problems.append(f"{venv / 'bin' / 'pyvenv.cfg'}: not made by python -m venv")
    lib64 = venv / "lib64"
    if os.path.lexists(lib64) and (not lib64.is_symlink() or str(lib64.readlink()) != "lib"):
        problems.append(f"{lib64}: not the link to lib that python -m venv makes")
    return problems


def _remove_bytecode(site: Path) -> None:
    for cache in sorted(site.rglob("__pycache__"), reverse=True):
        if cache.is_dir() and not cache.is_symlink():
            shutil.rmtree(cache)


def _expected_files(
    wheels: list[Path],
) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """Path under site-packages → (dist-info directory, RECORD hash) of every file `wheels`
    install there, and path under the environment's root → RECORD hash of every data file
    (a wheel's `.data/data/`, such as a manual page under `share/`), from each wheel's own
    RECORD."""
    expected: dict[str, tuple[str, str]] = {}
    data: dict[str, str] = {}
    for wheel in wheels:
        files, its_data = _wheel_files(wheel)
        expected.update(files)
        data.update(its_data)
    return expected, data


def _wheel_files(wheel: Path) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        records = [n for n in archive.namelist() if n.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            return {}, {}
        dist_info = records[0].split("/")[0]
        rows = list(csv.reader(io.StringIO(archive.read(records[0]).decode("utf-8"))))
    files, data = {}, {}
    for row in rows:
        if len(row) < 2 or not row[1]:
            continue
        path = row[0]
        top, _, rest = path.partition("/")
        if top.endswith(".data"):
            scheme, _, below = rest.partition("/")
            if scheme == "data":
                data[posixpath.normpath(below)] = row[1]
            if scheme not in ("purelib", "platlib"):
                continue  # scripts and headers: bin/ and include/, never imported
            path = below
        files[path] = (dist_info, row[1])
    return files, data


def _data_tops(data: dict[str, str]) -> set[str]:
    """The entries of the environment's root that data files make (`share`)."""
    return {path.split("/")[0] for path in data if not path.startswith("..")}


def _check_data(venv: Path, data: dict[str, str]) -> list[str]:
    """Every data file of the wheels is in place with its hash; the directories only data
    files make (`share/`, not bin/, include/ or lib/ of the venv itself) hold nothing else."""
    problems = []
    for relative, digest in sorted(data.items()):
        path = venv / relative
        if relative.startswith("..") or path.is_symlink() or not path.is_file():
            problems.append(f"{path}: missing")
        elif _record_hash(path) != digest:
            problems.append(f"{path}: not the bytes its wheel installs")
    for top in sorted(_data_tops(data) - VENV_ENTRIES):
        if (venv / top).is_symlink():
            problems.append(f"{venv / top}: a symlink, installed by no wheel")
            continue
        for directory, subdirectories, names in os.walk(venv / top):
            problems += [
                f"{Path(directory) / name}: a symlink, installed by no wheel"
                for name in sorted(subdirectories)
                if (Path(directory) / name).is_symlink()
            ]
            for name in sorted(names):
                relative = (Path(directory) / name).relative_to(venv).as_posix()
                if relative not in data:
                    problems.append(f"{venv / relative}: installed by no wheel of the tools")
    return problems


def _installed_distributions(site: Path) -> set[str]:
    return {path.name for path in site.glob("*.dist-info")}


def _ensurepip_files(dist_info: str, expected: dict[str, tuple[str, str]]) -> list[str]:
    """The files of `dist_info` (pip or setuptools, as `python3 -m venv` installs them) added to
    `expected` from the wheel this interpreter's ensurepip holds; why not, when it holds none."""
    stem = dist_info.removesuffix(".dist-info")
    for directory in _ensurepip_directories():
        for wheel in sorted(directory.glob(f"{stem}-*.whl")):
            files, _data = _wheel_files(wheel)
            if files and all(owner == dist_info for owner, _ in files.values()):
                expected.update(files)
                return []
    return [f"{dist_info}: installed from no wheel of the bundle's tools nor of ensurepip"]


def _ensurepip_directories() -> list[Path]:
    directories = []
    try:
        import ensurepip

        directories.append(Path(ensurepip.__file__).parent / "_bundled")
    except ImportError:
        pass
    packaged = sysconfig.get_config_var("WHEEL_PKG_DIR")
    if packaged:
        directories.append(Path(packaged))
    return [d for d in directories if d.is_dir()]


def _check_site(site: Path, expected: dict[str, str]) -> list[str]:
    problems = []
    seen = set()
    for directory, subdirectories, files in os.walk(site):
        for name in sorted(subdirectories):
            if (Path(directory) / name).is_symlink():
                problems.append(f"{Path(directory) / name}: a symlink, installed by no wheel")
        for name in sorted(files):
            path = Path(directory) / name
            relative = path.relative_to(site).as_posix()
            seen.add(relative)
            if relative not in expected:
                owner, _, leaf = relative.partition("/")
                if not (owner.endswith(".dist-info") and leaf in _BOOKKEEPING):
                    problems.append(f"{path}: installed by no wheel of the bundle's tools")
                continue
            if path.is_symlink() or _record_hash(path) != expected[relative]:
                problems.append(f"{path}: not the bytes its wheel installs")
    problems += [f"{site / p}: missing" for p in sorted(expected.keys() - seen)]
    return problems


def _record_hash(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
