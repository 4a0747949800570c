"""The live truth of a running server: every process, every ELF it maps, whether predicted.

`repro audit --pid P` or `--port N` snapshots the whole process tree, hashes each mapped ELF
once, replays the loader emulation for every process and reports each disagreement as a drift.
Without `--manifest` or `--allow-root`, libraries may come from the Python environment each
process runs in, its base installation and the loader's system directories; the table printed
first says where each environment was found. Exit 0 when there is no drift, 1 when there is, 3
when the tree cannot be observed.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from repro_serving.builder.documents.audit import AuditDocument
from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.errors import BadInput, ExitCode
from repro_serving.builder.native.audit import AuditReport
from repro_serving.builder.native.auditreport import audit_document, print_report
from repro_serving.builder.native.loaderhost import host_config
from repro_serving.builder.native.policy import (
    DefaultRoots,
    default_roots,
    judge_tree,
    observe_tree,
    policy_from_flags,
    policy_from_manifest,
)
from repro_serving.builder.native.processes import pid_listening_on
from repro_serving.builder.observe.host import observe_host
from repro_serving.builder.progress import showing
from repro_serving.builder.render import Report, console, table, write_report


class AuditOutput(AuditDocument, Report):
    """`repro audit --json`: the envelope (`ok`: no drift), then the audit as a run seals it."""


REPORT = AuditOutput
"""The document `--json` prints (its schema: `repro schema audit`)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--pid", type=int, help="root process of the tree to audit")
    target.add_argument("--port", type=int, help="audit the tree of the process listening here")
    parser.add_argument(
        "--allow-root",
        action="append",
        default=[],
        metavar="DIR",
        help="a directory libraries may be mapped from (repeatable); default: the Python "
        "environment each process runs in (found from its argv[0], PATH and pyvenv.cfg as its "
        "interpreter found it), its base installation and the loader's system directories",
    )
    parser.add_argument(
        "--module",
        action="append",
        default=[],
        metavar="NAME",
        help="an extension module some process must map, e.g. vllm._C (repeatable)",
    )
    parser.add_argument(
        "--role",
        action="append",
        default=[],
        metavar="ROLE=COUNT",
        help="expected number of processes of a role, e.g. worker=1 (repeatable)",
    )
    parser.add_argument(
        "--allow-preload",
        action="append",
        default=[],
        metavar="FILE",
        help="a library the stack itself may put in LD_PRELOAD (repeatable)",
    )
    parser.add_argument(
        "--kernel-set",
        action="append",
        default=[],
        metavar="NAME",
        help="a platform set of kernels/ (cuda, xpu, cpu): driver libraries and JIT artifacts "
        "it names may lie outside the allowed roots (repeatable)",
    )
    parser.add_argument(
        "--manifest",
        type=Path,
        help="take allowed roots, modules, preloads and roles from a manifest instead",
    )
    parser.add_argument("--objects", action="store_true", help="list every mapped ELF")
    parser.add_argument("--json", action="store_true", help="machine-readable report")


@dataclass(frozen=True)
class Audit:
    """One audit as `repro audit` judges it, and the default roots it took, if any."""

    report: AuditReport
    defaults: DefaultRoots | None
    """The roots found for the tree when neither `--allow-root` nor `--manifest` gave them."""


def audit(args: argparse.Namespace) -> Audit:
    """Snapshot the tree the arguments name and judge it under the policy they describe: the
    one judgement of `repro audit`, for the command and for any script that records it."""
    pid = args.pid if args.pid is not None else pid_listening_on(args.port)
    tree = observe_tree(pid, show_progress=not args.json and showing())
    host = observe_host().capabilities()
    if args.manifest is not None:
        policy = policy_from_manifest(Manifest.from_path(args.manifest), host)
        return Audit(judge_tree(tree, policy), None)
    system_dirs = host_config().system_dirs
    defaults = None if args.allow_root else default_roots(tree, system_dirs)
    policy = policy_from_flags(
        tree,
        system_dirs,
        allowed_roots=args.allow_root or (defaults.roots if defaults else ()),
        modules=args.module,
        roles=parse_roles(args.role),
        preload=args.allow_preload,
        kernel_sets=args.kernel_set,
        host=host,
    )
    return Audit(judge_tree(tree, policy), defaults)


def execute(args: argparse.Namespace) -> int:
    done = audit(args)
    if args.json:
        document = audit_document(done.report)
        write_report(AuditOutput(ok=done.report.passed, **dict(document)))
    else:
        if done.defaults is not None:
            print_environments(done.defaults)
        print_report(done.report, objects=args.objects)
    return int(ExitCode.PASS if done.report.passed else ExitCode.CHECK_FAILED)


def print_environments(defaults: DefaultRoots) -> None:
    """Where each process's Python environment was found, and the roots that follow."""
    out = console()
    out.print(
        table(
            "Python environment of each process",
            ("pid", "environment", "base", "how it was found"),
            (
                (found.pid, found.venv or "-", ", ".join(found.base), found.evidence())
                for found in defaults.environments
            ),
        )
    )
    out.print("allowed roots: " + ", ".join(defaults.roots))


def parse_roles(values: list[str]) -> dict[str, int]:
    roles: dict[str, int] = {}
    for value in values:
        name, _, count = value.partition("=")
        if not name or not count.isdigit():
            raise BadInput(
                "malformed --role", where="--role", expected="ROLE=COUNT", found=repr(value)
            )
        roles[name] = int(count)
    return roles
