"""A bundle's README.md, made from its lock and the claims `repro verify` recomputes.

`repro build` makes it from the staged bundle before SHA256SUMS is written; `repro verify` makes
it again from the claims it has just recomputed and refuses a README that differs, so every value
it states is the one verify prints, with its evidence class. Its recipe to check the bundle
without repro is run by the test suite as written here.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from repro_serving.builder.claims import ClaimCheck
from repro_serving.builder.documents.lock import Lock
from repro_serving.builder.sealing.bundle import LAUNCHER, TOOLS_DIR

CONTENT_CLAIM = "content = "
"""The start of a content check's claim: the bundle's file count, README.md among them, so no
README can state it."""

CHECK_HEADING = "## Check it without repro"

_RECIPE = r""": "${PUB:?set PUB to the public key file of the signer}"
sha256sum -c --strict SHA256SUMS
sums=$(sha256sum SHA256SUMS | cut -c1-64)
grep -qF "{\"digest\":{\"sha256\":\"$sums\"},\"name\":\"SHA256SUMS\"}" statement.json
work=$(mktemp -d)
sed -n 's/^{"payload":"\([^"]*\)".*/\1/p' statement.dsse.json | base64 -d > "$work/payload"
test "$(sha256sum < "$work/payload")" = "$(sha256sum < statement.json)"
type=application/vnd.in-toto+json
printf 'DSSEv1 %d %s %d ' "${#type}" "$type" "$(wc -c < statement.json)" > "$work/pae"
cat statement.json >> "$work/pae"
sed -n 's/.*"sig":"\([^"]*\)".*/\1/p' statement.dsse.json | base64 -d > "$work/sig"
openssl pkeyutl -verify -pubin -inkey "$PUB" -rawin -in "$work/pae" -sigfile "$work/sig"
rm -r "$work"
"""
"""Every file against SHA256SUMS (`builder.sealing.bundle`), SHA256SUMS against the statement,
the statement against the envelope's payload, the signature over the DSSE pre-authentication
encoding of the payload type (`builder.sealing.dsse`) with OpenSSL: each line fails alone."""


def in_readme(check: ClaimCheck) -> bool:
    """Whether a recomputed claim is one a README states."""
    return not check.claim.startswith(CONTENT_CLAIM)


def render_readme(lock: Lock, checks: Sequence[ClaimCheck]) -> bytes:
    bundle = lock.bundle
    sections = [
        f"# {bundle.name}",
        _wrap(bundle.description),
        _wrap(
            f"A record sealed and signed by repro {bundle.repro_version}: the manifest it was "
            "built from, the lock of every pin with its evidence class, the oracle, the evidence "
            f"itself, and the repro that sealed it (`{TOOLS_DIR}/`). Anyone can check it offline "
            "and run it again on a machine like the one that made it."
        ),
        "## What it claims",
        _wrap(
            "`repro verify` recomputes each value from the sealed evidence and prints it with "
            "its class: `live` was observed on the machine that built the record, `sealed` is "
            "recomputed from the files here, `declared` is what the record's producer states, "
            "unchecked."
        ),
        _claims(checks),
        "## Run it",
        *_run(lock),
        CHECK_HEADING,
        *_check(),
    ]
    return ("\n\n".join(sections) + "\n").encode("utf-8")


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=96, break_long_words=False, break_on_hyphens=False)


def _claims(checks: Sequence[ClaimCheck]) -> str:
    rows = [
        f"| {_cell(c.claim)} | {c.evidence.value} | {_cell(c.value)} |"
        for c in checks
        if in_readme(c)
    ]
    return "\n".join(["| claim | class | value |", "| --- | --- | --- |", *rows])


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _run(lock: Lock) -> list[str]:
    arch = lock.host.enforced.arch or lock.host.facts.arch or "its architecture"
    first = (
        f"On Linux {arch}, with python3 (3.11 or later), coreutils and a package index pip is "
        "configured with:"
    )
    usage = f"```sh\n./{LAUNCHER} --key SIGNER.pub\n```"
    what = (
        "`SIGNER.pub` is the signer's public key, from the signer, never from this directory "
        f"(`--trusted-keys DIR` for a directory of them). `./{LAUNCHER}` checks this directory, "
        f"installs the repro of `{TOOLS_DIR}/` in a private environment (under "
        "`~/.cache/repro/envs/`) and verifies the bundle with it; "
    )
    if lock.record is not None:
        what += (
            "this record was produced elsewhere and imported from its evidence, which is what "
            f"it is checked by (`--verify-only` stops there); `./{LAUNCHER}` restores nothing "
            "for it, and `repro launch` refuses to replay it unless the machine and the stack "
            "it declares are there."
        )
    else:
        python = lock.python
        what += (
            f"it then restores what the lock pins (Python {python.interpreter}, which must be "
            f"on the machine; {len(python.artifacts)} wheels by sha256; the models) under "
            f"`~/.local/share/repro/bundles/{lock.bundle.name}/` and replays it: the candidate "
            "profile started exactly as locked, judged against the sealed teacher. Add "
            "`--signing-key KEY` to seal the run, `--verify-only` to stop after the "
            f"verification; `./{LAUNCHER} --help` says the rest."
        )
    trust = (
        "It refuses, with the reason, at the first step that does not hold. "
        f"`{LAUNCHER}` is one of the sealed files: it checks the others and the signature "
        "(openssl 3.0 or later) before it installs or runs anything, but a changed one "
        "would not say so: when the bundle did not come straight from its signer, check it "
        "first as below."
    )
    return [_wrap(first), usage, _wrap(what), _wrap(trust)]


def _check() -> list[str]:
    intro = (
        "With coreutils, grep, sed and OpenSSL 3, in this directory: every file against "
        "SHA256SUMS, "
        "SHA256SUMS against the signed statement, the statement against the DSSE envelope that "
        "carries it, and the envelope's signature over its pre-authentication encoding "
        "(`DSSEv1 <length> <type> <length> <payload>`) with the signer's public key, `PUB`:"
    )
    recipe = f"```sh\n{_RECIPE}```"
    after = (
        "Each command fails when its check does not hold; the last check prints `Signature "
        "Verified Successfully`. `repro verify` checks more: no file beside the sealed ones, "
        "and every claim recomputed."
    )
    return [_wrap(intro), recipe, _wrap(after)]
