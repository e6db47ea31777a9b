"""Cassettes: a run's model exchanges, tool results, approvals and answers, recorded and
replayed.

A cassette is versioned YAML. It holds the plan (or the goal it was planned from), the run
inputs, and four lists of entries:

* `llm`: every model exchange, keyed by a hash of the canonical request (model, messages,
  tools, response format, temperature) plus an ordinal for repeats of the same request
  within a step;
* `tools`: every tool call's result or error, keyed by step, attempt, action and a hash of
  the params;
* `approvals`: every gate decision (and the review of a model-written plan);
* `answers`: every `human.ask` answer.

Secrets are redacted before anything is hashed or written, so the keys are the same
whether or not the secret is present when the run is replayed. No HTTP headers are stored.

A `Tape` sits between the run and the world. In a replay it serves every recorded entry and
never calls a model or makes a side effect; a request with no recording raises
`ReplayMismatch`, which names the step and shows the nearest recorded request with a
field-level diff. Modes are vcrpy's: `none` (replay only), `once` (replay if the cassette
exists, else record), `new_episodes` (replay what is recorded, record what is new) and `all`
(record everything again).

A recorded decision answers only a call whose result is served from the cassette too
(`Tape.serves`, asked before the gate): a call that will run live is always decided by the
live approver (terminal, `--yes`, `--no`, policy, or fail closed), whatever the cassette's
`approvals:` say, so an entry added by hand cannot approve a side effect. Decisions served
from a cassette say `by: recorded`.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import io
import json
import os
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import LiteralScalarString

from engine._secrets import Secrets
from engine.approval import Approver, GateRequest
from engine.diagnostics import render_diagnostics
from engine.errors import (
    BudgetExceeded,
    CapabilityDenied,
    ConfigurationError,
    PlanValidationError,
    ReplayMismatch,
    StepError,
    StepFailed,
    StepTimeout,
)
from engine.llm import ChatResult, LLMError, NoJSON, ToolCallRequest
from engine.model import Limits, LLMSettings
from engine.questions import Question
from engine.results import Decision

__all__ = [
    "PLANNER",
    "PLAN_REVIEW",
    "RECORDED",
    "RECORD_MODES",
    "Cassette",
    "OfflineModel",
    "RecordMode",
    "Tape",
    "TapeApprover",
    "current_scope",
    "enter_scope",
    "field_diff",
    "request_key",
]

FORMAT = 1
RecordMode = Literal["none", "once", "new_episodes", "all"]
RECORD_MODES: tuple[RecordMode, ...] = ("none", "once", "new_episodes", "all")

PLANNER = "(planner)"
"""The scope of the planner's model calls (step ids cannot contain parentheses)."""
PLAN_REVIEW = "(plan)"
"""The scope of the decision on a model-written plan."""
RECORDED = "recorded"
"""The `by` of a decision served from a cassette."""

_scope: ContextVar[str | None] = ContextVar("planloom_scope", default=None)

_DIFF_LINES = 24  # lines of a mismatch diff shown
_NEAREST_CANDIDATES = 200  # recorded entries compared when looking for the nearest

E = TypeVar("E", bound=BaseModel)


def current_scope() -> str | None:
    """The step (with `[index]` for a `for_each` item) the running code belongs to."""
    return _scope.get()


def enter_scope(name: str) -> None:
    """Mark the current task as running for `name`; tasks it creates inherit it."""
    _scope.set(name)


def _digest(value: Any) -> str:
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    """JSON data only (tuples become lists, keys strings), as stored and compared."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=repr))


def canonical_request(request: dict[str, Any]) -> dict[str, Any]:
    """The fields of a chat request that decide its answer, in JSON form."""
    canonical: dict[str, Any] = _plain(
        {
            "model": request.get("model"),
            "messages": request.get("messages", []),
            "tools": request.get("tools") or None,
            "response_format": request.get("response_format"),
            "temperature": request.get("temperature"),
        }
    )
    return canonical


def request_key(request: dict[str, Any]) -> str:
    """The hash a model exchange is stored under (of the canonical request)."""
    return _digest(canonical_request(request))


# -- the file --------------------------------------------------------------------------


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RecordedError(_Entry):
    """An error a call ended with, rebuilt with the same type and message on replay."""

    type: str
    message: str
    rule: str | None = None
    limit: str | None = None


class RecordedReply(_Entry):
    content: str | None = None
    tool_calls: list[ToolCallRequest] = []
    prompt_tokens: int = 0
    completion_tokens: int = 0


class LLMExchange(_Entry):
    """One model request and its answer (or the error it ended with, after retries)."""

    step: str
    key: str
    ordinal: int = 0
    request: dict[str, Any]
    response: RecordedReply | None = None
    error: RecordedError | None = None


class ToolResult(_Entry):
    """One tool call and what it returned (or the error it ended with)."""

    step: str
    attempt: int = 1
    action: str
    params_hash: str
    ordinal: int = 0
    params: Any = None
    output: Any = None
    error: RecordedError | None = None


class Approval(_Entry):
    """One gate decision, or (`step: (plan)`) the decision on a model-written plan."""

    step: str
    action: str
    params_hash: str
    ordinal: int = 0
    approved: bool
    by: str
    reason: str | None = None
    edited_params: Any = None
    edited_plan: str | None = None
    quit: bool = False


class Answer(_Entry):
    """One `human.ask` answer."""

    step: str
    question: str
    key: str
    ordinal: int = 0
    answer: Any = None


class Cassette(_Entry):
    """A recorded run (`planloom_cassette: 1`)."""

    planloom_cassette: Literal[1] = 1
    note: str | None = Field(None, description="What this recording is; kept on re-record.")
    goal: str | None = Field(None, description="The goal the plan was made from, if any.")
    base: dict[str, Any] | None = Field(
        None, description="Goal runs: the capabilities, limits and llm the planner was given."
    )
    plan: dict[str, Any] | None = Field(None, description="The recipe, or the model's plan.")
    model: str | None = None
    inputs: dict[str, Any] = {}
    llm: list[LLMExchange] = []
    tools: list[ToolResult] = []
    approvals: list[Approval] = []
    answers: list[Answer] = []

    @classmethod
    def load(cls, path: str | Path) -> Cassette:
        """Read and check a cassette file.

        Raises:
            ConfigurationError: unreadable, not YAML, or not a cassette (says where).
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cassette {path}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigurationError(f"cassette {path}: not UTF-8 text ({exc.reason})") from exc
        data = _read_yaml(text, str(path))
        if not isinstance(data, dict) or "planloom_cassette" not in data:
            raise ConfigurationError(
                f"cassette {path}: not a planloom cassette (no 'planloom_cassette:' version); "
                "record one with: planloom run RECIPE --record FILE"
            )
        if data.get("planloom_cassette") != FORMAT:
            raise ConfigurationError(
                f"cassette {path}: format {data.get('planloom_cassette')!r} is not supported "
                f"(this planloom reads format {FORMAT}); record it again with --record"
            )
        try:
            cassette = cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigurationError(f"cassette {path}: {_problems(exc, ())}") from None
        base = cassette.base or {}
        # What the planner was given is used before any step runs: check it here.
        for key, model in (("llm", LLMSettings), ("limits", Limits)):
            if base.get(key) is not None:
                try:
                    model.model_validate(base[key])
                except ValidationError as exc:
                    problems = _problems(exc, ("base", key))
                    raise ConfigurationError(f"cassette {path}: {problems}") from None
        return cassette

    def dump(self) -> str:
        """The YAML text: entries in a stable order, no timestamps, multi-line text as blocks."""
        data = self.model_dump(mode="json", exclude_none=False)
        data["llm"] = [_compact(e) for e in _sorted_llm(data["llm"])]
        data["tools"] = [
            _compact(e)
            for e in sorted(
                data["tools"],
                key=lambda e: (
                    e["step"],
                    e["attempt"],
                    e["action"],
                    e["params_hash"],
                    e["ordinal"],
                ),
            )
        ]
        data["approvals"] = [
            _compact(e)
            for e in sorted(
                data["approvals"],
                key=lambda e: (e["step"], e["action"], e["params_hash"], e["ordinal"]),
            )
        ]
        data["answers"] = [
            _compact(e)
            for e in sorted(data["answers"], key=lambda e: (e["step"], e["key"], e["ordinal"]))
        ]
        data = {k: v for k, v in data.items() if v is not None}
        text = _yaml_text(_blocks(data))
        if YAML(typ="safe", pure=False).load(text) != data:  # a block scalar went wrong
            text = _yaml_text(data)
        return text

    def save(self, path: str | Path) -> None:
        """Write atomically: a reader sees the old file or the new one, never half of one."""
        target = Path(path)
        text = self.dump()
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as stream:
                stream.write(text)
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise


def _problems(exc: ValidationError, prefix: tuple[str, ...]) -> str:
    return "; ".join(
        f"{'.'.join(map(str, (*prefix, *e['loc'])))}: {e['msg']}"
        for e in exc.errors(include_url=False)[:5]
    )


def _sorted_llm(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Stable: within one step the exchanges stay in the order they happened.
    return sorted(entries, key=lambda e: e["step"])


def _compact(entry: dict[str, Any]) -> dict[str, Any]:
    """Drop an entry's empty optional fields (nested data keeps its nulls)."""
    keep = {"output", "answer"}  # a null result is a result
    return {
        k: v
        for k, v in entry.items()
        if not (v is None and k not in keep) and not (k in ("quit",) and v is False)
    }


def _blocks(value: Any) -> Any:
    """Multi-line strings as `|` blocks, so prompts and outputs read as text."""
    if isinstance(value, dict):
        return {k: _blocks(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_blocks(v) for v in value]
    if isinstance(value, str) and "\n" in value and _block_safe(value):
        return LiteralScalarString(value)
    return value


def _block_safe(text: str) -> bool:
    lines = text.split("\n")
    return (
        not text.startswith((" ", "\t"))
        and all(line == line.rstrip() for line in lines)
        and all(ch.isprintable() or ch == "\n" for ch in text)
    )


def _read_yaml(text: str, file: str) -> Any:
    """A cassette's data, through the recipe reader and its caps: cassettes are user files,
    so an alias bomb or 10,000 nested brackets in one is a located error, not a crash."""
    from engine._yaml import parse_recipe_text

    try:
        data, source = parse_recipe_text(text, file)
    except PlanValidationError as exc:
        raise ConfigurationError(
            f"cassette {file}: not valid YAML:\n{render_diagnostics(exc.diagnostics, None)}"
        ) from None
    if source.problems:  # duplicate or merge keys: the file was edited, and is ambiguous
        raise ConfigurationError(f"cassette {file}: {render_diagnostics(source.problems, source)}")
    return data


def _yaml_text(data: Any) -> str:
    yaml = YAML(typ="rt")
    yaml.width = 1_000_000  # long lines stay whole: stable and diffable
    yaml.indent(mapping=2, sequence=4, offset=2)
    stream = io.StringIO()
    yaml.dump(data, stream)
    return stream.getvalue()


# -- diffs -----------------------------------------------------------------------------


def field_diff(recorded: Any, now: Any, path: str = "") -> list[str]:
    """The fields that differ between two JSON values, one `path: recorded → now` each;
    long texts as a line diff."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        lines: list[str] = []
        for key in list(recorded) + [k for k in now if k not in recorded]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in now:
                lines.append(f"{sub}: recorded {_short(recorded[key])}, now absent")
            elif key not in recorded:
                lines.append(f"{sub}: absent in the recording, now {_short(now[key])}")
            else:
                lines += field_diff(recorded[key], now[key], sub)
        return lines
    if isinstance(recorded, list) and isinstance(now, list):
        lines = []
        for index in range(max(len(recorded), len(now))):
            sub = f"{path}[{index}]"
            if index >= len(now):
                lines.append(f"{sub}: recorded {_short(recorded[index])}, now absent")
            elif index >= len(recorded):
                lines.append(f"{sub}: absent in the recording, now {_short(now[index])}")
            else:
                lines += field_diff(recorded[index], now[index], sub)
        return lines
    if recorded == now and type(recorded) is type(now):
        return []
    if isinstance(recorded, str) and isinstance(now, str) and ("\n" in recorded + now):
        text = difflib.unified_diff(
            recorded.splitlines(), now.splitlines(), "recorded", "now", lineterm="", n=1
        )
        return [f"{path or 'value'}:", *(f"    {line}" for line in list(text)[2:])]
    return [f"{path or 'value'}: recorded {_short(recorded)}, now {_short(now)}"]


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else f"{text[: limit - 20]}…({len(text)} chars)"


def _nearest(candidates: list[tuple[E, Any]], now: Any) -> tuple[E, list[str]] | None:
    """The candidate whose value differs from `now` in the fewest fields."""
    best: tuple[E, list[str]] | None = None
    for entry, value in candidates[:_NEAREST_CANDIDATES]:
        diff = field_diff(value, now)
        if best is None or len(diff) < len(best[1]):
            best = (entry, diff)
    return best


def _shown(diff: list[str]) -> str:
    lines = diff[:_DIFF_LINES]
    more = f"\n  … and {len(diff) - _DIFF_LINES} more lines" if len(diff) > _DIFF_LINES else ""
    return "\n".join(f"  {line}" for line in lines) + more


# -- errors ----------------------------------------------------------------------------


_ERROR_TYPES: dict[str, type[StepError]] = {
    cls.__name__: cls
    for cls in (StepFailed, StepTimeout, CapabilityDenied, BudgetExceeded, LLMError, NoJSON)
}


def _recorded_error(exc: StepError, redact: Callable[[str], str]) -> RecordedError:
    return RecordedError(
        type=type(exc).__name__ if type(exc).__name__ in _ERROR_TYPES else "StepFailed",
        message=redact(exc.message),
        rule=getattr(exc, "rule", None),
        limit=getattr(exc, "limit", None),
    )


def _rebuild(error: RecordedError, step_id: str | None) -> StepError:
    """The recorded error again: same type, same message."""
    cls = _ERROR_TYPES.get(error.type, StepFailed)
    exc = cls.__new__(cls)
    StepError.__init__(exc, error.message, step_id=step_id)
    if error.rule is not None:
        exc.rule = error.rule  # type: ignore[attr-defined]
    if error.limit is not None:
        exc.limit = error.limit  # type: ignore[attr-defined]
    return exc


# -- the tape --------------------------------------------------------------------------


class Tape:
    """Records a run into a cassette, replays one, or both (`new_episodes`).

    Args:
        path: the cassette file.
        mode: `none`, `once`, `new_episodes` or `all` (see the module docstring).
        secrets: redacted from everything before it is hashed or stored.
        live_tools: in a replay, read-only tools run for real instead of being served.
    """

    def __init__(
        self,
        path: str | Path,
        mode: RecordMode = "none",
        *,
        secrets: Secrets | None = None,
        live_tools: bool = False,
    ) -> None:
        if mode not in RECORD_MODES:
            raise ConfigurationError(
                f"record mode {mode!r} is not one of: {', '.join(RECORD_MODES)}"
            )
        self.path = Path(path)
        self.requested_mode = mode
        exists = self.path.exists()
        if mode == "once":
            mode = "none" if exists else "all"
        if mode in ("none", "new_episodes") and not exists:
            raise ConfigurationError(
                f"cassette {path} does not exist; record it first with --record {path} "
                "(or run with --record-mode once, which records when it is missing)"
            )
        self.mode: RecordMode = mode
        self.secrets = secrets if secrets is not None else Secrets.from_environ()
        self.live_tools = live_tools
        self.recorded = Cassette.load(self.path) if exists else Cassette()
        self.cassette = Cassette(note=self.recorded.note)  # what this run writes
        self.mismatches: list[str] = []
        self._used: set[int] = set()
        self._ordinals: Counter[tuple[Any, ...]] = Counter()
        self._llm = {(e.step, e.key, e.ordinal): e for e in self.recorded.llm}
        self._tools = {
            (e.step, e.attempt, e.action, e.params_hash, e.ordinal): e for e in self.recorded.tools
        }
        self._approvals = {
            (e.step, e.action, e.params_hash, e.ordinal): e for e in self.recorded.approvals
        }
        self._answers = {(e.step, e.key, e.ordinal): e for e in self.recorded.answers}

    @property
    def replaying(self) -> bool:
        """Recorded entries are served (`none`, `new_episodes`, `once` with a cassette)."""
        return self.mode in ("none", "new_episodes")

    @property
    def recording(self) -> bool:
        """Live calls are made and written (`all`, `new_episodes`, `once` without one)."""
        return self.mode in ("all", "new_episodes")

    def redact(self, value: Any) -> Any:
        return self.secrets.redact_value(_plain(value))

    def _next(self, *key: Any) -> int:
        ordinal = self._ordinals[key]
        self._ordinals[key] += 1
        return ordinal

    def _take(self, table: dict[Any, E], key: Any) -> E | None:
        entry = table.get(key)
        if entry is not None:
            self._used.add(id(entry))
        return entry

    def _fail(self, message: str, step_id: str | None) -> ReplayMismatch:
        self.mismatches.append(message)
        return ReplayMismatch(message, step_id=step_id)

    # -- model calls -------------------------------------------------------------------

    async def chat(
        self,
        request: dict[str, Any],
        live: Callable[[dict[str, Any]], Awaitable[ChatResult]],
        served: Callable[[ChatResult], None],
    ) -> ChatResult:
        """The answer to a model request: the recording, or a live call that is recorded.

        `served` is told about a replayed answer (to count it as the live call was).
        """
        scope = current_scope() or PLANNER
        canonical = self.redact(canonical_request(request))
        key = _digest(canonical)
        ordinal = self._next("llm", scope, key)
        if self.replaying:
            entry = self._take(self._llm, (scope, key, ordinal))
            if entry is not None:
                if entry.error is not None or entry.response is None:
                    served(ChatResult())  # the live call failed, and was counted all the same
                    raise _rebuild(
                        entry.error or RecordedError(type="LLMError", message="no answer"),
                        _step_of(scope),
                    )
                result = ChatResult(**entry.response.model_dump())
                served(result)
                return result
            if not self.recording:
                raise self._fail(self._llm_miss(scope, canonical, key, ordinal), _step_of(scope))
        try:
            result = await live(request)
        except StepError as exc:
            if isinstance(exc, ReplayMismatch | BudgetExceeded):
                raise
            self.cassette.llm.append(
                LLMExchange(
                    step=scope,
                    key=key,
                    ordinal=ordinal,
                    request=canonical,
                    error=_recorded_error(exc, self.secrets.redact),
                )
            )
            raise
        reply = RecordedReply.model_validate(
            self.redact(
                {
                    "content": result.content,
                    "tool_calls": [call.model_dump() for call in result.tool_calls],
                    "prompt_tokens": result.prompt_tokens,
                    "completion_tokens": result.completion_tokens,
                }
            )
        )
        self.cassette.llm.append(
            LLMExchange(step=scope, key=key, ordinal=ordinal, request=canonical, response=reply)
        )
        return result

    def _llm_miss(self, scope: str, canonical: dict[str, Any], key: str, ordinal: int) -> str:
        where = _where(scope)
        head = (
            f"replay: {where} made a model request that {self.path} has no recording of "
            f"(key {key}, repeat #{ordinal})"
        )
        same_step = [(e, e.request) for e in self.recorded.llm if e.step == scope]
        others = [(e, e.request) for e in self.recorded.llm if e.step != scope]
        unused_first = sorted(same_step or others, key=lambda pair: id(pair[0]) in self._used)
        nearest = _nearest(unused_first, canonical)
        if nearest is None:
            return f"{head}; the cassette has no model requests at all.\n{_HOW}"
        entry, diff = nearest
        detail = _shown(diff) if diff else f"  (the same request, recorded {entry.ordinal + 1}x)"
        return (
            f"{head}.\nnearest recorded request: {_where(entry.step)}, key {entry.key} "
            f"#{entry.ordinal}; what differs:\n{detail}\n{_HOW}"
        )

    # -- tool calls --------------------------------------------------------------------

    def serves(
        self,
        step_id: str,
        attempt: int,
        action: str,
        params: Any,
        *,
        read_only: bool,
        recorded: bool = True,
    ) -> bool:
        """Whether this call will be answered from the cassette, nothing run: asked before
        the call's gate, since only such a call may be approved by a recorded decision.

        A pure replay runs nothing (a call with no recording fails as a mismatch), except
        read-only calls under `live_tools`. With `new_episodes`, a call is served when its
        result is recorded, for these params or for params a recorded decision edited them
        to; a call whose result is not recorded itself (`recorded` false: its model's or
        person's answers are) may reach a live model, so it is not.
        """
        if not self.replaying or (self.live_tools and read_only):
            return False
        if not self.recording:
            return True
        if not recorded:
            return False
        scope = current_scope() or step_id
        digest = _digest(self.redact(params))
        digests = {digest} | {
            _digest(self.redact(e.edited_params))
            for e in self.recorded.approvals
            if (e.step, e.action, e.params_hash) == (step_id, action, digest)
            and e.approved
            and e.edited_params is not None
        }
        return any(
            (scope, attempt, action, d, self._ordinals["tool", scope, attempt, action, d])
            in self._tools
            for d in digests
        )

    async def tool(
        self,
        step_id: str,
        attempt: int,
        action: str,
        params: Any,
        *,
        read_only: bool,
        run: Callable[[], Awaitable[Any]],
        replayed: bool = False,
    ) -> Any:
        """The call's result: the recording, or a live run that is recorded.

        In a replay, side effects are never made; read-only calls run live only with
        `live_tools`. `replayed` says the gate was asked on the promise that this call is
        served (`serves`), so a recorded decision may have approved it: if it cannot be
        served after all, it fails as a mismatch rather than run live.
        """
        scope = current_scope() or step_id
        shown = self.redact(params)
        digest = _digest(shown)
        ordinal = self._next("tool", scope, attempt, action, digest)
        key = (scope, attempt, action, digest, ordinal)
        live_read = self.live_tools and read_only
        if self.replaying:
            entry = self._take(self._tools, key)
            if entry is not None and not live_read:
                if entry.error is not None:
                    raise _rebuild(entry.error, step_id)
                return entry.output
            if entry is None and not self.recording and not live_read:
                raise self._fail(
                    self._tool_miss(scope, attempt, action, shown, digest, ordinal), step_id
                )
            if replayed:
                raise self._fail(
                    f"replay: {_where(scope)} (attempt {attempt}) called {action} on the "
                    f"promise that {self.path} holds its result (params hash {digest}, "
                    f"repeat #{ordinal}), but it does not: it would run live under a "
                    f"recorded decision, so nothing was run\n{_HOW}",
                    step_id,
                )
            if entry is not None:  # --live-tools: run it, the recording stands
                return await run()
        entry = ToolResult(
            step=scope,
            attempt=attempt,
            action=action,
            params_hash=digest,
            ordinal=ordinal,
            params=shown,
        )
        try:
            output = await run()
        except StepError as exc:
            if self.recording and not isinstance(exc, ReplayMismatch):
                entry.error = _recorded_error(exc, self.secrets.redact)
                self.cassette.tools.append(entry)
            raise
        if self.recording:
            entry.output = self.redact(output)
            self.cassette.tools.append(entry)
        return output

    def _tool_miss(
        self, scope: str, attempt: int, action: str, params: Any, digest: str, ordinal: int
    ) -> str:
        head = (
            f"replay: {_where(scope)} (attempt {attempt}) called {action} with params that "
            f"{self.path} has no recording of (params hash {digest}, repeat #{ordinal}); "
            "nothing was run"
        )
        same = [(e, e.params) for e in self.recorded.tools if e.step == scope]
        same_action = [pair for pair in same if pair[0].action == action]
        nearest = _nearest(same_action or same, params)
        if nearest is None:
            return f"{head}.\nthe cassette has no tool calls for this step.\n{_HOW}"
        entry, diff = nearest
        what = (
            _shown(diff)
            if entry.action == action and diff
            else f"  action: recorded {entry.action}, now {action}"
            if entry.action != action
            else f"  (the same params; recorded for attempt {entry.attempt} #{entry.ordinal})"
        )
        return (
            f"{head}.\nnearest recorded call: {_where(entry.step)} attempt {entry.attempt}, "
            f"{entry.action} #{entry.ordinal}; what differs:\n{what}\n{_HOW}"
        )

    # -- approvals and answers ---------------------------------------------------------

    async def decide(
        self, request: GateRequest, live: Callable[[GateRequest], Awaitable[Decision]]
    ) -> Decision:
        """The decision on a gated call: the recorded one if the call is served from the
        cassette (`request.replayed`), else the live approver's (recorded when recording).
        """
        shown = self.redact(request.params)
        digest = _digest(shown)
        ordinal = self._next("gate", request.step_id, request.action, digest)
        if self.replaying and request.replayed:
            entry = self._take(self._approvals, (request.step_id, request.action, digest, ordinal))
            if entry is not None:
                return request.decision(
                    entry.approved,
                    RECORDED,
                    entry.reason,
                    edited_params=entry.edited_params,
                    quit=entry.quit,
                )
            if not self.recording:
                raise self._fail(
                    self._gate_miss(request.step_id, request.action, shown, digest),
                    request.step_id,
                )
        try:
            decision = await live(request)
        except ReplayMismatch:
            raise
        except Exception as exc:  # fails closed, as the gatekeeper would: record that
            decision = request.decision(
                False, "error", f"approver failed: {type(exc).__name__}: {exc}"
            )
        if self.recording:
            self.cassette.approvals.append(
                Approval(
                    step=request.step_id,
                    action=request.action,
                    params_hash=digest,
                    ordinal=ordinal,
                    approved=decision.approved,
                    by=decision.by,
                    reason=self.secrets.redact(decision.reason) if decision.reason else None,
                    edited_params=self.redact(decision.edited_params),
                    quit=decision.quit,
                )
            )
        return decision

    def _gate_miss(self, step_id: str, action: str, params: Any, digest: str) -> str:
        head = (
            f"replay: {_where(step_id)} reached a gate for {action} that {self.path} has no "
            f"decision for (params hash {digest})"
        )
        recorded = {
            (e.step, e.action, e.params_hash): e for e in self.recorded.tools
        }  # the gated params are the tool call's
        candidates = [
            (e, e.params)
            for (step, act, _), e in recorded.items()
            if (step, act) == (step_id, action)
        ]
        nearest = _nearest(candidates, params)
        if nearest is None:
            return f"{head}.\n{_HOW}"
        return f"{head}.\nnearest recorded params, what differs:\n{_shown(nearest[1])}\n{_HOW}"

    async def answer(
        self, step_id: str, question: Question, live: Callable[[], Awaitable[Any]]
    ) -> Any:
        asked = self.redact(question.model_dump(mode="json", exclude_unset=True))
        key = _digest(asked)
        step_id = current_scope() or step_id  # a for_each item's questions are its own
        ordinal = self._next("answer", step_id, key)
        if self.replaying:
            entry = self._take(self._answers, (step_id, key, ordinal))
            if entry is not None:
                return entry.answer
            if not self.recording:
                texts = [e.question for e in self.recorded.answers if e.step == step_id]
                near = difflib.get_close_matches(question.question, texts, n=1, cutoff=0)
                hint = (
                    "\nnearest recorded question: "
                    + "\n".join(field_diff(near[0], question.question, "question"))
                    if near
                    else ""
                )
                raise self._fail(
                    f"replay: {_where(step_id)} asked {question.question!r}, which {self.path} "
                    f"has no answer for (key {key}, repeat #{ordinal}){hint}\n{_HOW}",
                    step_id,
                )
        value = await live()
        if self.recording:
            self.cassette.answers.append(
                Answer(
                    step=step_id,
                    question=self.secrets.redact(question.question),
                    key=key,
                    ordinal=ordinal,
                    answer=self.redact(value),
                )
            )
        return value

    async def review(
        self, text: str, live: Callable[[], Awaitable[tuple[bool, str | None]]]
    ) -> tuple[bool, str | None]:
        """The decision on a model-written plan: (approved, edited YAML or None).

        A recorded decision (and the plan edit it may carry) answers only a pure replay,
        where nothing runs live. When the run records too (`new_episodes`), steps that are
        not in the cassette run live, so the plan goes to the live reviewer: an edit added
        to the cassette by hand cannot bring in steps, grants or `confirm: never`.
        """
        shown = self.secrets.redact(text)
        digest = _digest(shown)
        ordinal = self._next("gate", PLAN_REVIEW, "plan", digest)
        if self.replaying and not self.recording:
            entry = self._take(self._approvals, (PLAN_REVIEW, "plan", digest, ordinal))
            if entry is not None:
                return entry.approved, entry.edited_plan
            plans = [
                e for e in self.recorded.approvals if e.step == PLAN_REVIEW and e.action == "plan"
            ]
            raise self._fail(
                f"replay: the model's plan (hash {digest}) has no recorded decision in "
                f"{self.path} ({len(plans)} plan decision(s) recorded for other plans); "
                f"the plan's requests are recorded, so the planner itself changed\n{_HOW}",
                None,
            )
        approved, edited = await live()
        if self.recording:
            self.cassette.approvals.append(
                Approval(
                    step=PLAN_REVIEW,
                    action="plan",
                    params_hash=digest,
                    ordinal=ordinal,
                    approved=approved,
                    by="review",
                    edited_plan=self.secrets.redact(edited) if edited is not None else None,
                )
            )
        return approved, edited

    # -- the end -----------------------------------------------------------------------

    def unused(self) -> list[str]:
        """Recorded entries this replay never asked for, one line each."""
        if not self.replaying:
            return []
        lines: list[str] = []
        for entry in self.recorded.llm:
            if id(entry) not in self._used:
                lines.append(
                    f"model request of {_where(entry.step)} #{entry.ordinal} (key {entry.key})"
                )
        for tool in self.recorded.tools:
            if id(tool) not in self._used:
                lines.append(
                    f"tool call of {_where(tool.step)} attempt {tool.attempt}: {tool.action} "
                    f"#{tool.ordinal} (params hash {tool.params_hash})"
                )
        for approval in self.recorded.approvals:
            if id(approval) not in self._used:
                what = "the plan" if approval.step == PLAN_REVIEW else approval.action
                lines.append(f"decision on {what} in {_where(approval.step)} #{approval.ordinal}")
        for answer in self.recorded.answers:
            if id(answer) not in self._used:
                lines.append(f"answer to {answer.question!r} in {_where(answer.step)}")
        return lines

    def save(
        self,
        *,
        plan: dict[str, Any] | None,
        goal: str | None,
        base: dict[str, Any] | None,
        model: str | None,
        inputs: dict[str, Any],
    ) -> bool:
        """Write what was recorded (with what was replayed, for `new_episodes`); False when
        this mode writes nothing."""
        if not self.recording:
            return False
        cassette = self.cassette
        if self.mode == "new_episodes":
            # A live decision replaces a recorded one for the same gate: the recorded one
            # answered nothing (its call ran live), and a cassette holds one per gate.
            decided = {(e.step, e.action, e.params_hash, e.ordinal) for e in cassette.approvals}
            kept = [
                e
                for e in self.recorded.approvals
                if (e.step, e.action, e.params_hash, e.ordinal) not in decided
            ]
            cassette = cassette.model_copy(
                update={
                    "llm": [*self.recorded.llm, *cassette.llm],
                    "tools": [*self.recorded.tools, *cassette.tools],
                    "approvals": [*kept, *cassette.approvals],
                    "answers": [*self.recorded.answers, *cassette.answers],
                }
            )
        cassette = cassette.model_copy(
            update={
                "plan": self.redact(plan) if plan is not None else None,
                "goal": self.secrets.redact(goal) if goal is not None else None,
                "base": self.redact(base) if base is not None else None,
                "model": model,
                "inputs": self.redact(inputs),
            }
        )
        cassette.save(self.path)
        return True


_HOW = (
    "if the change is intended, record again: --record-mode new_episodes adds what is "
    "missing, --record-mode all records the whole run again"
)


def _where(scope: str) -> str:
    if scope == PLANNER:
        return "the planner"
    if scope == PLAN_REVIEW:
        return "the plan review"
    return f"step '{scope}'"


def _step_of(scope: str) -> str | None:
    if scope in (PLANNER, PLAN_REVIEW):
        return None
    return scope.split("[", 1)[0]


class OfflineModel:
    """Stands in for the `openai` client in a replay: a live call is refused, loudly.

    The tape serves every answer in a replay, so this is never reached; it is here so
    that no path can reach the network by mistake.
    """

    @property
    def chat(self) -> OfflineModel:
        return self

    @property
    def completions(self) -> OfflineModel:
        return self

    @property
    def models(self) -> OfflineModel:
        return self

    async def create(self, **_: Any) -> Any:
        raise ReplayMismatch("replay: a live model call was attempted; replays are offline")

    async def list(self) -> Any:
        return []

    async def close(self) -> None:
        return None


class TapeApprover:
    """An approver whose decisions and answers go through a tape: a recorded decision
    answers a call served from the cassette (`GateRequest.replayed`); every other call is
    asked of `inner` (and recorded, when recording). Answers are replayed when recorded."""

    def __init__(self, tape: Tape, inner: Approver) -> None:
        self.tape = tape
        self.inner = inner

    async def decide(self, request: GateRequest) -> Decision:
        return await self.tape.decide(request, self.inner.decide)

    async def answer(self, step_id: str, question: Question) -> Any:
        return await self.tape.answer(
            step_id, question, lambda: self.inner.answer(step_id, question)
        )
