"""Policy files (`--policy FILE`): allow, ask, deny, the default, and where load errors are."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from capabilities import Registry, default_registry
from capabilities.human import Question
from engine.approval import GateRequest, params_hash
from engine.errors import ConfigurationError, StepFailed
from engine.policy import Policy, PolicyApprover, load_policy, parse_policy_text
from engine.results import Decision
from engine.testing import ScriptedApprover, run_recipe_text

POLICY = """\
version: 1
default: deny
rules:
  - {tool: fs.read, decision: allow}
  - {tool: "fs.*", params: {path: "notes/**"}, decision: allow, reason: notes are ours}
  - {tool: shell.run, params: {argv: ["git", "*"]}, decision: ask}
  - {tool: http.request, params: {method: GET}, decision: allow}
  - {tool: fs.write, decision: deny, reason: only notes may be written}
"""


def policy(text: str = POLICY) -> Policy:
    return parse_policy_text(text, "policy.yaml")


def decide(approver: PolicyApprover, action: str, params: Any, step_id: str = "s") -> Decision:
    request = GateRequest(
        step_id=step_id,
        action=action,
        params=params,
        params_hash=params_hash(params),
        reason="has side effects",
    )
    return asyncio.run(approver.decide(request))


def rule_of(p: Policy, action: str, params: Any) -> int | None:
    found = p.match(action, params)
    return found[0] if found else None


# -- decisions --------------------------------------------------------------------------------


def test_an_allow_rule_approves_and_names_the_rule() -> None:
    decision = decide(PolicyApprover(policy()), "fs.write", {"path": "notes/a.md"})
    assert decision.approved
    assert decision.by == "policy:2"
    assert (
        decision.reason
        == "policy rule 2 (tool pattern 'fs.*', policy.yaml:5) allows: notes are ours"
    )
    assert decision.params_hash == params_hash({"path": "notes/a.md"})


def test_a_deny_rule_refuses_with_its_reason() -> None:
    decision = decide(PolicyApprover(policy()), "fs.write", {"path": "secret.txt"})
    assert not decision.approved
    assert decision.by == "policy:5"
    assert decision.reason == (
        "denied by policy rule 5 (tool pattern 'fs.write', policy.yaml:8): "
        "only notes may be written"
    )


def test_an_unknown_tool_is_denied_by_default() -> None:
    decision = decide(PolicyApprover(policy()), "mcp.github.delete_repo", {})
    assert not decision.approved
    assert decision.by == "policy:default"
    assert "no rule in policy.yaml matches mcp.github.delete_repo" in (decision.reason or "")
    assert "the default is deny" in (decision.reason or "")


def test_a_missing_default_is_deny() -> None:
    assert parse_policy_text("version: 1\n").default == "deny"
    assert not decide(PolicyApprover(policy("version: 1\n")), "fs.read", {"path": "a"}).approved


@pytest.mark.parametrize(("verdict", "approved"), [(True, True), ("not today", False)])
def test_an_ask_rule_delegates_to_the_interactive_approver(
    verdict: bool | str, approved: bool
) -> None:
    person = ScriptedApprover(decisions={"s": verdict})
    params = {"argv": ["git", "push"]}
    decision = decide(PolicyApprover(policy(), ask=person), "shell.run", params)
    assert decision.approved is approved
    assert decision.by == "policy:3→script"
    assert [r.params for r in person.requests] == [params]
    reason = decision.reason or ""
    assert reason.startswith("policy rule 3 (tool pattern 'shell.run', policy.yaml:6) asks; ")
    if approved:
        assert reason.endswith("approved by script")
    else:
        assert reason.endswith("denied by script: not today")


def test_an_ask_rule_with_nobody_to_ask_is_denied_saying_how_to_approve() -> None:
    decision = decide(PolicyApprover(policy()), "shell.run", {"argv": ["git", "push"]})
    assert not decision.approved
    assert decision.by == "policy:3→fail-closed"
    reason = decision.reason or ""
    assert reason.startswith("policy rule 3 (tool pattern 'shell.run', policy.yaml:6) asks;")
    assert "no terminal" in reason
    assert "--yes" in reason
    assert "policy.yaml" in reason


def test_default_ask_asks_the_person_for_unlisted_tools() -> None:
    p = policy("version: 1\ndefault: ask\nrules:\n  - {tool: fs.delete, decision: deny}\n")
    person = ScriptedApprover(decisions={"s": True})
    decision = decide(PolicyApprover(p, ask=person), "fs.write", {"path": "x"})
    assert decision.approved
    assert decision.by == "policy:default→script"
    assert (decision.reason or "").startswith("no policy rule matches fs.write; approved")
    alone = decide(PolicyApprover(p), "fs.write", {"path": "x"})
    assert not alone.approved
    assert "no terminal" in (alone.reason or "")
    # a deny rule still wins over asking
    assert not decide(PolicyApprover(p, ask=person), "fs.delete", {"path": "x"}).approved
    assert len(person.requests) == 1


@dataclass
class Editor:
    """A person who approves after changing the params to `edit`."""

    edit: Any

    async def decide(self, request: GateRequest) -> Decision:
        approved = Decision(
            step_id=request.step_id,
            action=request.action,
            params_hash=request.params_hash,
            approved=True,
            by="terminal (edited)",
        )
        return approved.model_copy(update={"edited_params": self.edit})

    async def answer(self, step_id: str, question: Question) -> Any:
        raise StepFailed("not asked")


@pytest.mark.parametrize(
    ("edit", "refusal"),
    [
        (["git", "log"], None),  # still an ask rule, and the person approved it
        (["rm", "-rf", "."], "the edited params are denied by policy rule 2"),
        (["ls"], "the edited params are matched by no rule in policy.yaml"),
    ],
)
def test_an_edit_at_the_ask_cannot_escape_the_policy(edit: list[str], refusal: str | None) -> None:
    text = """\
version: 1
rules:
  - {tool: shell.run, params: {argv: ["git", "*"]}, decision: ask}
  - {tool: shell.run, params: {argv: ["rm"]}, decision: deny, reason: never rm}
"""
    approver = PolicyApprover(policy(text), ask=Editor({"argv": edit}))
    decision = decide(approver, "shell.run", {"argv": ["git", "status"]})
    if refusal is None:
        assert decision.approved
        assert decision.by == "policy:1→terminal (edited)"
    else:
        assert not decision.approved
        assert decision.by == ("policy:2" if "rule 2" in refusal else "policy:default")
        assert refusal in (decision.reason or "")


def test_a_re_ask_after_a_refused_edit_goes_to_the_person() -> None:
    person = ScriptedApprover(decisions={"s": "gave up"})
    request = GateRequest(
        step_id="s",
        action="fs.write",
        params={"path": "notes/a.md"},  # an allow rule would approve it unasked
        params_hash="0",
        reason="has side effects",
    ).model_copy(update={"problem": "content: field required"})
    decision = asyncio.run(PolicyApprover(policy(), ask=person).decide(request))
    assert not decision.approved
    assert decision.by == "policy:re-ask→script"
    assert len(person.requests) == 1


def test_questions_go_to_the_person_or_get_their_default() -> None:
    person = ScriptedApprover(answers={"s": ["blue"]})
    asked = PolicyApprover(policy(), ask=person)
    assert asyncio.run(asked.answer("s", Question(question="colour?"))) == "blue"
    alone = PolicyApprover(policy())
    assert asyncio.run(alone.answer("s", Question(question="n?", type="integer", default=3))) == 3
    with pytest.raises(StepFailed, match="no default"):
        asyncio.run(alone.answer("s", Question(question="colour?")))


# -- matching ---------------------------------------------------------------------------------


def test_the_first_matching_rule_wins() -> None:
    text = """\
version: 1
rules:
  - {tool: fs.write, params: {path: "tmp/*"}, decision: allow}
  - {tool: fs.write, params: {path: "tmp/secret*"}, decision: deny}
  - {tool: "fs.*", decision: deny}
"""
    p = policy(text)
    assert rule_of(p, "fs.write", {"path": "tmp/a"}) == 1
    assert rule_of(p, "fs.write", {"path": "tmp/secret.txt"}) == 1  # rule 2 comes too late
    assert decide(PolicyApprover(p), "fs.write", {"path": "tmp/secret.txt"}).approved
    assert rule_of(p, "fs.write", {"path": "other/a"}) == 3
    assert not decide(PolicyApprover(p), "fs.write", {"path": "other/a"}).approved


@pytest.mark.parametrize(
    ("pattern", "action", "matches"),
    [
        ("fs.*", "fs.write", True),
        ("fs.*", "fsx.write", False),
        ("fs.*", "http.request", False),
        ("*", "mcp.server.tool", True),
        ("fs.?ead", "fs.read", True),
        ("fs.[rw]*", "fs.write", True),
        ("fs.[!rw]*", "fs.write", False),
        ("fs.write", "fs.writer", False),
    ],
)
def test_tool_globs(pattern: str, action: str, matches: bool) -> None:
    p = policy(f'version: 1\nrules:\n  - {{tool: "{pattern}", decision: allow}}\n')
    assert (rule_of(p, action, {}) == 1) is matches


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("notes/**", "notes/a.md", True),
        ("notes/**", "notes/2024/06/a.md", True),
        ("notes/*", "notes/2024/a.md", False),  # * stays in one folder
        ("notes/*", "notes/a.md", True),
        ("**/*.md", "a.md", True),
        ("**/*.md", "x/y/a.md", True),
        ("**/*.md", "x/y/a.txt", False),
        ("notes/**", "notesX/a.md", False),
        ("notes/**", "notes/../secret.txt", False),  # dot segments do not walk out
        # an allow must match the text as written too: write "notes/a.md", not "./notes/a.md"
        ("notes/**", "./notes/a.md", False),
    ],
)
def test_param_globs(pattern: str, path: str, matches: bool) -> None:
    rule = f'{{tool: fs.write, params: {{path: "{pattern}"}}, decision: allow}}'
    text = f"version: 1\nrules:\n  - {rule}\n"
    assert (rule_of(policy(text), "fs.write", {"path": path}) == 1) is matches


def test_dot_segments_cannot_dodge_a_deny_rule() -> None:
    text = """\
version: 1
rules:
  - {tool: fs.write, params: {path: "secrets/**"}, decision: deny}
  - {tool: fs.write, decision: allow}
"""
    p = policy(text)
    assert rule_of(p, "fs.write", {"path": "secrets/../secrets/key"}) == 1
    assert rule_of(p, "fs.write", {"path": "./secrets/key"}) == 1
    assert rule_of(p, "fs.write", {"path": "public/key"}) == 2


@pytest.mark.parametrize(
    ("argv", "matches"),
    [
        (["git", "status"], True),
        (["git", "log", "--oneline", "-5"], True),  # a prefix: more items are fine
        (["git"], False),  # fewer items than the pattern
        (["gitx", "status"], False),
        (["rm", "git"], False),
        (["git", "a/b"], False),  # * does not cross '/'
        ("git status", False),  # a string is not a list
    ],
)
def test_list_patterns_match_argv_as_a_prefix(argv: Any, matches: bool) -> None:
    assert (rule_of(policy(), "shell.run", {"argv": argv}) == 3) is matches


@pytest.mark.parametrize(
    ("params", "matches"),
    [
        ({"method": "GET", "url": "http://127.0.0.1/"}, True),
        ({"method": "POST"}, False),
        ({"method": "get"}, False),  # globs are case-sensitive
        ({"url": "http://127.0.0.1/"}, False),  # a missing param never matches
    ],
)
def test_scalar_patterns_and_missing_params(params: dict[str, Any], matches: bool) -> None:
    assert (rule_of(policy(), "http.request", params) == 4) is matches


def test_non_string_scalars_match_by_equality_and_type() -> None:
    text = """\
version: 1
rules:
  - {tool: x.a, params: {n: 3}, decision: allow}
  - {tool: x.b, params: {flag: true}, decision: allow}
  - {tool: x.c, params: {v: null}, decision: allow}
  - {tool: x.d, params: {n: "3"}, decision: allow}
"""
    p = policy(text)
    assert rule_of(p, "x.a", {"n": 3}) == 1
    assert rule_of(p, "x.a", {"n": 3.0}) == 1
    assert rule_of(p, "x.a", {"n": "3"}) is None
    assert rule_of(p, "x.b", {"flag": True}) == 2
    assert rule_of(p, "x.b", {"flag": 1}) is None
    assert rule_of(p, "x.c", {"v": None}) == 3
    assert rule_of(p, "x.c", {}) is None  # missing is not null
    assert rule_of(p, "x.d", {"n": 3}) is None  # a glob matches strings only


def test_a_redacted_secret_cannot_be_matched() -> None:
    rule = '{tool: http.request, params: {url: "*token=abc*"}, decision: allow}'
    text = f"version: 1\nrules:\n  - {rule}\n"
    shown = {"url": "https://api.example/x?token=[REDACTED]"}
    assert rule_of(policy(text), "http.request", shown) is None


# -- loading ----------------------------------------------------------------------------------


def test_load_policy_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    loaded = load_policy(path, registry=default_registry())
    assert [r.decision for r in loaded.rules] == ["allow", "allow", "ask", "allow", "deny"]
    assert loaded.rules[2].params == {"argv": ["git", "*"]}
    assert loaded.origin == str(path)


def test_an_unknown_key_is_located(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("version: 1\nrules:\n  - tool: fs.read\n    decison: allow\n")
    with pytest.raises(ConfigurationError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert f"{path}:4:5: error[unknown-key]: unknown key 'decison' in a rule" in message
    assert "did you mean 'decision'?" in message
    assert f"{path}:3:5: error[missing-decision]" in message


def test_a_bad_decision_is_located(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("version: 1\nrules:\n  - {tool: fs.read, decision: alow}\n")
    with pytest.raises(ConfigurationError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert f"{path}:3:31: error[bad-decision]: decision must be allow, ask or deny, not 'alow'" in (
        message
    )
    assert "did you mean 'allow'?" in message


@pytest.mark.parametrize(
    ("text", "headline"),
    [
        ("version: 1\nrules:\n  - {decision: allow}\n", "p.yaml:3:5: error[missing-tool]"),
        (
            'version: 1\nrules:\n  - {tool: "fs.[rw", decision: allow}\n',
            "p.yaml:3:12: error[bad-glob]: bad glob 'fs.[rw'",
        ),
        (
            'version: 1\nrules:\n  - {tool: x, params: {p: "a[b"}, decision: allow}\n',
            "p.yaml:3:27: error[bad-glob]",
        ),
        ("version: 1\ndefault: allow\n", "p.yaml:2:10: error[bad-default]"),
        ("version: 2\n", "p.yaml:1:10: error[bad-version]"),
        ("rules: []\n", "p.yaml:1:1: error[missing-version]"),
        ("version: 1\nrules: {tool: x}\n", "p.yaml:2:8: error[bad-rules]"),
        ("version: 1\nversion: 1\n", "p.yaml:2:1: error[duplicate-key]"),
        ("version: [1\n", "p.yaml:2:1: error[yaml-syntax]"),
        ("", "p.yaml:1:1: error[empty]: the policy file is empty"),
        (
            'version: 1\nrules:\n  - {tool: "*", decision: deny}\n'
            "  - {tool: fs.read, decision: allow}\n",
            "p.yaml:4:5: error[unreachable-rule]: rule 2 can never match: rule 1",
        ),
    ],
)
def test_load_errors_are_located(text: str, headline: str) -> None:
    with pytest.raises(ConfigurationError, match=r"error\[") as caught:
        parse_policy_text(text, "p.yaml")
    assert headline in str(caught.value)


def test_every_problem_is_reported_at_once() -> None:
    text = (
        "version: 1\nrules:\n"
        "  - {tool: fs.read, decision: alow}\n"
        "  - {tol: fs.write, decision: deny}\n"
    )
    with pytest.raises(ConfigurationError) as caught:
        parse_policy_text(text, "p.yaml")
    message = str(caught.value)
    assert "p.yaml:3:31: error[bad-decision]" in message
    assert "p.yaml:4:6: error[unknown-key]" in message
    assert "p.yaml:4:5: error[missing-tool]" in message


def test_a_registry_catches_misspelled_tools() -> None:
    registry = default_registry()
    text = (
        "version: 1\nrules:\n"
        "  - {tool: fs.wirte, decision: deny}\n"
        '  - {tool: "fz.*", decision: deny}\n'
    )
    with pytest.raises(ConfigurationError) as caught:
        parse_policy_text(text, "p.yaml", registry=registry)
    message = str(caught.value)
    assert "p.yaml:3:12: error[unknown-tool]: no action named 'fs.wirte'" in message
    assert "did you mean 'fs.write'?" in message
    assert "p.yaml:4:12: error[unknown-tool]: 'fz.*' matches no known action" in message


# -- through the executor ---------------------------------------------------------------------


def test_a_run_under_a_policy_writes_only_what_it_allows(
    registry: Registry, tmp_path: Path
) -> None:
    jail = tmp_path / "jail"
    (jail / "notes").mkdir(parents=True)
    (jail / "keep.txt").write_text("keep")
    recipe = f"""
version: 1
name: policed
capabilities: {{fs: {{root: "{jail}", write: true}}}}
steps:
  - {{id: note, tool: fs.write, params: {{path: notes/today.md, content: hello}}}}
  - {{id: secret, tool: fs.write, params: {{path: secret.txt, content: x}}}}
  - {{id: sneak, tool: fs.write, params: {{path: notes/../sneak.txt, content: x}}}}
  - {{id: remove, tool: fs.delete, params: {{path: keep.txt}}}}
"""
    rules = """\
version: 1
rules:
  - {tool: fs.write, params: {path: "notes/**"}, decision: allow}
  - {tool: fs.write, params: {path: "secret*"}, decision: deny, reason: no secrets on disk}
"""
    approver = PolicyApprover(parse_policy_text(rules, "policy.yaml"))
    result = run_recipe_text(recipe, registry, base_dir=tmp_path, approver=approver)

    assert result.steps["note"].status == "succeeded"
    assert (jail / "notes" / "today.md").read_text() == "hello"

    assert result.steps["secret"].status == "denied"
    assert not (jail / "secret.txt").exists()
    assert "denied by policy rule 2" in (result.steps["secret"].error or "")
    assert "no secrets on disk" in (result.steps["secret"].error or "")

    assert result.steps["sneak"].status == "denied"
    assert not (jail / "sneak.txt").exists()

    assert result.steps["remove"].status == "denied"
    assert (jail / "keep.txt").read_text() == "keep"
    assert "no rule in policy.yaml matches fs.delete" in (result.steps["remove"].error or "")

    by_step = {d.step_id: (d.approved, d.by) for d in result.approvals}
    assert by_step == {
        "note": (True, "policy:1"),
        "secret": (False, "policy:2"),
        "sneak": (False, "policy:default"),
        "remove": (False, "policy:default"),
    }


def test_a_run_asks_the_person_when_a_rule_says_ask(registry: Registry, tmp_path: Path) -> None:
    recipe = f"""
version: 1
name: asked
capabilities: {{fs: {{root: "{tmp_path}", write: true}}}}
steps:
  - {{id: yes, tool: fs.write, params: {{path: a.txt, content: a}}}}
  - {{id: no, tool: fs.write, params: {{path: b.txt, content: b}}}}
"""
    person = ScriptedApprover(decisions={"yes": True, "no": "not b"})
    p = parse_policy_text("version: 1\nrules:\n  - {tool: fs.write, decision: ask}\n")
    result = run_recipe_text(
        recipe, registry, base_dir=tmp_path, approver=PolicyApprover(p, ask=person)
    )
    assert result.steps["yes"].status == "succeeded"
    assert (tmp_path / "a.txt").read_text() == "a"
    assert result.steps["no"].status == "denied"
    assert not (tmp_path / "b.txt").exists()
    assert "not b" in (result.steps["no"].error or "")
    assert {d.by for d in result.approvals} == {"policy:1→script"}
