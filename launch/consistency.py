"""Contradictions inside one start's sealed evidence: its rows against themselves and the suite,
and vLLM's `/metrics` read before and after the suite against the rows.

A holder of the signing key can re-seal any bytes; what it cannot do is make a fabricated record
agree with itself everywhere a real one does. This module owns those agreements, as pure
functions over the sealed texts, each returning every problem it finds: a sentence naming the
file, the row (its place and prompt) or sample, the field, what was expected and what was found.

Rows (`rows_problems`): every prompt of the suite answered exactly once, in suite order, its
`prompt_index` its place; `completion_tokens` the number of its token ids; no more tokens than
the request allowed (the suite's max_tokens, less where `--max-model-len` leaves less room:
vLLM asks `min(max_tokens, max_model_len - prompt_tokens)`); `finish_reason` `length` only at
that limit (vLLM 0.32 checks EOS before the limit, so `stop` may end at it too); ids and counts
never negative, ids below the vocabulary where the caller knows it; `cached_tokens` reported
where the manifest gates it, and below `prompt_tokens` (vLLM always recomputes a prompt's last
token); a first token read in the answer's read 0 has no earlier read (`first_token_after_s`
0.0). `starts_problems`: a prompt has the same `prompt_tokens` in every fresh start.

Metrics (`metrics_problems`): both reads of one process (`process_start_time_seconds`, every
counter's `_created`, none created before it, none later than the read, which was taken before
teardown began), the same label sets, every info sample (`vllm:cache_config_info`,
`python_info`) the same, no counter or histogram sample going backwards, each read's histograms
cumulative with the +Inf bucket their count and their sum one their buckets allow (each
observation between its bucket's bounds, from 0 for a first bucket of a non-negative bound; so
too the rise of the sum against the rise of the buckets), no request running or waiting before
the suite (its client had sent nothing to the fresh server) nor left after it (by reason too; in
each read the reasons sum to those waiting), and not all unchanged while the suite was answered;
every vLLM sample labelled with the argv's served model name, and of one engine unless the argv
asks for data parallelism (then of at most `--data-parallel-size`). Then what vLLM 0.32 counts
per request, measured equal on the committed bundles, an ngram run and a prefix-cache-hit run
of the tiny model: `request_success` one per row (per `finished_reason` where the rows state
it), `prompt_tokens` / `generation_tokens` and the per-request histograms' counts, sums and
(where each row's value is known: prompt and generated tokens, the prefill's computed KV tokens,
`prompt_tokens - cached_tokens` as `loggers.py` observes them, the max tokens) buckets the
rows', `request_params_max_tokens` each row's limit, the prompt tokens by source and cached,
the prefix cache's queries (the rows' prompt tokens when `vllm:cache_config_info` says prefix
caching is on, as the argv must ask, none when off) and hits (their cached tokens), the cached
prompt tokens by source summing to the hits, local and external (their HELP says so), no
external cache query or hit and no prompt token from a KV transfer without a KV connector in
the argv, and with prefix caching off and no KV connector no KV block in use once nothing runs
or waits (vLLM frees a finished request's blocks before it states the gauges); the engine's
preemptions those of the requests that finished; the server's time to first token and
end-to-end latency inside the client's times (10 ms a request of clock slack where the
server's interval nests in the client's, 250 ms of delivery slack where it does not), in sum and in
every bucket (a bucket holds at least the rows whose client-side upper bound is within its
bound, at most those whose lower bound is: time to first token at most the row's ttft_s,
end-to-end latency at most its last token's offset and at least its first to last token); the
per-request times against each other as vLLM 0.32's `stats.py` takes them (every phase, time
per output token and inter-token latency inside the end-to-end latency; queue + prefill +
decode inside it, queue + prefill inside the time to first token, 10 ms a request of slack
between the server's wall clock and the engine's monotonic one; inference = prefill + decode
and the inter-token latencies' sum = decode to 1 us an observation, measured equal to the last
bit on every committed read; time per output token between the decode time over the rows' most
and fewest tokens after the first); one inter-token latency per decode step (exactly
completion - 1 per row without speculation), and for speculative decoding with k draft tokens: k
positions, drafts <= draft tokens <= drafts x k, accepted <= draft tokens, each position at
most the drafts, positions never rising, summing to the accepted tokens. Draft tokens equal to
drafts x k is not an invariant: vLLM's ngram proposer drafts fewer tokens when its match lies
near the end of the context (measured: 29 drafts of k = 3, 86 draft tokens).
The API server's HTTP instrumentation (prometheus-fastapi-instrumentator, which observes every
request it counts once in each of its families): in each read the request and response sizes
and the durations count by handler (and method) what `http_requests_total` counts, the
unlabelled duration histogram counts every such request, and both duration histograms hold the
same durations (their shared bounds count alike, their sums agree to rounding); the suite's
POSTs timed inside the client's times as the end-to-end latency is, in sum and in every bucket
of both histograms (the unlabelled one may also hold the requests of no row).
Against what other sealed files state (`ServerFacts`): the suite's handler first counted a
request no earlier than `server.json`'s ready_at (an imported record: its first request's
start), vLLM's counters created no later than that (the engine existed once the server answered)
and no earlier than its engine core's start in the sealed audit (an imported record: its last
idle snapshot before the run, which saw no process holding a card; 1 s of slack for `/proc`'s
start times); `python_info` the interpreter the observations (an imported record: its runtime
lock) state; `vllm:cache_config_info`'s KV cache size in tokens and maximum concurrency those
the log states, and on vLLM's CPU platform its bytes `VLLM_CPU_KVCACHE_SPACE` GiB of the
server's environment.
Against the access log the server wrote while it served: each request `http_requests_total`
counted between the reads (by handler, method and status class) has its access line, unless
the argv turned uvicorn's access log off and the log holds none; where it holds access lines,
every POST is to the suite's endpoint, the readiness probe answered 2xx before the suite's
first POST, and a GET `/metrics` answered 2xx before that POST and another after the suite's
last (the two sealed reads), each unless the argv leaves its path out of the access log
(`--disable-access-log-for-endpoints`). A quantity neither read exports is listed as not
applicable, never invented (a relation between samples the rows do not give, judged where a
read exports its samples, is listed nowhere when none does).

What these checks cannot see: a record fabricated consistently in every file (the texts, the
counts, the counters and the histograms made to agree); whether the token ids are what the model
computes (the teacher and a replay tell); prompt texts (only their token counts are sealed),
so neither a prompt's token count nor which earlier prompt a cache hit came from; the vocabulary,
which the sealed evidence does not state; whether a `stop` row ended on an end-of-sequence or
stop token; how vLLM grouped tokens into stream events (its output collector merges a late
client's outputs, speculative or not); counters of an engine that does not export them; where
in its bucket an observation lies (a sum moved within its buckets' bounds, and the per-request
times moved together, agree; an observation moved inside the client's interval of its row, or
to another row's place of the same bounds); which request an HTTP observation of no row was
(beyond the suite's handler, only that the instrumentator counted it alike everywhere); when a
read was taken where the evidence states no time (an imported record); when the API server's
own process started beyond `process_start_time_seconds` (no other file states it: an imported
record's may precede its last idle snapshot, which sees only the cards, and Laguna's does by
0.5 s); the KV cache's bytes other than on the CPU platform (vLLM sizes it from memory free at
start, which no file states) and its blocks (a hybrid model's blocks are no token count over the
block size: Laguna's 6446 x 64 is not its 136,802 tokens); a KV connector configured other than
by the argv (a config file); an access line of a request the metrics did not count, beyond the
suite's POSTs and the reads and probe repro makes (a GET the server answered for another
client).
"""

from __future__ import annotations

import json
import math
import re
import string
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from typing import Final, Literal

from repro_serving.builder.documents.evidence import OracleRow
from repro_serving.builder.documents.manifest import ENDPOINTS, Load, Suite
from repro_serving.builder.errors import BadInput
from repro_serving.builder.vllmlog import flag_name, flag_value
from repro_serving.launch.gates import AccessLine, access_lines
from repro_serving.launch.metrics import LabelSet, Samples, families, samples

FINISH_REASONS: Final = ("stop", "length")
"""How a complete answer ends (vLLM's `abort`, `error` and `repetition` are not answers, and
the oracle asks with no tools)."""
SPECULATIVE_CONFIG: Final = ("--speculative-config", "-sc")
MAX_MODEL_LEN: Final = "--max-model-len"
SPEC_COUNTERS: Final = (
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)
PER_POSITION: Final = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
PROCESS_START: Final = "process_start_time_seconds"
HTTP_REQUESTS: Final = "http_requests_total"
"""The API server's HTTP instrumentation: requests by handler, method and status class."""
PER_REQUEST_HISTOGRAMS: Final = (
    "vllm:e2e_request_latency_seconds",
    "vllm:time_to_first_token_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:request_num_preemptions",
)
"""Histograms vLLM 0.32 observes once per finished request, whose sums the rows cannot give."""
KV_CONNECTOR: Final = ("--kv-transfer-config", "--kv-offloading-size")
"""Arguments that give the engine a KV connector, and with it KV from outside its own cache."""
UVICORN_LOG_LEVEL: Final = "--uvicorn-log-level"
ACCESS_LOG_LEVELS: Final = ("trace", "debug", "info")
"""uvicorn log levels at which its access log is written (it logs each request at info)."""
UNLOGGED_ENDPOINTS: Final = "--disable-access-log-for-endpoints"
DATA_PARALLEL: Final = ("--data-parallel-size", "-dp")
MOST_ENGINES: Final = 4096
"""Beyond any data-parallel size."""
MOST_TOKENS: Final = 2**40
"""Beyond any context a model serves: a larger --max-model-len is no length."""
MOST_DRAFT_TOKENS: Final = 4096
"""Beyond any speculative depth: a larger one would make the per-position checks enumerate it."""
_HUMAN_INT: Final = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_MULTIPLIERS: Final = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12} | {
    "K": 2**10,
    "M": 2**20,
    "G": 2**30,
    "T": 2**40,
}


@dataclass(frozen=True)
class Limits:
    """What bounds a row, from the suite and the locked argv of the run."""

    api: Literal["chat", "completion"]
    """The suite's API: which endpoint its requests were posted to."""
    max_tokens: int
    """The suite's max_tokens."""
    max_model_len: int | None
    """`--max-model-len`; None when the argv leaves it to the model (unknown to the evidence)."""
    speculative: bool
    """The argv asks for speculative decoding (`--speculative-config`)."""
    speculative_k: int | None = None
    """Its `num_speculative_tokens`; None when not speculative or not stated."""
    prefix_caching: bool | None = None
    """`--enable-prefix-caching` / `--no-enable-prefix-caching`; None when the argv leaves it
    to vLLM's default."""
    served_name: str | None = None
    """`--served-model-name` (its first name): the `model_name` label of every vLLM metric;
    None when the argv leaves it to the model's path."""
    kv_connector: bool = False
    """The argv configures a KV connector (`--kv-transfer-config`, or `--kv-offloading-size`,
    which vLLM serves through one): only then may KV come from outside the engine."""
    access_logged: bool = True
    """uvicorn logs every request the API server answers: the argv neither passes
    `--disable-uvicorn-access-log` nor sets `--uvicorn-log-level` above info."""
    unlogged_paths: frozenset[str] = frozenset()
    """Paths whose requests the access log leaves out (`--disable-access-log-for-endpoints`)."""
    data_parallel: int | None = 1
    """`--data-parallel-size`: how many engines may export samples; None when the argv's value
    is no number (a template the lock leaves unexpanded)."""

    @classmethod
    def of(cls, suite: Suite, argv: Sequence[str]) -> Limits:
        """The limits of a run of `suite` started with `argv`: the lock's (placeholders
        unexpanded, literal braces doubled) or the expanded one a run recorded. Raises
        `BadInput` naming the argument when `--max-model-len` or `--speculative-config` is not
        what vLLM would start with."""
        length = _last_value(argv, (MAX_MODEL_LEN,))
        config = _last_value(argv, SPECULATIVE_CONFIG)
        return cls(
            api=suite.api,
            max_tokens=suite.max_tokens,
            max_model_len=None if length is None else _max_model_len(length),
            speculative=config is not None,
            speculative_k=None if config is None else _speculative_k(config),
            prefix_caching=_switch(argv, "--enable-prefix-caching"),
            served_name=_served_name(argv),
            kv_connector=any(_last_value(argv, (flag,)) is not None for flag in KV_CONNECTOR),
            access_logged=not _switch(argv, "--disable-uvicorn-access-log")
            and (_last_value(argv, (UVICORN_LOG_LEVEL,)) or "info").lower() in ACCESS_LOG_LEVELS,
            unlogged_paths=frozenset(
                path.strip()
                for path in (_last_value(argv, (UNLOGGED_ENDPOINTS,)) or "").split(",")
                if path.strip()
            ),
            data_parallel=_data_parallel(_last_value(argv, DATA_PARALLEL)),
        )

    def limit(self, row: OracleRow) -> tuple[int, str]:
        """The most tokens vLLM generates for `row` (its serving layer asks for
        `min(max_tokens, max_model_len - prompt_tokens)`), and why."""
        length = self.max_model_len
        if length is not None and length - row.prompt_tokens < self.max_tokens:
            return max(length - row.prompt_tokens, 0), (
                f"max_model_len {length} less {row.prompt_tokens} prompt tokens"
            )
        return self.max_tokens, "the suite's max_tokens"


@dataclass(frozen=True)
class Findings:
    """What a check found: contradictions, and what the evidence does not let it check."""

    problems: tuple[str, ...] = ()
    not_applicable: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerFacts:
    """What the record's other sealed files state about the server its `/metrics` reads came
    from, as plain values the caller reads (each with the file and field that state it, for the
    problems to name); each one absent where no file states it."""

    answering: tuple[float, str] | None = None
    """A wall-clock time (the server host's) by which the server answered requests, and before
    which the suite sent none: `server.json`'s ready_at (repro posts the suite after the
    readiness probe answered), an imported record's first request's start."""
    engine: tuple[float, str] | None = None
    """A wall-clock time before which no engine of the server existed: its engine core's start
    in the sealed live audit; an imported record's last idle snapshot before the run (which saw
    no process holding a card)."""
    python: tuple[str, str] | None = None
    """The release of the interpreter that ran the API server."""
    environment: tuple[Mapping[str, str], str] | None = None
    """The environment the server was started with."""
    readiness_path: str | None = None
    """The path of the readiness probe (`[launch.readiness]`), answered before the suite."""


def _last_value(argv: Sequence[str], flags: Sequence[str]) -> str | None:
    """The value of the last of `flags` in `argv` (argparse keeps the last)."""
    found = None
    for index, argument in enumerate(argv):
        if flag_name(argument) in flags:
            given = flag_value(argv, index)
            found = None if given is None else given[1]
    return found


def _switch(argv: Sequence[str], flag: str) -> bool | None:
    """An argparse BooleanOptionalAction as vLLM reads it: the last of `flag` and `--no-…`."""
    negated = "--no-" + flag.removeprefix("--")
    found = None
    for argument in argv:
        name = flag_name(argument)
        if name in (flag, negated):
            found = name == flag
    return found


def _served_name(argv: Sequence[str]) -> str | None:
    """The first of `--served-model-name`'s names (nargs='+': the first is the label's)."""
    for index in range(len(argv) - 1, -1, -1):
        if flag_name(argv[index]) == "--served-model-name":
            given = flag_value(argv, index)
            return None if given is None else given[1]
    return None


def _data_parallel(value: str | None) -> int | None:
    """`--data-parallel-size` as a number of engines: 1 when not given, None when no number."""
    if value is None:
        return 1
    text = value.strip()
    return (
        int(text)
        if text.isdecimal() and 1 <= len(text) <= 4 and int(text) <= MOST_ENGINES
        else None
    )


def _max_model_len(value: str) -> int | None:
    """As vLLM 0.32 reads it (`human_readable_int_or_auto`); None for `auto` or -1."""
    text = value.strip()
    if text.lower() == "auto" or text == "-1":
        return None
    match = _HUMAN_INT.fullmatch(text)
    length = None
    if match is not None and len(match[1]) <= 20:
        length = int(float(match[1]) * _MULTIPLIERS[match[2]])
    elif match is None and text.isdecimal() and len(text) <= 20:
        length = int(text)
    if length is not None and length <= MOST_TOKENS:
        return length
    raise BadInput(
        "the argv's --max-model-len is not a number vLLM reads",
        where=MAX_MODEL_LEN,
        expected=f"an integer up to {MOST_TOKENS}, 1k / 1K style, auto or -1",
        found=repr(value),
    )


def speculative_config(argv: Sequence[str]) -> dict[str, object]:
    """The argv's `--speculative-config` object (in the lock, literal braces doubled); empty
    when it asks for none or gives no JSON object."""
    value = _last_value(argv, SPECULATIVE_CONFIG)
    return {} if value is None else _json_object(value) or {}


def _speculative_k(value: str) -> int | None:
    config = _json_object(value)
    if config is None:
        raise BadInput(
            "the argv's --speculative-config is not a JSON object",
            where=SPECULATIVE_CONFIG[0],
            expected="a JSON object (in the lock, literal braces doubled)",
            found=repr(value[:200]),
        )
    k = config.get("num_speculative_tokens")
    if k is None:
        return None  # vLLM takes it from the draft model's config, which the evidence lacks
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MOST_DRAFT_TOKENS:
        raise BadInput(
            "the argv's speculative num_speculative_tokens is not a positive integer",
            where=SPECULATIVE_CONFIG[0],
            expected=f"num_speculative_tokens from 1 to {MOST_DRAFT_TOKENS}",
            found=repr(k),
        )
    return k


def _json_object(value: str) -> dict[str, object] | None:
    """The JSON object `value` holds, expanded (valid JSON) or a manifest template (`{{`
    literal braces, `{placeholder}`s, which become empty strings)."""
    for text in (value, _untemplated(value)):
        try:
            document = json.loads(text) if text is not None else None
        except json.JSONDecodeError:
            continue
        if isinstance(document, dict):
            return document
    return None


def _untemplated(template: str) -> str | None:
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError:
        return None
    return "".join(literal for literal, _name, _spec, _conversion in parts)


# --- rows -------------------------------------------------------------------------------------


def rows_problems(
    suite: Suite,
    rows: Sequence[OracleRow],
    *,
    where: str,
    limits: Limits,
    cached_tokens_gated: bool,
    vocab_size: int | None = None,
) -> Findings:
    """Every contradiction of one start's `rows` (the file `where`) with themselves and with
    `suite`. `cached_tokens_gated`: the manifest gates `cached_tokens_zero`, so every row must
    report it. `vocab_size`: the model's, where the caller knows it."""
    problems = _identity_problems(suite, rows, where)
    for place, row in enumerate(rows):
        at = f"{where}: row {place} ({row.prompt_id})"
        problems += _count_problems(row, at, limits)
        problems += _id_problems(row, at, vocab_size)
        problems += _cached_problems(row, at, cached_tokens_gated)
        problems += _read_problems(row, at)
    not_applicable = (
        ()
        if vocab_size is not None
        else ("token ids against the vocabulary: the evidence does not state its size",)
    )
    return Findings(tuple(problems), not_applicable)


SEND_SLACK_S: Final = 1e-6
"""Rounding between a load's clock zero plus i/rate and the send time taken after it."""


def load_problems(load: Load | None, rows: Sequence[OracleRow], *, where: str) -> list[str]:
    """A phase's send times against its load shape: the suite's rows (no `load`) were sent one
    after another and carry none; a load's rows each carry one, under a `request_rate` row i
    sent no earlier than i/rate s (its sender slept until then), under `concurrency` N no row
    sent while N others were surely in flight (sent earlier, their last token read later)."""
    if load is None:
        return [
            f"{where}: row {place} ({row.prompt_id}) sent_at_s {row.sent_at_s!r}: expected none, "
            "the suite's requests are sent one after another"
            for place, row in enumerate(rows)
            if row.sent_at_s is not None
        ]
    problems = []
    sends: list[tuple[float, float, int]] = []
    for place, row in enumerate(rows):
        sent = row.sent_at_s
        at = f"{where}: row {place} ({row.prompt_id})"
        if sent is None:
            problems.append(f"{at}: expected sent_at_s, the send time of a load's row; found none")
            continue
        end = sent + (row.token_offsets_s[-1] if row.token_offsets_s else 0.0)
        sends.append((sent, end, place))
        if load.request_rate is not None and sent < place / load.request_rate - SEND_SLACK_S:
            problems.append(
                f"{at}: sent_at_s {sent!r}: expected at least {place / load.request_rate!r} "
                f"(row {place} at {load.request_rate:g} requests/s)"
            )
    if load.concurrency is not None:
        for sent, _, place in sends:
            busy = [p for s, e, p in sends if s < sent and e > sent]
            if len(busy) >= load.concurrency:
                problems.append(
                    f"{where}: row {place} ({rows[place].prompt_id}) sent at {sent!r} s while "
                    f"rows {', '.join(map(str, busy))} were in flight: expected at most "
                    f"{load.concurrency - 1} others under concurrency {load.concurrency}"
                )
    return problems


def _identity_problems(suite: Suite, rows: Sequence[OracleRow], where: str) -> list[str]:
    """Each prompt of the suite answered once, in order, and each row's prompt_index its
    prompt's place."""
    places = {prompt.id: index for index, prompt in enumerate(suite.prompts)}
    problems = []
    if len(rows) != len(suite.prompts):
        problems.append(
            f"{where}: expected one row for each of the {len(suite.prompts)} prompts of suite "
            f"{suite.name}, found {len(rows)} rows"
        )
    answered: dict[str, list[int]] = defaultdict(list)
    for place, row in enumerate(rows):
        answered[row.prompt_id].append(place)
        if row.prompt_id not in places:
            problems.append(
                f"{where}: row {place} prompt_id: expected a prompt of suite {suite.name}, found "
                f"{row.prompt_id!r}"
            )
        problems += _index_problem(row, place, places.get(row.prompt_id, place), len(places), where)
    for prompt_id, found in answered.items():
        if len(found) > 1:
            shown = ", ".join(map(str, found))
            problems.append(f"{where}: prompt {prompt_id!r}: expected one row, found rows {shown}")
    problems += [
        f"{where}: prompt {index} ({prompt.id}) of suite {suite.name}: expected a row, found none"
        for index, prompt in enumerate(suite.prompts)
        if prompt.id not in answered
    ]
    if problems:
        return problems
    return [
        f"{where}: row {place} prompt_id: expected {suite.prompts[place].id!r} (suite prompt "
        f"{place}), found {row.prompt_id!r} (suite prompt {places[row.prompt_id]}): rows answer "
        f"the suite in order"
        for place, row in enumerate(rows)
        if places[row.prompt_id] != place
    ]


def _index_problem(row: OracleRow, place: int, expected: int, count: int, where: str) -> list[str]:
    if row.prompt_index == expected:
        return []
    outside = "" if 0 <= row.prompt_index < count else f", outside the suite's 0..{count - 1}"
    return [
        f"{where}: row {place} ({row.prompt_id}) prompt_index: expected {expected} (its "
        f"prompt's place in the suite), found {row.prompt_index}{outside}"
    ]


def _count_problems(row: OracleRow, at: str, limits: Limits) -> list[str]:
    tokens = len(row.token_ids)
    problems = []
    if row.completion_tokens != tokens:
        problems.append(
            f"{at} completion_tokens: expected {tokens} (its token_ids), found "
            f"{row.completion_tokens}"
        )
    if row.prompt_tokens < 1:
        problems.append(f"{at} prompt_tokens: expected at least 1, found {row.prompt_tokens}")
    length = limits.max_model_len
    if length is not None and row.prompt_tokens >= length:
        problems.append(
            f"{at} prompt_tokens: expected fewer than max_model_len {length} (vLLM refuses a "
            f"longer prompt), found {row.prompt_tokens}"
        )
    limit, why = limits.limit(row)
    if tokens > limit:
        problems.append(f"{at} token_ids: expected at most {limit} ({why}), found {tokens}")
    reason = row.finish_reason
    if reason == "length" and tokens < limit:
        problems.append(
            f"{at} finish_reason 'length': expected {limit} tokens ({why}), found {tokens}"
        )
    elif reason is None and row.token_reads is not None:
        problems.append(
            f"{at} finish_reason: expected 'stop' or 'length' (vLLM ends every stream with "
            f"one, and the oracle keeps it), found none"
        )
    elif reason is not None and reason not in FINISH_REASONS:
        problems.append(
            f"{at} finish_reason: expected 'stop' or 'length' (a complete answer), found {reason!r}"
        )
    return problems


def _id_problems(row: OracleRow, at: str, vocab_size: int | None) -> list[str]:
    for token, value in enumerate(row.token_ids):
        if value < 0:
            return [f"{at} token_ids: expected ids of at least 0, found {value} at token {token}"]
        if vocab_size is not None and value >= vocab_size:
            return [
                f"{at} token_ids: expected ids below the vocabulary size {vocab_size}, found "
                f"{value} at token {token}"
            ]
    return []


def _cached_problems(row: OracleRow, at: str, gated: bool) -> list[str]:
    cached = row.cached_tokens
    if cached is None:
        if not gated:
            return []
        return [
            f"{at} cached_tokens: expected a count (the manifest gates cached_tokens_zero), "
            f"found none"
        ]
    if 0 <= cached < max(row.prompt_tokens, 1):
        return []
    return [
        f"{at} cached_tokens: expected 0..{row.prompt_tokens - 1} (vLLM recomputes a prompt's "
        f"last token), found {cached}"
    ]


def _read_problems(row: OracleRow, at: str) -> list[str]:
    reads = row.token_reads
    if not reads:
        return []
    if reads[0] < 0:
        return [f"{at} token_reads: expected read numbers of at least 0, found {reads[0]}"]
    if reads[0] == 0 and row.first_token_after_s != 0.0:
        return [
            f"{at} first_token_after_s: expected 0.0 (its first token came in read 0, with no "
            f"read before it), found {row.first_token_after_s!r}"
        ]
    return []


def starts_problems(starts: Sequence[tuple[str, Sequence[OracleRow]]]) -> list[str]:
    """Each prompt's `prompt_tokens` the same in every fresh start: `starts` are (file, rows),
    start 1 first. The same prompt tokenizes the same on a fresh start of the same stack."""
    if not starts:
        return []
    first_where, first = starts[0]
    counts = {row.prompt_id: row.prompt_tokens for row in first}
    return [
        f"{where}: row {place} ({row.prompt_id}) prompt_tokens: expected "
        f"{counts[row.prompt_id]} (as in {first_where}), found {row.prompt_tokens}"
        for where, rows in starts[1:]
        for place, row in enumerate(rows)
        if counts.get(row.prompt_id, row.prompt_tokens) != row.prompt_tokens
    ]


# --- metrics ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Reads:
    """Two reads of `/metrics` and which of their samples only ever grow."""

    before: Samples
    after: Samples
    growing: frozenset[str]
    """Sample names of counter and histogram families (`_total`, `_bucket`, `_count`, `_sum`)."""

    def exported(self, name: str) -> bool:
        return bool(self.before.get(name)) or bool(self.after.get(name))

    @cached_property
    def histograms(self) -> tuple[Histograms, Histograms]:
        """Each read's histograms (`_histograms`), taken once: several checks read them."""
        return _histograms(self.before), _histograms(self.after)

    def rise(self, name: str, **labels: str) -> float | None:
        """After minus before of `name`, summed over its label sets that carry `labels` (those
        both reads have; for a label set created at its first observation, those after, from 0);
        None when neither read exports it."""
        if not self.exported(name):
            return None
        old, new = self.before.get(name, {}), self.after.get(name, {})
        wanted = set(labels.items())
        return sum(
            new[key] - old.get(key, 0.0)
            for key in new.keys() & (old.keys() if _created_at_start(name) else new.keys())
            if wanted <= set(key)
        )

    def label_values(self, name: str, label: str) -> list[str]:
        keys = set(self.before.get(name, {})) | set(self.after.get(name, {}))
        return sorted({dict(key)[label] for key in keys if label in dict(key)})


def metrics_problems(
    rows: Sequence[OracleRow],
    before_text: str,
    after_text: str,
    *,
    limits: Limits,
    sources: tuple[str, str],
    read_by: float | None = None,
    served_log: str | None = None,
    log_source: str = "server.log",
    facts: ServerFacts = ServerFacts(),
) -> Findings:
    """Every contradiction between one start's `rows` and its `/metrics` read before and after
    the suite (`sources` name the two files). `read_by`: a wall-clock time, on the clock of the
    server's host, by which both reads were taken (teardown's `began_at`); None where the
    evidence states none. `served_log`: what the server logged while it served (the log up to
    teardown's `log_bytes`, the file `log_source`); None where none is sealed. `facts`: what
    other sealed files state about the server. Raises `MetricsUnreadable` for a text that is
    not Prometheus text exposition."""
    reads = _Reads(
        samples(before_text, sources[0]),
        samples(after_text, sources[1]),
        _growing(before_text, sources[0]) | _growing(after_text, sources[1]),
    )
    pair = f"{sources[0]} → {sources[1]}"
    problems = _reading_problems(reads, pair) + _read_time_problems(reads, pair, read_by)
    problems += _stated_time_problems(reads, pair, facts, ENDPOINTS[limits.api])
    problems += _python_problems(reads, pair, facts.python)
    if rows and not any(reads.rise(name) for name in reads.growing if name.startswith("vllm:")):
        return Findings(
            (
                *problems,
                f"{pair}: expected vLLM's counters to rise while "
                f"{len(rows)} rows were answered, found every one unchanged",
            )
        )
    check = _Check(reads, pair)
    _request_checks(check, rows, limits)
    _prompt_checks(check, rows)
    _cache_checks(check, rows, limits)
    _label_checks(check, limits)
    streams = _stream_bounds(rows)
    _timing_checks(check, rows, streams)
    _duration_checks(check, rows)
    _http_checks(check, rows, limits, streams)
    _preemption_checks(check)
    _decode_checks(check, rows, limits)
    if served_log is not None:
        lines = access_lines(served_log)
        _access_log_checks(check, lines, log_source, limits)
        _access_order_checks(check, lines, log_source, limits, facts.readiness_path)
        _kv_cache_checks(check, served_log, log_source, facts.environment)
    return Findings(tuple(problems + check.problems), tuple(dict.fromkeys(check.not_applicable)))


def _growing(text: str, source: str) -> frozenset[str]:
    return frozenset(
        sample.name
        for family in families(text, source)
        if family.type in ("counter", "histogram")
        for sample in family.samples
        if not sample.name.endswith("_created")
    )


def _reading_problems(reads: _Reads, pair: str) -> list[str]:
    """Two reads of one process's counters: same label sets, none going backwards, none
    recreated, one process start time."""
    problems = []
    for name in sorted(reads.growing):
        old, new = reads.before.get(name, {}), reads.after.get(name, {})
        added = new.keys() - old.keys() if _created_at_start(name) else set()
        if added or old.keys() - new.keys():
            problems.append(
                f"{pair}: {name}: expected the same label sets in both reads, found "
                f"{_label_sets(old.keys() - new.keys())} only before and "
                f"{_label_sets(added)} only after"
            )
        problems += [
            f"{pair}: {name}{_labels(key)}: expected a counter that never decreases, found "
            f"{_shown(old[key])} before and {_shown(new[key])} after"
            for key in sorted(old.keys() & new.keys(), key=sorted)
            if new[key] < old[key]
        ]
    created = sorted(name for name in reads.after if name.endswith("_created"))
    for name in created:
        old, new = reads.before.get(name, {}), reads.after[name]
        problems += [
            f"{pair}: {name}{_labels(key)}: expected one creation time (the counter was not "
            f"recreated), found {old[key]!r} before and {new[key]!r} after"
            for key in sorted(old.keys() & new.keys(), key=sorted)
            if old[key] != new[key]
        ]
    start = PROCESS_START
    old_start, new_start = reads.before.get(start, {}), reads.after.get(start, {})
    if old_start and new_start and old_start != new_start:
        problems.append(
            f"{pair}: {start}: expected one server process for both reads, found "
            f"{_values(old_start)} before and {_values(new_start)} after"
        )
    for read, histograms, which in zip(
        (reads.before, reads.after), reads.histograms, ("before", "after"), strict=True
    ):
        problems += [f"{pair} ({which}): {p}" for p in _one_read_problems(read, histograms)]
        problems += [f"{pair} ({which}): {p}" for p in _http_read_problems(read, histograms[0])]
    problems += _rise_problems(reads, pair)
    problems += _info_problems(reads, pair)
    problems += [
        f"{pair}: {name}{_labels(key)}: expected no request {when}, found {_shown(value)}"
        for read, when in (
            (
                reads.before,
                "running or waiting when the suite began (its client had sent nothing to the "
                "fresh server)",
            ),
            (reads.after, "left once the suite was answered"),
        )
        for name in IDLE_AFTER_SUITE
        for key, value in sorted(read.get(name, {}).items(), key=lambda kv: sorted(kv[0]))
        if value != 0
    ]
    return problems


CHANGING_INFO: Final = frozenset({"vllm:lora_requests_info"})
"""Info gauges whose labels change while the server runs (the adapters running and waiting)."""


def _info_problems(reads: _Reads, pair: str) -> list[str]:
    """Both reads of one process state the same information (`vllm:cache_config_info`,
    `python_info`, every `*_info` sample but those that follow the load)."""
    problems = []
    names = {n for read in (reads.before, reads.after) for n in read if n.endswith("_info")}
    for name in sorted(names - CHANGING_INFO):
        old, new = dict(reads.before.get(name, {})), dict(reads.after.get(name, {}))
        if old == new:
            continue
        if len(old) == len(new) == 1:
            (before, was), (after, now) = next(iter(old.items())), next(iter(new.items()))
            mine, theirs = dict(before), dict(after)
            differing = [
                f"{key}={mine.get(key)!r} before, {theirs.get(key)!r} after"
                for key in sorted(mine.keys() | theirs.keys())
                if mine.get(key) != theirs.get(key)
            ] or [f"value {_shown(was)} before, {_shown(now)} after"]
            found = "; ".join(differing)
        else:
            found = f"{_label_sets(old.keys())} before and {_label_sets(new.keys())} after"
        problems.append(
            f"{pair}: {name}: expected the same information in both reads of one server "
            f"process, found {found}"
        )
    return problems


IDLE_AFTER_SUITE: Final = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_requests_waiting_by_reason",
)
"""Gauges that read 0 once every request of the suite was answered."""
WAITING: Final = "vllm:num_requests_waiting"
WAITING_BY_REASON: Final = "vllm:num_requests_waiting_by_reason"
SUM_ROUNDING: Final = 1e-9
"""Relative slack of a histogram's sum against its buckets' bounds: a sum of floats, each
rounded to 1e-16 of it, and a rise the difference of two such sums."""
READ_SLACK_S: Final = 0.1
"""How far a time a read states may pass the time by which the read was taken, both read on
one host's wall clock: its granularity and a small step (`builder.freshstarts`)."""

Buckets = list[tuple[float, float]]
"""A histogram's buckets: (upper bound, cumulative count), in bound order."""
Series = dict[tuple[str, LabelSet], Buckets]
"""A read's histograms by family and label set (less `le`)."""
Histograms = tuple[Series, list[str]]
"""A read's histograms, and every bucket whose `le` is no bound."""


def _histograms(read: Samples) -> Histograms:
    """Each histogram of `read` by family and label set (less `le`), its buckets in bound
    order; and every bucket whose `le` is no bound."""
    series: dict[tuple[str, LabelSet], Buckets] = defaultdict(list)
    problems = []
    for name in sorted(n for n in read if n.endswith("_bucket")):
        family = name.removesuffix("_bucket")
        for labels, value in read[name].items():
            bound = dict(labels).get("le")
            rest = frozenset((k, v) for k, v in labels if k != "le")
            try:
                series[family, rest].append(
                    (float(bound) if bound is not None else float("nan"), value)
                )
            except ValueError:
                problems.append(f"{name}{_labels(labels)}: expected an le bound, found {bound!r}")
    for buckets in series.values():
        buckets.sort()
    return dict(series), problems


def _sum_bounds(buckets: Buckets) -> tuple[float, float, float] | None:
    """The least and the most a histogram's observations sum to, each between its bucket's
    bounds, and how many they are; None when its buckets are not cumulative, a bound is no
    number or none is +Inf (then the other checks say so, or no bound holds). The first
    bucket's lower bound is 0 when its own is not negative: every histogram these reads export
    (vLLM's and the API server's HTTP instrumentation) observes durations and counts."""
    bounds = [bound for bound, _count in buckets]
    if not buckets or any(math.isnan(b) for b in bounds) or bounds[-1] != math.inf:
        return None
    low = high = 0.0
    lower, before = (0.0 if bounds[0] >= 0 else -math.inf), 0.0
    for bound, cumulative in buckets:
        count = cumulative - before
        if count < 0 or math.isnan(count):
            return None
        if count:
            low += count * lower
            high += count * bound
        lower, before = bound, cumulative
    return low, high, before


def _sum_problem(buckets: Buckets, found: float, scale: float) -> tuple[str, float] | None:
    """Why `found` cannot be the sum of a histogram of these buckets, and how many observations
    they hold; None when it can (or the buckets say nothing). `scale`: the magnitude of the
    sums `found` was taken from, which its rounding follows."""
    bounds = _sum_bounds(buckets)
    if bounds is None or math.isnan(found):
        return None
    low, high, count = bounds
    slack = SUM_ROUNDING * (1.0 + abs(scale) + sum(abs(x) for x in (low, high) if math.isfinite(x)))
    if low - slack <= found <= high + slack:
        return None
    span = f"of at least {low:.6g}" if high == math.inf else f"between {low:.6g} and {high:.6g}"
    return span, count


def _one_read_problems(read: Samples, histograms: Histograms) -> list[str]:
    """One read against itself: every histogram's buckets cumulative, its +Inf bucket its
    count, its sum one its buckets allow; the waiting requests by reason summing to those
    waiting; no counter created before the process that exports it started."""
    series, refused = histograms
    problems = list(refused)
    for (family, rest), buckets in sorted(
        series.items(), key=lambda kv: (kv[0][0], sorted(kv[0][1]))
    ):
        name = f"{family}_bucket"
        values = [value for _bound, value in buckets]
        if any(later < earlier for earlier, later in pairwise(values)):
            problems.append(f"{name}{_labels(rest)}: expected cumulative buckets, found {values}")
        count = read.get(f"{family}_count", {}).get(rest)
        if buckets and buckets[-1][0] == float("inf") and count is not None and count != values[-1]:
            problems.append(
                f"{name}{_labels(rest)}: expected the +Inf bucket to be {family}_count "
                f"{_shown(count)}, found {_shown(values[-1])}"
            )
        total = read.get(f"{family}_sum", {}).get(rest)
        wrong = None if total is None else _sum_problem(buckets, total, total)
        if wrong is not None:
            problems.append(
                f"{family}_sum{_labels(rest)}: expected a sum {wrong[0]} (each of its "
                f"{_shown(wrong[1])} observations between the bounds of its bucket), found "
                f"{total!r}"
            )
    problems += _waiting_problems(read)
    started = list(read.get(PROCESS_START, {}).values())
    if started:
        problems += [
            f"{name}{_labels(key)}: expected a counter created once its process started "
            f"({started[0]!r}), found {value!r}"
            for name in sorted(n for n in read if n.endswith("_created"))
            for key, value in sorted(read[name].items(), key=lambda kv: sorted(kv[0]))
            if value < started[0] - 1
        ]
    return problems


def _waiting_problems(read: Samples) -> list[str]:
    """The waiting requests by reason sum to those waiting, per engine (vLLM's HELP: "Sum of
    all reasons equals vllm:num_requests_waiting")."""
    by_engine: dict[LabelSet, float] = defaultdict(float)
    for labels, value in read.get(WAITING_BY_REASON, {}).items():
        by_engine[frozenset((k, v) for k, v in labels if k != "reason")] += value
    waiting = read.get(WAITING, {})
    return [
        f"{WAITING_BY_REASON}{_labels(engine)}: expected reasons summing to {WAITING} "
        f"{_shown(waiting[engine])} (every waiting request has one reason), found {_shown(total)}"
        for engine, total in sorted(by_engine.items(), key=lambda kv: sorted(kv[0]))
        if engine in waiting and total != waiting[engine]
    ]


def _rise_problems(reads: _Reads, pair: str) -> list[str]:
    """What rose between the reads against itself: each histogram's sum rose by what the
    observations its buckets rose by can sum to."""
    (before, _), (after, _) = reads.histograms
    problems = []
    for (family, rest), buckets in sorted(
        after.items(), key=lambda kv: (kv[0][0], sorted(kv[0][1]))
    ):
        old = before.get((family, rest))
        if old is None and _created_at_start(family):
            continue  # a label set only after: refused as such
        old = old or [(bound, 0.0) for bound, _count in buckets]
        if [bound for bound, _ in old] != [bound for bound, _ in buckets]:
            continue
        name = f"{family}_sum"
        new_sum = reads.after.get(name, {}).get(rest)
        old_sum = reads.before.get(name, {}).get(rest, None if _created_at_start(family) else 0.0)
        if new_sum is None or old_sum is None:
            continue
        rose = [
            (bound, value - earlier)
            for (bound, value), (_, earlier) in zip(buckets, old, strict=True)
        ]
        wrong = _sum_problem(rose, new_sum - old_sum, abs(new_sum) + abs(old_sum))
        if wrong is not None:
            problems.append(
                f"{pair}: {name}{_labels(rest)}: expected a rise {wrong[0]} (each of the "
                f"{_shown(wrong[1])} observations between the reads between the bounds of its "
                f"bucket), found {_shown(new_sum - old_sum)}"
            )
    return problems


def _read_time_problems(reads: _Reads, pair: str, read_by: float | None) -> list[str]:
    """No time a read states (a counter's creation, its process's start) later than the read:
    both reads were taken by `read_by`."""
    if read_by is None:
        return []
    latest = read_by + READ_SLACK_S
    return [
        f"{pair} ({which}): {name}{_labels(key)}: expected a time no later than the read, "
        f"taken before {read_by!r} (teardown began), found {value!r}"
        for read, which in ((reads.before, "before"), (reads.after, "after"))
        for name in sorted(n for n in read if n.endswith("_created") or n == PROCESS_START)
        for key, value in sorted(read[name].items(), key=lambda kv: sorted(kv[0]))
        if value > latest
    ]


class _Check:
    """Expected rises, compared with what the two reads give."""

    def __init__(self, reads: _Reads, pair: str) -> None:
        self.reads = reads
        self.pair = pair
        self.problems: list[str] = []
        self.not_applicable: list[str] = []

    def rise(self, name: str, **labels: str) -> float | None:
        found = self.reads.rise(name, **labels)
        if found is None:
            self.not_applicable.append(f"{name}: exported by neither read")
        return found

    def equal(self, name: str, expected: float, why: str, **labels: str) -> None:
        found = self.rise(name, **labels)
        if found is not None and found != expected:
            self.fail(name, found, f"{_shown(expected)} ({why})", **labels)

    def holds(self, name: str, expected: float, why: str, **labels: str) -> None:
        """`equal` where a read exports `name`; where neither does, nothing (not even listed as
        not applicable: what no read exports no relation of two samples needs)."""
        found = self.reads.rise(name, **labels)
        if found is not None and found != expected:
            self.fail(name, found, f"{_shown(expected)} ({why})", **labels)

    def fail(self, name: str, found: float, expected: str, **labels: str) -> None:
        shown = _labels(frozenset(labels.items())) if labels else ""
        self.problems.append(
            f"{self.pair}: {name}{shown}: expected a rise of {expected}, found {_shown(found)}"
        )


def _request_checks(check: _Check, rows: Sequence[OracleRow], limits: Limits) -> None:
    """Per request: one success each, by finish reason, and every per-request histogram."""
    count = len(rows)
    success = "vllm:request_success_total"
    check.equal(success, count, "one per row")
    if check.reads.exported(success):
        _finish_reason_checks(check, rows, limits)
    check.equal("vllm:admission_rejections_total", 0, "every row was answered")
    endpoint = ENDPOINTS[limits.api]
    check.equal(HTTP_REQUESTS, count, f"one POST {endpoint} per row", handler=endpoint)
    check.equal(HTTP_REQUESTS, count, "every one answered", handler=endpoint, status="2xx")
    for family in PER_REQUEST_HISTOGRAMS:
        check.equal(f"{family}_count", count, "one per row")
    observed = {
        "vllm:request_prompt_tokens": ([r.prompt_tokens for r in rows], "the rows' prompt_tokens"),
        "vllm:request_generation_tokens": (
            [r.completion_tokens for r in rows],
            "the rows' completion_tokens",
        ),
        "vllm:request_max_num_generation_tokens": (
            [r.completion_tokens for r in rows],
            "the rows' completion_tokens, one sequence each",
        ),
        "vllm:request_params_n": ([1 for _ in rows], "n = 1 for each row"),
        "vllm:request_params_max_tokens": (
            [limits.limit(row)[0] for row in rows],
            "each row's max_tokens as vLLM clamps it",
        ),
    }
    for family, (values, why) in observed.items():
        check.equal(f"{family}_count", count, "one per row")
        check.equal(f"{family}_sum", sum(values), why)
        _bucket_checks(check, family, values, why)


def _bucket_checks(check: _Check, family: str, values: Sequence[int], why: str) -> None:
    """A histogram each row observed once with a value the rows give: each bucket rose by the
    rows whose value is at most its bound."""
    bucket = f"{family}_bucket"
    for bound in check.reads.label_values(bucket, "le"):
        try:
            limit = float(bound)
        except ValueError:
            continue  # refused by the read's own check
        within = sum(1 for value in values if value <= limit)
        check.equal(bucket, within, f"the rows at most {bound}: {why}", le=bound)


def _finish_reason_checks(check: _Check, rows: Sequence[OracleRow], limits: Limits) -> None:
    success = "vllm:request_success_total"
    stated = Counter(row.finish_reason for row in rows)
    if None not in stated:
        for reason in sorted(
            set(check.reads.label_values(success, "finished_reason"))
            | {r for r in stated if r is not None}
        ):
            check.equal(
                success, stated[reason], f"rows that finished by {reason!r}", finished_reason=reason
            )
        return
    at_limit = sum(len(row.token_ids) == limits.limit(row)[0] for row in rows)
    found = check.reads.rise(success, finished_reason="length")
    if found is not None and found > at_limit:
        check.fail(
            success,
            found,
            f"at most {at_limit} (the rows that reached their token limit)",
            finished_reason="length",
        )


def _prompt_checks(check: _Check, rows: Sequence[OracleRow]) -> None:
    """Prompt and generated tokens, and the prompt tokens by where their KV came from."""
    prompt = sum(row.prompt_tokens for row in rows)
    completion = sum(row.completion_tokens for row in rows)
    check.equal("vllm:prompt_tokens_total", prompt, "the rows' prompt_tokens")
    check.equal("vllm:generation_tokens_total", completion, "the rows' completion_tokens")
    by_source = "vllm:prompt_tokens_by_source_total"
    check.equal(by_source, prompt, "the rows' prompt_tokens, over every source")
    cached = _cached(rows)
    if cached is None:
        check.not_applicable.append("cached prompt tokens: a row does not report cached_tokens")
        return
    computed = prompt - cached
    check.equal("vllm:prompt_tokens_cached_total", cached, "the rows' cached_tokens")
    check.equal(by_source, computed, "prompt_tokens less cached_tokens", source="local_compute")
    check.equal(
        "vllm:request_prefill_kv_computed_tokens_sum",
        computed,
        "the rows' prompt_tokens less cached_tokens",
    )
    _bucket_checks(
        check,
        "vllm:request_prefill_kv_computed_tokens",
        [row.prompt_tokens - (row.cached_tokens or 0) for row in rows],
        "each row's prompt_tokens less its cached_tokens",
    )
    check.equal(
        "vllm:iteration_tokens_total_sum",
        computed + completion,
        "the rows' computed prompt tokens and completion_tokens",
    )


def _cached(rows: Sequence[OracleRow]) -> int | None:
    counts = [row.cached_tokens for row in rows]
    return None if None in counts else sum(c for c in counts if c is not None)


def _cache_checks(check: _Check, rows: Sequence[OracleRow], limits: Limits) -> None:
    """The prefix cache's queries (every prompt token when it is on, none when off) and hits
    (the rows' cached tokens); a cached prefix only of what an earlier request computed."""
    queries = check.rise("vllm:prefix_cache_queries_total")
    hits = check.rise("vllm:prefix_cache_hits_total")
    enabled = _prefix_caching(check.reads.after)
    if (
        enabled is not None
        and limits.prefix_caching is not None
        and enabled != limits.prefix_caching
    ):
        check.problems.append(
            f"{check.pair}: vllm:cache_config_info enable_prefix_caching: expected "
            f"{limits.prefix_caching} (the argv), found {enabled}"
        )
    if enabled is None and queries is not None:
        enabled = queries != 0
    prompt, cached = sum(row.prompt_tokens for row in rows), _cached(rows)
    if enabled is False:
        expected = {"queries": (0, "prefix caching is off"), "hits": (0, "prefix caching is off")}
    else:
        expected = {"queries": (prompt, "the rows' prompt_tokens, prefix caching on")}
        if cached is not None:
            expected["hits"] = (cached, "the rows' cached_tokens")
    for kind, found in (("queries", queries), ("hits", hits)):
        if found is not None and kind in expected and found != expected[kind][0]:
            total, why = expected[kind]
            check.fail(f"vllm:prefix_cache_{kind}_total", found, f"{total} ({why})")
    check.problems += _cached_beyond(check, rows, enabled)
    _external_checks(check, limits)
    _cached_by_source_checks(check, hits)
    _kv_usage_checks(check, limits, enabled)


EXTERNAL_QUERIES: Final = "vllm:external_prefix_cache_queries_total"
EXTERNAL_HITS: Final = "vllm:external_prefix_cache_hits_total"
CACHED_BY_SOURCE: Final = "vllm:prompt_tokens_cached_by_source_total"
KV_USAGE: Final = "vllm:kv_cache_usage_perc"


def _external_checks(check: _Check, limits: Limits) -> None:
    """KV from outside the engine only through a KV connector the argv configures."""
    if limits.kv_connector:
        return
    why = "the argv configures no KV connector (--kv-transfer-config)"
    check.holds(EXTERNAL_QUERIES, 0, why)
    check.holds(EXTERNAL_HITS, 0, why)
    check.holds("vllm:prompt_tokens_by_source_total", 0, why, source="external_kv_transfer")


def _cached_by_source_checks(check: _Check, hits: float | None) -> None:
    """The cached prompt tokens by the tier that supplied them sum to the prefix cache's hits,
    local and external (vLLM's HELP: "sums to vllm:prefix_cache_hits +
    vllm:external_prefix_cache_hits")."""
    by_source = check.reads.rise(CACHED_BY_SOURCE)
    if by_source is None or hits is None:
        return
    external = check.reads.rise(EXTERNAL_HITS) or 0.0
    if by_source != hits + external:
        check.fail(
            CACHED_BY_SOURCE,
            by_source,
            f"{_shown(hits + external)} over every source (the prefix cache's {_shown(hits)} "
            f"hits and {_shown(external)} external hits)",
        )


def _kv_usage_checks(check: _Check, limits: Limits, enabled: bool | None) -> None:
    """With prefix caching off and no KV connector, an engine with no request running or
    waiting holds no KV block: vLLM frees a finished request's blocks when it finishes, before
    the scheduler states the gauges of that step."""
    after = check.reads.after
    if enabled is not False or limits.kv_connector:
        return
    engines = after.get(KV_USAGE, {})
    for key, value in sorted(engines.items(), key=lambda kv: sorted(kv[0])):
        busy = any(after.get(name, {}).get(key, 0.0) for name in IDLE_AFTER_SUITE[:2])
        if value != 0 and not busy:
            check.problems.append(
                f"{check.pair}: {KV_USAGE}{_labels(key)}: expected 0 once the suite was "
                "answered (no request running or waiting, prefix caching off, no KV connector: "
                f"every block free), found {_shown(value)}"
            )


TIMING_SLACK_S: Final = 0.01
"""Per request, how far the server's and the client's clocks of one interval may part, where
the server's interval lies inside the client's (it saw the request after the client sent it,
and produced each token before the client read it)."""
DELIVERY_SLACK_S: Final = 0.25
"""Per request, how much longer the client's first-to-last token may be than the server's, and
how long after the client read the last token the API server may stop timing the request (it
sends the final chunk and `[DONE]` after it): neither is an interval nested in the other, so
each part is a scheduling delay of a busy host. A demo sealed on 2 cores while the test suite
ran beside it read its last token more than 10 ms later than the server's timing allowed."""


def _timing_checks(
    check: _Check, rows: Sequence[OracleRow], streams: tuple[list[float], list[float]]
) -> None:
    """The server's per-request times inside the client's: its time to first token no longer
    than the client waited for it (the request travelled first), its end-to-end latency no
    longer than the client's last token and no shorter than the client's first to last."""
    slack = TIMING_SLACK_S * len(rows)
    delivered = DELIVERY_SLACK_S * len(rows)
    waited = sum(row.ttft_s for row in rows)
    last = sum(max(row.token_offsets_s, default=row.ttft_s) for row in rows)
    streamed = sum(
        max(row.token_offsets_s, default=0.0) - min(row.token_offsets_s, default=0.0)
        for row in rows
    )
    bounds = {
        "vllm:time_to_first_token_seconds_sum": (None, waited, "the rows' ttft_s"),
        "vllm:e2e_request_latency_seconds_sum": (
            streamed,
            last,
            "the rows' first to last token, and their last token's offset",
        ),
    }
    for name, (low, high, why) in bounds.items():
        found = check.reads.rise(name)
        if found is None:
            continue
        if found > high + slack or (low is not None and found < low - delivered):
            span = (
                f"at most {high + slack:.3f}"
                if low is None
                else f"between {low - delivered:.3f} and {high + slack:.3f}"
            )
            check.fail(
                name,
                found,
                f"{span} s ({why}; {slack:.2f} s of clock slack"
                + ("" if low is None else f", {delivered:.2f} s of delivery slack")
                + ")",
            )
    most = [row.ttft_s + TIMING_SLACK_S for row in rows]
    _bounded_buckets(
        check, "vllm:time_to_first_token_seconds", most, None, "ttft_s", slack=TIMING_SLACK_S
    )
    # the server's end-to-end latency ends before the client reads the last token: nested
    ended = [max(row.token_offsets_s, default=row.ttft_s) + TIMING_SLACK_S for row in rows]
    _bounded_buckets(
        check,
        "vllm:e2e_request_latency_seconds",
        ended,
        streams[1],
        "last token's offset",
        slack=TIMING_SLACK_S,
    )


def _bucket_rises(
    reads: _Reads, bucket: str, labels: Mapping[str, str]
) -> list[tuple[float, str, float]]:
    """Each bound of histogram samples `bucket` whose labels include `labels`: (its value, its
    `le` as written, the rise of its buckets summed over those label sets), in bound order; one
    pass over the samples (`_Reads.rise` per bound would take one per bound)."""
    old, new = reads.before.get(bucket, {}), reads.after.get(bucket, {})
    wanted = set(labels.items())
    kept = new.keys() & old.keys() if _created_at_start(bucket) else new.keys()
    rises: dict[str, float] = defaultdict(float)
    for key in kept:
        if wanted <= key:
            bound = dict(key).get("le")
            if bound is not None:
                rises[bound] += new[key] - old.get(key, 0.0)
    found = []
    for bound, rise in rises.items():
        try:
            found.append((float(bound), bound, rise))
        except ValueError:
            continue  # refused by the read's own check
    return sorted(found)


def _stream_bounds(rows: Sequence[OracleRow]) -> tuple[list[float], list[float]]:
    """Per row, the most and the least a time the server took to answer it from its arrival
    to its last byte may be: the client's last token's offset, and its first to last token
    (`DELIVERY_SLACK_S` of slack each way)."""
    most = [max(row.token_offsets_s, default=row.ttft_s) + DELIVERY_SLACK_S for row in rows]
    least = [
        max(
            max(row.token_offsets_s, default=0.0)
            - min(row.token_offsets_s, default=0.0)
            - DELIVERY_SLACK_S,
            0.0,
        )
        for row in rows
    ]
    return most, least


def _bounded_buckets(
    check: _Check,
    family: str,
    most: Sequence[float],
    least: Sequence[float] | None,
    what: str,
    *,
    slack: float,
    others: float = 0.0,
    **labels: str,
) -> None:
    """A histogram every row observed once, each observation at most its row's `most` and at
    least its row's `least` (None: at least 0; `most` has `slack` added, `least` has
    `DELIVERY_SLACK_S` taken): each bucket rose by at least the rows whose
    `most` is within its bound and by at most those whose `least` is, and the `others`
    observations of no row. Where each observation lies the sum cannot tell; the buckets can."""
    bucket = f"{family}_bucket"
    for limit, bound, found in _bucket_rises(check.reads, bucket, labels):
        low = sum(1 for value in most if value <= limit)
        fits = len(most) if least is None else sum(1 for value in least if value <= limit)
        high = fits + others
        if low <= found <= high:
            continue
        span = f"of {_shown(low)}" if low == high else f"between {_shown(low)} and {_shown(high)}"
        less = f"{DELIVERY_SLACK_S:g} s"
        lower = "" if least is None else f", {fits} whose first to last token less {less} is"
        extra = f", and {_shown(others)} requests of no row" if others else ""
        check.problems.append(
            f"{check.pair}: {bucket}{_labels(frozenset({**labels, 'le': bound}.items()))}: "
            f"expected a rise {span} (one observation a row, inside the client's times: {low} "
            f"rows whose {what} plus {slack:g} s is at most {bound} s{lower}{extra}), found "
            f"{_shown(found)}"
        )


ROUNDING_S: Final = 1e-6
"""Per observation, how far two sums of the same intervals of one clock may part: float
rounding of differences of timestamps (measured 0.0 on every committed record)."""
E2E: Final = "vllm:e2e_request_latency_seconds_sum"
TTFT: Final = "vllm:time_to_first_token_seconds_sum"
QUEUE: Final = "vllm:request_queue_time_seconds_sum"
PREFILL: Final = "vllm:request_prefill_time_seconds_sum"
DECODE: Final = "vllm:request_decode_time_seconds_sum"
INFERENCE: Final = "vllm:request_inference_time_seconds_sum"
TPOT: Final = "vllm:request_time_per_output_token_seconds_sum"
ITL: Final = "vllm:inter_token_latency_seconds_sum"
PHASES: Final = {
    TTFT: "time to its first token",
    QUEUE: "time queued",
    PREFILL: "prefill",
    DECODE: "decode",
    INFERENCE: "inference (prefill and decode)",
    TPOT: "time per output token",
    ITL: "inter-token latencies",
}
"""Per-request times, each inside the request's end-to-end latency."""


def _duration_checks(check: _Check, rows: Sequence[OracleRow]) -> None:
    """vLLM 0.32's per-request times against each other (`vllm/v1/metrics/stats.py`): the API
    server times a request from its arrival to its first token (time to first token) and to its
    end (end-to-end latency) on the wall clock; the engine core, on its monotonic clock, from
    queued to scheduled (queue), to its first token (prefill), to its last (decode), scheduled
    to last (inference = prefill + decode), and each step's tokens after the previous one's
    (inter-token latencies, summing to decode); time per output token is a request's decode
    over its tokens after the first. The engine's interval lies inside the server's, which saw
    the request first and its tokens last: each time and queue + prefill + decode at most the
    end-to-end latency, queue + prefill at most the time to first token (10 ms a request of
    slack between the two clocks). Sums of one clock's intervals agree to float rounding."""
    sums = {name: check.reads.rise(name) for name in (E2E, *PHASES)}
    slack = TIMING_SLACK_S * len(rows)
    clocks = f"{slack:.2f} s of slack between the server's and the engine's clocks"
    e2e = sums[E2E]
    if e2e is not None:
        for name, phase in PHASES.items():
            found = sums[name]
            if found is not None and found > e2e + slack:
                check.fail(
                    name,
                    found,
                    f"at most {e2e + slack:.6g} s (each request's {phase} inside its "
                    f"end-to-end latency, whose sum rose by {e2e:.6g} s; {clocks})",
                )
    queue, prefill, decode = sums[QUEUE], sums[PREFILL], sums[DECODE]
    if None not in (queue, prefill, decode, e2e):
        engine = (queue or 0.0) + (prefill or 0.0) + (decode or 0.0)
        if engine > (e2e or 0.0) + slack:
            check.problems.append(
                f"{check.pair}: {QUEUE}, {PREFILL} and {DECODE}: expected rises summing to at "
                f"most {(e2e or 0.0) + slack:.6g} s (a request is queued, prefilled and decoded "
                f"inside its end-to-end latency, whose sum rose by {e2e:.6g} s; {clocks}), found "
                f"{engine:.6g} s"
            )
    if None not in (queue, prefill, sums[TTFT]):
        first = sums[TTFT] or 0.0
        if (queue or 0.0) + (prefill or 0.0) > first + slack:
            check.problems.append(
                f"{check.pair}: {QUEUE} and {PREFILL}: expected rises summing to at most "
                f"{first + slack:.6g} s (a request is queued and prefilled before the server sees "
                f"its first token, whose times rose by {first:.6g} s; {clocks}), found "
                f"{(queue or 0.0) + (prefill or 0.0):.6g} s"
            )
    _same_interval(check, INFERENCE, (PREFILL, DECODE), sums, len(rows))
    steps = check.reads.rise("vllm:inter_token_latency_seconds_count") or 0.0
    _same_interval(check, ITL, (DECODE,), sums, int(steps) + len(rows))
    _per_token_checks(check, rows, sums[TPOT], decode)


def _same_interval(
    check: _Check,
    name: str,
    parts: Sequence[str],
    sums: Mapping[str, float | None],
    observations: int,
) -> None:
    """`name`'s sum rose by the sum of `parts`' (one interval of one clock, cut otherwise)."""
    found, given = sums[name], [sums[part] for part in parts]
    if found is None or any(value is None for value in given):
        return
    total = sum(value or 0.0 for value in given)
    if abs(found - total) > ROUNDING_S * observations:
        shown = " + ".join(parts)
        check.fail(
            name,
            found,
            f"{total!r} ({shown}: the same intervals of the engine's clock, to "
            f"{ROUNDING_S:g} s an observation)",
        )


def _per_token_checks(
    check: _Check, rows: Sequence[OracleRow], found: float | None, decode: float | None
) -> None:
    """Time per output token: each request's decode over its tokens after the first (0 for a
    request of one token), so its sum lies between the decode time's over the rows' most and
    over their fewest tokens after the first."""
    if found is None or decode is None:
        return
    later = [row.completion_tokens - 1 for row in rows if row.completion_tokens > 1]
    low, high = (decode / max(later), decode / min(later)) if later else (0.0, 0.0)
    slack = ROUNDING_S * len(rows)
    if not low - slack <= found <= high + slack:
        span = f"of {low:.6g}" if low == high else f"between {low:.6g} and {high:.6g}"
        tokens = f"{min(later)} to {max(later)} tokens" if later else "no tokens"
        check.problems.append(
            f"{check.pair}: {TPOT}: expected a rise {span} s (each request's decode time over its "
            f"tokens after the first: the decode time's rise {decode:.6g} s over the rows' "
            f"{tokens}), found {_shown(found)}"
        )


def _preemption_checks(check: _Check) -> None:
    """Every preemption the engine counted is one of a request's, counted when it finished: no
    request ran across either read (none left after, and each row's success counted)."""
    total = check.reads.rise("vllm:num_preemptions_total")
    per_request = check.reads.rise("vllm:request_num_preemptions_sum")
    if total is not None and per_request is not None and total != per_request:
        check.fail(
            "vllm:num_preemptions_total",
            total,
            f"{_shown(per_request)} (vllm:request_num_preemptions_sum: the preemptions of the "
            "requests finished between the reads)",
        )


def _access_log_checks(
    check: _Check, lines: Sequence[AccessLine], where: str, limits: Limits
) -> None:
    """Every request the API server counted between the reads (`http_requests_total`, by
    handler, method and status) has its access line in what the server logged while it
    served: uvicorn logs each request it answers, and the reads were taken while it served."""
    if not lines and not limits.access_logged:
        return  # the server logs no request
    counted = check.reads.after.get(HTTP_REQUESTS, {})
    for key in sorted(counted, key=sorted):
        labels = dict(key)
        rose = check.reads.rise(HTTP_REQUESTS, **labels) or 0.0
        logged = sum(1 for line in lines if _logs(line, labels))
        if rose > logged:
            check.problems.append(
                f"{where}: access lines of {HTTP_REQUESTS}{_labels(key)}: expected at least the "
                f"{_shown(rose)} requests it counted between the reads ({check.pair}; uvicorn "
                f"logs every request it answers), found {logged}"
            )


def _logs(line: AccessLine, labels: Mapping[str, str]) -> bool:
    """Whether an access line is of a request counted under `labels` (a handler is its route,
    `{name}` one path segment; `none` a path of no route; a status its class, `2xx`, or
    itself)."""
    handler, method, status = (labels.get(k) for k in ("handler", "method", "status"))
    if method is not None and method != line.method:
        return False
    if status is not None and status != (
        f"{line.status // 100}xx" if status.endswith("xx") else str(line.status)
    ):
        return False
    if handler is None or handler == "none":
        return True
    route = "[^/]+".join(re.escape(part) for part in re.split(r"\{[^/{}]*\}", handler))
    return re.fullmatch(route, line.path) is not None


def _label_checks(check: _Check, limits: Limits) -> None:
    """Every vLLM sample of both reads labelled with the model name the argv serves, and of one
    engine unless the argv asks for data parallelism (then of at most that many)."""
    engines: set[str] = set()
    names: set[str] = set()
    for read in (check.reads.before, check.reads.after):
        for name, found in read.items():
            if name.startswith("vllm:"):
                for key in found:
                    for label, value in key:
                        if label == "engine":
                            engines.add(value)
                        elif label == "model_name":
                            names.add(value)
    if limits.data_parallel is not None and len(engines) > limits.data_parallel:
        check.problems.append(
            f"{check.pair}: engine: expected the samples of at most {limits.data_parallel} "
            f"engine(s) (the argv's --data-parallel-size, 1 when not given), found engines "
            f"{sorted(engines)}"
        )
    if limits.served_name is not None and names - {limits.served_name}:
        check.problems.append(
            f"{check.pair}: model_name: expected {limits.served_name!r} (the argv's "
            f"--served-model-name), found {sorted(names)}"
        )


def _prefix_caching(after: Samples) -> bool | None:
    """`enable_prefix_caching` of `vllm:cache_config_info` after the suite, the engine's own
    report; None when it does not say."""
    found = after.get("vllm:cache_config_info", {})
    values = {dict(key).get("enable_prefix_caching", "") for key in found}
    return {"True": True, "False": False}.get(values.pop()) if len(values) == 1 else None


def _cached_beyond(check: _Check, rows: Sequence[OracleRow], enabled: bool | None) -> list[str]:
    """Rows whose cached prefix nothing could have computed: any with prefix caching off; and,
    where the server had answered nothing before the suite, more than the longest prompt and
    answer of an earlier row."""
    success = "vllm:request_success_total"
    fresh = check.reads.exported(success) and not sum(check.reads.before.get(success, {}).values())
    problems, longest = [], 0
    for place, row in enumerate(rows):
        if enabled is False:
            bound, why = 0, "prefix caching is off"
        elif fresh:
            bound, why = (
                longest,
                (
                    "the longest prompt and answer of an earlier row, the server having answered "
                    "nothing before the suite"
                ),
            )
        else:
            break
        if row.cached_tokens is not None and row.cached_tokens > bound:
            problems.append(
                f"{check.pair}: row {place} ({row.prompt_id}) cached_tokens: expected at most "
                f"{bound} ({why}), found {row.cached_tokens}"
            )
        longest = max(longest, row.prompt_tokens + row.completion_tokens)
    return problems


def _decode_checks(check: _Check, rows: Sequence[OracleRow], limits: Limits) -> None:
    """Decode steps and speculative decoding's counters."""
    spec = _Speculation.read(check.reads)
    if spec is None and limits.speculative:
        check.not_applicable.append(
            "speculative decoding and decode steps: a read lacks vllm:spec_decode_* counters"
        )
        return
    if spec is not None and not limits.speculative:
        if spec.drafts or spec.draft_tokens or spec.accepted:
            check.fail(
                SPEC_COUNTERS[0], spec.drafts, "0 (the argv asks for no speculative decoding)"
            )
        spec = None
    elif spec is not None:
        _speculation_checks(check, spec, limits.speculative_k)
    _step_checks(check, rows, limits, spec)


@dataclass(frozen=True)
class _Speculation:
    drafts: float
    draft_tokens: float
    accepted: float
    per_position: dict[int, float]
    """Accepted tokens by draft position (-1 for a position label that is not a number)."""

    @classmethod
    def read(cls, reads: _Reads) -> _Speculation | None:
        """The rises of vLLM's speculative-decoding counters; None when a read lacks one."""
        values = [reads.rise(name) for name in SPEC_COUNTERS]
        drafts, draft_tokens, accepted = (value or 0.0 for value in values)
        if any(value is None for value in values):
            return None
        positions = reads.label_values(PER_POSITION, "position")
        curve = {
            int(p) if p.isdecimal() else -1: reads.rise(PER_POSITION, position=p) or 0.0
            for p in positions
        }
        return cls(drafts, draft_tokens, accepted, curve)


def _speculation_checks(check: _Check, spec: _Speculation, k: int | None) -> None:
    """What vLLM 0.32's scheduler counts of each draft (`SpecDecodingStats.observe_draft`): 1 to
    k tokens, the accepted ones a prefix of them, each accepted one counted at its position."""
    pair, curve = check.pair, spec.per_position
    depth = k if k is not None else len(curve)
    problems = []
    if sorted(curve) != list(range(depth)):
        stated = f"num_speculative_tokens {k}" if k is not None else "contiguous positions"
        problems.append(
            f"{PER_POSITION}: expected positions 0..{depth - 1} ({stated}), found "
            + (", ".join(str(p) if p >= 0 else "one not a number" for p in sorted(curve)) or "none")
        )
    if not spec.drafts <= spec.draft_tokens <= spec.drafts * depth:
        problems.append(
            f"{SPEC_COUNTERS[1]}: expected a rise between the {_shown(spec.drafts)} drafts and "
            f"{depth} tokens each ({_shown(spec.drafts * depth)}), found "
            f"{_shown(spec.draft_tokens)}"
        )
    if spec.accepted > spec.draft_tokens:
        problems.append(
            f"{SPEC_COUNTERS[2]}: expected a rise of at most the {_shown(spec.draft_tokens)} "
            f"draft tokens, found {_shown(spec.accepted)}"
        )
    if curve and sum(curve.values()) != spec.accepted:
        problems.append(
            f"{PER_POSITION}: expected positions summing to the {_shown(spec.accepted)} "
            f"accepted tokens, found {_shown(sum(curve.values()))}"
        )
    ordered = [(position, curve[position]) for position in sorted(curve) if position >= 0]
    problems += [
        f'{PER_POSITION}{{position="{position}"}}: expected a rise of at most the '
        f"{_shown(spec.drafts)} drafts, found {_shown(value)}"
        for position, value in ordered
        if value > spec.drafts
    ]
    problems += [
        f"{PER_POSITION}: expected position {later} to rise by at most position {earlier}'s "
        f"{_shown(before)} (a draft token is accepted only after the one before it), found "
        f"{_shown(after)}"
        for (earlier, before), (later, after) in pairwise(ordered)
        if after > before
    ]
    check.problems += [f"{pair}: {problem}" for problem in problems]


def _step_checks(
    check: _Check, rows: Sequence[OracleRow], limits: Limits, spec: _Speculation | None
) -> None:
    """One inter-token latency per decode step: a step gives one token, or with speculation
    one and its accepted drafts, less those past the row's end (at most k a row)."""
    steps = check.rise("vllm:inter_token_latency_seconds_count")
    if steps is None:
        return
    later_tokens = sum(row.completion_tokens - 1 for row in rows)
    name = "vllm:inter_token_latency_seconds_count"
    if spec is None:
        if steps != later_tokens:
            check.fail(
                name,
                steps,
                f"{later_tokens} (each row's tokens after its first: one decode step each)",
            )
        return
    depth = limits.speculative_k or len(spec.per_position)
    most = depth * len(rows)
    given = steps + spec.accepted
    if not later_tokens <= given <= later_tokens + most:
        check.problems.append(
            f"{check.pair}: {name} and {SPEC_COUNTERS[2]}: expected decode steps plus accepted "
            f"draft tokens to rise by the rows' {later_tokens} tokens after their first, plus at "
            f"most {most} drafted past a row's end ({depth} a row), found {_shown(steps)} + "
            f"{_shown(spec.accepted)}"
        )


# --- the API server's HTTP instrumentation ------------------------------------------------------

HTTP_SIZES: Final = ("http_request_size_bytes", "http_response_size_bytes")
"""prometheus-fastapi-instrumentator's summaries, by handler."""
HTTP_DURATION: Final = "http_request_duration_seconds"
"""Its histogram of durations by handler and method (few buckets)."""
HTTP_HIGHR: Final = "http_request_duration_highr_seconds"
"""Its histogram of the same durations with no label (many buckets)."""


def _http_read_problems(read: Samples, series: Series) -> list[str]:
    """One read of the API server's HTTP instrumentation against itself. The instrumentator
    (prometheus-fastapi-instrumentator 7 and 8, as vLLM's API server installs it) observes every
    request it does not exclude once, in one call, in each of its families: the request and
    response sizes by handler and the duration by handler and method count what
    `http_requests_total` counts, the unlabelled duration histogram every one of them (it
    respects every status), and both duration histograms hold the same durations (their shared
    bounds count alike, their sums agree to float rounding)."""
    counted = read.get(HTTP_REQUESTS, {})
    by_handler: defaultdict[str | None, float] = defaultdict(float)
    by_route: defaultdict[tuple[str | None, str | None], float] = defaultdict(float)
    for key, value in counted.items():
        labels = dict(key)
        by_handler[labels.get("handler")] += value
        by_route[labels.get("handler"), labels.get("method")] += value
    problems = []
    for family in HTTP_SIZES:
        found = read.get(f"{family}_count")
        if found is None:
            continue
        stated: defaultdict[str | None, float] = defaultdict(float)
        for key, value in found.items():
            stated[dict(key).get("handler")] += value
        problems += [
            f'{family}_count{{handler="{handler}"}}: expected {_shown(by_handler[handler])} '
            f"(the requests {HTTP_REQUESTS} counts for the handler: the instrumentator observes "
            f"each one it counts), found {_shown(stated[handler])}"
            for handler in sorted(stated.keys() | by_handler.keys(), key=str)
            if stated[handler] != by_handler[handler]
        ]
    durations = read.get(f"{HTTP_DURATION}_count")
    if durations is not None:
        timed: defaultdict[tuple[str | None, str | None], float] = defaultdict(float)
        for key, value in durations.items():
            labels = dict(key)
            timed[labels.get("handler"), labels.get("method")] += value
        problems += [
            f'{HTTP_DURATION}_count{{handler="{handler}",method="{method}"}}: expected '
            f"{_shown(by_route[handler, method])} (the requests {HTTP_REQUESTS} counts for the "
            f"handler and method), found {_shown(timed[handler, method])}"
            for handler, method in sorted(timed.keys() | by_route.keys(), key=str)
            if timed[handler, method] != by_route[handler, method]
        ]
    highr = read.get(f"{HTTP_HIGHR}_count", {})
    total = sum(by_handler.values())
    problems += [
        f"{HTTP_HIGHR}_count: expected {_shown(total)} (every request {HTTP_REQUESTS} counts), "
        f"found {_shown(value)}"
        for value in highr.values()
        if value != total
    ]
    return problems + _http_durations_problems(read, series)


def _http_durations_problems(read: Samples, series: Series) -> list[str]:
    """The unlabelled duration histogram against the labelled one: the same observations."""
    fine = [buckets for (family, _rest), buckets in series.items() if family == HTTP_HIGHR]
    coarse: dict[float, float] = defaultdict(float)
    for (family, _rest), buckets in series.items():
        if family == HTTP_DURATION:
            for bound, count in buckets:
                coarse[bound] += count
    if len(fine) != 1 or not coarse:
        return []
    problems = [
        f'{HTTP_HIGHR}_bucket{{le="{_bound(bound)}"}}: expected {_shown(coarse[bound])} (the '
        f"requests {HTTP_DURATION} counts within the same bound: both observe every request's "
        f"one duration), found {_shown(count)}"
        for bound, count in fine[0]
        if bound in coarse and coarse[bound] != count
    ]
    total = sum(read.get(f"{HTTP_HIGHR}_sum", {}).values())
    parts = list(read.get(f"{HTTP_DURATION}_sum", {}).values())
    if read.get(f"{HTTP_HIGHR}_sum") and parts:
        slack = SUM_ROUNDING * (1.0 + abs(total) + sum(abs(part) for part in parts))
        if abs(total - sum(parts)) > slack:
            problems.append(
                f"{HTTP_HIGHR}_sum: expected {sum(parts)!r} (the sum of {HTTP_DURATION}_sum over "
                f"its handlers: the same durations), found {total!r}"
            )
    return problems


def _bound(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(bound)


def _http_checks(
    check: _Check,
    rows: Sequence[OracleRow],
    limits: Limits,
    streams: tuple[list[float], list[float]],
) -> None:
    """The suite's requests as the API server timed them, inside the client's times: each from
    its arrival to its last byte, so at most the client's last token's offset and at least its
    first to last token (`DELIVERY_SLACK_S` a request of slack), in sum and in every bucket of
    both duration histograms (the unlabelled one also counts the requests of no row)."""
    endpoint = ENDPOINTS[limits.api]
    route = {"handler": endpoint, "method": "POST"}
    most, least = streams
    slack = DELIVERY_SLACK_S * len(rows)
    found = check.reads.rise(f"{HTTP_DURATION}_sum", **route)
    low, high = sum(least), sum(most)
    if found is not None and not low <= found <= high:
        check.problems.append(
            f"{check.pair}: {HTTP_DURATION}_sum{_labels(frozenset(route.items()))}: expected a "
            f"rise between {low:.3f} and {high:.3f} s (the rows' first to last token less, and "
            f"their last token's offset plus, {slack:.2f} s of delivery slack), found "
            f"{_shown(found)}"
        )
    _bounded_buckets(
        check,
        HTTP_DURATION,
        most,
        least,
        "last token's offset",
        slack=DELIVERY_SLACK_S,
        handler=endpoint,
        method="POST",
    )
    counted = check.reads.rise(f"{HTTP_HIGHR}_count") or 0.0
    _bounded_buckets(
        check,
        HTTP_HIGHR,
        most,
        least,
        "last token's offset",
        slack=DELIVERY_SLACK_S,
        others=max(counted - len(rows), 0.0),
    )


# --- what other sealed files state -------------------------------------------------------------

ENGINE_START_SLACK_S: Final = 1.0
"""How much earlier than a process truly started the kernel's start time may read: `/proc`
gives it as whole-second boot time plus clock ticks (as `builder.freshstarts` bounds it)."""


def _stated_time_problems(reads: _Reads, pair: str, facts: ServerFacts, endpoint: str) -> list[str]:
    """The reads' times against those other files state: the suite's handler first counted a
    request no earlier than the server answered (the suite came after), vLLM's counters created
    no later (its engine existed once the server answered: vLLM 0.32's API server creates its
    loggers after the engine core's handshake, then serves) and no earlier than its engine core
    started (or than the last idle snapshot before the run saw no process holding a card)."""
    problems = []
    for read, which in ((reads.before, "before"), (reads.after, "after")):
        created = [
            (value, name, key)
            for name in read
            if name.startswith("vllm:") and name.endswith("_created")
            for key, value in read[name].items()
        ]
        if facts.answering is not None:
            at, where = facts.answering
            early = [
                (value, name, key)
                for name in read
                if name.startswith("http_") and name.endswith("_created")
                for key, value in read[name].items()
                if dict(key).get("handler") == endpoint and value < at - READ_SLACK_S
            ]
            problems += _times(pair, which, min(early, default=None), len(early), (
                f"no earlier than {where} ({at!r}): the suite's first request came after it"
            ))  # fmt: skip
            late = [found for found in created if found[0] > at + READ_SLACK_S]
            late += [
                (value, PROCESS_START, key)
                for key, value in read.get(PROCESS_START, {}).items()
                if value > at + READ_SLACK_S
            ]
            problems += _times(pair, which, max(late, default=None), len(late), (
                f"no later than {where} ({at!r}): the server answered by then, its engine up"
            ))  # fmt: skip
        if facts.engine is not None:
            at, where = facts.engine
            early = [found for found in created if found[0] < at - ENGINE_START_SLACK_S]
            problems += _times(pair, which, min(early, default=None), len(early), (
                f"no earlier than {where} ({at!r}; {ENGINE_START_SLACK_S:g} s of slack): vLLM "
                "creates its counters once its engine answered"
            ))  # fmt: skip
    return problems


def _times(
    pair: str,
    which: str,
    first: tuple[float, str, LabelSet] | None,
    count: int,
    expected: str,
) -> list[str]:
    if first is None:
        return []
    value, name, key = first
    more = f" (and {count - 1} more)" if count > 1 else ""
    return [
        f"{pair} ({which}): {name}{_labels(key)}: expected a time {expected}, found {value!r}{more}"
    ]


def _python_problems(reads: _Reads, pair: str, python: tuple[str, str] | None) -> list[str]:
    """`python_info`: its version the interpreter another file states, its major, minor and
    patch level that version."""
    problems = []
    for read, which in ((reads.before, "before"), (reads.after, "after")):
        for key in sorted(read.get("python_info", {}), key=sorted):
            labels = dict(key)
            version = labels.get("version", "")
            parts = ".".join(labels.get(part, "") for part in ("major", "minor", "patchlevel"))
            if python is not None and version != python[0]:
                problems.append(
                    f"{pair} ({which}): python_info version: expected {python[0]!r} (the "
                    f"interpreter {python[1]} states), found {version!r}"
                )
            elif not re.fullmatch(re.escape(parts) + r"(?:[a-z+][0-9a-z+.]*)?", version):
                problems.append(
                    f"{pair} ({which}): python_info: expected major.minor.patchlevel {parts!r} to "
                    f"be its version, found {version!r}"
                )
    return problems


# --- the access log ------------------------------------------------------------------------------

METRICS_PATH: Final = "/metrics"
"""Where repro reads the server's metrics (`launch.oracle.read_metrics`), before and after."""


def _access_order_checks(
    check: _Check,
    lines: Sequence[AccessLine],
    where: str,
    limits: Limits,
    readiness: str | None,
) -> None:
    """What the access log says of the suite, where the server logs its requests: every POST
    is to the suite's endpoint (the client posts nothing else), the readiness probe answered
    2xx before the suite's first POST, a read of `/metrics` answered before it and another
    after its last (the reads sealed before and after it), each unless the argv leaves the
    path out of the access log."""
    if not lines:
        return  # a log with no access line: the counted requests say what it lacks
    endpoint = ENDPOINTS[limits.api]
    check.problems += [
        f"{where}:{line.line}: access line: expected only the suite's POSTs to {endpoint} (its "
        f"client posts nothing else), found POST {line.path} answered {line.status}"
        for line in lines
        if line.method == "POST" and line.path != endpoint
    ]
    posts = [line.line for line in lines if line.method == "POST" and line.path == endpoint]
    if not posts:
        return  # the server log gate counts the suite's POSTs
    answered = [line for line in lines if 200 <= line.status < 300]
    wanted = [
        ("the readiness probe GET " + str(readiness), readiness, "before", posts[0]),
        (f"the read before the suite GET {METRICS_PATH}", METRICS_PATH, "before", posts[0]),
        (f"the read after the suite GET {METRICS_PATH}", METRICS_PATH, "after", posts[-1]),
    ]
    for what, path, side, at in wanted:
        if path is None or path in limits.unlogged_paths:
            continue
        if not any(
            line.method == "GET"
            and line.path == path
            and (line.line < at if side == "before" else line.line > at)
            for line in answered
        ):
            check.problems.append(
                f"{where}: {what}: expected its access line answered 2xx {side} the suite's "
                f"{'first' if side == 'before' else 'last'} POST {endpoint} (line {at}), found "
                "none"
            )


# --- the KV cache the engine states ---------------------------------------------------------------

KV_CACHE_SIZE: Final = re.compile(r"\b([A-Z]{2,4} )?KV cache size: ([0-9][0-9,]{0,30}) tokens")
"""vLLM's log of its KV cache (`kv_cache_utils`): `CPU KV cache size: 524,288 tokens`."""
MAX_CONCURRENCY: Final = re.compile(
    r"Maximum concurrency for [0-9][0-9,]{0,30} tokens per request: ([0-9]{1,30}\.[0-9]{2})x"
)
CPU_KV_CACHE_SPACE: Final = "VLLM_CPU_KVCACHE_SPACE"
"""vLLM's CPU platform sets the KV cache's bytes to this many GiB where it is set and not empty
(`vllm/platforms/cpu.py`, `check_and_update_config`)."""
CACHE_CONFIG: Final = "vllm:cache_config_info"


def _kv_cache_checks(
    check: _Check,
    log: str,
    where: str,
    environment: tuple[Mapping[str, str], str] | None,
) -> None:
    """`vllm:cache_config_info` against what the log states of the KV cache (its size in
    tokens, the concurrency it allows, each as vLLM logs them) and, on the CPU platform, the
    bytes `VLLM_CPU_KVCACHE_SPACE` gives it."""
    sizes: set[int] = set()
    devices: set[str] = set()
    concurrency: set[str] = set()
    for line in _lines_with(log, ("KV cache size: ", "Maximum concurrency for ")):
        for size in KV_CACHE_SIZE.finditer(line):
            sizes.add(int(size[2].replace(",", "")))
            devices.add((size[1] or "").strip())
        concurrency.update(m[1] for m in MAX_CONCURRENCY.finditer(line))
    space = None
    if environment is not None and "CPU" in devices:
        value = environment[0].get(CPU_KV_CACHE_SPACE, "").strip()
        space = int(value) if value.isdecimal() and len(value) <= 9 else None
    found = {
        key
        for read in (check.reads.before, check.reads.after)
        for key in read.get(CACHE_CONFIG, {})
    }
    for key in sorted(found, key=sorted):
        labels = dict(key)
        tokens = labels.get("kv_cache_size_tokens", "")
        if sizes and tokens.isdecimal() and int(tokens) not in sizes:
            check.problems.append(
                f"{check.pair}: {CACHE_CONFIG}{_engine(labels)} kv_cache_size_tokens: expected "
                f"{_alternatives(sorted(sizes))} (the KV cache size {where} states), found {tokens}"
            )
        shown = _two_places(labels.get("kv_cache_max_concurrency", ""))
        if concurrency and shown is not None and shown not in concurrency:
            check.problems.append(
                f"{check.pair}: {CACHE_CONFIG}{_engine(labels)} kv_cache_max_concurrency: "
                f"expected {_alternatives(sorted(concurrency))} (the maximum concurrency {where} "
                f"states), found {labels['kv_cache_max_concurrency']}"
            )
        memory = labels.get("kv_cache_memory_bytes")
        if space is not None and environment is not None and memory != str(space * 2**30):
            check.problems.append(
                f"{check.pair}: {CACHE_CONFIG}{_engine(labels)} kv_cache_memory_bytes: expected "
                f"{space * 2**30} ({CPU_KV_CACHE_SPACE}={space} GiB in {environment[1]}, the CPU "
                f"platform's KV cache), found {memory}"
            )


def _lines_with(text: str, phrases: Sequence[str]) -> list[str]:
    """The lines of `text` that hold one of `phrases` (found by `str.find`, not by a pattern
    over the whole log)."""
    found: dict[int, str] = {}
    for phrase in phrases:
        at = text.find(phrase)
        while at >= 0:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            found[start] = text[start:end]
            at = text.find(phrase, end)
    return [found[start] for start in sorted(found)]


def _engine(labels: Mapping[str, str]) -> str:
    return f'{{engine="{labels["engine"]}"}}' if "engine" in labels else ""


def _alternatives(values: Sequence[object]) -> str:
    return " or ".join(str(value) for value in values)


def _two_places(value: str) -> str | None:
    """A float label as vLLM's log shows it (`%.2f`); None when it is no finite number."""
    try:
        number = float(value)
    except ValueError:
        return None
    return f"{number:.2f}" if math.isfinite(number) else None


def _created_at_start(name: str) -> bool:
    """vLLM creates every label set of its counters when it starts; other exporters of the API
    server (its HTTP instrumentation) create one at its first observation, from 0."""
    return name.startswith("vllm:")


def _shown(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _labels(labels: LabelSet) -> str:
    return "{" + ",".join(f'{key}="{value}"' for key, value in sorted(labels)) + "}"


def _label_sets(sets: Iterable[LabelSet]) -> str:
    return ", ".join(sorted(_labels(labels) for labels in sets)) or "none"


def _values(found: Mapping[LabelSet, float]) -> str:
    return ", ".join(repr(value) for value in found.values())
