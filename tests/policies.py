"""An audit policy for a live process tree in the tests: what the flags alone give it, one
more root allowed."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from repro_serving.builder.native.loaderhost import host_config
from repro_serving.builder.native.policy import AuditPolicy, policy_from_flags
from repro_serving.builder.native.snapshot import TreeSnapshot


def policy_allowing(tree: TreeSnapshot, root: Path, **changes: Any) -> AuditPolicy:
    """The policy of no flags for `tree` (no roots, modules, roles or preloads given), with
    `root` allowed besides its default roots and `changes` made."""
    flags = policy_from_flags(
        tree, host_config().system_dirs, allowed_roots=(), modules=(), roles={}, preload=()
    )
    allowed = (*flags.allowed_roots, str(root.resolve()))
    return dataclasses.replace(flags, allowed_roots=allowed, **changes)
