"""Validate a manifest and its oracle suite, and print the plan: what will be pinned and checked.

The plan is what `repro build` will resolve on a host: models and their release files, sources,
packages, native modules, kernel sets and allowed roots, the launch command with its
placeholders, profiles, the oracle suite and every gate that will run. Nothing is observed,
unless `--deep`: then each model's directory is resolved on this host, named, and every release
file hashed against its pin (what `repro build` would refuse 20 s later, in the time the hashing
takes); exit 1 when one does not hold.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import JsonValue
from rich.markup import escape
from rich.table import Table

from repro_serving.builder.documents.manifest import (
    Accelerator,
    Bundle,
    HostFact,
    Launch,
    Manifest,
    Suite,
)
from repro_serving.builder.errors import BadInput, ExitCode
from repro_serving.builder.native.kernels import KernelSet
from repro_serving.builder.progress import say
from repro_serving.builder.render import Output, Report, console, table, write_report
from repro_serving.launch.gates import plan as gate_plan
from repro_serving.launch.gatetext import marker_check


class EnforcedHost(Output):
    """The host facts a build enforces; null (or empty): not enforced."""

    arch: str | None
    os: str | None
    os_release: str | None
    kernel: str | None
    accelerators: tuple[Accelerator, ...]
    drivers: dict[str, str]


class HostPlan(Output):
    enforce: EnforcedHost
    record: tuple[HostFact, ...]
    """Facts only recorded, never enforced."""


class PackagePlan(Output):
    name: str
    version: str
    source: str | None
    """The `[[source]]` it is installed from, editable, or null."""


class PythonPlan(Output):
    interpreter: str
    venv: str
    check_record: bool
    packages: tuple[PackagePlan, ...]


class ModelPlan(Output):
    role: str
    repo: str
    revision: str
    directory: str
    files: int
    """How many release files are pinned."""


class SourcePlan(Output):
    name: str
    path: str
    commit: str
    clean: bool
    patches: tuple[str, ...]


class KernelPin(Output):
    """A file a kernel set pins, with its bytes."""

    set: str
    kind: Literal["module", "library", "external (declared)", "external (drift when mapped)"]
    path: str
    sha256: str


class KernelMarkerPlan(Output):
    set: str
    marker: str
    checks: str


class NativePlan(Output):
    modules: tuple[str, ...]
    kernel_sets: tuple[str, ...]
    kernel_pins: tuple[KernelPin, ...]
    kernel_markers: tuple[KernelMarkerPlan, ...]
    allowed_roots: tuple[str, ...]
    allowed_mappings: tuple[str, ...]
    preload: tuple[str, ...]
    forbidden_env: tuple[str, ...]


class SuitePlan(Output):
    path: str
    name: str
    api: str
    prompts: int
    max_tokens: int
    seed: int
    temperature: float | None
    replayable: bool
    """Whether the suite carries its prompts' texts and a temperature, so a run can ask it."""


class GatePlan(Output):
    gate: str
    checks: str


class QualityPlan(Output):
    check: str
    kind: str
    prompts: tuple[str, ...] | Literal["all"]


class OraclePlan(Output):
    suite: SuitePlan
    teacher: str
    chat_template_kwargs: dict[str, JsonValue]
    gates: tuple[GatePlan, ...]
    quality: tuple[QualityPlan, ...]


class EvidencePlan(Output):
    """The imported record's files, resolved against the manifest's directory."""

    run: str
    teacher_tokens: str
    teacher_texts: str
    identity: str | None
    model_files: str | None
    files: tuple[str, ...]
    checksums: tuple[str, ...]


class Plan(Output):
    """What a build of the manifest pins and checks, section by section."""

    bundle: Bundle
    host: HostPlan
    python: PythonPlan
    models: tuple[ModelPlan, ...]
    sources: tuple[SourcePlan, ...]
    native: NativePlan
    launch: Launch
    oracle: OraclePlan
    evidence: EvidencePlan | None
    """Null unless the manifest imports a record (`[evidence]`)."""


class ModelCheck(Output):
    """`--deep`: one model as this host has it."""

    role: str
    directory: str
    """Resolved on this host (the manifest's directory for a relative path)."""
    files: int
    """Release files hashed."""
    problems: tuple[str, ...]
    """Each way the directory disagrees with the pins (as `repro build` would say it)."""


class CheckOutput(Report):
    """`repro check --json`: the manifest is valid, and its plan (`ok`: false only where
    `--deep` found a model other than pinned)."""

    ok: bool = True
    manifest: str
    plan: Plan
    models_checked: tuple[ModelCheck, ...] | None = None
    """`--deep` only: every model resolved and hashed on this host."""


REPORT = CheckOutput
"""The document `--json` prints (its schema: `repro schema check`)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="the manifest TOML file")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument(
        "--deep",
        action="store_true",
        help="also resolve every model's directory on this host and hash its release files",
    )


def execute(args: argparse.Namespace) -> int:
    manifest = Manifest.from_path(args.manifest)
    suite = manifest.load_suite()
    document = plan(manifest, suite)
    checked = deep_models(manifest) if args.deep else None
    ok = checked is None or not any(model.problems for model in checked)
    if args.json:
        write_report(
            CheckOutput(ok=ok, manifest=str(args.manifest), plan=document, models_checked=checked)
        )
    else:
        print_plan(str(args.manifest), document)
        if checked is not None:
            _print_models(checked)
    return ExitCode.PASS if ok else ExitCode.CHECK_FAILED


def deep_models(manifest: Manifest) -> tuple[ModelCheck, ...]:
    """Every model's directory resolved on this host and its release files hashed against the
    pins, each problem with the placeholder of its directory replaced by the path."""
    # hashing and observing: only what --deep runs imports
    from repro_serving.builder.documents.models import compare
    from repro_serving.builder.observe.models import observe_model
    from repro_serving.builder.placeholders import model_directory

    found = []
    for model in manifest.models:
        directory = model_directory(manifest, model)
        placeholder = f"{{model.{model.role}}}"
        say(f"hashing the {len(model.files)} release file(s) of model {model.role} in {directory}")
        facts = observe_model(model, directory, {f"model.{model.role}": str(directory)})
        problems = tuple(
            f"{drift.subject}: {drift.why}: expected {drift.expected}, found {drift.observed}"
            .replace(placeholder, str(directory))
            for drift in compare(model, facts)
        )  # fmt: skip
        files = sum(1 for f in facts.files if f.sha256 is not None)
        found.append(ModelCheck(role=model.role, directory=str(directory), files=files,
                                problems=problems))  # fmt: skip
    return tuple(found)


def _print_models(checked: Sequence[ModelCheck]) -> None:
    out = console()
    for model in checked:
        verdict = "as pinned" if not model.problems else f"{len(model.problems)} problem(s)"
        line = f"model {model.role} at {model.directory}: {model.files} file(s) hashed, {verdict}"
        out.print(escape(line), soft_wrap=True)  # a path a user copies: never broken
        for problem in model.problems:
            out.print(escape(f"  {problem}"), soft_wrap=True)


def plan(manifest: Manifest, suite: Suite) -> Plan:
    """What a build of `manifest` pins and checks, section by section."""
    return Plan(
        bundle=manifest.bundle,
        host=_host(manifest),
        python=_python(manifest),
        models=_models(manifest),
        sources=_sources(manifest),
        native=_native(manifest),
        launch=manifest.launch,
        oracle=_oracle(manifest, suite),
        evidence=None if manifest.evidence is None else _evidence(manifest),
    )


def _evidence(manifest: Manifest) -> EvidencePlan:
    """The imported record's files, resolved against the manifest's directory."""
    evidence = manifest.evidence
    assert evidence is not None

    def resolved(path: str | None) -> str | None:
        return None if path is None else str(manifest.resolve(path))

    return EvidencePlan(
        run=str(manifest.resolve(evidence.run)),
        teacher_tokens=str(manifest.resolve(evidence.teacher_tokens)),
        teacher_texts=str(manifest.resolve(evidence.teacher_texts)),
        identity=resolved(evidence.identity),
        model_files=resolved(evidence.model_files),
        files=tuple(str(manifest.resolve(p)) for p in evidence.files),
        checksums=tuple(str(manifest.resolve(p)) for p in evidence.checksums),
    )


def _host(manifest: Manifest) -> HostPlan:
    host = manifest.host
    enforce = EnforcedHost(
        arch=host.arch,
        os=host.os,
        os_release=host.os_release,
        kernel=host.kernel,
        accelerators=host.accelerators,
        drivers=host.drivers,
    )
    return HostPlan(enforce=enforce, record=host.record)


def _python(manifest: Manifest) -> PythonPlan:
    python = manifest.python
    return PythonPlan(
        interpreter=python.interpreter,
        venv=str(manifest.resolve(python.venv)),
        check_record=python.check_record,
        packages=tuple(
            PackagePlan(name=name, version=package.pinned, source=package.source)
            for name, package in python.packages.items()
        ),
    )


def _models(manifest: Manifest) -> tuple[ModelPlan, ...]:
    return tuple(
        ModelPlan(
            role=model.role,
            repo=model.repo,
            revision=model.revision,
            directory=str(model.directory(manifest.resolve("."))),
            files=len(model.files),
        )
        for model in manifest.models
    )


def _sources(manifest: Manifest) -> tuple[SourcePlan, ...]:
    return tuple(
        SourcePlan(
            name=source.name,
            path=str(manifest.resolve(source.path)),
            commit=source.commit,
            clean=source.clean,
            patches=tuple(str(manifest.resolve(patch.path)) for patch in source.patches),
        )
        for source in manifest.sources
    )


def _kernel_set(manifest: Manifest, index: int, name: str) -> KernelSet:
    """A kernel set the manifest names must exist in kernels/, be well formed, and use only
    placeholders this manifest defines (its model roles and [[source]] names)."""
    where = f"{manifest.source}: native.kernel_sets[{index}]"
    try:
        kernel_set = KernelSet.load(name)
    except BadInput as error:
        raise BadInput(
            error.what,
            where=f"{where} ({error.where})",
            expected=error.expected,
            found=error.found,
        ) from error
    known = set(manifest.placeholder_names(launch=False))
    known |= {f"source.{source.name}" for source in manifest.sources}
    unknown = [name for name in kernel_set.placeholders() if name not in known]
    if unknown:
        raise BadInput(
            "a kernel set uses a placeholder this manifest does not define",
            where=f"{where} ({name})",
            expected="placeholders among " + ", ".join("{" + k + "}" for k in sorted(known)),
            found="{" + unknown[0] + "}",
        )
    return kernel_set


def _kernel_pins(kernel_set: KernelSet) -> list[KernelPin]:
    """What a kernel set pins: each module, library and external origin with its bytes."""
    pins = [
        KernelPin(set=kernel_set.name, kind="module", path=m.path, sha256=m.sha256)
        for m in kernel_set.modules
    ]
    pins += [
        KernelPin(set=kernel_set.name, kind="library", path=lib.path, sha256=lib.sha256)
        for lib in kernel_set.libraries
    ]
    pins += [
        KernelPin(
            set=kernel_set.name,
            kind="external (declared)" if e.declared else "external (drift when mapped)",
            path=e.path,
            sha256=e.sha256,
        )
        for e in kernel_set.external
    ]
    return pins


def _native(manifest: Manifest) -> NativePlan:
    native = manifest.native
    sets = [_kernel_set(manifest, i, name) for i, name in enumerate(native.kernel_sets)]
    return NativePlan(
        modules=tuple(native.modules),
        kernel_sets=tuple(kernel_set.name for kernel_set in sets),
        kernel_pins=tuple(pin for kernel_set in sets for pin in _kernel_pins(kernel_set)),
        kernel_markers=tuple(
            KernelMarkerPlan(set=kernel_set.name, marker=marker.name, checks=marker_check(marker))
            for kernel_set in sets
            for marker in kernel_set.markers
        ),
        allowed_roots=tuple(native.allowed_roots),
        allowed_mappings=tuple(native.allowed_mappings),
        preload=tuple(native.preload),
        forbidden_env=tuple(native.forbidden_environment),
    )


def _oracle(manifest: Manifest, suite: Suite) -> OraclePlan:
    oracle = manifest.oracle
    return OraclePlan(
        suite=SuitePlan(
            path=str(manifest.resolve(oracle.suite)),
            name=suite.name,
            api=suite.api,
            prompts=len(suite.prompts),
            max_tokens=suite.max_tokens,
            seed=suite.seed,
            temperature=suite.temperature,
            replayable=suite.replayable,
        ),
        teacher=oracle.teacher,
        chat_template_kwargs=oracle.chat_template_kwargs,
        gates=tuple(GatePlan(gate=gate, checks=checks) for gate, checks in gate_plan(oracle.gates)),
        quality=tuple(
            QualityPlan(check=check.name, kind=check.kind, prompts=tuple(check.prompts) or "all")
            for check in oracle.quality
        ),
    )


def print_plan(source: str, document: Plan) -> None:
    out = console()
    out.print(escape(f"{source}: valid manifest of bundle {document.bundle.name}"))
    for title, section in document.model_dump(mode="json").items():
        if section is None:
            continue  # a section the manifest does not have ([evidence])
        for rendered in _tables(title, section):
            out.print(rendered)


def _tables(title: str, section: Any) -> list[Table]:
    """One table for the section; a list of records inside it gets a table of its own."""
    if isinstance(section, list):
        return [_records_table(title, section)]
    rows: list[tuple[str, str]] = []
    nested: list[Table] = []
    for key, value in _flatten(section, ""):
        if _is_records(value):
            nested.append(_records_table(f"{title}.{key}", value))
        else:
            rows.append((escape(key), _cell(value)))
    return [table(title, ("key", "value"), rows), *nested]


def _records_table(title: str, records: list[dict[str, Any]]) -> Table:
    """A list of tables as rows: a column for every key any of them has, in first-seen order
    (an empty cell where a record lacks it)."""
    columns = list(dict.fromkeys(key for record in records for key in record)) or ["(none)"]
    return table(
        title,
        columns,
        ([_cell(row[column]) if column in row else "" for column in columns] for row in records),
    )


def _is_records(value: Any) -> bool:
    """A non-empty list of tables only (a list mixing tables and values is a value)."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _flatten(section: dict[str, Any], prefix: str) -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in section.items():
        if isinstance(value, dict) and value:
            items += _flatten(value, f"{prefix}{key}.")
        else:
            items.append((f"{prefix}{key}", value))
    return items


def _cell(value: Any) -> str:
    if value is None or value in ("", [], {}):
        return "-"
    if isinstance(value, list):
        return escape(shlex.join(str(item) for item in value))
    if isinstance(value, dict):
        return escape(", ".join(f"{key}: {item}" for key, item in value.items()))
    return escape(str(value))
