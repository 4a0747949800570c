"""The one refusal of a document that does not follow its model: every problem, at once.

Every document read, a manifest, an oracle suite, a sealed evidence file or a record file,
is validated here (`validated`) or translated here (`problems_of`), and refused as one
`InvalidDocument` naming the file and each problem: where (key path, and line and column where
the source text gives one), what is wrong, what was expected and what was found.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, TypeVar

from pydantic import BaseModel, ValidationError

from repro_serving.builder.documents.translate import Problem, Syntax, problems_of
from repro_serving.builder.errors import BadInput
from repro_serving.builder.readers import refuse_duplicate_keys

SHOWN_PROBLEMS: Final = 10
"""Problems joined into `found` (the line of `--json`); `diagnostics()` lists every one."""

Model = TypeVar("Model", bound=BaseModel)


class InvalidDocument(BadInput):
    """Every problem of one document, reported at once.

    `what` is `title` and the one problem's own words, or how many there are (unless `what` is
    given). One problem gives its place in `where` and its sides in `expected` and `found`;
    several, or any number where the document's `expected` side is given (the model a sealed
    file must follow, for readers that show `found` alone), are joined into `found` (the first
    ten, and how many more), each with its place.
    """

    def __init__(
        self,
        source: str,
        problems: Sequence[Problem],
        *,
        title: str,
        what: str | None = None,
        expected: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.source = source
        self.problems = tuple(problems)
        if len(self.problems) == 1 and expected is None:
            (only,) = self.problems
            where = f"{source}, {only.place}" if only.place else source
            super().__init__(
                what or f"{title}: {only.what}",
                where=where,
                expected=only.expected,
                found=only.found,
                hint=hint,
            )
            return
        lines = [problem.line() for problem in self.problems]
        more = len(lines) - SHOWN_PROBLEMS
        found = "; ".join(lines[:SHOWN_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")
        what = what or f"{title}: {len(self.problems)} problems"
        super().__init__(what, where=source, expected=expected, found=found, hint=hint)

    def diagnostics(self) -> str:
        if len(self.problems) == 1:
            return super().diagnostics()
        lines = [f"error: {self.what}", f"  {'where:':<9} {self.where}"]
        if self.expected is not None:
            lines.append(f"  {'expected:':<9} {self.expected}")
        for problem in self.problems:
            lines.append(f"  - {problem.place}: {problem.what}")
            lines.append(f"      {'expected:':<9} {problem.expected}")
            lines.append(f"      {'found:':<9} {problem.found}")
        if self.hint is not None:
            lines.append(f"  {'hint:':<9} {self.hint}")
        return "\n".join(lines)


def refused(error: BadInput) -> Problem:
    """A refusal of `builder.readers` (not a regular file, too large, too deep) as a problem."""
    return Problem("", error.what, error.expected or "", error.found or "")


def validated(
    model: type[Model],
    text: str | bytes,
    *,
    source: str,
    title: str,
    what: str | None = None,
    expected: str | None = None,
    hint: str | None = None,
    syntax: Syntax = "json",
    positions_from: str | None = None,
    strict: bool | None = True,
) -> Model:
    """JSON `text` as a `model`, or InvalidDocument listing every problem; each is placed in
    `positions_from` (in `syntax`), by default `text` itself. A JSON document stating a key
    twice is refused (`readers.refuse_duplicate_keys`) once the model has read it: the model
    keeps the last value, another reader (or a person) the first."""
    try:
        document = model.model_validate_json(text, strict=strict)
    except ValidationError as error:
        if positions_from is None:
            positions_from = text if isinstance(text, str) else text.decode(errors="replace")
        problems = problems_of(error, model, syntax=syntax, text=positions_from)
        raise InvalidDocument(
            source, problems, title=title, what=what, expected=expected, hint=hint
        ) from None
    if syntax == "json":
        refuse_duplicate_keys(text, where=source)
    return document


__all__ = ["SHOWN_PROBLEMS", "InvalidDocument", "Problem", "refused", "validated"]
