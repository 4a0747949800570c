"""The values of a manifest's path placeholders on this host (`{python}`, `{venv}`, `{site}`,
`{python_prefix}`, `{model.<role>}`), read from the serving venv's `pyvenv.cfg`, so that every
place that expands a manifest template sees the same paths; and the reverse, `placeholder_path`,
which writes an observed absolute path in those terms so that a fact holds for the same bytes
under another root and never for other bytes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from repro_serving.builder.documents.manifest import Manifest, Model, expand, normal_path
from repro_serving.builder.errors import NotObservable
from repro_serving.builder.native.pyenv import parse_venv_config
from repro_serving.builder.readers import ENVIRONMENT_FILE_LIMIT, read_needed


@dataclass(frozen=True)
class Venv:
    root: Path
    python: Path
    site: Path
    prefix: Path
    version: str
    """The interpreter version `pyvenv.cfg` states, such as '3.11.7'."""

    @classmethod
    def at(cls, root: Path) -> Venv:
        config = root / "pyvenv.cfg"
        data = read_needed(
            config,
            limit=ENVIRONMENT_FILE_LIMIT,
            what="pyvenv.cfg",
            missing="the serving virtual environment is missing",
            expected="a virtual environment made by `python -m venv`",
            refusal=NotObservable,
            hint="create it with `make serve-env`",
        )
        values = parse_venv_config(data.decode("utf-8", errors="replace"))
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
            version=version,
        )


def path_values(manifest: Manifest) -> dict[str, str]:
    """The value of every path placeholder of `manifest` on this host."""
    values = venv_values(Venv.at(normal_path(manifest.resolve(manifest.python.venv))))
    for model in manifest.models:
        values[f"model.{model.role}"] = str(model_directory(manifest, model))
    return values


def venv_values(venv: Venv) -> dict[str, str]:
    """The placeholders a virtual environment gives values to."""
    return {
        "python": str(venv.python),
        "venv": str(venv.root),
        "site": str(venv.site),
        "python_prefix": str(venv.prefix),
    }


def model_directory(manifest: Manifest, model: Model) -> Path:
    """Where `model` lives on this host: its path or hub snapshot against the manifest's
    directory, absolute and normalised (the value of `{model.<role>}`)."""
    return normal_path(model.directory(manifest.resolve(".")))


def expand_all(templates: tuple[str, ...], values: dict[str, str]) -> tuple[str, ...]:
    return tuple(expand(template, values) for template in templates)
