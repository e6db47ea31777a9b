"""The terminal frontend of a session: progress on stderr, the plan review menu, the
live view of running steps, and who approves gates (`--yes`, `--no`, a person, a policy)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from engine.app.console import LiveProgress, console_on
from engine.app.logs import subscribe_logs
from engine.approval import (
    ApproveAll,
    Approver,
    DenyAll,
    FailClosed,
    InDoubtDecisions,
    TerminalApprover,
)
from engine.approval.prompt import Menu, NoAnswer, ask, read_line
from engine.capability import Registry
from engine.diagnostics import render_diagnostics
from engine.errors import PlanValidationError
from engine.events import Event, EventBus
from engine.model import Plan
from engine.planning import PlanOutcome
from engine.policy import Policy, PolicyApprover
from engine.render import render_plan
from engine.sanitize import neutralize
from engine.session import Attached, plan_from_text
from engine.yaml import parse_recipe_text

__all__ = ["TerminalFrontend"]

_PLAN_MENU = Menu(
    ("[a]pprove", "[e]dit", "[r]eject", "[s]ave as recipe"),
    aliases={"y": "a", "yes": "a", "n": "r", "no": "r"},
    fold_case=True,
)


@dataclass
class TerminalFrontend:
    """A session's frontend on stderr (and stdin, when it is a terminal).

    Attributes:
        registry: for rendering plans and checking edited ones.
        base_dir: where an edited plan's relative paths start.
        yes / no: `--yes` approves the plan and every gate; `--no` denies them.
        policy: rules that decide gates first (their `ask` goes to the person).
        redo / skip: `resume --redo STEP` / `--skip STEP`: the person's decisions on these
            steps' calls in doubt, before anything else is asked.
        verbose: every event on stderr (and no live view).
        log_stream: every event as JSON lines (`--log-file`).
        save_plan: where a model-written plan is saved (`plan -o FILE`).
        replace_saved: `--force`: `save_plan` may replace an existing file.
        spans: has each run's spans made from its events (`--otel`).
    """

    registry: Registry
    base_dir: Path
    yes: bool = False
    no: bool = False
    policy: Policy | None = None
    redo: frozenset[str] = frozenset()
    skip: frozenset[str] = frozenset()
    verbose: bool = False
    log_stream: TextIO | None = None
    save_plan: str | None = None
    replace_saved: bool = False
    spans: Callable[[EventBus], object] | None = None

    def say(self, text: str) -> None:
        sys.stderr.write(f"{text}\n")

    async def show_plan(self, outcome: PlanOutcome) -> None:
        for number, problems in enumerate(outcome.problems, 1):  # what the model was told
            self.say(f"the model's plan #{number} was invalid:")
            for diagnostic in problems[:10]:
                self.say(f"  {neutralize(diagnostic.headline())}")
            if len(problems) > 10:
                self.say(f"  (and {len(problems) - 10} more)")
        if outcome.fell_back and outcome.repeated:
            self.say(
                f"the model answered repair {outcome.repairs} with the plan it was asked to "
                "repair (temperature 0: asking again would get it again): falling back to one "
                "agent step"
            )
        elif outcome.fell_back:
            self.say(
                f"the model's plan was still invalid after {outcome.repairs} "
                f"repair{'' if outcome.repairs == 1 else 's'}: "
                "falling back to one agent step"
            )
        elif outcome.repairs:
            self.say(f"plan repaired {outcome.repairs} time(s) from validation errors")
        if not outcome.plan.capabilities:
            self.say(
                "note: no capabilities are granted, so the plan's steps have no tools: "
                "pass --capabilities FILE (YAML with a 'capabilities:' block, as in recipes)"
            )
        sys.stderr.write(render_plan(outcome.plan, self.registry))
        if outcome.early:  # a streamed plan's read-only steps, begun before this review
            shown = ", ".join(f"{neutralize(k)} ({v})" for k, v in outcome.early.items())
            self.say(f"already started while the plan streamed (read-only): {shown}")
        if self.save_plan:
            target = Path(self.save_plan)
            if await asyncio.to_thread(_save, target, outcome.text, self.replace_saved):
                self.say(f"plan saved to {target} (run it with: planloom run {target})")
            else:  # it appeared since the command started
                self.say(f"plan not saved: {target} exists (pass --force to replace it)")

    async def review(self, outcome: PlanOutcome) -> tuple[bool, str | None]:
        if self.yes:
            return True, None
        if self.no:
            return False, None
        if not _interactive():
            self.say(
                "the plan has side effects and there is no terminal to approve it: pass --yes "
                "to approve it, or review it with -o FILE and run that"
            )
            return False, None
        return await self._menu(outcome.plan, outcome.text)

    def invalid_plan(self, text: str, error: PlanValidationError) -> None:
        try:
            _, source = parse_recipe_text(text, "plan.yaml")
        except PlanValidationError:
            source = None
        sys.stderr.write(render_diagnostics(error.diagnostics, source) + "\n")

    def attach(self, plan: Plan, events: EventBus) -> Attached:
        live = None
        if not self.verbose and sys.stderr.isatty():
            live = LiveProgress(console_on(sys.stderr), [s.id for s in plan.all_steps()])
            events.subscribe(live)
        subscribe_logs(events, verbose=self.verbose, log_stream=self.log_stream)
        if self.spans is not None:
            self.spans(events)
        showing = live if live is not None else contextlib.nullcontext()
        return Attached(self._approver(live), showing)

    def watch(self, events: EventBus) -> None:
        if not self.verbose:  # (verbose shows every event already)
            events.subscribe(_plan_growing, sink=True)
        subscribe_logs(events, verbose=self.verbose, log_stream=self.log_stream)
        if self.spans is not None:
            self.spans(events)

    def _approver(self, live: LiveProgress | None) -> Approver:
        approver = self._gates(live)
        if self.redo or self.skip:  # what the person decided on the command line comes first
            return InDoubtDecisions(approver, redo=self.redo, skip=self.skip)
        return approver

    def _gates(self, live: LiveProgress | None) -> Approver:
        person: Approver | None = None
        if self.yes:
            person = ApproveAll()
        elif self.no:
            person = DenyAll()
        elif _interactive():
            person = TerminalApprover(pause=live.paused if live is not None else None)
        if self.policy is not None:
            # The policy decides first; its `ask` rules go to the person, if there is one.
            return PolicyApprover(self.policy, ask=person)
        return person if person is not None else FailClosed()

    async def _menu(self, plan: Plan, text: str) -> tuple[bool, str | None]:
        """The person's review of a plan: approve, edit in $EDITOR (re-validated, with
        located errors until it is valid or given up), reject, or save it as a recipe.
        An empty or unknown answer is asked again; the end of input rejects the plan.
        Returns whether it was approved, and the edited YAML if it was edited."""
        valid: Plan | None = plan
        edited = False
        while True:
            try:
                answer = await ask(_PLAN_MENU.prompt, _PLAN_MENU.parse)
            except NoAnswer as exc:
                self.say(str(exc))
                return False, None
            if answer == "a":
                if valid is not None:
                    return True, text if edited else None
                self.say("the plan is invalid: edit it again, or reject it")
            elif answer == "e":
                text = await asyncio.to_thread(_edit, text)
                edited = True
                try:
                    valid = plan_from_text(text, self.registry, self.base_dir)
                except PlanValidationError as exc:
                    valid = None
                    self.invalid_plan(text, exc)
                else:
                    sys.stderr.write(render_plan(valid, self.registry))
            elif answer == "s":
                name = await read_line("save as [plan.yaml] > ")
                if name is None:  # Ctrl-D: no name, nothing saved
                    self.say("not saved")
                    continue
                target = Path(name.strip() or "plan.yaml")
                replace = False
                if await asyncio.to_thread(target.exists):
                    asked = f"{target} exists: replace it? [y/N] > "
                    with contextlib.suppress(NoAnswer):  # the end of input keeps the file
                        replace = await ask(asked, _yes_or_no)
                    if not replace:
                        self.say(f"not saved: {target} is left as it was")
                        continue
                if await asyncio.to_thread(_save, target, text, replace):
                    self.say(f"saved to {target} (run it with: planloom run {target})")
                else:
                    self.say(f"not saved: {target} appeared meanwhile; save again to replace it")
            else:  # r
                return False, None


def _yes_or_no(text: str) -> bool:
    """y or n, and an empty answer is n (as the `[y/N]` shows)."""
    answer = text.strip().lower()
    if answer in {"y", "yes"}:
        return True
    if answer in {"", "n", "no"}:
        return False
    raise ValueError("type y or n (Enter: n)")


def _save(target: Path, text: str, replace: bool) -> bool:
    """Write `text` to `target` whole (a temporary file renamed over it), replacing an
    existing file only if `replace`; False if it exists and may not be replaced."""
    folder = target.parent if str(target.parent) else Path(".")
    with tempfile.NamedTemporaryFile(
        "w", dir=folder, prefix=f".{target.name}.", suffix=".tmp", delete=False, encoding="utf-8"
    ) as draft:
        draft.write(text)
    try:
        if replace:
            os.replace(draft.name, target)
        else:
            try:
                os.link(draft.name, target)  # fails if it exists: no window to overwrite it
            except FileExistsError:
                raise
            except OSError:  # a file system without hard links: create it exclusively
                with open(target, "x", encoding="utf-8") as out:
                    out.write(text)
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(draft.name)


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stderr.isatty()


def _edit(text: str) -> str:
    """Open $VISUAL / $EDITOR on the plan's YAML; the edited text (comments kept)."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, encoding="utf-8") as f:
        f.write(text)
        path = f.name
    try:
        subprocess.run([*shlex.split(editor), path], check=False)
        return Path(path).read_text(encoding="utf-8")
    finally:
        os.unlink(path)


def _plan_growing(event: Event) -> None:
    """A line for each step of a streamed plan as it arrives: started at once (read-only),
    or waiting for the whole plan."""
    if event.kind != "plan.step" or event.step_id is None:
        return
    what = "started (read-only)" if event.data.get("early") else "waits for the whole plan"
    action = neutralize(str(event.data.get("action")))
    sys.stderr.write(f"  + {neutralize(event.step_id)} ({action}): {what}\n")
