"""Everything a manifest pins, observed on this host.

One place runs the observers (host, models, sources, Python) for `repro build`, `repro verify
--host` and the preflight of `repro launch`, so the three can never measure a fact differently;
`builder.documents.observations` holds what they found and judges it against the manifest.
A fact that cannot be observed (a venv, a model directory or a source tree that is not there)
is a drift in the same report as every other, so a refusal lists everything missing at once.
"""

from __future__ import annotations

from pathlib import Path

from repro_serving.builder.documents.manifest import Manifest, normal_path
from repro_serving.builder.documents.observations import Observations
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import NotObservable, ReproError
from repro_serving.builder.observe import host as host_observer
from repro_serving.builder.observe import models as model_observer
from repro_serving.builder.observe import python as python_observer
from repro_serving.builder.observe import sources as source_observer
from repro_serving.builder.placeholders import Venv, model_directory, venv_values


def observe(manifest: Manifest) -> Observations:
    values, venv, problems = _values(manifest)
    base = manifest.resolve(".")
    python = None
    if venv is not None:
        try:
            python = python_observer.observe_python(manifest.python, venv, values)
        except ReproError as error:
            problems.append(_unobservable("python", error))
    return Observations(
        values=values,
        host=host_observer.observe_host(),
        models=tuple(
            model_observer.observe_model(m, Path(values[f"model.{m.role}"]), values)
            for m in manifest.models
        ),
        sources=tuple(source_observer.observe_source(s, base) for s in manifest.sources),
        python=python,
        unobservable=tuple(problems),
    )


def _values(manifest: Manifest) -> tuple[dict[str, str], Venv | None, list[Drift]]:
    """Placeholder values; without a venv, the lexical ones so every other fact still reads."""
    root = normal_path(manifest.resolve(manifest.python.venv))
    problems: list[Drift] = []
    venv: Venv | None
    try:
        venv = Venv.at(root)
        values = venv_values(venv)
    except NotObservable as error:
        venv = None
        problems.append(_unobservable("python", error))
        version = manifest.python.interpreter
        values = {
            "python": str(root / "bin" / "python"),
            "venv": str(root),
            "site": str(root / "lib" / f"python{version}" / "site-packages"),
        }
    for model in manifest.models:
        values[f"model.{model.role}"] = str(model_directory(manifest, model))
    return values, venv, problems


def _unobservable(fact: str, error: ReproError) -> Drift:
    return Drift(
        kind=DriftKind.NOT_OBSERVABLE,
        subject=f"{fact}: {error.where}" if error.where else fact,
        expected=error.expected or "observable",
        observed=error.found or error.what,
        why=error.what,
    )
