"""The cassette file: a run's model exchanges, tool results, approvals and answers.

A cassette is versioned YAML. It holds the plan (or the goal it was planned from), the run
inputs, and four lists of entries:

* `llm`: every model exchange, keyed by a hash of the canonical request (model, messages,
  tools, response format, temperature) plus an ordinal for repeats of the same request
  within a step;
* `tools`: every tool call's result or error, keyed by step (`step[i]` for a `for_each`
  item), action, a hash of the params and an ordinal for repeats of the same call within
  the step or item, over its attempts; each also says which attempt made it (an item's
  attempts are numbered within the item);
* `approvals`: every gate decision (and the review of a model-written plan);
* `answers`: every `human.ask` answer.

Secrets are redacted before anything is hashed or written (by `engine.recording.Tape`), so
the keys are the same whether or not the secret is present when the run is replayed. No
HTTP headers are stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import LiteralScalarString

from engine._support.problems import validation_problems
from engine.diagnostics import render_diagnostics
from engine.errors import (
    BudgetExceeded,
    CapabilityDenied,
    ConfigurationError,
    PlanValidationError,
    StepError,
    StepFailed,
    StepTimeout,
)
from engine.llm import LLMError, NoJSON, ToolCallRequest
from engine.model import Limits, LLMSettings
from engine.yaml import decode_text

__all__ = [
    "RECORDED",
    "RECORD_MODES",
    "Answer",
    "Approval",
    "Cassette",
    "LLMExchange",
    "RecordMode",
    "RecordedError",
    "RecordedReply",
    "ToolResult",
    "canonical_request",
    "digest",
    "json_data",
    "rebuild_error",
    "record_error",
    "request_key",
]

FORMAT = 1
RecordMode = Literal["none", "once", "new_episodes", "all"]
RECORD_MODES: tuple[RecordMode, ...] = ("none", "once", "new_episodes", "all")
RECORDED = "recorded"
"""The `by` of a decision served from a cassette."""


def digest(value: Any) -> str:
    """The short hash entries are keyed by (of JSON data, keys sorted)."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def json_data(value: Any) -> Any:
    """JSON data only (tuples become lists, keys strings), as stored and compared."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=repr))


def canonical_request(request: dict[str, Any]) -> dict[str, Any]:
    """The fields of a chat request that decide its answer, in JSON form."""
    canonical: dict[str, Any] = json_data(
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
    return digest(canonical_request(request))


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RecordedError(_Entry):
    """An error a call ended with, rebuilt with the same type and message on replay."""

    type: str
    message: str
    rule: str | None = None
    limit: str | None = None
    status: int | None = None  # the HTTP status a model endpoint answered with


class RecordedReply(_Entry):
    content: str | None = None
    tool_calls: list[ToolCallRequest] = []
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None  # None in cassettes recorded before it was kept


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


class ToolListing(_Entry):
    """What a discovering family found for one grant (an MCP server's tools), so a replay
    validates the recipe without starting any server."""

    family: str
    grant: str = Field(description="The grant, as canonical JSON.")
    listing: dict[str, Any]


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
    listings: list[ToolListing] = []

    @classmethod
    def load(cls, path: str | Path) -> Cassette:
        """Read and check a cassette file.

        Raises:
            ConfigurationError: unreadable, not YAML, or not a cassette (says where).
        """
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigurationError(f"cassette {path}: {exc.strerror or exc}") from exc
        try:
            text = decode_text(raw, str(path))
        except PlanValidationError as exc:  # not UTF-8, UTF-16, binary: at line and column
            raise ConfigurationError(
                f"cassette {path}: {render_diagnostics(exc.diagnostics, None)}"
            ) from None
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
            raise ConfigurationError(
                f"cassette {path}: {validation_problems(exc, most=5)}"
            ) from None
        base = cassette.base or {}
        # What the planner was given is used before any step runs: check it here.
        for key, model in (("llm", LLMSettings), ("limits", Limits)):
            if base.get(key) is not None:
                try:
                    model.model_validate(base[key])
                except ValidationError as exc:
                    problems = validation_problems(exc, prefix=("base", key), most=5)
                    raise ConfigurationError(f"cassette {path}: {problems}") from None
        return cassette

    def dump(self) -> str:
        """The YAML text: entries in a stable order, no timestamps, multi-line text as blocks."""
        data = self.model_dump(mode="json", exclude_none=False)
        data["llm"] = [_compact(e) for e in _sorted_llm(data["llm"])]
        for entry in data["llm"]:  # a reply recorded without one stays as it was written
            if entry.get("response", {}).get("finish_reason", "") is None:
                del entry["response"]["finish_reason"]
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
        data["listings"] = sorted(data["listings"], key=lambda e: (e["family"], e["grant"]))
        if not data["listings"]:
            del data["listings"]  # only recipes whose tools are discovered (MCP) have any
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
    from engine.yaml import parse_recipe_text

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


# -- errors, as stored --------------------------------------------------------------


_ERROR_TYPES: dict[str, type[StepError]] = {
    cls.__name__: cls
    for cls in (StepFailed, StepTimeout, CapabilityDenied, BudgetExceeded, LLMError, NoJSON)
}


_KEPT = ("rule", "limit", "status")
"""What an error says besides its message, kept with it (a denial's rule, a budget's limit,
an endpoint's HTTP status: what decides how the run goes on, as it did live)."""


def record_error(exc: StepError, redact: Callable[[str], str]) -> RecordedError:
    return RecordedError(
        type=type(exc).__name__ if type(exc).__name__ in _ERROR_TYPES else "StepFailed",
        message=redact(exc.message),
        **{name: getattr(exc, name, None) for name in _KEPT},
    )


def rebuild_error(error: RecordedError, step_id: str | None) -> StepError:
    """The recorded error again: same type, same message, same `_KEPT` attributes."""
    cls = _ERROR_TYPES.get(error.type, StepFailed)
    exc = cls.__new__(cls)
    StepError.__init__(exc, error.message, step_id=step_id)
    for name in _KEPT:
        value = getattr(error, name)
        if value is not None:
            setattr(exc, name, value)
    return exc
