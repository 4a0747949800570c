"""The machine a benchmark ran on, and the CPU time it and the rest of the machine used."""

from __future__ import annotations

import os
import platform
import resource
from pathlib import Path
from typing import Any

CPU_FLAGS_REPORTED = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "sha_ni")


def machine() -> dict[str, Any]:
    """CPU model and the flags that change what runs, cores, memory, kernel, Python, load."""
    cpuinfo = Path("/proc/cpuinfo").read_text()
    lines = cpuinfo.splitlines()
    model = next(
        (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
        platform.processor() or "unknown CPU",
    )
    flags = set(
        next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    )
    memory_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    return {
        "cpu": model,
        "cpu_flags": [flag for flag in CPU_FLAGS_REPORTED if flag in flags],
        "cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(memory_kib / (1 << 20), 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
    }


def describe(document: dict[str, Any]) -> str:
    flags = ", ".join(document["cpu_flags"]) or "none of " + ", ".join(CPU_FLAGS_REPORTED)
    return (
        f"{document['cpu']} ({flags}); {document['cores']} cores; "
        f"{document['memory_gib']} GiB; Python {document['python']}; "
        f"load {' '.join(str(v) for v in document['load_average'])}"
    )


def own_cpu_s() -> float:
    """CPU seconds this process and its waited-for children have used."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(use.ru_utime + use.ru_stime for use in usage)


def machine_busy_s() -> float:
    """CPU seconds all cores have spent not idle since boot (/proc/stat)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
