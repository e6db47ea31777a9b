"""Fuzz: hostile template expressions end in the project's typed errors, fast, in bounded memory.

A seeded generator composes size bombs (`*`, `**`, `+`, `~`, `%`, padding and joining
string methods, size-multiplying filters, `lipsum`), time bombs (nested loops over
`range`, catastrophic regexes in `match`/`search`/`regex_replace`), shared-reference
bombs (`set` chains of list literals, namespace doubling) and deep nesting (brackets,
`not`, `-`, operator and filter chains). Each case is parsed and rendered through
`engine.templating` exactly as the executor does, in a child process under an address
space limit (`RLIMIT_AS`), and must end in `jinja2.TemplateSyntaxError` (what validation
reports) or `engine.errors.TemplateError`, or a value; never another exception, never a
`MemoryError` anywhere in the cause chain, never more than `CASE_SECONDS`, and the child's
peak memory stays under `PEAK_RSS_MIB`.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from _procs import peaked

CASES = 1200
SEED = 20261123
CASE_SECONDS = 2.0
TOTAL_SECONDS = 180  # the whole run takes ~15 s; more means a case hung
PEAK_RSS_MIB = 640  # seen: 80-270 MiB; one render may build 100 MB in all
ADDRESS_SPACE = 1536 << 20  # 1.5 GiB: a bomb that got through would die here, not pass

_CHILD = textwrap.dedent(
    r"""
    import json, random, resource, sys, time

    LIMIT, SEED, CASES, CASE_SECONDS = map(float, sys.argv[1:5])
    LIMIT, SEED, CASES = int(LIMIT), int(SEED), int(CASES)

    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    import contextlib
    import jinja2
    from engine.errors import TemplateError
    from engine.templating import Template

    try:
        from engine.templating._limits import budget
    except ImportError:  # a build without render budgets: run with what it has
        budget = lambda seconds: contextlib.nullcontext()

    rng = random.Random(SEED)
    BIG = ["100000", "999999999", "6000000000", "10**9", "2**40", "100000000"]
    ATOMS = ["'a'", "'ab\\tc'", "'x\\ny'", "1", "7", "s", "n", "l", "[1, 2, 3]",
             "range(100000)", "'%0999999999d'", "'{:>999999999}'", "none", "d",
             "d.fromkeys(range(100000), s)", "s.split('a')", "loop"]
    CATASTROPHIC = ["^(a|a)+$", "^(a|aa)+$", "(a*)*b", "^(\\w+\\s?)*$", "(x+x+)+y",
                    "x{4294967294}", "((a{1000}){1000}){1000}"]
    FILTERS = [
        "center({b})", "indent({b})", "indent({a})", "wordwrap(1, wrapstring={a})",
        "replace({a}, {a})", "join({a})", "batch({b}, {a})", "slice({b})",
        "tojson(indent={b})", "format({a})", "sum(start=[])", "list", "string",
        "pprint", "upper", "unique", "sort", "reverse", "first", "length", "map('string')",
        "truncate({b})", "urlencode", "xmlattr", "title", "trim", "wordcount",
        "regex_replace({p}, {a})", "select('match', {p})", "min", "max",
        "default({a})", "dictsort", "int", "float", "abs", "round({b})",
        "filesizeformat", "striptags", "escape", "items", "map('center', {b})",
        "map('upper')|list", "map('string')|join({a})", "select|list",
    ]
    METHODS = ["center({b})", "ljust({b})", "rjust({b})", "zfill({b})",
               "expandtabs({b})", "replace({a}, {a})", "join({a})",
               "format({a}, {a})", "split({a})", "upper()", "translate({{97: {a}}})",
               "encode()", "splitlines()", "count({a})", "ljust({b}, 'x')"]

    def big():
        return rng.choice(BIG)

    def pattern():
        return repr(rng.choice(CATASTROPHIC))

    def expr(depth=0):
        if depth > 4 or rng.random() < 0.25:
            return rng.choice(ATOMS)
        kind = rng.randrange(11)
        a, b = expr(depth + 1), expr(depth + 1)
        if kind == 0:
            return f"({a} * {rng.choice([b, big()])})"
        if kind == 1:
            return f"({a} ** {rng.choice([b, big(), '100000000'])})"
        if kind == 2:
            return f"({a} + {b})"
        if kind == 3:
            return f"({a} ~ {b})"
        if kind == 4:
            return f"({a} % {rng.choice([b, '1', '(1, 2)', 'd'])})"
        if kind == 5:
            f = rng.choice(FILTERS).format(a=b, b=big(), p=pattern())
            return f"({a} | {f})"
        if kind == 6:
            m = rng.choice(METHODS).format(a=b, b=big())
            return f"({a}).{m}"
        if kind == 7:
            return f"({a} is {rng.choice(['match', 'search'])}({pattern()}))"
        if kind == 8:
            return f"lipsum({big()})"
        if kind == 9:
            return f"[{a}, {a}, {b}]"
        return f"({a})[{rng.choice(['1', ':5', '::-1', '0:' + big()])}]"

    def deep():
        d = rng.randrange(20, 400)
        kind = rng.randrange(6)
        if kind == 0:
            return "${{ " + "(" * d + "1" + ")" * d + " }}"
        if kind == 1:
            return "${{ " + "not " * d + "1 }}"
        if kind == 2:
            return "${{ " + "- " * d + "1 }}"
        if kind == 3:
            return "${{ " + " + ".join(["1"] * d) + " }}"
        if kind == 4:
            return "${{ s" + "|upper" * d + " }}"
        return "${{ " + "[" * d + "1" + "]" * d + " }}"

    def statements():
        kind = rng.randrange(6)
        e = expr(2)
        if kind == 0:
            loops = rng.randrange(2, 5)
            head = "".join(f"${{% for i{k} in range({big()}) %}}" for k in range(loops))
            return head + "${{ " + e + " }}" + "${% endfor %}" * loops
        if kind == 1:
            sets = "${% set v0 = " + e + " %}"
            for k in range(1, rng.randrange(3, 12)):
                sets += f"${{% set v{k} = [v{k-1}, v{k-1}, v{k-1}, v{k-1}] %}}"
            return sets + f"${{{{ v{k} }}}}${{{{ v{k} == v{k} }}}}"
        if kind == 2:
            return ("${% set ns = namespace(v=" + e + ") %}${% for i in range(200) %}"
                    "${% set ns.v = ns.v ~ ns.v %}${% endfor %}${{ ns.v }}")
        if kind == 3:
            return ("${% macro f(x) %}${{ f([x, x]) }}${% endmacro %}${{ f("
                    + e + ") }}")
        if kind == 4:
            return ("${% set x %}${% for i in range(100000) %}${% for j in range(100000) %}"
                    "${{ " + e + " }}${% endfor %}${% endfor %}${% endset %}${{ x|length }}")
        return "${{ " + e + " }} and ${{ " + expr() + " }}"

    def case():
        roll = rng.random()
        if roll < 0.15:
            return deep()
        if roll < 0.35:
            return statements()
        return "${{ " + expr() + " }}"

    def chain(exc):
        while exc is not None:
            yield exc
            exc = exc.__cause__ or exc.__context__

    context = {"s": "a" * 1000 + "!", "n": 12, "l": list(range(100)), "d": {"k": "v" * 100}}
    bad, slowest, kinds = [], 0.0, {"value": 0, "syntax": 0, "template": 0}
    for number in range(CASES):
        source = case()
        print(f"case {number}: {source[:300]}", file=sys.stderr, flush=True)
        start = time.monotonic()
        try:
            with budget(0.3):  # the executor's budget is 1 s; a shorter one keeps this quick
                Template.parse(source).render(context)
            kinds["value"] += 1
        except jinja2.TemplateSyntaxError as exc:
            kinds["syntax"] += 1
            leaked = [type(e).__name__ for e in chain(exc.__cause__)
                      if isinstance(e, (MemoryError, OverflowError, TimeoutError))]
            if leaked:
                bad.append((source[:300], "syntax error caused by " + ", ".join(leaked)))
        except TemplateError as exc:
            kinds["template"] += 1
            leaked = [type(e).__name__ for e in chain(exc) if isinstance(e, MemoryError)]
            if leaked:
                bad.append((source[:300], "relied on MemoryError: " + str(exc)[:200]))
        except BaseException as exc:  # the failure this test exists to find
            bad.append((source[:300], f"{type(exc).__name__}: {str(exc)[:200]}"))
        elapsed = time.monotonic() - start
        slowest = max(slowest, elapsed)
        if elapsed > CASE_SECONDS:
            bad.append((source[:300], f"took {elapsed:.2f} s"))
    print(json.dumps({"cases": CASES, "bad": bad, "slowest": slowest, "kinds": kinds}))
    """
)


@pytest.mark.slow
def test_hostile_templates_end_in_typed_errors_quickly_in_bounded_memory() -> None:
    args = [str(v) for v in (ADDRESS_SPACE, SEED, CASES, CASE_SECONDS)]
    # through `peaked`: the child's own peak, not this test process's inherited through fork
    proc = peaked([sys.executable, "-c", _CHILD, *args], timeout=TOTAL_SECONDS)
    if proc.timed_out:
        last = proc.stderr.strip().splitlines()[-1:] or ["(before the first case)"]
        pytest.fail(f"the fuzz hung for {TOTAL_SECONDS} s at {last[0]}")

    assert proc.returncode == 0, proc.stderr[-3000:]  # a crash names its case last
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(
        f"\n{report['cases']} hostile templates: {report['kinds']}, slowest "
        f"{report['slowest']:.2f} s, peak RSS {proc.peak_mib:.0f} MiB"
    )
    assert report["cases"] >= 1000
    assert report["bad"] == [], json.dumps(report["bad"][:10], indent=1)
    # the limits hold memory near what one render may build (engine.templating._limits)
    assert proc.peak_mib < PEAK_RSS_MIB
