"""How fast repro establishes native truth, against the tools people use for the same question.

In one run, on this machine, every row the median of `--rounds` runs after one unmeasured
warm-up (so every tool reads from a warm page cache), the tools of a row run in turn:

- startup: `repro --help`, against `python -c pass` (the interpreter alone); goal <= 0.3 s.
- closure: `repro closure` over every ELF file of the serving venv in one invocation, against
  `libtree FILE` and `ldd FILE` once per file; goal <= 2 x libtree.
- verify offline: `repro verify repro/tiny-cpu`, against `sha256sum -c SHA256SUMS` in the
  bundle; goal <= 0.35 s.
- verify --host: `repro verify repro/tiny-cpu --host`, against `openssl dgst -sha256` of every
  file the venv's RECORDs list, one process per core (the hashing a host check owes); goal
  <= 8 s.
- audit: `repro audit --port N --kernel-set cpu --allow-preload L` (L: the library vLLM
  itself preloads) of the live tiny server, against `openssl dgst
  -sha256` of the ELF files its processes map, one process per core; goal <= 0.8 s.

Python bytecode: every tool runs with it written and read, as pip leaves an installed repro
(PYTHONDONTWRITEBYTECODE is removed from the tools' environment; the warm-up writes it).

Every row's ratio to its first peer is reported; a goal missed says by how much. The result
goes to `bench/results/native_speed.json` (`--json FILE` for elsewhere) with the machine.

Usage: .venv/bin/python bench/native_speed.py [--rounds 5] [--skip-audit]
The audit row starts the embedded default's tiny vLLM CPU server (about a minute); `make
serve-env` first. libtree is a Debian package (`apt-get install libtree`); without it the closure
row is compared with ldd alone and says so.
"""

from __future__ import annotations

import argparse
import json
import os
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

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import describe, machine  # noqa: E402
from repro_serving.builder.documents.manifest import Manifest  # noqa: E402
from repro_serving.builder.native.elf import ElfError, is_elf, read_elf  # noqa: E402
from repro_serving.builder.observe.python import record_entries  # noqa: E402
from repro_serving.launch import server as lifecycle  # noqa: E402
from repro_serving.launch.spec import server_spec  # noqa: E402

BUNDLE = REPO_ROOT / "repro" / "tiny-cpu"
PUBLIC = REPO_ROOT / "keys" / "example.pub"
MANIFEST = REPO_ROOT / "manifests" / "tiny-cpu.toml"
SERVE_VENV = REPO_ROOT / ".venv-serve"
RESULT = REPO_ROOT / "bench" / "results" / "native_speed.json"
REPRO = [str(REPO_ROOT / ".venv" / "bin" / "repro")]
ENVIRONMENT = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


@dataclass(frozen=True)
class Tool:
    name: str
    run: Callable[[], None]


@dataclass(frozen=True)
class Row:
    name: str
    tools: Sequence[Tool]  # repro's first, then its peers
    goal_s: float | None = None  # absolute goal for repro's median
    goal_ratio: float | None = None  # goal for repro's median / the first peer's


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-audit", action="store_true", help="no live server row")
    parser.add_argument("--json", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    if not SERVE_VENV.is_dir():
        raise SystemExit(f"{SERVE_VENV} is missing: run `make serve-env` first")
    elves = elf_files(SERVE_VENV)
    records = record_files(SERVE_VENV)
    rows = [startup_row(), closure_row(elves), verify_row(), host_row(records)]
    document: dict[str, Any] = {"machine": machine(), "rounds": args.rounds}
    print(f"machine: {describe(document['machine'])}")
    print(f"{len(elves)} ELF files and {len(records)} RECORD-listed files in {SERVE_VENV.name}")
    results = [measure(row, args.rounds) for row in rows]
    if not args.skip_audit:
        results.append(audit_measured(args.rounds))
    document["rows"] = results
    document["machine_after"] = machine()["load_average"]
    print_table(results)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=2) + "\n")
    print(f"written to {args.json}")
    return 0 if all(result["met"] is not False for result in results) else 1


# --- the rows -----------------------------------------------------------------------------------


def startup_row() -> Row:
    return Row(
        "startup",
        [
            Tool("repro --help", lambda: quiet([*REPRO, "--help"])),
            Tool("python -c pass", lambda: quiet([sys.executable, "-c", "pass"])),
        ],
        goal_s=0.3,
    )


def closure_row(elves: Sequence[str]) -> Row:
    peers = []
    libtree = shutil.which("libtree")
    if libtree is not None:
        peers.append(Tool("libtree, once per file", lambda: each([libtree], elves)))
    peers.append(Tool("ldd, once per file", lambda: each(["ldd"], elves)))
    return Row(
        f"closure of {len(elves)} ELF files",
        [
            Tool(
                "repro closure, one invocation",
                lambda: quiet([*REPRO, "closure", *elves], allowed=(0, 1)),
            ),
            *peers,
        ],
        goal_ratio=2.0 if libtree is not None else None,
    )


def verify_row() -> Row:
    return Row(
        "verify offline",
        [
            Tool("repro verify", lambda: quiet([*REPRO, *verify_args()])),
            Tool(
                "sha256sum -c SHA256SUMS",
                lambda: quiet(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=BUNDLE),
            ),
        ],
        goal_s=0.35,
    )


def host_row(records: Sequence[str]) -> Row:
    return Row(
        "verify --host",
        [
            Tool("repro verify --host", lambda: quiet([*REPRO, *verify_args(), "--host"])),
            Tool(f"openssl dgst of {len(records)} files, per core", lambda: hash_per_core(records)),
        ],
        goal_s=8.0,
    )


def audit_measured(rounds: int) -> dict[str, Any]:
    """Start the tiny server, measure its audit against hashing what it maps, stop it."""
    manifest = Manifest.from_path(MANIFEST)
    workdir = Path(tempfile.mkdtemp(prefix="repro-bench-audit-"))
    spec = server_spec(manifest, "teacher", workdir, port=lifecycle.free_port())
    print(f"starting the tiny server on port {spec.port} (about a minute)")
    with lifecycle.serving(spec) as server:
        mapped = mapped_elves(server.pid)
        audit = [*REPRO, "audit", "--port", str(spec.port), "--kernel-set", "cpu"]
        # vLLM puts torch's libgomp in LD_PRELOAD itself: declared, as a user auditing it would
        audit += [
            option for path in stack_preloads(server.pid) for option in ("--allow-preload", path)
        ]
        row = Row(
            f"audit of the live server ({len(mapped)} ELF files mapped)",
            [
                Tool("repro audit --port", lambda: quiet(audit)),
                Tool(
                    "openssl dgst of the mapped ELF files, per core", lambda: hash_per_core(mapped)
                ),
            ],
            goal_s=0.8,
        )
        result = measure(row, rounds)
        verdict = subprocess.run(
            audit, env=ENVIRONMENT, capture_output=True, text=True, check=False
        )
        result["repro_exit_code"] = verdict.returncode
    shutil.rmtree(workdir, ignore_errors=True)
    return result


# --- running and measuring ----------------------------------------------------------------------


def verify_args() -> list[str]:
    return ["verify", str(BUNDLE), "--key", str(PUBLIC)]


def quiet(argv: Sequence[str], cwd: Path | None = None, allowed: Sequence[int] = (0,)) -> None:
    finished = subprocess.run(argv, cwd=cwd, env=ENVIRONMENT, capture_output=True, check=False)
    if finished.returncode not in allowed:
        tail = finished.stderr.decode(errors="replace")[-2000:]
        raise SystemExit(f"{' '.join(argv[:3])} ... exited {finished.returncode}:\n{tail}")


def each(command: Sequence[str], files: Sequence[str]) -> None:
    """One invocation per file, as a user asking each file's closure would; any exit code (a
    library some file needs may only be found through its loader's RPATH at run time)."""
    for path in files:
        subprocess.run([*command, path], env=ENVIRONMENT, capture_output=True, check=False)


def hash_per_core(files: Sequence[str]) -> None:
    cores = len(os.sched_getaffinity(0))
    share = [files[index::cores] for index in range(cores)]
    processes = [
        subprocess.Popen(
            ["xargs", "-0", "openssl", "dgst", "-sha256"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
        )
        for _ in share
    ]
    for process, part in zip(processes, share, strict=True):
        assert process.stdin is not None
        process.stdin.write(b"\0".join(os.fsencode(path) for path in part))
        process.stdin.close()
    if any(process.wait() != 0 for process in processes):
        raise SystemExit("openssl dgst failed")


def measure(row: Row, rounds: int) -> dict[str, Any]:
    """Every tool once unmeasured, then once per round in turn; medians and the goal."""
    for tool in row.tools:
        tool.run()
    walls: dict[str, list[float]] = {tool.name: [] for tool in row.tools}
    for _ in range(rounds):
        for tool in row.tools:
            began = time.perf_counter()
            tool.run()
            walls[tool.name].append(time.perf_counter() - began)
    medians = {name: statistics.median(values) for name, values in walls.items()}
    ours, peer = row.tools[0].name, row.tools[1].name
    ratio = medians[ours] / medians[peer]
    met: bool | None
    if row.goal_ratio is not None:
        goal, met = f"<= {row.goal_ratio:g} x {peer}", ratio <= row.goal_ratio
        missed_by = ratio / row.goal_ratio
    elif row.goal_s is not None:
        goal, met = f"<= {row.goal_s:g} s", medians[ours] <= row.goal_s
        missed_by = medians[ours] / row.goal_s
    else:  # its goal names a peer this machine lacks
        goal, met, missed_by = "not judged: its peer is not installed", None, 1.0
    return {
        "row": row.name,
        "repro": ours,
        "medians_s": medians,
        "runs_s": walls,
        "ratio_to_peer": ratio,
        "goal": goal,
        "met": met,
        "missed_by": None if met is not False else f"{missed_by:.2f} x the goal",
    }


# --- what is measured ---------------------------------------------------------------------------


def elf_files(root: Path) -> list[str]:
    """Every regular ELF file under `root` the loader can load (an executable or a shared
    object: not the relocatable objects a compiler ships), symlinks not followed."""
    return sorted(
        str(path)
        for path in root.rglob("*")
        if not path.is_symlink() and path.is_file() and _loadable(path)
    )


def record_files(venv: Path) -> list[str]:
    """Every file a RECORD of the venv's site-packages lists with a hash: what the RECORD check
    of `verify --host` hashes (`record_entries`, bytecode caches aside)."""
    (site,) = venv.glob("lib/python3*/site-packages")
    return sorted(
        {
            entry.path
            for dist_info in site.glob("*.dist-info")
            for entry in record_entries(dist_info)
            if entry.recorded is not None and Path(entry.path).is_file()
        }
    )


def mapped_elves(root_pid: int) -> list[str]:
    found = set()
    for member in lifecycle.tree_members(root_pid):
        for line in Path(f"/proc/{member.pid}/maps").read_text().splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/"):
                path = Path(fields[5])
                if path.is_file() and is_elf(str(path)):
                    found.add(str(path))
    return sorted(found)


def stack_preloads(root_pid: int) -> list[str]:
    """Every library the processes of the tree put in LD_PRELOAD, each once."""
    found: list[str] = []
    for member in lifecycle.tree_members(root_pid):
        environ = Path(f"/proc/{member.pid}/environ").read_bytes().split(b"\0")
        for entry in environ:
            if entry.startswith(b"LD_PRELOAD="):
                for path in os.fsdecode(entry[len(b"LD_PRELOAD=") :]).replace(":", " ").split():
                    if path not in found:
                        found.append(path)
    return found


def _loadable(path: Path) -> bool:
    try:
        return read_elf(str(path)).e_type in ("ET_EXEC", "ET_DYN")
    except ElfError:
        return False


def print_table(results: Sequence[dict[str, Any]]) -> None:
    print()
    print(f"{'row':<44} {'repro s':>8} {'peer':<44} {'peer s':>8} {'ratio':>6}  goal")
    for result in results:
        medians = result["medians_s"]
        names = list(medians)
        ours = medians[names[0]]
        for index, peer in enumerate(names[1:]):
            first = index == 0
            print(
                f"{result['row'] if first else '':<44} {f'{ours:.3f}' if first else '':>8} "
                f"{peer:<44} {medians[peer]:>8.3f} {ours / medians[peer]:>6.2f}  "
                + (
                    f"{result['goal']}: "
                    + {True: "met", None: "—"}.get(result["met"], f"MISSED ({result['missed_by']})")
                    if first
                    else ""
                )
            )


if __name__ == "__main__":
    raise SystemExit(main())
