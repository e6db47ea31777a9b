"""`${{ }}` templates: native whole values, text rendering, the fast path, the sandbox."""

from __future__ import annotations

import copy
from typing import Any

import jinja2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import TemplateError
from engine.templating import Template, compile_value, find_templates

CTX: dict[str, Any] = {
    "steps": {
        "a": {
            "output": {"items": [1, 2], "n": 3, "none": None, "flag": False, "d": {"k": "v"}},
            "status": "succeeded",
        },
        "list": {"output": {"paths": ["x.txt", "y.txt"]}},
    },
    "inputs": {"names": ["ann", "bob"], "s": "hi", "count": 0},
    "item": None,
    "index": 2,
}


def render(source: str, context: dict[str, Any] | None = None) -> Any:
    return Template.parse(source).render(CTX if context is None else context)


# -- native values and text ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("${{ inputs.names }}", ["ann", "bob"]),
        ("${{ steps.a.output.d }}", {"k": "v"}),
        ("${{ steps.a.output.n }}", 3),
        ("${{ inputs.count }}", 0),
        ("${{ steps.a.output.none }}", None),
        ("${{ steps.a.output.flag }}", False),
        ("${{ item }}", None),
        ("${{ steps.a.output.n + 1 }}", 4),
        ("${{ steps.a.output.n > 2 }}", True),
        ("${{ inputs.names | length }}", 2),
        ("${{ inputs.names[1] }}", "bob"),
        ("${{ steps.list.output.paths[0] }}", "x.txt"),
        ("${{ [1, 'a'] }}", [1, "a"]),
        ("${{ none }}", None),
    ],
)
def test_a_whole_expression_keeps_its_native_type(source: str, expected: Any) -> None:
    result = render(source)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("n=${{ steps.a.output.n }}", "n=3"),
        ("${{ steps.a.output.n }}x", "3x"),
        ("a${{ steps.a.output.none }}b", "ab"),
        ("[${{ item }}]", "[]"),
        ("${{ inputs.s }} ${{ inputs.s }}", "hi hi"),
        ("flag=${{ steps.a.output.flag }}", "flag=False"),
        ("${% for n in inputs.names %}${{ n }};${% endfor %}", "ann;bob;"),
        ("line\n${{ inputs.s }}\n", "line\nhi\n"),
        # Text around a template is data, whitespace included: only a value that is
        # exactly one template keeps its type.
        ("  ${{ steps.a.output.n }}\n", "  3\n"),
        ("${{ 'line1' }}\n", "line1\n"),
        ("${{ steps.a.output.n }}\n", "3\n"),
        (" ${{ inputs.s }}", " hi"),
    ],
)
def test_mixed_text_renders_a_string(source: str, expected: str) -> None:
    assert render(source) == expected


def test_compile_value_renders_a_tree_and_leaves_static_parts_alone() -> None:
    value = {"a": ["${{ inputs.names }}", "k", 1], "b": None, "c": "t ${{ inputs.s }}"}
    original = copy.deepcopy(value)
    compiled = compile_value(value)
    assert not compiled.is_static
    assert [t.source for t in compiled.templates] == ["${{ inputs.names }}", "t ${{ inputs.s }}"]
    assert compiled.render(CTX) == {"a": [["ann", "bob"], "k", 1], "b": None, "c": "t hi"}
    assert value == original  # rendering does not write into the recipe's data


def test_compile_value_of_static_data_is_static() -> None:
    value = {"a": [1, {"b": "no template {{ here }}"}]}
    compiled = compile_value(value)
    assert compiled.is_static
    assert compiled.templates == []
    assert compiled.render({}) is value


def test_compile_value_raises_on_a_malformed_template() -> None:
    with pytest.raises(jinja2.TemplateSyntaxError):
        compile_value({"a": "${{ steps.a.output "})


def test_find_templates_yields_paths() -> None:
    value = {"p": ["x", "${{ a }}"], "q": {"r": "b ${{ c }}"}, "s": 1}
    assert list(find_templates(value, ("params",))) == [
        (("params", "p", 1), "${{ a }}"),
        (("params", "q", "r"), "b ${{ c }}"),
    ]


# -- the fast dotted path and the Jinja path agree --------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "steps.a.output.items",  # a dict key that is also a dict method: Jinja gives the method
        "steps.a.output.n",
        "steps.a.output.d.k",
        "steps.a.output.items[1]",
        "steps.list.output.paths[1]",
        "inputs.names[0]",
        "steps.a.status",
    ],
)
def test_fast_path_and_jinja_agree(path: str) -> None:
    fast = Template.parse(f"${{{{ {path} }}}}")
    slow = Template.parse(f"${{{{ ({path}) }}}}")
    # The fast path is eligible unless a hop is named like a dict method, which Jinja
    # resolves to the method: such a path is left to Jinja from the start ...
    hops = path.replace("[", ".").split(".")[1:]
    assert (fast._path is None) is any(hasattr(dict, hop) for hop in hops)
    assert slow._path is None  # ... and the parenthesised form is never eligible
    assert _outcome(fast, CTX) == _outcome(slow, CTX)


def test_a_method_then_an_index_fails_on_both_paths() -> None:
    for source in ("${{ steps.a.output.items[1] }}", "${{ (steps.a.output.items[1]) }}"):
        with pytest.raises(TemplateError, match="has no element 1"):
            render(source)


def test_a_key_named_like_a_dict_method_follows_jinja() -> None:
    # Jinja resolves `.items` to the dict's method before the key; `['items']` to the key.
    assert render("${{ steps.a.output['items'] }}") == [1, 2]
    # The method is not data: a whole value is JSON data, so this is an error with a hint.
    with pytest.raises(TemplateError, match=r"function \(items\), not data.*\['items'\]"):
        render("${{ steps.a.output.items }}")


def test_list_index_on_the_fast_path() -> None:
    assert render("${{ inputs.names[0] }}") == "ann"
    assert render("${{ steps.list.output.paths[1] }}") == "y.txt"


# -- strict undefined ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "${{ nope }}",
        "${{ inputs.nope }}",
        "${{ steps.a.output.missing }}",
        "${{ steps.zz.output }}",
        "${{ inputs.names[5] }}",
        "${{ steps.a.output.n.x }}",
        "value: ${{ inputs.nope }}",
        "${{ inputs.nope | length }}",
        "${% for x in nope %}${{ x }}${% endfor %}",
    ],
)
def test_an_unknown_name_or_missing_key_raises_template_error(source: str) -> None:
    with pytest.raises(TemplateError) as info:
        render(source)
    assert source.strip() in str(info.value)
    assert info.value.retryable is False


def test_template_error_messages_name_what_is_missing() -> None:
    with pytest.raises(TemplateError, match="'nope' is undefined"):
        render("${{ nope }}")
    with pytest.raises(TemplateError, match="has no attribute 'missing'"):
        render("${{ steps.a.output.missing }}")


def test_an_exception_inside_a_template_becomes_template_error() -> None:
    with pytest.raises(TemplateError, match="ZeroDivisionError"):
        render("${{ 1 / inputs.count }}")


# -- the sandbox -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "${{ ''.__class__.__mro__ }}",
        "${{ inputs.s.__class__ }}",
        "${{ cycler.__init__.__globals__ }}",
        "${{ joiner.__init__.__globals__ }}",
        "${{ steps.update({}) }}",
        "${{ steps.a.output.pop('n') }}",
        "${{ inputs.names.append(1) }}",
        "${{ inputs.names.clear() }}",
        "x ${{ inputs.names.append(1) }}",
        "${{ steps.__class__.__subclasses__() }}",
    ],
)
def test_the_sandbox_refuses_internals_and_mutation(source: str) -> None:
    context = copy.deepcopy(CTX)
    with pytest.raises(TemplateError) as info:
        render(source, context)
    assert "unsafe" in str(info.value)
    assert context == CTX  # nothing was changed


# -- references ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "references"),
    [
        ("${{ steps.a.output }}", [("steps", "a", "output")]),
        ("${{ steps.a.output | length }}", [("steps", "a", "output")]),
        ("${{ steps['a'].output }}", [("steps", "a", "output")]),
        ("${{ steps['a']['output'][0] }}", [("steps", "a", "output", 0)]),
        ("${{ inputs.names[1] }}", [("inputs", "names", 1)]),
        (
            "${{ steps.a.output[inputs.key] }}",
            [("steps", "a", "output"), ("inputs", "key")],
        ),
        (
            "${{ steps.a.output.x if inputs.f else steps.b.error }}",
            [("inputs", "f"), ("steps", "a", "output", "x"), ("steps", "b", "error")],
        ),
        ("${{ [steps.a.output, {'k': inputs.q}] }}", [("steps", "a", "output"), ("inputs", "q")]),
        ("${{ x | default(inputs.d) }}", [("x",), ("inputs", "d")]),
        (
            "${{ steps.a.output | join(inputs.sep) }} and ${{ steps.b.status }}",
            [("steps", "a", "output"), ("inputs", "sep"), ("steps", "b", "status")],
        ),
        (
            "${% for x in steps.b.output %}${{ x.name }}${{ inputs.y }}${% endfor %}",
            [("steps", "b", "output"), ("inputs", "y")],
        ),
        ("${% set y = inputs.z %}${{ y.w }}", [("inputs", "z")]),
        ("${{ range(3) | list }}", []),
        ("${{ 1 + 2 }}", []),
    ],
)
def test_references(source: str, references: list[tuple[str | int, ...]]) -> None:
    assert Template.parse(source).references == tuple(references)


def test_loop_locals_are_remembered_and_excluded() -> None:
    template = Template.parse("${% for x in inputs.l %}${{ x.a }}${{ loop.index }}${% endfor %}")
    assert template.locals == {"x"}
    assert template.references == (("inputs", "l"),)


@pytest.mark.parametrize("literal", ["true", "none", "False"])
def test_literals_are_not_references(literal: str) -> None:
    """`${{ true }}` is a constant: the fast path must not read it as a variable name."""
    assert Template.parse(f"${{{{ ({literal}) }}}}").references == ()
    assert Template.parse(f"${{{{ {literal} }}}}").references == ()


@pytest.mark.parametrize("literal", ["true", "none", "False"])
def test_literals_mean_the_same_on_both_paths(literal: str) -> None:
    context = {literal: "shadow"}
    fast = Template.parse(f"${{{{ {literal} }}}}").render(context)
    jinja = Template.parse(f"${{{{ ({literal}) }}}}").render(context)
    assert fast == jinja


def test_parse_raises_on_bad_syntax() -> None:
    with pytest.raises(jinja2.TemplateSyntaxError):
        Template.parse("${{ 1 + }}")


# -- property: the fast path is an optimisation, never a change of meaning --------------------

_KEYS = st.one_of(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True),
    st.sampled_from(["items", "keys", "values", "get", "pop", "update", "copy", "_x", "__len__"]),
)
_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)
)
_JSON = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=25,
)


@st.composite
def _context_and_path(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    context = draw(st.dictionaries(_KEYS, _JSON, min_size=1, max_size=4))
    root = draw(st.sampled_from(sorted(context)))
    path, value = root, context[root]
    for _ in range(draw(st.integers(0, 5))):
        stray = draw(st.integers(0, 9))  # sometimes step off the data, to compare errors too
        if isinstance(value, dict) and value and stray:
            key = draw(st.sampled_from(sorted(value)))
            path, value = f"{path}.{key}", value[key]
        elif isinstance(value, list) and value and stray:
            index = draw(st.integers(0, len(value) - 1))
            path, value = f"{path}[{index}]", value[index]
        else:
            key = draw(_KEYS)
            index = draw(st.integers(0, 6))
            path = draw(st.sampled_from([f"{path}.{key}", f"{path}[{index}]"]))
            break
    return context, path


def _outcome(template: Template, context: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "value", template.render(context)
    except TemplateError:
        return "error", None


@pytest.mark.slow
@settings(max_examples=300)
@given(_context_and_path())
def test_fast_path_equals_pure_jinja(case: tuple[dict[str, Any], str]) -> None:
    context, path = case
    fast = Template.parse(f"${{{{ {path} }}}}")
    jinja = Template.parse(f"${{{{ ({path}) }}}}")
    hops = path.replace("[", ".").split(".")[1:]  # a dict method's name: left to Jinja
    assert (fast._path is None) is any(hasattr(dict, hop) for hop in hops)
    assert jinja._path is None
    fast_result = _outcome(fast, context)
    jinja_result = _outcome(jinja, context)
    assert fast_result == jinja_result
    assert type(fast_result[1]) is type(jinja_result[1])


def test_fromjson_of_deep_nesting_is_a_clear_template_error() -> None:
    with pytest.raises(TemplateError, match="JSON nests deeper than 100 levels"):
        Template.parse("${{ ('[' * 100000) | fromjson }}").render({})
