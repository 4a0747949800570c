"""How fast `repro verify` proves a big bundle intact, against the tools anyone would use instead.

One invocation, on this machine, on the same files:

1. generate K files of N MiB of deterministic pseudo-random bytes (AES-CTR keystream; default
   8 x 512 MiB = 4 GiB, the model files of a large record), pin their sha256 in a lock and seal
   them with the example key as `evidence/models/` of a bundle (`builder.sealing.seal`);
2. time, warm page cache (each tool run once first, then every tool in turn per round, median of
   the rounds): repro's integrity verification in-process
   (`builder.sealing.integrity.verify_bundle`:
   signature, every file's sha256, the file set, SHA256SUMS), the `repro verify` command line
   (which goes on to read the lock; the bench's lock is minimal, so it stops there with exit
   code 2 after the integrity check has passed), `sha256sum -c SHA256SUMS` inside the bundle,
   `openssl dgst -sha256` over the same files one after another, and the same split over one
   openssl per core (what the cores can do, reads included);
3. measure the single-core OpenSSL SHA-256 rate (`openssl speed -evp sha256 -bytes 16384`) and
   derive the target: repro's wall time <= 1.1 x total bytes / (single-core rate x cores).

The generated files are deleted at the end; the result is printed and written as JSON.

Usage: .venv/bin/python bench/verify_speed.py [--size-mib N] [--files K] [--rounds R] [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import machine, machine_busy_s, own_cpu_s  # noqa: E402
from repro_serving.builder.sealing.bundle import SHA256SUMS, parse_sha256sums  # noqa: E402
from repro_serving.builder.sealing.integrity import verify_bundle  # noqa: E402
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys  # noqa: E402
from repro_serving.builder.sealing.seal import BundleContent, seal  # noqa: E402

EXAMPLE_KEY = REPO_ROOT / "keys" / "example.key"
EXAMPLE_PUB = REPO_ROOT / "keys" / "example.pub"
RESULT = REPO_ROOT / "bench" / "results" / "verify_speed.json"
BUNDLE_NAME = "verify-speed"
MIB = 1 << 20
GENERATE_CHUNK = 64 * MIB
TARGET_SLACK = 1.1
QUICK = (64, 8)
"""--quick: 8 files of 64 MiB, a check that the bench runs, not a measurement of the target."""


@dataclass(frozen=True)
class Tool:
    name: str
    version: str
    run: Callable[[], None]
    """Verifies the bundle once; raises when the tool does not report every file intact."""


@dataclass(frozen=True)
class Timing:
    name: str
    version: str
    runs_s: tuple[float, ...]
    cpu_s: tuple[float, ...]
    """CPU time this process and its children spent in each run."""
    others_cpu_s: tuple[float, ...]
    """CPU time the rest of the machine spent during each run: a shared host's interference."""

    @property
    def median_s(self) -> float:
        return statistics.median(self.runs_s)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    size_mib, count = QUICK if args.quick else (args.size_mib, args.files)
    cores = len(os.sched_getaffinity(0))
    rate, rate_all = openssl_rate(1), openssl_rate(cores)
    workdir = Path(tempfile.mkdtemp(prefix="repro-verify-speed-", dir=args.tmp))
    try:
        started = time.perf_counter()
        bundle = make_bundle(workdir, size_mib * MIB, count)
        seal_s = time.perf_counter() - started
        files = sealed_files(bundle)
        total = sum((bundle / name).stat().st_size for name in files)
        tools = peers(bundle, files, cores)
        resident_cold = resident_share(bundle, files)
        for tool in tools:  # warm the page cache and the interpreters, not measured
            tool.run()
        resident_warm = resident_share(bundle, files)
        timings = measure(tools, args.rounds)
        resident_after = resident_share(bundle, files)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ideal_s = total / (rate * cores)
    document = {
        "version": 1,
        "machine": machine_document(cores),
        "files": {"count": count, "size_bytes": size_mib * MIB, "total_bytes": total},
        "sealed_files": len(files),
        "seal_s": round(seal_s, 3),
        "page_cache_resident": {
            "after_seal": resident_cold,
            "after_warm_up": resident_warm,
            "after_measurement": resident_after,
        },
        "openssl_sha256_rate_bytes_per_s": {"one_core": rate, f"{cores}_cores": rate_all},
        "target": {
            "rule": "repro wall time <= 1.1 x total bytes / (single-core OpenSSL rate x cores)",
            "ideal_s": round(ideal_s, 4),
            "limit_s": round(TARGET_SLACK * ideal_s, 4),
        },
        "rounds": args.rounds,
        "timings": [
            {
                "tool": timing.name,
                "version": timing.version,
                "runs_s": [round(run, 4) for run in timing.runs_s],
                "cpu_s": [round(cpu, 3) for cpu in timing.cpu_s],
                "others_cpu_s": [round(cpu, 2) for cpu in timing.others_cpu_s],
                "median_s": round(timing.median_s, 4),
                "gib_per_s": round(total / timing.median_s / (1 << 30), 3),
                "vs_ideal": round(timing.median_s / ideal_s, 3),
            }
            for timing in timings
        ],
    }
    repro_s = timings[0].median_s
    document["target"]["repro_in_process_s"] = round(repro_s, 4)
    document["target"]["met"] = repro_s <= TARGET_SLACK * ideal_s
    print_table(document)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=2) + "\n")
    print(f"written {args.json}")
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size-mib", type=int, default=512, help="size of each file (512)")
    parser.add_argument("--files", type=int, default=8, help="number of files (8)")
    parser.add_argument("--rounds", type=int, default=3, help="measured runs of each tool (3)")
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK[1]} files of {QUICK[0]} MiB: a smoke check"
    )
    parser.add_argument("--tmp", type=Path, default=None, help="where to generate (system tmp)")
    parser.add_argument("--json", type=Path, default=RESULT, help=f"result file ({RESULT.name})")
    return parser.parse_args(argv)


# --- the bundle ---------------------------------------------------------------------------------


def make_bundle(workdir: Path, size: int, count: int) -> Path:
    """Seal `count` generated files of `size` bytes, pinned in the lock, as a bundle here."""
    models = workdir / "models"
    models.mkdir()
    pins = {}
    for index in range(count):
        name = f"model-{index + 1:05d}-of-{count:05d}.bin"
        pins[name] = write_pseudo_random(models / name, size, index)
    manifest = workdir / "manifest.toml"
    manifest.write_text("# bench/verify_speed.py: generated model files, sealed to be verified\n")
    content = BundleContent(
        name=BUNDLE_NAME,
        manifest=manifest,
        manifest_source="bench/verify_speed.py",
        lock={"schema": "repro.lock/v1", "bundle": BUNDLE_NAME, "models": {"target": pins}},
        evidence={"models": models},
    )
    parent = workdir / "repro"
    parent.mkdir()
    sealed = seal(content, SigningKey.from_path(EXAMPLE_KEY), parent)
    shutil.rmtree(models)  # only the bundle's copies stay in the page cache
    return sealed.path


def write_pseudo_random(path: Path, size: int, index: int) -> str:
    """Write `size` bytes of an AES-CTR keystream keyed by `index`; return their sha256."""
    key = hashlib.sha256(f"repro bench verify_speed {index}".encode()).digest()
    keystream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
    zeros = memoryview(bytes(GENERATE_CHUNK))
    digest = hashlib.sha256()
    with path.open("wb") as out:
        left = size
        while left:
            block = keystream.update(zeros[: min(left, GENERATE_CHUNK)])
            digest.update(block)
            out.write(block)
            left -= len(block)
    return digest.hexdigest()


def sealed_files(bundle: Path) -> list[str]:
    """Every file SHA256SUMS lists, in its order: what each peer hashes."""
    return list(parse_sha256sums((bundle / SHA256SUMS).read_bytes(), where=SHA256SUMS))


# --- the tools ----------------------------------------------------------------------------------


def peers(bundle: Path, files: list[str], cores: int) -> list[Tool]:
    trusted = TrustedKeys.from_key_file(EXAMPLE_PUB)
    python = f"Python {platform.python_version()}, hashlib on {openssl_library()}"

    def in_process() -> None:
        report = verify_bundle(bundle, trusted)
        if not report.ok:
            raise SystemExit(f"repro found drift in the bench bundle: {report.findings}")

    def command_line() -> None:
        # The bench lock is minimal: after the integrity check passes, reading it as a full
        # lock.json is refused (exit 2). Any drift would be exit 1, printed as a table.
        completed = subprocess.run(
            [*repro_command(), "verify", str(bundle), "--key", str(EXAMPLE_PUB)],
            capture_output=True,
            text=True,
            check=False,
            cwd=REPO_ROOT,  # `python -m` imports from the working directory first
            env=environment_with_this_checkout(),
        )
        if completed.returncode != 2 or "lock.json" not in completed.stderr:
            raise SystemExit(f"repro verify did not pass integrity: {completed}")

    def sha256sum() -> None:
        subprocess.run(
            ["sha256sum", "--quiet", "-c", SHA256SUMS],
            cwd=bundle,
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def openssl_sequential() -> None:
        subprocess.run(
            ["openssl", "dgst", "-sha256", *files],
            cwd=bundle,
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def openssl_per_core() -> None:
        shares = [files[core::cores] for core in range(cores)]
        running = [
            subprocess.Popen(
                ["openssl", "dgst", "-sha256", *share], cwd=bundle, stdout=subprocess.DEVNULL
            )
            for share in shares
            if share
        ]
        if any(process.wait() != 0 for process in running):
            raise SystemExit("openssl dgst failed")

    openssl = version(["openssl", "version"])
    return [
        Tool("repro integrity (in-process)", python, in_process),
        Tool("repro verify (command line)", python, command_line),
        Tool("sha256sum -c SHA256SUMS", version(["sha256sum", "--version"]), sha256sum),
        Tool("openssl dgst -sha256, sequential", openssl, openssl_sequential),
        Tool(f"openssl dgst -sha256, {cores} processes", openssl, openssl_per_core),
    ]


def environment_with_this_checkout() -> dict[str, str]:
    """The environment, with the builder beside this bench first on the import path."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def repro_command() -> list[str]:
    script = Path(sys.executable).parent / "repro"
    return [str(script)] if script.exists() else [sys.executable, "-m", "repro_serving"]


def measure(tools: list[Tool], rounds: int) -> list[Timing]:
    """Each tool once per round, in turn, so a drift of the machine's load touches all alike."""
    runs: dict[str, list[tuple[float, float, float]]] = {tool.name: [] for tool in tools}
    for _ in range(rounds):
        for tool in tools:
            busy, ours, started = machine_busy_s(), own_cpu_s(), time.perf_counter()
            tool.run()
            wall = time.perf_counter() - started
            cpu = own_cpu_s() - ours
            runs[tool.name].append((wall, cpu, max(0.0, machine_busy_s() - busy - cpu)))
    return [
        Timing(
            tool.name,
            tool.version,
            tuple(wall for wall, _, _ in runs[tool.name]),
            tuple(cpu for _, cpu, _ in runs[tool.name]),
            tuple(others for _, _, others in runs[tool.name]),
        )
        for tool in tools
    ]


# --- the machine --------------------------------------------------------------------------------


def openssl_rate(processes: int) -> float:
    """SHA-256 bytes per second of `openssl speed` on 16 KiB blocks, over `processes` cores."""
    command = ["openssl", "speed", "-evp", "sha256", "-bytes", "16384", "-seconds", "3"]
    if processes > 1:
        command[2:2] = ["-multi", str(processes)]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    match = re.search(r"^sha256\s+([\d.]+)k\s*$", output, re.MULTILINE)
    if match is None:
        raise SystemExit(f"cannot read the rate from openssl speed:\n{output}")
    return float(match.group(1)) * 1000


def resident_share(bundle: Path, files: list[str]) -> float | None:
    """The share of the files' bytes in the page cache (fincore), None without fincore."""
    if shutil.which("fincore") is None:
        return None
    completed = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES,SIZE", *files],
        cwd=bundle,
        capture_output=True,
        text=True,
        check=True,
    )
    resident = size = 0
    for line in completed.stdout.splitlines():
        res, total = line.split()
        resident, size = resident + int(res), size + int(total)
    return round(resident / size, 4) if size else None


def machine_document(cores: int) -> dict[str, Any]:
    """The machine (`bench.machine`), with the cores this bench hashes on and SHA-NI."""
    found = machine()
    return {**found, "cores": cores, "sha_ni": "sha_ni" in found["cpu_flags"]}


def openssl_library() -> str:
    import ssl

    return ssl.OPENSSL_VERSION


def version(command: list[str]) -> str:
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return output.splitlines()[0].strip()


# --- the report ---------------------------------------------------------------------------------


def print_table(document: dict[str, Any]) -> None:
    machine_, files, target = document["machine"], document["files"], document["target"]
    rates = document["openssl_sha256_rate_bytes_per_s"]
    print(
        f"{machine_['cpu']}; {machine_['cores']} cores; {machine_['memory_gib']} GiB; "
        f"sha_ni {machine_['sha_ni']}; load {machine_['load_average']}"
    )
    print(
        f"{files['count']} files x {files['size_bytes'] // MIB} MiB, "
        f"{files['total_bytes'] / (1 << 30):.2f} GiB hashed in {document['sealed_files']} files; "
        f"sealed in {document['seal_s']:.1f} s; page cache resident "
        f"{document['page_cache_resident']}"
    )
    print(
        "openssl speed sha256 16 KiB blocks: "
        + ", ".join(f"{name} {rate / 1e9:.3f} GB/s" for name, rate in rates.items())
    )
    print(
        f"target: <= {target['limit_s']:.3f} s (1.1 x ideal {target['ideal_s']:.3f} s); "
        f"repro {target['repro_in_process_s']:.3f} s: {'MET' if target['met'] else 'NOT MET'}"
    )
    width = max(len(row["tool"]) for row in document["timings"])
    print(
        f"{'tool':<{width}}  {'median s':>8}  {'GiB/s':>6}  {'x ideal':>7}  "
        "runs s (CPU s of the tool, of the rest of the machine)"
    )
    for row in document["timings"]:
        runs = "  ".join(
            f"{run:.3f} ({cpu:.2f}, {others:.2f})"
            for run, cpu, others in zip(
                row["runs_s"], row["cpu_s"], row["others_cpu_s"], strict=True
            )
        )
        print(
            f"{row['tool']:<{width}}  {row['median_s']:>8.3f}  {row['gib_per_s']:>6.2f}  "
            f"{row['vs_ideal']:>7.2f}  {runs}"
        )
    print(
        "versions: " + "; ".join(f"{row['tool']}: {row['version']}" for row in document["timings"])
    )


if __name__ == "__main__":
    raise SystemExit(main())
