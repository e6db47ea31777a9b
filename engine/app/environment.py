"""The environment variables planloom reads, each with one line on what it does: the
epilog of `planloom --help`.

`VARIABLES` names who reads each: `planloom` (its own code: `tests/test_completion.py`
scans `engine/`, `planners/` and `capabilities/`, and fails on a variable read but not
listed here, or listed but no longer read), or a library planloom hands it to, by its
import name (the model client, the OpenTelemetry SDK, the terminal's colours; the same test
finds each in that library's source).

Plain data, no imports: `--help` prints it without loading the engine.
"""

from __future__ import annotations

__all__ = ["PLANLOOM", "VARIABLES", "epilog"]

PLANLOOM = "planloom"
"""The reader of a variable planloom's own code reads."""

VARIABLES: dict[str, tuple[str, str]] = {
    "PLANLOOM_HOME": (PLANLOOM, "the folder of the run store (runs.db), not .planloom/"),
    "PLANLOOM_MODEL": (PLANLOOM, "the model, when no --model is given (over the recipe's)"),
    "PLANLOOM_LLM_TIMEOUT": (PLANLOOM, "seconds to wait for one model answer (--llm-timeout)"),
    "PLANLOOM_LLM_MAX_TOKENS": (PLANLOOM, "the longest model answer (--llm-max-tokens)"),
    "PLANLOOM_LLM_CONTEXT": (PLANLOOM, "the model's context window, in tokens (--llm-context)"),
    "PLANLOOM_LLM_RETRIES": (PLANLOOM, "how often a failed model call is tried again (3)"),
    "PLANLOOM_LLM_STRUCTURED_OUTPUT": (
        PLANLOOM,
        "json_schema, json_object_schema, json_object or none",
    ),
    "PLANLOOM_EXECUTOR": (PLANLOOM, "where tool calls run, when no --executor is given"),
    "PLANLOOM_DASK_WORKER_WAIT": (PLANLOOM, "seconds to wait for a Dask worker (120)"),
    "OPENAI_API_KEY": (PLANLOOM, "the model endpoint's key (none needed on loopback)"),
    "OPENAI_BASE_URL": (PLANLOOM, "the OpenAI-compatible endpoint, when no --base-url"),
    "OPENAI_ORG_ID": ("openai", "the organization the model client sends"),
    "OPENAI_PROJECT_ID": ("openai", "the project the model client sends"),
    "OTEL_EXPORTER_OTLP_ENDPOINT": (PLANLOOM, "export traces over OTLP/HTTP there (as --otel)"),
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": (PLANLOOM, "as above, for traces only (wins over it)"),
    "OTEL_EXPORTER_OTLP_PROTOCOL": (PLANLOOM, "http/protobuf, the only one planloom speaks"),
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": (PLANLOOM, "as above, for traces only"),
    "OTEL_EXPORTER_OTLP_HEADERS": (PLANLOOM, "key=value,... headers sent with the traces"),
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS": (PLANLOOM, "as above, for traces only"),
    "OTEL_EXPORTER_OTLP_TIMEOUT": (PLANLOOM, "milliseconds one export may take"),
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": (PLANLOOM, "as above, for traces only"),
    "OTEL_EXPORTER_OTLP_COMPRESSION": (PLANLOOM, "gzip, deflate or none"),
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": (PLANLOOM, "as above, for traces only"),
    "OTEL_BSP_MAX_QUEUE_SIZE": (PLANLOOM, "spans waiting to be exported, at most (32768)"),
    "OTEL_SDK_DISABLED": (PLANLOOM, "true: no traces, even with --otel or an endpoint"),
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": (
        PLANLOOM,
        "true: model messages and tool data (redacted) in spans",
    ),
    "OTEL_SERVICE_NAME": ("opentelemetry.sdk", "the traces' service name (planloom)"),
    "OTEL_RESOURCE_ATTRIBUTES": ("opentelemetry.sdk", "key=value,... on every trace"),
    "OTEL_TRACES_SAMPLER": ("opentelemetry.sdk", "which runs are traced (all of them)"),
    "OTEL_TRACES_SAMPLER_ARG": ("opentelemetry.sdk", "the sampler's argument (a ratio)"),
    "NO_COLOR": ("rich", "no colour on the terminal"),
    "FORCE_COLOR": ("rich", "colour and the live view even off a terminal"),
    "VISUAL": (PLANLOOM, "the editor a plan is edited in (else EDITOR, else vi)"),
    "EDITOR": (PLANLOOM, "the editor, when VISUAL is not set"),
    "_ARGCOMPLETE": (PLANLOOM, "set by `planloom completion`'s script: complete, not run"),
}
"""Every variable: who reads it, and what it does."""

_NAME_WIDTH = 24  # a longer name has its line below it, as argparse lays out flags


def epilog() -> str:
    """The variables, as `planloom --help` ends: one line on what each does."""
    lines = ["environment variables:"]
    for name, (_, what) in VARIABLES.items():
        if len(name) + 2 < _NAME_WIDTH:
            lines.append(f"  {name:<{_NAME_WIDTH - 2}}{what}")
        else:
            lines += [f"  {name}", f"{'':<{_NAME_WIDTH}}{what}"]
    return "\n".join(lines)
