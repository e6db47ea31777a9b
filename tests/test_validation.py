"""Validation of recipes: one test per rule, asserting the exact headline and hint.

Every recipe is written to `r.yaml` in a temporary folder that is also the working
directory, so headlines read `r.yaml:LINE:COL: error[rule]: message` as a user sees them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from capabilities import default_registry
from engine.diagnostics import Diagnostic, render_diagnostics
from engine.errors import PlanValidationError, RecipeSyntaxError
from engine.model import Plan
from planners.recipe import load_recipe, read_recipe

Check = Callable[[str], list[Diagnostic]]

CYCLE_HINT = "remove one of these dependencies (a 'steps.X' reference or a 'depends_on' entry)"
DUPLICATE_KEY_HINT = "remove one of them; YAML would silently keep only the last"
DUPLICATE_ID_HINT = "give every step, 'finally' steps included, its own id"


def _write(text: str, name: str = "r.yaml") -> Path:
    path = Path(name)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


@pytest.fixture
def check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Check:
    """Write a recipe to r.yaml, load it, and return the diagnostics it must raise."""
    monkeypatch.chdir(tmp_path)

    def run(text: str) -> list[Diagnostic]:
        _write(text)
        with pytest.raises(PlanValidationError) as info:
            load_recipe("r.yaml", default_registry())
        assert info.value.diagnostics, "a validation error must carry its diagnostics"
        return info.value.diagnostics

    return run


@pytest.fixture
def valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Plan]:
    """Write a recipe to r.yaml and load it; it must be valid."""
    monkeypatch.chdir(tmp_path)

    def run(text: str) -> Plan:
        _write(text)
        try:
            plan, _ = load_recipe("r.yaml", default_registry())
        except PlanValidationError as exc:  # show every problem, not just the first
            pytest.fail("\n".join(d.headline() for d in exc.diagnostics))
        return plan

    return run


def headlines(diags: list[Diagnostic]) -> list[str]:
    return [d.headline() for d in diags]


def pairs(diags: list[Diagnostic]) -> list[tuple[str, str | None]]:
    return [(d.headline(), d.hint) for d in diags]


# -- unknown-key ---------------------------------------------------------------------------

UNKNOWN_KEY_CASES = {
    "top-level": (
        """
        version: 1
        nmae: x
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
        """,
        [("r.yaml:2:1: error[unknown-key]: unknown key 'nmae'", "did you mean 'name'?")],
    ),
    "step": (
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
            descripton: hi
        """,
        [
            (
                "r.yaml:7:5: error[unknown-key]: unknown key 'descripton' in steps[0]",
                "did you mean 'description'?",
            )
        ],
    ),
    "finally-step": (
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
        finally:
          - id: z
            tool: fs.read
            params: {path: x}
            can_fial: true
        """,
        [
            (
                "r.yaml:11:5: error[unknown-key]: unknown key 'can_fial' in finally[0]",
                "did you mean 'can_fail'?",
            )
        ],
    ),
    "retry": (
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
            retry: {attempts: 2, backof: fixed}
        """,
        [
            (
                "r.yaml:7:26: error[unknown-key]: unknown key 'backof' in steps[0].retry",
                "did you mean 'backoff'?",
            )
        ],
    ),
    "fallback": (
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
            fallback: {tool: fs.read, params: {path: y}, timout: 3}
        """,
        [
            (
                "r.yaml:7:50: error[unknown-key]: unknown key 'timout' in steps[0].fallback",
                "did you mean 'timeout'?",
            )
        ],
    ),
    "agent": (
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            agent: {goal: hi, tols: [fs.read]}
        """,
        [
            (
                "r.yaml:5:23: error[unknown-key]: unknown key 'tols' in steps[0].agent",
                "did you mean 'tools'?",
            ),
        ],
    ),
    "fallback-agent": (
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
            fallback: {agent: {goal: x, max_iter: 3}}
        """,
        [
            (
                "r.yaml:7:33: error[unknown-key]: unknown key 'max_iter' in "
                "steps[0].fallback.agent",
                "did you mean 'max_iterations'?",
            ),
        ],
    ),
    "limits": (
        """
        version: 1
        capabilities: {fs: {}}
        limits: {max_paralel: 2}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
        """,
        [
            (
                "r.yaml:3:10: error[unknown-key]: unknown key 'max_paralel' in limits",
                "did you mean 'max_parallel'?",
            )
        ],
    ),
    "llm": (
        """
        version: 1
        capabilities: {fs: {}}
        llm: {modle: gpt-4o-mini}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
        """,
        [("r.yaml:3:7: error[unknown-key]: unknown key 'modle' in llm", "did you mean 'model'?")],
    ),
    "input-spec": (
        """
        version: 1
        inputs:
          f: {type: string, defualt: x}
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: "${{ inputs.f }}"}
        """,
        [
            (
                "r.yaml:3:21: error[unknown-key]: unknown key 'defualt' in inputs.f",
                "did you mean 'default'?",
            )
        ],
    ),
}


@pytest.mark.parametrize("case", UNKNOWN_KEY_CASES, ids=list(UNKNOWN_KEY_CASES))
def test_unknown_key_points_at_the_key_with_did_you_mean(check: Check, case: str) -> None:
    text, expected = UNKNOWN_KEY_CASES[case]
    assert pairs(check(text)) == expected


def test_unknown_key_with_no_close_match_lists_the_allowed_keys(check: Check) -> None:
    diags = check(
        """
        version: 1
        zzz: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
        """
    )
    assert pairs(diags) == [
        (
            "r.yaml:2:1: error[unknown-key]: unknown key 'zzz'",
            "allowed keys: version, name, description, inputs, llm, capabilities, limits, "
            "on_failure, goal, replan, planner, steps, finally, outputs",
        )
    ]


# -- duplicate-key, unquoted-template, yaml-syntax (the loader) ----------------------------


def test_duplicate_key_is_reported_at_the_second_key_naming_the_first_line(
    check: Check,
) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
            tool: fs.write
        """
    )
    assert pairs(diags) == [
        (
            "r.yaml:7:5: error[duplicate-key]: duplicate key 'tool' (first defined on line 5)",
            DUPLICATE_KEY_HINT,
        )
    ]


def test_every_duplicate_key_and_unquoted_template_is_reported_at_once(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.write
            params:
              path: out.txt
              content: {{ inputs.x }}
          - id: b
            id: c
            tool: fs.read
            params: {path: x}
        version: 1
        """
    )
    assert all(isinstance(d, Diagnostic) for d in diags)
    assert headlines(diags) == [
        "r.yaml:8:17: error[unquoted-template]: unquoted '{{': YAML reads it as a nested "
        "mapping, not a template",
        "r.yaml:10:5: error[duplicate-key]: duplicate key 'id' (first defined on line 9)",
        "r.yaml:13:1: error[duplicate-key]: duplicate key 'version' (first defined on line 1)",
    ]


def test_unquoted_template_says_how_to_quote_it(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.write
            params: {path: x, content: {{ x }}}
        """
    )
    assert pairs(diags) == [
        (
            "r.yaml:6:33: error[unquoted-template]: unquoted '{{': YAML reads it as a nested "
            "mapping, not a template",
            "write templates as '${{ ... }}' and quote them, e.g. path: \"${{ inputs.file }}\"",
        )
    ]


def test_unquoted_dollar_template_in_a_flow_mapping_gets_the_quoting_hint(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: ${{ item }}}
        """
    )
    assert pairs(diags) == [
        (
            "r.yaml:6:21: error[yaml-syntax]: did not find expected ',' or '}'",
            "quote template values: path: \"${{ item }}\" (a bare '{' starts a YAML mapping)",
        )
    ]


def test_syntax_errors_are_recipe_syntax_errors(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write("version: 1\nsteps: [\n")
    with pytest.raises(RecipeSyntaxError) as info:
        load_recipe("r.yaml", default_registry())
    assert [d.rule for d in info.value.diagnostics] == ["yaml-syntax"]


# -- ids and names ---------------------------------------------------------------------------


def test_bad_step_ids(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: my-step
            tool: fs.read
            params: {path: x}
          - id: 1abc
            tool: fs.read
            params: {path: x}
        """
    )
    message = (
        ": use letters, digits and '_', not starting with a digit (ids are names in templates)"
    )
    assert pairs(diags) == [
        ("r.yaml:4:9: error[bad-id]: bad step id 'my-step'" + message, None),
        ("r.yaml:7:9: error[bad-id]: bad step id '1abc'" + message, None),
    ]


def test_bad_recipe_name(check: Check) -> None:
    diags = check(
        """
        version: 1
        name: My Recipe
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
        """
    )
    assert headlines(diags) == [
        "r.yaml:2:7: error[bad-name]: bad name 'My Recipe': use lowercase letters, digits, "
        "'-' and '_'"
    ]


def test_limits_per_family_names_a_granted_family(check: Check) -> None:
    diags = check(
        """
        version: 1
        name: r
        capabilities: {fs: {}, shell: {allow: [echo]}}
        limits: {per_family: {shel: 2, http: 1}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
        """
    )
    assert pairs(diags) == [
        (
            "r.yaml:4:23: error[unknown-capability]: limits.per_family names 'shel', which "
            "the recipe does not grant",
            "did you mean 'shell'?",
        ),
        (
            "r.yaml:4:32: error[unknown-capability]: limits.per_family names 'http', which "
            "the recipe does not grant",
            "granted: fs, shell",
        ),
    ]


def test_duplicate_ids_in_steps_and_finally(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
          - id: a
            tool: fs.read
            params: {path: y}
        finally:
          - id: a
            tool: fs.read
            params: {path: z}
        """
    )
    assert pairs(diags) == [
        (
            "r.yaml:7:9: error[duplicate-id]: duplicate step id 'a' (first used on line 4)",
            DUPLICATE_ID_HINT,
        ),
        (
            "r.yaml:11:9: error[duplicate-id]: duplicate step id 'a' (first used on line 4)",
            DUPLICATE_ID_HINT,
        ),
    ]


# -- missing-key -----------------------------------------------------------------------------


def test_missing_version_and_missing_step_id(check: Check) -> None:
    diags = check(
        """
        capabilities: {fs: {}}
        steps:
          - tool: fs.read
            params: {path: x}
        """
    )
    assert pairs(diags) == [
        ("r.yaml:1:1: error[missing-key]: missing 'version'", "add 'version: 1' at the top"),
        ("r.yaml:3:5: error[missing-key]: missing 'id'", None),
    ]


def test_missing_steps(check: Check) -> None:
    diags = check(
        """
        version: 1
        name: x
        """
    )
    assert pairs(diags) == [
        (
            "r.yaml:1:1: error[missing-key]: the recipe has no 'steps'",
            "add a 'steps:' list, each step with an 'id' and a 'tool'",
        )
    ]


# -- tools, grants, capabilities -----------------------------------------------------------


def test_unknown_tool_with_and_without_a_close_match(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.reed
            params: {path: x}
          - id: b
            tool: zzz.qqq
        """
    )
    assert pairs(diags) == [
        ("r.yaml:5:11: error[unknown-tool]: unknown tool 'fs.reed'", "did you mean 'fs.read'?"),
        (
            "r.yaml:8:11: error[unknown-tool]: unknown tool 'zzz.qqq'",
            "run 'planloom tools' to list the actions",
        ),
    ]


def test_tool_of_an_ungranted_capability(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: b
            tool: shell.run
            params: {argv: [ls]}
        """
    )
    assert pairs(diags) == [
        (
            "r.yaml:5:11: error[not-granted]: 'shell.run' needs the 'shell' capability, which "
            "this recipe does not grant",
            "add it under 'capabilities:', e.g. capabilities: {shell: {}}",
        )
    ]


def test_unknown_capability(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}, shel: {}, foo: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
        """
    )
    assert pairs(diags) == [
        (
            "r.yaml:2:24: error[unknown-capability]: unknown capability 'shel'",
            "did you mean 'shell'?",
        ),
        (
            "r.yaml:2:34: error[unknown-capability]: unknown capability 'foo'",
            "known capabilities: " + ", ".join(sorted(default_registry().families)),
        ),
    ]


def test_bad_grants_unknown_key_and_wrong_type(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities:
          fs: {root: ., reed: true}
          shell: {allow: git}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
        """
    )
    # A grant that does not validate is reported there, not again at each step using it
    # ("not granted: add it under capabilities" would send the user to what is there).
    assert pairs(diags) == [
        (
            "r.yaml:3:17: error[bad-grant]: unknown key 'reed' in the 'fs' grant",
            "did you mean 'read'?",
        ),
        ("r.yaml:4:18: error[bad-grant]: shell grant allow: input should be a valid list", None),
    ]


# -- bad-params --------------------------------------------------------------------------------


def test_bad_params_unknown_missing_and_wrong_type(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}, shell: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x, pth: y}
          - id: b
            tool: fs.write
            params: {path: x}
          - id: c
            tool: fs.read
            params: {path: 3}
          - id: d
            tool: fs.read
            params: {path: x, zzzzzzz: 1}
          - id: e
            tool: shell.run
            params: {argv: [ls], check: maybe, cwd: 3}
        """
    )
    assert pairs(diags) == [
        ("r.yaml:6:23: error[bad-params]: fs.read has no param 'pth'", "did you mean 'path'?"),
        (
            "r.yaml:9:13: error[bad-params]: fs.write needs param 'content'",
            "fs.write takes: path, content, create_dirs? (? = optional)",
        ),
        (
            "r.yaml:12:20: error[bad-params]: fs.read param 'path': input should be a valid string",
            None,
        ),
        ("r.yaml:15:23: error[bad-params]: fs.read has no param 'zzzzzzz'", "fs.read takes: path"),
        (
            "r.yaml:18:33: error[bad-params]: shell.run param 'check': input should be a valid "
            "boolean, unable to interpret input",
            None,
        ),
        (
            "r.yaml:18:45: error[bad-params]: shell.run param 'cwd': input should be a valid "
            "string",
            None,
        ),
    ]


def test_templated_params_are_not_type_checked(valid: Callable[[str], Plan]) -> None:
    plan = valid(
        """
        version: 1
        inputs:
          argv: {type: array, default: [ls]}
          check: {type: boolean, default: true}
        capabilities: {fs: {}, shell: {}}
        steps:
          - id: a
            tool: shell.run
            params: {argv: "${{ inputs.argv }}", check: "${{ inputs.check }}"}
          - id: b
            tool: fs.write
            params:
              path: "${{ steps.a.output.stdout }}"
              content: "${{ steps.a.output.stdout }}"
              create_dirs: "${{ inputs.check }}"
        """
    )
    assert [s.id for s in plan.steps] == ["a", "b"]
    assert plan.steps[0].params == {"argv": "${{ inputs.argv }}", "check": "${{ inputs.check }}"}


def test_a_templated_param_does_not_excuse_a_static_one(check: Check) -> None:
    diags = check(
        """
        version: 1
        inputs:
          p: {type: string, default: x}
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.write
            params: {path: "${{ inputs.p }}", content: 7}
        """
    )
    assert headlines(diags) == [
        "r.yaml:8:48: error[bad-params]: fs.write param 'content': input should be a valid string"
    ]


# -- cycles ----------------------------------------------------------------------------------


def test_two_step_cycle(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: "${{ steps.b.output.content }}"}
          - id: b
            tool: fs.read
            params: {path: "${{ steps.a.output.content }}"}
        """
    )
    assert pairs(diags) == [("r.yaml:4:9: error[cycle]: dependency cycle: a → b → a", CYCLE_HINT)]


def test_three_step_cycle_is_named_in_order_from_the_first_step(check: Check) -> None:
    # b reads a, c reads b (depends_on), a reads c: the arrows follow the data.
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: "${{ steps.c.output.content }}"}
          - id: b
            tool: fs.read
            params: {path: "${{ steps.a.output.content }}"}
          - id: c
            tool: fs.read
            params: {path: x}
            depends_on: [b]
        """
    )
    assert pairs(diags) == [
        ("r.yaml:4:9: error[cycle]: dependency cycle: a → b → c → a", CYCLE_HINT)
    ]


def test_self_reference_is_a_cycle(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: ok
            tool: fs.read
            params: {path: x}
          - id: me
            tool: fs.read
            params: {path: "${{ steps.me.output.content }}"}
        """
    )
    assert pairs(diags) == [("r.yaml:7:9: error[cycle]: dependency cycle: me → me", CYCLE_HINT)]


def test_cycle_among_finally_steps(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
        finally:
          - id: f
            tool: fs.read
            params: {path: x}
            depends_on: [g]
          - id: g
            tool: fs.read
            params: {path: "${{ steps.f.output.content }}"}
        """
    )
    assert headlines(diags) == ["r.yaml:8:9: error[cycle]: dependency cycle: f → g → f"]


# -- references --------------------------------------------------------------------------------


def test_unknown_step_in_depends_on_and_in_a_template(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: fetch
            tool: fs.read
            params: {path: x}
          - id: b
            tool: fs.read
            params: {path: "${{ steps.fetc.output.content }}"}
            depends_on: [fecth, zzz]
        """
    )
    assert pairs(diags) == [
        ("r.yaml:9:20: error[unknown-step]: unknown step 'fetc'", "did you mean 'fetch'?"),
        ("r.yaml:10:18: error[unknown-step]: unknown step 'fecth'", "did you mean 'fetch'?"),
        ("r.yaml:10:25: error[unknown-step]: unknown step 'zzz'", "steps: b, fetch"),
    ]


def test_main_step_cannot_read_a_finally_step(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: "${{ steps.n.output }}"}
        finally:
          - id: n
            tool: fs.read
            params: {path: "${{ run.status }}"}
        """
    )
    assert pairs(diags) == [
        (
            "r.yaml:6:20: error[not-a-dependency]: step 'n' is a 'finally' step; main steps "
            "cannot read it",
            "move the reading step into 'finally', or the read step into 'steps'",
        )
    ]


def test_undefined_names(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: "${{ item }}"}
          - id: b
            tool: fs.read
            params: {path: "${{ run.status }}"}
          - id: c
            tool: fs.read
            params: {path: "${{ step.a.output }}"}
          - id: d
            tool: fs.read
            params: {path: "${{ index }}"}
          - id: e
            tool: fs.read
            for_each: ${{ item }}
            params: {path: x}
        """
    )
    for_each_only = "(only inside a step with 'for_each')"
    assert pairs(diags) == [
        (
            f"r.yaml:6:20: error[undefined-name]: 'item' is not defined here {for_each_only}",
            "names: inputs, steps",
        ),
        (
            "r.yaml:9:20: error[undefined-name]: 'run' is not defined here "
            "(only in 'finally' steps and 'outputs')",
            "names: inputs, steps",
        ),
        (
            "r.yaml:12:20: error[undefined-name]: 'step' is not defined here",
            "did you mean 'steps'?",
        ),
        (
            f"r.yaml:15:20: error[undefined-name]: 'index' is not defined here {for_each_only}",
            "names: inputs, steps",
        ),
        (
            f"r.yaml:18:15: error[undefined-name]: 'item' is not defined here {for_each_only}",
            "names: inputs, steps",
        ),
    ]


def test_names_that_are_defined_where_they_are_used(valid: Callable[[str], Plan]) -> None:
    plan = valid(
        """
        version: 1
        capabilities: {fs: {write: true}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
          - id: c
            tool: fs.read
            for_each: ${{ [steps.a.output.content, 'y'] }}
            params: {path: "${{ item }}-${{ index }}"}
        finally:
          - id: n
            tool: fs.append
            params: {path: log, content: "${{ run.status }} ${{ steps.c.status }}"}
          - id: m
            tool: fs.read
            params: {path: "${{ steps.n.output.path }}"}
        outputs:
          s: ${{ run.status }}
          o: ${{ steps.n.output }}
        """
    )
    assert [s.id for s in plan.all_steps()] == ["a", "c", "n", "m"]


def test_jinja_literals_are_not_names(valid: Callable[[str], Plan]) -> None:
    """`${{ false }}` is Jinja's literal false, not a reference to a variable `false`."""
    plan = valid(
        """
        version: 1
        capabilities: {fs: {write: true}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
            when: ${{ false }}
          - id: b
            tool: fs.write
            params: {path: x, content: "${{ none }}"}
            when: ${{ true }}
        """
    )
    assert plan.steps[0].when == "${{ false }}"


def test_unknown_input(check: Check) -> None:
    diags = check(
        """
        version: 1
        inputs: {name: {type: string, default: x}}
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: "${{ inputs.nmae }}"}
          - id: b
            tool: fs.read
            params: {path: "${{ inputs.zz }}"}
        """
    )
    assert pairs(diags) == [
        ("r.yaml:7:20: error[unknown-input]: unknown input 'nmae'", "did you mean 'name'?"),
        (
            "r.yaml:10:20: error[unknown-input]: unknown input 'zz'",
            "declare it under 'inputs:', e.g. inputs: {zz: {type: string}}",
        ),
    ]


def test_bad_reference_to_a_step_field(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
          - id: e
            tool: fs.read
            params: {path: "${{ steps.a.outptu }}"}
        """
    )
    assert pairs(diags) == [
        (
            "r.yaml:9:20: error[bad-reference]: steps.a has no field 'outptu'",
            "did you mean 'output'?",
        )
    ]


def test_references_in_outputs_are_checked(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
        outputs:
          o: "${{ steps.zz.output }}"
          p: "${{ run.status }} ${{ item }}"
        """
    )
    assert pairs(diags) == [
        ("r.yaml:8:6: error[unknown-step]: unknown step 'zz'", "steps: a"),
        (
            "r.yaml:9:6: error[undefined-name]: 'item' is not defined here "
            "(only inside a step with 'for_each')",
            "names: inputs, run, steps",
        ),
    ]


def test_template_syntax_error_is_reported_not_raised(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: f
            tool: fs.read
            params: {path: "${{ steps.a.output "}
        """
    )
    assert [(d.line, d.column, d.rule) for d in diags] == [(6, 20, "template-syntax")]
    assert diags[0].message.startswith("template syntax error: ")
    assert diags[0].hint == "templates look like ${{ steps.ID.output }} or ${{ inputs.NAME }}"


def test_template_syntax_error_in_when(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: f
            tool: fs.read
            params: {path: x}
            when: "${{ 1 + }}"
        """
    )
    assert [(d.line, d.column, d.rule) for d in diags] == [(7, 11, "template-syntax")]


def test_when_and_for_each_must_be_one_whole_expression(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: g
            tool: fs.read
            params: {path: x}
            when: "yes ${{ true }}"
          - id: h
            tool: fs.read
            params: {path: x}
            when: "true"
          - id: i
            tool: fs.read
            for_each: "${{ [1] }} x"
            params: {path: x}
        """
    )
    assert pairs(diags) == [
        (
            "r.yaml:7:11: error[bad-expression]: 'when' must be one whole expression, "
            "like when: ${{ ... }}",
            "drop the text around the ${{ }}",
        ),
        (
            "r.yaml:11:11: error[bad-expression]: 'when' must be one whole expression, "
            "like when: ${{ ... }}",
            "write it as ${{ ... }}",
        ),
        (
            "r.yaml:14:15: error[bad-expression]: 'for_each' must be one whole expression, "
            "like for_each: ${{ ... }}",
            "drop the text around the ${{ }}",
        ),
    ]


# -- values and types --------------------------------------------------------------------------


def test_bad_values_and_types_in_steps(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
            timeout: -1
          - id: b
            tool: fs.read
            params: {path: x}
            can_fail: maybe
          - id: c
            tool: fs.read
            params: {path: x}
            confirm: sometimes
          - id: d
            tool: fs.read
            params: {path: x}
            retry: {attempts: 0, backoff: linear, on: [crash]}
          - id: g
            tool: fs.read
            params: [x]
          - id: h
            tool: fs.read
            params: {path: x}
            depends_on: a
        """
    )
    assert pairs(diags) == [
        ("r.yaml:7:14: error[bad-value]: timeout: input should be greater than 0", None),
        ("r.yaml:11:15: error[bad-type]: can_fail: expected true or false, got a string", None),
        (
            "r.yaml:15:14: error[bad-value]: confirm: input should be 'auto', 'always' or 'never'",
            None,
        ),
        (
            "r.yaml:19:23: error[bad-value]: retry.attempts: input should be greater than or "
            "equal to 1",
            None,
        ),
        (
            "r.yaml:19:35: error[bad-value]: retry.backoff: input should be 'fixed' or "
            "'exponential'",
            None,
        ),
        ("r.yaml:19:48: error[bad-value]: retry.on[0]: input should be 'error' or 'timeout'", None),
        ("r.yaml:22:13: error[bad-type]: params: expected a mapping, got a list", None),
        ("r.yaml:26:17: error[bad-type]: depends_on: expected a list, got a string", None),
    ]


def test_bad_values_at_the_top_level(check: Check) -> None:
    diags = check(
        """
        version: 2
        on_failure: halt
        capabilities: {fs: {}}
        limits: {timeout: 0, max_parallel: four}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
        """
    )
    assert pairs(diags) == [
        ("r.yaml:1:10: error[bad-value]: version: input should be 1", None),
        ("r.yaml:2:13: error[bad-value]: on_failure: input should be 'stop' or 'continue'", None),
        ("r.yaml:4:19: error[bad-value]: limits.timeout: input should be greater than 0", None),
        (
            "r.yaml:4:36: error[bad-type]: limits.max_parallel: expected an integer, got a string",
            None,
        ),
    ]


def test_max_parallel_without_for_each(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: e
            tool: fs.read
            params: {path: x}
            max_parallel: 2
        """
    )
    assert pairs(diags) == [
        (
            "r.yaml:7:19: error[bad-value]: 'max_parallel' on a step applies only with 'for_each'",
            "set limits.max_parallel for the whole run instead",
        )
    ]


def test_steps_must_be_a_list(check: Check) -> None:
    diags = check(
        """
        version: 1
        steps: {a: 1}
        """
    )
    assert headlines(diags) == ["r.yaml:2:8: error[bad-type]: 'steps' must be a list of steps"]


def test_a_step_that_is_not_a_mapping_is_named_by_its_place(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - 7
          - id: x
            tool: fs.read
            params: {path: x}
        """
    )
    assert [(d.line, d.column, d.rule) for d in diags] == [(4, 5, "bad-type")]
    # The problem is the step, not the recipe: the message should say which.
    assert "steps[0]" in diags[0].message
    assert not diags[0].message.startswith("recipe")


def test_step_with_both_or_neither_action(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            agent: {goal: x}
          - id: b
            params: {path: x}
          - id: d
            tool: fs.read
            params: {path: x}
            fallback: {params: {path: y}}
        """
    )
    assert pairs(diags) == [
        ("r.yaml:4:5: error[invalid-step]: a step has exactly one of 'tool' or 'agent'", None),
        ("r.yaml:7:5: error[invalid-step]: a step has exactly one of 'tool' or 'agent'", None),
        ("r.yaml:12:15: error[bad-value]: a fallback has exactly one of 'tool' or 'agent'", None),
    ]


# -- what this version does not do yet, said honestly --------------------------------------------


def test_agent_tools_must_exist_and_be_granted(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            agent: {goal: summarize, tools: [fs.read, fs.reed, shell.run]}
          - id: c
            tool: fs.read
            params: {path: x}
            fallback: "try harder"
        """
    )
    assert pairs(diags) == [
        ("r.yaml:5:47: error[unknown-tool]: unknown tool 'fs.reed'", "did you mean 'fs.read'?"),
        (
            "r.yaml:5:56: error[not-granted]: 'shell.run' needs the 'shell' capability, which "
            "this recipe does not grant",
            "add it under 'capabilities:', e.g. capabilities: {shell: {}}",
        ),
    ]


def test_goal_without_steps_is_valid_for_the_planner(valid: Callable[[str], Plan]) -> None:
    plan = valid(
        """
        version: 1
        goal: do the thing
        capabilities: {fs: {}}
        """
    )
    assert plan.goal == "do the thing"
    assert plan.steps == []


def test_input_defaults_and_enums(check: Check) -> None:
    diags = check(
        """
        version: 1
        inputs:
          a: {type: integer, default: "x"}
          b: {type: string, enum: [x, y], default: z}
          c: {type: string, enum: [x, 1]}
          d: {type: boolean, default: 1}
        capabilities: {fs: {}}
        steps:
          - id: s
            tool: fs.read
            params: {path: x}
        """
    )
    assert pairs(diags) == [
        ("r.yaml:3:31: error[bad-default]: default of input 'a' is not of type integer", None),
        ("r.yaml:4:44: error[bad-default]: default 'z' of input 'b' is not one of its enum", None),
        ("r.yaml:5:27: error[bad-value]: enum value 1 of input 'c' is not of type string", None),
        ("r.yaml:6:31: error[bad-default]: default of input 'd' is not of type boolean", None),
    ]


def test_input_with_an_unknown_type(check: Check) -> None:
    diags = check(
        """
        version: 1
        inputs:
          d: {type: strin}
        capabilities: {fs: {}}
        steps:
          - id: s
            tool: fs.read
            params: {path: x}
        """
    )
    assert headlines(diags) == [
        "r.yaml:3:13: error[bad-value]: inputs.d.type: input should be 'string', 'integer', "
        "'number', 'boolean', 'array' or 'object'"
    ]


# -- many problems at once -------------------------------------------------------------------


def test_one_recipe_with_many_problems_reports_all_sorted_by_position(check: Check) -> None:
    diags = check(
        """
        version: 1
        nmae: x
        inputs:
          n: {type: integer, default: "x"}
        capabilities: {fs: {}, shel: {}}
        steps:
          - id: fetch
            tool: fs.reed
            params: {path: x}
          - id: b
            tool: fs.read
            params: {path: "${{ steps.fetc.output }}", pth: y}
            descripton: typo
          - id: c
            tool: shell.run
            params: {argv: [ls]}
            depends_on: [d]
          - id: d
            tool: fs.read
            params: {path: "${{ steps.c.outptu }}"}
          - id: e
            tool: fs.read
            params: {path: x}
            timeout: -1
        finally:
          - id: fetch
            tool: fs.write
            params: {path: x}
        outputs:
          o: ${{ inputs.m }}
        """
    )
    assert [(d.line, d.column, d.rule) for d in diags] == [
        (2, 1, "unknown-key"),
        (4, 31, "bad-default"),
        (5, 24, "unknown-capability"),
        (8, 11, "unknown-tool"),
        (12, 20, "unknown-step"),
        (12, 48, "bad-params"),
        (13, 5, "unknown-key"),
        (14, 9, "cycle"),
        (15, 11, "not-granted"),
        (20, 20, "bad-reference"),
        (24, 14, "bad-value"),
        (26, 9, "duplicate-id"),
        (28, 13, "bad-params"),
        (30, 6, "unknown-input"),
    ]
    assert diags[7].message == "dependency cycle: c → d → c"


def test_a_broken_step_does_not_hide_problems_in_other_steps(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: x}
            timeout: -1
            can_fail: maybe
          - id: b
            tool: fs.reed
            params: {path: x}
            depends_on: [a]
          - id: my-c
            tool: fs.read
          - id: d
            tool: fs.read
            params: {path: "${{ steps.a.outptu }}"}
        """
    )
    assert [(d.line, d.column, d.rule) for d in diags] == [
        (7, 14, "bad-value"),
        (8, 15, "bad-type"),
        (10, 11, "unknown-tool"),
        (13, 5, "bad-params"),  # a bad id does not hide that its step lacks 'path'
        (13, 9, "bad-id"),
        (17, 20, "bad-reference"),
    ]


def test_a_step_with_an_unknown_key_still_gets_its_other_problems_checked(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            descripton: typo
            tool: fs.reed
            params: {path: "${{ steps.zz.output }}"}
            max_parallel: 2
        """
    )
    assert [(d.line, d.column, d.rule) for d in diags] == [
        (5, 5, "unknown-key"),
        (6, 11, "unknown-tool"),
        (7, 20, "unknown-step"),
        (8, 19, "bad-value"),
    ]


def test_a_bad_top_level_value_does_not_hide_problems_in_steps(check: Check) -> None:
    diags = check(
        """
        version: 1
        on_failure: halt
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.reed
            params: {path: x}
        """
    )
    assert headlines(diags) == [
        "r.yaml:2:13: error[bad-value]: on_failure: input should be 'stop' or 'continue'",
        "r.yaml:6:11: error[unknown-tool]: unknown tool 'fs.reed'",
    ]


def test_a_bad_input_type_does_not_hide_the_other_inputs_problems(check: Check) -> None:
    diags = check(
        """
        version: 1
        inputs:
          a: {type: integer, default: "x"}
          d: {type: strin}
        capabilities: {fs: {}}
        steps:
          - id: s
            tool: fs.read
            params: {path: "${{ inputs.zz }}"}
        """
    )
    assert [(d.line, d.column, d.rule) for d in diags] == [
        (3, 31, "bad-default"),
        (4, 13, "bad-value"),
        (9, 20, "unknown-input"),
    ]


# -- how problems are shown ---------------------------------------------------------------------


def test_render_diagnostics_shows_the_line_and_a_caret_under_the_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _write(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.reed
            params: {path: "${{ steps.zz.output }}"}
        """
    )
    with pytest.raises(PlanValidationError) as info:
        load_recipe("r.yaml", default_registry())
    _, source = read_recipe("r.yaml")
    text = render_diagnostics(info.value.diagnostics, source)
    assert text.splitlines() == [
        "r.yaml:5:11: error[unknown-tool]: unknown tool 'fs.reed'",
        "    5 |     tool: fs.reed",
        "                  ^",
        "  hint: did you mean 'fs.read'?",
        "r.yaml:6:20: error[unknown-step]: unknown step 'zz'",
        '    6 |     params: {path: "${{ steps.zz.output }}"}',
        "                           ^",
        "  hint: steps: a",
    ]
    # The caret sits under the first character of the offending value.
    for diag, (source_line, caret) in zip(
        info.value.diagnostics, [text.splitlines()[1:3], text.splitlines()[5:7]], strict=True
    ):
        column = caret.index("^") - source_line.index("|") - 2
        assert column == diag.column - 1
    assert source.lines[4][10:] == "fs.reed"


def test_render_diagnostics_without_a_source_prints_headline_and_hint() -> None:
    diag = Diagnostic(file="x.yaml", line=3, column=2, rule="r", message="m", hint="h")
    assert render_diagnostics([diag], None) == "x.yaml:3:2: error[r]: m\n  hint: h"


def _planloom(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "planloom"
    return subprocess.run(
        [str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_cli_validate_json_lists_every_problem(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        "version: 1\n"
        "capabilities: {fs: {}}\n"
        "steps:\n"
        "  - id: a\n"
        "    tool: fs.reed\n"
        "    params: {path: x}\n"
        "  - id: b\n"
        "    tool: fs.read\n"
        "    params: {path: x}\n"
        "    depends_on: [aa]\n",
        encoding="utf-8",
    )
    result = _planloom("validate", "r.yaml", "--json", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    problems = json.loads(result.stdout)
    assert problems == [
        {
            "file": "r.yaml",
            "line": 5,
            "column": 11,
            "rule": "unknown-tool",
            "message": "unknown tool 'fs.reed'",
            "hint": "did you mean 'fs.read'?",
        },
        {
            "file": "r.yaml",
            "line": 10,
            "column": 18,
            "rule": "unknown-step",
            "message": "unknown step 'aa'",
            "hint": "did you mean 'a'?",
        },
    ]
    for problem in problems:
        assert list(problem) == ["file", "line", "column", "rule", "message", "hint"]


def test_cli_validate_json_on_a_syntax_error(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        "version: 1\nversion: 1\ncapabilities: {fs: {}}\n"
        "steps:\n  - id: a\n    tool: fs.read\n    params: {path: x}\n",
        encoding="utf-8",
    )
    result = _planloom("validate", "r.yaml", "--json", cwd=tmp_path)
    assert result.returncode == 2
    assert json.loads(result.stdout) == [
        {
            "file": "r.yaml",
            "line": 2,
            "column": 1,
            "rule": "duplicate-key",
            "message": "duplicate key 'version' (first defined on line 1)",
            "hint": DUPLICATE_KEY_HINT,
        }
    ]


def test_cli_validate_text_shows_caret_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        "version: 1\ncapabilities: {fs: {}}\nsteps:\n  - id: a\n    tool: fs.reed\n",
        encoding="utf-8",
    )
    result = _planloom("validate", "r.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "r.yaml:5:11: error[unknown-tool]: unknown tool 'fs.reed'",
        "    5 |     tool: fs.reed",
        "                  ^",
        "  hint: did you mean 'fs.read'?",
        "r.yaml: 1 problem",
    ]


@pytest.mark.slow
def test_cli_validate_a_valid_recipe(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        "version: 1\ncapabilities: {fs: {}}\nsteps:\n"
        "  - id: a\n    tool: fs.read\n    params: {path: x}\n",
        encoding="utf-8",
    )
    result = _planloom("validate", "r.yaml", "--json", cwd=tmp_path)
    assert (result.returncode, json.loads(result.stdout)) == (0, [])
    text = _planloom("validate", "r.yaml", cwd=tmp_path)
    assert (text.returncode, text.stdout) == (0, "r.yaml: ok (1 step)\n")


# -- unknown-filter, unknown-test ------------------------------------------------------------


def test_unknown_filter_and_test_are_reported_before_anything_runs(check: Check) -> None:
    diags = check(
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.read
            params: {path: "${{ 'x' | uper }}"}
          - id: b
            tool: fs.read
            params: {path: x}
            when: ${{ 'x' is mach('y') }}
        """
    )
    assert pairs(diags) == [
        ("r.yaml:6:20: error[unknown-filter]: unknown filter 'uper'", "did you mean 'upper'?"),
        ("r.yaml:10:11: error[unknown-test]: unknown test 'mach'", "did you mean 'match'?"),
    ]
