"""Capture the H200 evidence: audit a live CUDA process with repro and record the host.

Run on the GPU host from the repository root: `python3 tests/evidence/h200/capture.py OUT_DIR`.
It starts `workload.py`, waits for `ready`, snapshots the process with repro's live audit
(every mapping, the loader's rule for each) and writes `audit.json`, `host.json` and
`loader.json` into OUT_DIR, then stops the workload.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from builder.native.auditreport import report_document
from builder.native.loaderhost import host_config
from builder.native.policy import judge_tree, observe_tree, policy_from_flags
from builder.observe.host import observe_host

HERE = Path(__file__).resolve().parent


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    workload = subprocess.Popen(
        [sys.executable, str(HERE / "workload.py")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert workload.stdout is not None
        line = workload.stdout.readline()
        print("workload:", line.strip(), flush=True)
        if not line.startswith("ready"):
            return 1
        config = host_config()
        tree = observe_tree(workload.pid, show_progress=False)
        policy = policy_from_flags(
            tree,
            config.system_dirs,
            allowed_roots=(),
            modules=("torch._C",),
            roles={},
            preload=(),
        )
        report = judge_tree(tree, policy)
        document = {"version": 1, **report_document(report)}
        (out / "audit.json").write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
        (out / "host.json").write_text(json.dumps(observe_host().to_json(), indent=1) + "\n")
        loader = {
            "interpreter": config.interpreter,
            "system_dirs": config.system_dirs,
            "subdirs": config.subdirs,
            "lib": config.lib,
            "platform": config.platform,
        }
        (out / "loader.json").write_text(json.dumps(loader, indent=1) + "\n")
        print("drifts:", len(report.drifts), "files:", document["files"], flush=True)
        for drift in report.drifts:
            print(" ", drift.kind.value, drift.subject, "|", drift.observed[:160], flush=True)
        return 0
    finally:
        workload.kill()
        workload.wait()


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
