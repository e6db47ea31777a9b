"""Checking a plan's templates: their syntax, filters and tests, and the names they read."""

from __future__ import annotations

import jinja2

from engine._graph import step_parsed
from engine.diagnostics import NodePath, did_you_mean
from engine.model import Plan, Step
from engine.templating import Template, filter_names, find_templates, test_names
from engine.validation._graph import unknown_step
from engine.validation._outputs import Outputs
from engine.validation._report import Report

__all__ = ["STEP_FIELDS", "check_outputs", "check_step_shape", "check_step_templates"]

STEP_FIELDS = ("output", "status", "error", "attempts")
"""What a template can read of a step: `steps.ID.output`, `.status`, ..."""


def check_step_shape(report: Report, path: NodePath, step: Step) -> None:
    """Report a `when` or `for_each` that is not one whole expression, and a
    `max_parallel` without `for_each`."""
    for name in ("when", "for_each"):
        value = getattr(step, name)
        if isinstance(value, str):
            try:
                whole = Template.parse(value).expression is not None
            except jinja2.TemplateSyntaxError:
                continue  # reported with the other template errors
            if not whole:
                report(
                    (*path, name),
                    "bad-expression",
                    f"'{name}' must be one whole expression, like {name}: ${{{{ ... }}}}",
                    "drop the text around the ${{ }}"
                    if "${{" in value
                    else "write it as ${{ ... }}",
                )
    if step.max_parallel is not None and step.for_each is None:
        report(
            (*path, "max_parallel"),
            "bad-value",
            "'max_parallel' on a step applies only with 'for_each'",
            "set limits.max_parallel for the whole run instead",
        )


def check_step_templates(
    report: Report,
    path: NodePath,
    step: Step,
    plan: Plan,
    visible: set[str],
    later: set[str],
    outputs: Outputs | None = None,
) -> None:
    """Check every template of `step` against the names it may read there, and, with
    `outputs`, against what the steps it reads output."""
    roots = {"inputs", "steps", "run"} if path[0] == "finally" else {"inputs", "steps"}
    in_items = roots | {"item", "index"} if step.for_each is not None else roots
    for sub, source, template in step_parsed(step):
        names = in_items if sub[0] != "for_each" else roots
        _check_template(
            report, (*path, *sub), source, plan, names, visible, later, template, outputs
        )
        if outputs is not None and template is not None and len(template.references) == 1:
            outputs.check_param(report, path, step, sub, template, visible)


def check_outputs(
    report: Report, plan: Plan, visible: set[str], outputs: Outputs | None = None
) -> None:
    """Check the templates of the plan's `outputs`."""
    for name, value in plan.outputs.items():
        for sub, source in find_templates(value, ("outputs", name)):
            names = {"inputs", "steps", "run"}
            _check_template(report, sub, source, plan, names, visible, set(), None, outputs)


def _check_template(
    report: Report,
    path: NodePath,
    source: str,
    plan: Plan,
    names: set[str],
    visible: set[str],
    later: set[str],
    template: Template | None = None,
    outputs: Outputs | None = None,
) -> None:
    try:
        template = template or Template.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        report(
            path,
            "template-syntax",
            f"template syntax error: {exc.message}",
            "templates look like ${{ steps.ID.output }} or ${{ inputs.NAME }}",
        )
        return
    unknowns = (
        (
            ("filter", template.unknown_filters, filter_names),
            ("test", template.unknown_tests, test_names),
        )
        if template.unknown_filters or template.unknown_tests
        else ()
    )
    for kind, unknown, names_of in unknowns:
        known = names_of()  # (sorted: only for a hint)
        for name in unknown:
            report(
                path,
                f"unknown-{kind}",
                f"unknown {kind} '{name}'",
                did_you_mean(name, known) or f"{kind}s: {', '.join(known)}",
            )
    for ref in template.references:
        root = str(ref[0])
        if root not in names:
            where = {
                "item": "only inside a step with 'for_each'",
                "index": "only inside a step with 'for_each'",
                "run": "only in 'finally' steps and 'outputs'",
            }.get(root)
            message = f"'{root}' is not defined here" + (f" ({where})" if where else "")
            hint = did_you_mean(root, names) or "names: " + ", ".join(sorted(names))
            report(path, "undefined-name", message, hint)
        elif root == "inputs" and len(ref) >= 2 and ref[1] not in plan.inputs:
            hint = did_you_mean(str(ref[1]), plan.inputs) or (
                f"declare it under 'inputs:', e.g. inputs: {{{ref[1]}: {{type: string}}}}"
            )
            report(path, "unknown-input", f"unknown input '{ref[1]}'", hint)
        elif root == "steps" and len(ref) >= 2:
            target = str(ref[1])
            if target not in visible:
                unknown_step(report, path, target, visible, later)
            elif len(ref) >= 3 and ref[2] not in STEP_FIELDS:
                hint = did_you_mean(str(ref[2]), STEP_FIELDS) or (
                    "a step has: " + ", ".join(STEP_FIELDS)
                )
                report(path, "bad-reference", f"steps.{target} has no field '{ref[2]}'", hint)
            elif len(ref) >= 4 and ref[2] == "output" and outputs is not None:
                outputs.check_read(report, path, ref, source)
