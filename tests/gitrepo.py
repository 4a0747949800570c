"""Real git repositories made by the tests of the source observer and its restore: git run
with a fixed identity and no configuration of the machine's, and a commit of everything."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "repro tests",
    "GIT_AUTHOR_EMAIL": "tests@repro.invalid",
    "GIT_COMMITTER_NAME": "repro tests",
    "GIT_COMMITTER_EMAIL": "tests@repro.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}
ENGINE = "def step(x):\n    return x + 1\n\n\ndef scale(x):\n    return 2 * x\n"
"""The one source file of a test repository."""


def run_git(tree: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    done = subprocess.run(
        ["git", "-C", str(tree), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.strip()


def commit_all(tree: Path, message: str) -> str:
    run_git(tree, "add", "--all")
    run_git(tree, "commit", "--quiet", "-m", message)
    return run_git(tree, "rev-parse", "HEAD")
