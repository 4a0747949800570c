"""The one error root of repro and the exit codes every command shares.

Exit codes: 0 pass; 1 a check failed; 2 bad input; 3 something needed could not be observed;
4 an internal error (a bug). Code raises a subclass of `ReproError`; only `builder.cli.main`
catches it, prints `diagnostics()` and returns `exit_code`. A drift is data
(`builder.drift.Drift`), never an error.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    PASS = 0
    CHECK_FAILED = 1
    BAD_INPUT = 2
    NOT_OBSERVABLE = 3
    INTERNAL = 4
    """A bug: an exception no refusal was written for reached the command line's last guard."""
    INTERRUPTED = 130
    """Interrupted by SIGINT (128 + 2, as a shell reports it), after a clean teardown."""
    BROKEN_PIPE = 141
    """The reader of stdout closed it early (128 + SIGPIPE, as a shell reports it)."""


class ReproError(Exception):
    """Root of every error repro reports to a user.

    `what` says what went wrong, `where` names the file, key or process, `expected` and `found`
    give both sides where there are two, and `hint` says what to do about it.
    """

    exit_code: ExitCode = ExitCode.CHECK_FAILED

    def __init__(
        self,
        what: str,
        *,
        where: str | None = None,
        expected: str | None = None,
        found: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(what)
        self.what = what
        self.where = where
        self.expected = expected
        self.found = found
        self.hint = hint

    def diagnostics(self) -> str:
        lines = [f"error: {self.what}"]
        for label, value in (
            ("where", self.where),
            ("expected", self.expected),
            ("found", self.found),
            ("hint", self.hint),
        ):
            if value is not None:
                lines.append(f"  {label + ':':<9} {value}")
        # What else was found on the way (`add_note`): another node's drift, the error a
        # refusal's cause produced downstream.
        notes = getattr(self, "__notes__", ())
        lines += [f"  {'also:':<9} " + str(note).replace("\n", "\n" + " " * 12) for note in notes]
        return "\n".join(lines)


class BadInput(ReproError):
    """Usage, a malformed manifest, bundle or ELF file: the input must change."""

    exit_code = ExitCode.BAD_INPUT


class NotObservable(ReproError):
    """A fact that was needed could not be observed (permission, missing tool, no server)."""

    exit_code = ExitCode.NOT_OBSERVABLE
