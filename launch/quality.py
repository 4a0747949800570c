"""Quality checks of a run's answers: what `[[oracle.quality]]` asks of the output text.

Exactness (token ids, text hashes) says a run reproduced its teacher; it says nothing about
whether the teacher's answers are any good, and a lane that changes numerics (e.g. an FP8 KV
cache with its own teacher) needs both. Each check here is a pure function of the rows' text and
returns a `Verdict` of its own, reported beside the gates and never among them: a failing
quality check is reported as failing, and the run's exactness verdicts are untouched by it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Final

from repro_serving.builder.documents.evidence import OracleRow, Verdict, VerdictStatus
from repro_serving.builder.documents.manifest import (
    CodeBlockCheck,
    JsonCheck,
    LongContextCheck,
    QualityCheck,
    RepetitionCheck,
    ToolCallCheck,
)

_JSON_FENCE: Final = re.compile(r"^```json[ \t]*\r?\n(?P<body>.*?)(?:\r?\n```[ \t]*)?$", re.DOTALL)
_WORD: Final = re.compile(r"\S+")


def fence_opened(text: str, language: str) -> bool:
    """A line of `text` opens a fenced block in `language` ("```rust")."""
    pattern = re.compile(rf"^```{re.escape(language)}[ \t]*$", re.MULTILINE)
    return pattern.search(text) is not None


def json_object(text: str) -> dict[str, object] | str:
    """The one JSON object `text` is, bare or as the only content of a ```json block (an answer
    cut at max_tokens leaves the block open: its body is read as it is); otherwise why not,
    worded for a person."""
    stripped = text.strip()
    fenced = _JSON_FENCE.match(stripped)
    body = fenced["body"] if fenced is not None else stripped
    try:
        value = json.loads(body)
    except json.JSONDecodeError as error:
        return f"not JSON ({error.msg} at line {error.lineno}, column {error.colno})"
    if not isinstance(value, dict):
        return f"JSON {type(value).__name__}, not an object"
    return value


def most_repeated(text: str, ngram: int) -> tuple[str, int]:
    """The run of `ngram` consecutive words that occurs most often in `text`, and how often
    ("", 0 when the text is shorter)."""
    words = _WORD.findall(text)
    runs = Counter(" ".join(words[i : i + ngram]) for i in range(len(words) - ngram + 1))
    if not runs:
        return "", 0
    run, count = runs.most_common(1)[0]
    return run, count


def code_block_problem(check: CodeBlockCheck, row: OracleRow, text: str) -> str | None:
    if fence_opened(text, check.language):
        return None
    return f"no ```{check.language} block"


def json_problem(check: JsonCheck, row: OracleRow, text: str) -> str | None:
    found = json_object(text)
    if isinstance(found, str):
        return found
    missing = [key for key in check.required_keys if key not in found]
    return f"missing keys {', '.join(missing)}" if missing else None


def tool_call_problem(check: ToolCallCheck, row: OracleRow, text: str) -> str | None:
    found = json_object(text)
    if isinstance(found, str):
        return found
    name, arguments = found.get("name"), found.get("arguments")
    if not isinstance(name, str):
        return "no string name"
    if check.tools and name not in check.tools:
        return f"tool {name!r} is not one of {', '.join(check.tools)}"
    if not isinstance(arguments, dict):
        return "no object arguments"
    return None


def repetition_problem(check: RepetitionCheck, row: OracleRow, text: str) -> str | None:
    run, count = most_repeated(text, check.ngram)
    if count <= check.max_repeats:
        return None
    shown = run if len(run) <= 60 else run[:59] + "…"
    return f"{check.ngram} words repeat {count} times (at most {check.max_repeats}): {shown!r}"


def long_context_problem(check: LongContextCheck, row: OracleRow, text: str) -> str | None:
    if row.prompt_tokens < check.min_prompt_tokens:
        return f"prompt of {row.prompt_tokens} tokens, expected at least {check.min_prompt_tokens}"
    absent = [needle for needle in check.contains if needle not in text]
    return f"answer lacks {', '.join(map(repr, absent))}" if absent else None


def row_problem(check: QualityCheck, row: OracleRow, text: str) -> str | None:
    """Why `row`'s answer fails `check`, or None when it passes."""
    match check:
        case CodeBlockCheck():
            return code_block_problem(check, row, text)
        case JsonCheck():
            return json_problem(check, row, text)
        case ToolCallCheck():
            return tool_call_problem(check, row, text)
        case RepetitionCheck():
            return repetition_problem(check, row, text)
        case LongContextCheck():
            return long_context_problem(check, row, text)


def quality_check(check: QualityCheck, rows: Sequence[OracleRow]) -> Verdict:
    """One check over the rows it names (every row when it names none): it passes when each
    of them has its text and passes; a named row that is absent, or has no text, fails it."""
    by_id = {row.prompt_id: row for row in rows}
    names = check.prompts or tuple(by_id)
    problems: dict[str, str] = {}
    for prompt_id in names:
        row = by_id.get(prompt_id)
        if row is None or row.text is None:
            problems[prompt_id] = "row absent" if row is None else "the run kept no text"
            continue
        problem = row_problem(check, row, row.text)
        if problem is not None:
            problems[prompt_id] = problem
    passed = len(names) - len(problems)
    summary = f"{check.kind}: {passed}/{len(names)} rows pass"
    if problems:
        first = next(iter(problems))
        summary += f"; {first}: {problems[first]}"
    status = VerdictStatus.FAIL if problems or not names else VerdictStatus.PASS
    return Verdict(
        gate=f"quality:{check.name}",
        status=status,
        summary=summary,
        details={"kind": check.kind, "rows": list(names), "problems": problems},
    )


def assess(checks: Sequence[QualityCheck], rows: Sequence[OracleRow]) -> tuple[Verdict, ...]:
    """A verdict for each quality check, in the manifest's order; kept apart from `judge`."""
    return tuple(quality_check(check, rows) for check in checks)
