"""Dispatch truth: which code a host's capabilities select, predicted from its facts.

The same installed bytes can run different code on two machines. vLLM's CPU platform imports
`vllm._C` with AVX512-BF16, `vllm._C_AVX512` with AVX-512 alone and `vllm._C_AVX2` otherwise
(`vllm/platforms/cpu.py: import_kernels`, through torch's cpuinfo checks); torch's ATen picks
its kernels' code path inside one library by the same kind of test (`ATEN_CPU_CAPABILITY`
overrides it). A kernel set (`kernels/*.toml`) declares each such choice as a `Dispatch`: the
thing chosen, the variants in the order the stack tries them, and the host facts each needs.

This module is pure: `predict` takes the facts (CPU flags, architecture, the environment the
stack starts with) as arguments, so every branch is tested with facts of any host, and
`deciding_facts` names only the facts a dispatch reads, which is all a lock records of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from repro_serving.builder.drift import Drift, DriftKind

CpuFlag = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]+$")]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DispatchKind(StrEnum):
    MODULE = "module"
    """Each variant is another extension module (another file mapped)."""
    CODE_PATH = "code_path"
    """Each variant is a code path inside the same bytes (nothing else is mapped)."""


class Condition(_Frozen):
    """What a host must have for a variant: every listed CPU flag (as /proc/cpuinfo names
    it), on one of the listed architectures when any is listed. Empty: always."""

    arch: tuple[str, ...] = ()
    cpu_flags: tuple[CpuFlag, ...] = ()


class Variant(_Frozen):
    name: Annotated[str, Field(min_length=1)]
    """The module imported (`vllm._C_AVX2`) or the code path's name (`AVX2`)."""
    when: Condition = Condition()
    override: str | None = None
    """The value of the dispatch's override variable that forces this variant."""


class Dispatch(_Frozen):
    """One run-time choice of code by host capability, as the stack itself makes it."""

    name: Annotated[str, Field(min_length=1)]
    """What is chosen: the module a manifest names (`vllm._C`) or a code path's owner
    (`torch.aten_cpu_capability`)."""
    kind: DispatchKind
    decided_by: Annotated[str, Field(min_length=1)]
    """Where the stack makes the choice, for a reader who wants to check the rule."""
    override_env: str | None = None
    """An environment variable that forces a variant by its `override` value."""
    probe: str | None = None
    """Python code that prints the variant the stack chose, run in the serving environment
    with the launch environment at build time: the stack's own word, checked against the
    prediction. For a code path nothing is mapped, so this is its only live evidence."""
    variants: Annotated[tuple[Variant, ...], Field(min_length=1)]
    """In the order the stack tries them: the first whose condition holds is chosen. A name
    may come back under another condition (vllm._C on x86-64 with AVX512-BF16, and on every
    other architecture)."""

    @model_validator(mode="after")
    def _well_formed(self) -> Self:
        names = [v.name for v in self.variants]
        last = self.variants[-1].when
        if last.cpu_flags:
            raise ValueError(
                f"dispatch {self.name}: the last variant must need no CPU flag, so that every "
                "host of its architectures is predicted"
            )
        if self.kind is DispatchKind.MODULE and self.name not in names:
            raise ValueError(f"dispatch {self.name}: the module itself must be one variant")
        return self

    def deciding_facts(self) -> tuple[str, ...]:
        """Every CPU flag any variant tests, in order of first appearance: the facts that select
        code, and the only ones a lock records for this dispatch."""
        flags = (flag for variant in self.variants for flag in variant.when.cpu_flags)
        return tuple(dict.fromkeys(flags))

    def names(self) -> tuple[str, ...]:
        """Each variant's name once, in order."""
        return tuple(dict.fromkeys(v.name for v in self.variants))


@dataclass(frozen=True)
class HostCapabilities:
    """The facts a dispatch reads of a host: its architecture and CPU flags."""

    arch: str
    cpu_flags: frozenset[str]


@dataclass(frozen=True)
class Prediction:
    dispatch: str
    variant: str | None
    """None when no variant's condition holds (an architecture the set does not cover)."""
    facts: dict[str, bool | str]
    """The deciding facts as this host has them: `cpu:<flag>` → present, `arch`, and
    `env:<VAR>` when the override variable is set."""

    def describe(self) -> str:
        return f"{self.variant or 'no variant'} ({_facts(self.facts)})"


def predict(
    dispatch: Dispatch, host: HostCapabilities, env: Mapping[str, str] | None = None
) -> Prediction:
    """The variant `dispatch` chooses on `host` when the stack starts with `env`."""
    facts: dict[str, bool | str] = {"arch": host.arch}
    facts |= {f"cpu:{flag}": flag in host.cpu_flags for flag in dispatch.deciding_facts()}
    env = env or {}
    if dispatch.override_env and dispatch.override_env in env:
        value = env[dispatch.override_env]
        facts[f"env:{dispatch.override_env}"] = value
        forced = next((v for v in dispatch.variants if v.override == value), None)
        if forced is not None:
            return Prediction(dispatch.name, forced.name, facts)
    for variant in dispatch.variants:
        if _holds(variant.when, host):
            return Prediction(dispatch.name, variant.name, facts)
    return Prediction(dispatch.name, None, facts)


def _holds(condition: Condition, host: HostCapabilities) -> bool:
    if condition.arch and host.arch not in condition.arch:
        return False
    return all(flag in host.cpu_flags for flag in condition.cpu_flags)


def differs(
    subject: str,
    recorded_variant: str,
    recorded_facts: Mapping[str, bool | str],
    here: Prediction,
) -> Drift | None:
    """A drift when this host would choose another variant than the one recorded."""
    if here.variant == recorded_variant:
        return None
    recorded = _facts(recorded_facts)
    deciding = [k for k, v in sorted(here.facts.items()) if recorded_facts.get(k) != v]
    return Drift(
        kind=DriftKind.DISPATCH,
        subject=subject,
        expected=f"{recorded_variant} ({recorded})",
        observed=here.describe(),
        why=(
            f"this host selects other code than the record ran: {', '.join(deciding)} differ; "
            "the record replays on a host where they are as recorded"
            if deciding
            else "this host selects other code than the record ran"
        ),
    )


def _facts(facts: Mapping[str, bool | str]) -> str:
    """Facts in one order (by name, as a lock stores them), so two hosts read side by side."""
    return ", ".join(f"{k}={_shown(v)}" for k, v in sorted(facts.items()))


def _shown(value: bool | str) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return value
