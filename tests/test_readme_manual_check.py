"""The repository README's check of a bundle without repro, run exactly as written.

The `sh` blocks of the README's section "Checking a bundle without repro" are saved, in order, as
one script outside the bundle and run as the README says (`sh -eu`, and bash too), traced, in a
copy of the committed Laguna bundle, with PATH limited to /usr/bin and /bin and the signer's key
in PUB. They pass on the bundle as sealed; on each tampering they stop at the check that is
meant to catch it, and repro's own integrity check refuses the same bundle. The first block is,
command for command, the recipe of the README.md repro writes into every bundle.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from repro_serving.builder.build import staged_readme
from repro_serving.builder.handoff.readme import CHECK_HEADING
from repro_serving.builder.hashing import sha256_bytes
from repro_serving.builder.sealing import bundle, dsse
from repro_serving.builder.sealing.integrity import verify_bundle
from repro_serving.builder.sealing.keys import PublicKey, SigningKey, TrustedKeys
from repro_serving.builder.sealing.statement import Digest, Statement, Subject

SECTION = "## Checking a bundle without repro"
LAGUNA = REPO_ROOT / "repro" / "laguna-102tps"
PUBLIC = REPO_ROOT / "keys" / "example.pub"
PRIVATE = REPO_ROOT / "keys" / "example.key"
SHELLS = ("sh", "bash")
TEACHER = f"{bundle.ORACLE_DIR}/{bundle.TEACHER_FILE}"
VERIFIED = "Signature Verified Successfully"


def sh_blocks(markdown: str, heading: str) -> list[str]:
    """The ```sh blocks of the section of `markdown` that starts at `heading`."""
    start = markdown.index(f"\n{heading}\n")
    end = markdown.find("\n## ", start + 1)
    section = markdown[start : None if end < 0 else end]
    return re.findall(r"^```sh\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)


def readme_blocks() -> list[str]:
    return sh_blocks((REPO_ROOT / "README.md").read_text(encoding="utf-8"), SECTION)


@dataclass(frozen=True)
class Outcome:
    """How the script ended: its status, what it printed, and the command it stopped at."""

    returncode: int
    stdout: str
    stopped_at: str
    """The last command the shell traced: with -e, the one that failed."""


@dataclass(frozen=True)
class Checker:
    """The README's blocks as one script outside the bundle, run inside a copy of it."""

    script: Path
    scratch: Path

    def run(self, copy: Path, public: Path, shell: str) -> Outcome:
        done = subprocess.run(
            [shell, "-eux", str(self.script)],
            cwd=copy,
            env={"PATH": "/usr/bin:/bin", "PUB": str(public), "TMPDIR": str(self.scratch)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        traced = [line for line in done.stderr.splitlines() if line.startswith("+")]
        assert traced, done.stderr
        return Outcome(done.returncode, done.stdout, traced[-1].lstrip("+ "))


@pytest.fixture
def checker(tmp_path: Path) -> Checker:
    script = tmp_path / "check.sh"
    script.write_text("".join(readme_blocks()), encoding="utf-8")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    return Checker(script, scratch)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The committed Laguna bundle, copied under its own name: the committed one is never
    written."""
    target = tmp_path / "elsewhere" / LAGUNA.name
    shutil.copytree(LAGUNA, target, symlinks=True)
    return target


# --- the README's blocks --------------------------------------------------------------------------


def test_the_section_has_the_bundle_recipe_and_the_remaining_file_checks() -> None:
    blocks = readme_blocks()
    assert len(blocks) == 2
    assert 'openssl pkeyutl -verify -pubin -inkey "$PUB" -rawin' in blocks[0]
    assert "sha256sum -c --strict SHA256SUMS" in blocks[0]
    assert "find ." in blocks[1] and "statement.json" in blocks[1]


def test_the_first_block_is_the_recipe_repro_writes_into_every_bundle(copy: Path) -> None:
    written = staged_readme(copy).decode("utf-8")
    assert readme_blocks()[0] == sh_blocks(written, CHECK_HEADING)[0]


# --- a bundle as sealed ---------------------------------------------------------------------------


@pytest.mark.parametrize("shell", SHELLS)
def test_the_check_passes_on_the_bundle_as_sealed(copy: Path, checker: Checker, shell: str) -> None:
    before = sorted(p.relative_to(copy) for p in copy.rglob("*"))
    outcome = checker.run(copy, PUBLIC, shell)
    assert outcome.returncode == 0, outcome
    assert VERIFIED in outcome.stdout
    assert outcome.stopped_at.startswith("rm -r ")
    assert sorted(p.relative_to(copy) for p in copy.rglob("*")) == before, "nothing written"
    assert not any(checker.scratch.iterdir()), "its scratch directories are removed"
    assert verify_bundle(copy, TrustedKeys.from_key_file(PUBLIC)).ok


# --- tampering ------------------------------------------------------------------------------------


def flip_first_digit(path: Path) -> None:
    data = path.read_bytes()
    at = re.search(rb"[0-9]", data)
    assert at is not None, path
    digit = data[at.start()]
    path.write_bytes(data[: at.start()] + bytes([digit ^ 1]) + data[at.end() :])


def sealed(copy: Path) -> Statement:
    return Statement.from_json((copy / bundle.STATEMENT).read_bytes(), where=bundle.STATEMENT)


def with_digests(statement: Statement, digests: dict[str, str]) -> Statement:
    """`statement` with the subjects of `digests` changed or added, still sorted by name."""
    merged = statement.digests() | digests
    subjects = tuple(
        Subject(name=name, digest=Digest(sha256=merged[name])) for name in sorted(merged)
    )
    return statement.model_copy(update={"subject": subjects})


def rewrite_sums(copy: Path, digests: dict[str, str]) -> str:
    """SHA256SUMS with the lines of `digests` changed; its own new sha256."""
    path = copy / bundle.SHA256SUMS
    listed = bundle.parse_sha256sums(path.read_bytes(), where=bundle.SHA256SUMS)
    path.write_bytes(bundle.render_sha256sums(listed | digests))
    return sha256_bytes(path.read_bytes())


def write_statement(copy: Path, statement: Statement) -> bytes:
    payload = statement.to_json()
    (copy / bundle.STATEMENT).write_bytes(payload)
    return payload


def resign_with_example_key(copy: Path, statement: Statement) -> None:
    """A statement re-sealed with the example key, public on purpose: a signature by it proves
    nothing of who sealed, and the checks beside the signature must hold alone."""
    payload = write_statement(copy, statement)
    key = SigningKey.from_path(PRIVATE)
    (copy / bundle.ENVELOPE).write_bytes(dsse.sign(payload, key).to_json())


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def resign_with_openssl_key(copy: Path, statement: Statement, scratch: Path) -> Path:
    """The statement signed by a key made with `openssl genpkey`, in a canonical envelope;
    that key's public key file."""
    private, public, pae, signature = (
        scratch / name for name in ("other.key", "other.pub", "pae", "sig")
    )
    openssl("genpkey", "-algorithm", "ed25519", "-out", str(private))
    openssl("pkey", "-in", str(private), "-pubout", "-out", str(public))
    payload = write_statement(copy, statement)
    pae.write_bytes(dsse.pae(dsse.PAYLOAD_TYPE, payload))
    openssl(
        "pkeyutl",
        "-sign",
        "-rawin",
        "-inkey",
        str(private),
        "-in",
        str(pae),
        "-out",
        str(signature),
    )
    envelope = dsse.Envelope(
        payload=dsse.b64encode(payload),
        payload_type=dsse.PAYLOAD_TYPE,
        signatures=(
            dsse.Signature(
                keyid=PublicKey.from_path(public).key_id,
                sig=dsse.b64encode(signature.read_bytes()),
            ),
        ),
    )
    (copy / bundle.ENVELOPE).write_bytes(envelope.to_json())
    return public


def changed_file(copy: Path, scratch: Path) -> None:
    flip_first_digit(copy / TEACHER)


def missing_file(copy: Path, scratch: Path) -> None:
    (copy / TEACHER).unlink()


def changed_file_with_its_sums(copy: Path, scratch: Path) -> None:
    flip_first_digit(copy / TEACHER)
    rewrite_sums(copy, {TEACHER: sha256_bytes((copy / TEACHER).read_bytes())})


def changed_statement(copy: Path, scratch: Path) -> None:
    write_statement(copy, with_digests(sealed(copy), {TEACHER: "0" * 64}))


def changed_statement_and_payload(copy: Path, scratch: Path) -> None:
    payload = write_statement(copy, with_digests(sealed(copy), {TEACHER: "0" * 64}))
    envelope = json.loads((copy / bundle.ENVELOPE).read_bytes())
    envelope["payload"] = dsse.b64encode(payload)
    (copy / bundle.ENVELOPE).write_bytes(dsse.Envelope.model_validate(envelope).to_json())


def lies_signed_by_another_key(copy: Path, scratch: Path) -> None:
    """Every file, SHA256SUMS and the statement consistent with a changed teacher: only the
    key tells."""
    flip_first_digit(copy / TEACHER)
    teacher = sha256_bytes((copy / TEACHER).read_bytes())
    sums = rewrite_sums(copy, {TEACHER: teacher})
    statement = with_digests(sealed(copy), {TEACHER: teacher, bundle.SHA256SUMS: sums})
    resign_with_openssl_key(copy, statement, scratch)


def subject_sha256sums_leaves_out(copy: Path, scratch: Path) -> None:
    extra = copy / bundle.EVIDENCE_DIR / "unlisted.txt"
    extra.write_text("sealed by the statement, left out of SHA256SUMS\n")
    name = extra.relative_to(copy).as_posix()
    statement = with_digests(sealed(copy), {name: sha256_bytes(extra.read_bytes())})
    resign_with_example_key(copy, statement)


def digest_sha256sums_disagrees_with(copy: Path, scratch: Path) -> None:
    resign_with_example_key(copy, with_digests(sealed(copy), {TEACHER: "0" * 64}))


def extra_file(copy: Path, scratch: Path) -> None:
    (copy / bundle.EVIDENCE_DIR / "extra.txt").write_text("not sealed\n")


def sealed_file_as_symlink(copy: Path, scratch: Path) -> None:
    """The same bytes, read through a link to outside the bundle: sha256sum follows it."""
    outside = scratch / "teacher.json"
    shutil.move(copy / TEACHER, outside)
    (copy / TEACHER).symlink_to(outside)


def extra_symlink(copy: Path, scratch: Path) -> None:
    (copy / bundle.EVIDENCE_DIR / "link").symlink_to("../lock.json")


def empty_directory(copy: Path, scratch: Path) -> None:
    (copy / bundle.EVIDENCE_DIR / "empty").mkdir()


@dataclass(frozen=True)
class Tampering:
    change: Callable[[Path, Path], None]
    stops_at: str
    """How the command the script stops at starts (and, for `diff`, the file it ends with)."""
    says: str
    """What the failing command prints, or "" for `grep -q` and `test`, which print nothing."""


TAMPERINGS = {
    "a changed file": Tampering(changed_file, "sha256sum -c", f"{TEACHER}: FAILED"),
    "a missing file": Tampering(missing_file, "sha256sum -c", f"{TEACHER}: FAILED open or read"),
    "a changed file with its line of SHA256SUMS": Tampering(
        changed_file_with_its_sums, "grep -qF", ""
    ),
    "a changed statement.json": Tampering(changed_statement, "test ", ""),
    "a changed payload under the old signature": Tampering(
        changed_statement_and_payload, "openssl pkeyutl", "Signature Verification Failure"
    ),
    "consistent lies signed by another key": Tampering(
        lies_signed_by_another_key, "openssl pkeyutl", "Signature Verification Failure"
    ),
    "a sealed subject SHA256SUMS leaves out": Tampering(
        subject_sha256sums_leaves_out, "diff /subjects", "evidence/unlisted.txt"
    ),
    "a sealed digest SHA256SUMS disagrees with": Tampering(
        digest_sha256sums_disagrees_with, "diff /subjects", '"0000000000'
    ),
    "an extra file": Tampering(extra_file, "diff /present", "> evidence/extra.txt"),
    "a sealed file as a symlink to the same bytes": Tampering(
        sealed_file_as_symlink, "diff /present", f"< {TEACHER}"
    ),
    "an extra symlink": Tampering(extra_symlink, "diff /other", "> ./evidence/link"),
    "an empty directory": Tampering(empty_directory, "diff /other", "> ./evidence/empty"),
}


def stopped_where(outcome: Outcome, expected: str) -> bool:
    if expected.startswith("diff /"):
        command, _, file = expected.partition(" ")
        return outcome.stopped_at.startswith(command) and outcome.stopped_at.endswith(file)
    return outcome.stopped_at.startswith(expected)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("case", list(TAMPERINGS))
def test_each_tampering_stops_the_check_where_it_is_caught(
    copy: Path, checker: Checker, tmp_path: Path, case: str, shell: str
) -> None:
    tampering = TAMPERINGS[case]
    tampering.change(copy, tmp_path)
    outcome = checker.run(copy, PUBLIC, shell)
    assert outcome.returncode != 0, outcome
    assert stopped_where(outcome, tampering.stops_at), outcome
    assert tampering.says in outcome.stdout, outcome
    assert not verify_bundle(copy, TrustedKeys.from_key_file(PUBLIC)).ok


def test_consistent_lies_pass_with_the_key_that_sealed_them(
    copy: Path, checker: Checker, tmp_path: Path
) -> None:
    """The forgery above is refused for its key alone: the check is as good as PUB."""
    lies_signed_by_another_key(copy, tmp_path)
    outcome = checker.run(copy, tmp_path / "other.pub", "sh")
    assert outcome.returncode == 0, outcome
    assert VERIFIED in outcome.stdout


@pytest.mark.parametrize("shell", SHELLS)
def test_an_envelope_formatted_by_another_tool_is_refused_not_misread(
    copy: Path, checker: Checker, shell: str
) -> None:
    """The README says so: the commands read the envelope as one line of canonical JSON."""
    path = copy / bundle.ENVELOPE
    path.write_text(json.dumps(json.loads(path.read_bytes()), indent=2) + "\n")
    outcome = checker.run(copy, PUBLIC, shell)
    assert outcome.returncode != 0, outcome
    assert outcome.stopped_at.startswith("test "), outcome
    assert VERIFIED not in outcome.stdout


@pytest.mark.parametrize("shell", SHELLS)
def test_without_a_key_nothing_is_checked(copy: Path, checker: Checker, shell: str) -> None:
    done = subprocess.run(
        [shell, "-eu", str(checker.script)],
        cwd=copy,
        env={"PATH": "/usr/bin:/bin", "TMPDIR": str(checker.scratch)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "set PUB to the public key file of the signer" in done.stderr
    assert done.stdout == ""
