"""The serving virtual environment a manifest names: its interpreter, site-packages and prefix.

This module owns the values of the path placeholders (`{python}`, `{venv}`, `{site}`,
`{python_prefix}`, `{model.<role>}`), read from the venv's `pyvenv.cfg`, so that every place
that expands a manifest template sees the same paths.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from builder.errors import NotObservable
from builder.manifest import Manifest, expand


@dataclass(frozen=True)
class Venv:
    root: Path
    python: Path
    site: Path
    prefix: Path

    @classmethod
    def at(cls, root: Path) -> Venv:
        config = root / "pyvenv.cfg"
        try:
            text = config.read_text()
        except OSError as error:
            raise NotObservable(
                "the serving virtual environment is missing",
                where=str(config),
                expected="a virtual environment made by `python -m venv`",
                found=error.strerror or type(error).__name__,
                hint="create it with `make serve-env`",
            ) from error
        values = dict(
            (key.strip(), value.strip())
            for key, _, value in (line.partition("=") for line in text.splitlines())
        )
        home, version = values.get("home"), values.get("version_info") or values.get("version")
        if not home or not version:
            raise NotObservable(
                "pyvenv.cfg does not say which interpreter made the environment",
                where=str(config),
                expected="'home' and 'version' keys",
                found=", ".join(sorted(values)) or "no keys",
            )
        major_minor = ".".join(version.split(".")[:2])
        return cls(
            root=root,
            python=root / "bin" / "python",
            site=root / "lib" / f"python{major_minor}" / "site-packages",
            prefix=Path(home).parent,
        )


def path_values(manifest: Manifest) -> dict[str, str]:
    """The value of every path placeholder of `manifest` on this host."""
    venv = Venv.at(_normal(manifest.resolve(manifest.python.venv)))
    values = {
        "python": str(venv.python),
        "venv": str(venv.root),
        "site": str(venv.site),
        "python_prefix": str(venv.prefix),
    }
    for model in manifest.models:
        values[f"model.{model.role}"] = str(_normal(model.directory(manifest.resolve("."))))
    return values


def _normal(path: Path) -> Path:
    """Absolute and without `..`, symlinks kept: a venv's `bin/python` must stay its own path."""
    return Path(os.path.normpath(path.absolute()))


def expand_all(templates: tuple[str, ...], values: dict[str, str]) -> tuple[str, ...]:
    return tuple(expand(template, values) for template in templates)
