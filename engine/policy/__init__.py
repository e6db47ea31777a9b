"""Deciding gated calls by a policy file (`--policy FILE`) of ordered allow / ask / deny rules.

```yaml
version: 1
default: deny            # deny | ask: what happens when no rule matches (default: deny)
rules:                   # ordered; the first rule that matches decides
  - {tool: fs.read, decision: allow}
  - {tool: "fs.*", params: {path: "notes/**"}, decision: allow, reason: notes are ours}
  - {tool: shell.run, params: {argv: ["git", "*"]}, decision: ask}
  - {tool: http.request, params: {method: GET}, decision: allow}
  - {tool: "*", decision: deny, reason: not on the list}
```

A rule matches a call when its `tool` glob matches the action name and every one of its
`params` patterns matches the call's param of that name:

- globs: `*` and `?` match within one `/`-separated segment, `**` spans segments, `[abc]`
  and `[!abc]` are character classes; there are no backslash escapes (write `[*]` for a
  literal `*`). Action names hold no `/`, so `fs.*` and `*` match across dots.
- a string pattern is a glob over a string param; it never matches a non-string value.
- a list pattern matches a list param element-wise as a prefix: `["git", "*"]` matches
  `argv` with at least two items whose first is exactly `git` and whose second is one
  segment (`*` stops at `/`; write `**` to allow paths). Further items are not looked at.
- any other scalar (number, bool, null) matches a value equal to it (`true` is not `1`).
- a param the call does not have never matches.

Dot segments cannot walk a value out of a pattern: a string with `.` or `..` segments
(`notes/../secret.txt`) is also compared in its normalized form (`secret.txt`); an
`allow` rule must match both forms, an `ask` or `deny` rule matches if either does.

The policy sees the params the approver is shown, with secrets already redacted to
`[REDACTED]`: a pattern cannot match (or be written against) a secret's value.

Only gated calls reach the policy (side effects, or `confirm: always`); read-only calls
run without asking, so a rule about them has no effect under `confirm: auto`.

A decision's `by` names the rule that made it: `policy:N` (rule N, 1-based), `policy:default`
(no rule matched), `policy:N→terminal` (rule N asked the person, who decided),
`policy:N→fail-closed` (it asked, and nobody could answer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.approval import Approver, GateRequest, _unattended, in_doubt_reason
from engine.policy._file import load_policy, parse_policy_text
from engine.policy._rules import ParamPattern, Policy, PolicyRule, Scalar, Verdict
from engine.results import Decision

if TYPE_CHECKING:
    from engine.approval.questions import Question

__all__ = [
    "ParamPattern",
    "Policy",
    "PolicyApprover",
    "PolicyRule",
    "Scalar",
    "Verdict",
    "load_policy",
    "parse_policy_text",
]


class PolicyApprover:
    """An `Approver` that decides gated calls by a `Policy`.

    Args:
        policy: the rules.
        ask: who decides the calls a rule (or the default) marks `ask`, and answers
            `human.ask` questions: a `TerminalApprover` in a terminal, `ApproveAll` for
            `--yes`. Without one, those calls are denied with a reason saying how to
            approve them, and questions get their default (or the step fails).
    """

    def __init__(self, policy: Policy, *, ask: Approver | None = None) -> None:
        self.policy = policy
        self.ask = ask

    async def decide(self, request: GateRequest) -> Decision:
        # A re-ask after the person's edit failed the schema is a conversation with them;
        # the policy checks whatever they finally approve (see `_ask`).
        if request.problem is not None:
            return await self._ask(request, "asked again after a refused edit", _RE_ASK)
        if request.in_doubt:  # no rule may approve it: the person, or nobody
            if self.ask is None:
                reason = f"no terminal: {in_doubt_reason(request.step_id)}"
                return _decision(request, False, reason, "fail-closed")
            return await self._ask(request, "the call may already have happened", _DEFAULT)
        found = self.policy.match(request.action, request.params)
        if found is None:
            if self.policy.default == "deny":
                return _decision(
                    request,
                    False,
                    f"denied by policy: no rule in {self.policy.origin} matches "
                    f"{request.action} and the default is deny; add a rule for it",
                    _DEFAULT,
                )
            return await self._ask(request, f"no policy rule matches {request.action}", _DEFAULT)
        number, rule = found
        label, source = rule.label(number), _source(number)
        if rule.decision == "allow":
            return _decision(request, True, f"{label} allows" + _colon(rule.reason), source)
        if rule.decision == "deny":
            return _decision(request, False, f"denied by {label}" + _colon(rule.reason), source)
        return await self._ask(request, f"{label} asks" + _colon(rule.reason), source)

    async def answer(self, step_id: str, question: Question) -> Any:
        if self.ask is not None:
            return await self.ask.answer(step_id, question)
        return _unattended(question, "policy file, no terminal")

    def _refusal(self, action: str, params: Any) -> tuple[str, str] | None:
        """Why the policy denies outright a call with these params, and the source of
        that denial (`policy:N`); None if it does not."""
        found = self.policy.match(action, params)
        if found is None:
            if self.policy.default == "deny":
                why = f"matched by no rule in {self.policy.origin} and the default is deny"
                return why, _DEFAULT
            return None
        number, rule = found
        if rule.decision == "deny":
            return f"denied by {rule.label(number)}" + _colon(rule.reason), _source(number)
        return None

    async def _ask(self, request: GateRequest, why: str, source: str) -> Decision:
        if self.ask is None:
            return _decision(
                request,
                False,
                f"{why}; it needs a person and there is no terminal to ask: run in a "
                f"terminal to answer, pass --yes to approve what the policy asks about, or "
                f"change the rule in {self.policy.origin}",
                f"{source}→fail-closed",
            )
        decision = await self.ask.decide(request)
        # The person may edit the params before approving: an edit must not walk a call
        # into what a deny rule (or the deny default) forbids.
        edited = decision.edited_params
        if decision.approved and edited is not None:
            refusal = self._refusal(request.action, edited)
            if refusal is not None:
                text, denier = refusal
                return _decision(request, False, f"{why}; the edited params are {text}", denier)
        verdict = "approved" if decision.approved else "denied"
        return decision.model_copy(
            update={
                "by": f"{source}→{decision.by}",
                "reason": f"{why}; {verdict} by {decision.by}" + _colon(decision.reason),
            }
        )


def _colon(text: str | None) -> str:
    return f": {text}" if text else ""


_DEFAULT = "policy:default"
_RE_ASK = "policy:re-ask"  # the person's edit failed the schema: asked again


def _source(number: int) -> str:
    """The `by` of a decision made by rule `number`."""
    return f"policy:{number}"


def _decision(request: GateRequest, approved: bool, reason: str, source: str) -> Decision:
    return request.decision(approved, source, reason)
