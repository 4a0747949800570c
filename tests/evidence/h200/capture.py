"""Capture the H200 evidence: `repro audit` of a live CUDA process, the verdict a user gets.

Run on the GPU host from the repository root, with repro's run-time dependencies for that
host's interpreter in DEPS (pydantic with pydantic_core, annotated_types, typing_extensions and
typing_inspection; psutil; rich with pygments, markdown_it and mdurl; pyelftools: wheels
unpacked with `python3 -m zipfile -e`), so that the environment under audit is left as it is:

    PYTHONPATH=$PWD:DEPS python3.12 -S tests/evidence/h200/capture.py --venv /opt/torch/.venv OUT

It starts `workload.py` (CUDA initialised, a cuBLAS matmul, a Triton kernel) from the virtual
environment three times, as a user would, each with the host's environment less PYTHONPATH,
PYTHONHOME, LD_PRELOAD and LD_AUDIT, and the environment's `bin` first on PATH:

- `path/`: as `python3 workload.py`, argv[0] found on PATH;
- `full-path/`: as `<venv>/bin/python3 workload.py`;
- `preload/`: as `path/`, with LD_PRELOAD naming a library built here with the host's C compiler.

Each is judged by `builder.commands.audit.audit`, the judgement of `repro audit --pid P
--kernel-set cuda --module torch._C` itself, and gets `audit.json` (byte for byte what that
command prints with `--json`) and `environment.json` (the Python environment repro found for
each process, how, and the roots that followed). Beside them: `host.json`, `loader.json`,
`dispatch.json` (the CPU's flags, torch's own answers for the code paths it chose, and what
the `cpu` kernel set's rules predict from those flags) and `summary.json` (per start: exit code,
drift count, files, each drift in one line). The workloads are stopped at the end; the exit
code is 0 when both clean starts audit with no drift.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from repro_serving.builder.cli import build_parser
from repro_serving.builder.commands.audit import Audit, audit
from repro_serving.builder.native.auditreport import report_document
from repro_serving.builder.native.dispatch import predict
from repro_serving.builder.native.kernels import KernelSet, dispatches
from repro_serving.builder.native.loaderhost import host_config
from repro_serving.builder.observe.host import observe_host
from repro_serving.builder.render import json_document

HERE = Path(__file__).resolve().parent
AUDIT_ARGS = ("--kernel-set", "cuda", "--module", "torch._C")
"""The command the evidence is the verdict of: `repro audit --pid P` with these."""
READY_TIMEOUT_S = 600.0
UNSET = ("PYTHONPATH", "PYTHONHOME", "LD_PRELOAD", "LD_AUDIT")
TORCH_PROBE = """
import json, torch
print(json.dumps({
    "torch": torch.__version__,
    "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    "torch_cpu_is_avx512_supported": torch.cpu._is_avx512_supported(),
    "torch_cpu_is_avx512_bf16_supported": torch.cpu._is_avx512_bf16_supported(),
}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--venv", type=Path, required=True, help="the environment to start in")
    parser.add_argument("--workload", type=Path, default=HERE / "workload.py")
    args = parser.parse_args(argv)
    out: Path = args.out
    venv = Path(os.path.abspath(args.venv))  # noqa: PTH100 - the venv's own path, links kept
    out.mkdir(parents=True, exist_ok=True)
    write(out / "host.json", observe_host().to_json())
    config = host_config()
    loader = {
        "interpreter": config.interpreter,
        "system_dirs": config.system_dirs,
        "subdirs": config.subdirs,
        "lib": config.lib,
        "platform": config.platform,
    }
    write(out / "loader.json", loader)
    write(out / "dispatch.json", dispatch_facts(venv))
    with tempfile.TemporaryDirectory(prefix="repro-capture-") as scratch:
        injected = injected_library(Path(scratch))
        starts = {
            "path": (["python3"], {}),
            "full-path": ([str(venv / "bin" / "python3")], {}),
            "preload": (["python3"], {"LD_PRELOAD": str(injected)}),
        }
        summary = {}
        for name, (command, extra) in starts.items():
            argv0 = [*command, str(args.workload)]
            summary[name] = capture(out / name, argv0, environment(venv, extra))
            summary[name]["injected"] = str(injected) if extra else None
    write(out / "summary.json", summary)
    clean = all(summary[name]["drifts"] == [] for name in ("path", "full-path"))
    return 0 if clean else 1


def environment(venv: Path, extra: Mapping[str, str]) -> dict[str, str]:
    """The host's environment as a user's shell has it, the venv's `bin` first on PATH."""
    env = {name: value for name, value in os.environ.items() if name not in UNSET}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    return {**env, **extra}


def capture(out: Path, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    workload = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert workload.stdout is not None
        readable, _, _ = select.select([workload.stdout], [], [], READY_TIMEOUT_S)
        line = workload.stdout.readline() if readable else ""
        print(f"{out.name}: {' '.join(argv)}: {line.strip() or 'not ready'}", flush=True)
        if not line.startswith("ready"):
            return {"argv": argv, "ready": False, "drifts": None}
        done = judged(workload.pid)
        (out / "audit.json").write_text(json_document(report_document(done.report)) + "\n")
        write(out / "environment.json", environments(done))
        drifts = [f"{d.kind.value} {d.subject} | {d.observed}" for d in done.report.drifts]
        code = 0 if done.report.passed else 1
        print(f"  exit {code}, {len(drifts)} drift(s)", flush=True)
        for drift in drifts:
            print("  ", drift[:240], flush=True)
        files = len([f for f in done.report.files if f.is_elf])
        return {"argv": argv, "ready": True, "exit": code, "files": files, "drifts": drifts}
    finally:
        workload.kill()
        workload.wait()


def judged(pid: int) -> Audit:
    """`repro audit --pid P --kernel-set cuda --module torch._C --json`, parsed and judged by
    the command's own code."""
    args = build_parser("audit").parse_args(["audit", "--pid", str(pid), *AUDIT_ARGS, "--json"])
    return audit(args)


def environments(done: Audit) -> dict[str, Any]:
    defaults = done.defaults
    assert defaults is not None, "no --allow-root: the roots are found"
    return {
        "allowed_roots": list(defaults.roots),
        "processes": [
            {
                "pid": env.pid,
                "venv": env.venv,
                "base": list(env.base),
                "how": env.evidence(),
                "site_packages": list(env.site_packages),
                "outside": list(env.outside),
            }
            for env in defaults.environments
        ],
    }


def dispatch_facts(venv: Path) -> dict[str, Any]:
    """The host's CPU flags, torch's own answers there, and what repro's rules predict."""
    host = observe_host()
    answered = subprocess.run(
        [str(venv / "bin" / "python3"), "-c", TORCH_PROBE],
        capture_output=True,
        text=True,
        check=True,
        env=environment(venv, {}),
    )
    rules = dispatches([KernelSet.load("cpu")])
    predicted = {
        name: predict(rule, host.capabilities()).variant for name, (_, rule) in rules.items()
    }
    return {
        "cpu_model": host.cpu_model,
        "arch": host.arch,
        "cpu_flags": list(host.cpu_flags),
        **json.loads(answered.stdout.strip().splitlines()[-1]),
        "predicted_by_the_cpu_set": predicted,
    }


def injected_library(directory: Path) -> Path:
    """A shared library of nobody's, built with the host's C compiler (Triton needs one too)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("no C compiler on PATH to build the library to inject")
    source = directory / "injected.c"
    source.write_text("int repro_injected_marker(void) { return 42; }\n")
    library = directory / "libinjected.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def write(path: Path, document: object) -> None:
    path.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
