#!/usr/bin/env python3
"""Golden renders for tests/text/chat_template_test.cc from Python's jinja2.

Renders, with jinja2 configured as transformers' apply_chat_template configures it (an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols extension, a
{% generation %} tag, raise_exception() and strftime_now() globals and a tojson filter that is
json.dumps(ensure_ascii=False)), and with the variables it passes (messages, tools=None,
documents=None, add_generation_prompt and the special tokens):

  cases:      every template of tests/data/chat_templates/templates/ with every message list
              below, with and without add_generation_prompt;
  vars_cases: templates rendered with whole variable sets (tools, tool calls, content parts);
  snippets:   short templates, each exercising one corner of the language.

and writes them to tests/data/chat_templates/goldens.json. A render that raises is recorded as
{"error": message, "stage": "parse" | "render", "raised": whether raise_exception() raised it}.
strftime_now reads a fixed clock (CLOCK below), which the C++ test sets too.

Needs Python 3 and jinja2 >= 3.1 (`pip install jinja2`).
Usage: python3 tests/text/gen_chat_golden.py [output folder, default tests/data/chat_templates]
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

CLOCK = datetime.datetime(2024, 7, 26, 14, 5, 9)

SPECIAL_TOKENS = {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "unk_token": "<unk>", "pad_token": "<pad>"}


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %}: renders its body, as a call block does."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: CLOCK.strftime(fmt)
    return env


ENV = make_environment()


def render(source, variables):
    """The output, or the error, of `source` rendered with `variables`."""
    try:
        template = ENV.from_string(source)
    except Exception as e:  # noqa: BLE001 - any parse error is a golden
        return {"error": str(e), "stage": "parse", "raised": False}
    try:
        return {"output": template.render(**variables)}
    except Exception as e:  # noqa: BLE001
        return {"error": str(e), "stage": "render", "raised": type(e) is jinja2.exceptions.TemplateError}


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def system(text):
    return {"role": "system", "content": text}


MESSAGES = {
    "single_user": [user("Hello!")],
    "system_user": [system("You are a terse assistant."), user("What is 2 + 2?")],
    "multi_turn": [
        system("Answer in one line."),
        user("Hi there"),
        assistant("Hello! How can I help?"),
        user("Name a color."),
        assistant("Blue."),
        user("Another one, please."),
    ],
    "multi_no_system": [user("hello a"), assistant("hi b"), user("a third message")],
    "unicode": [user("Grüße aus Köln — 你好，世界! 🙂👍🏽 Ελληνικά, Привет, عربى, ß and Σ")],
    "tricky": [
        system("Reply with {{ braces }} and {% tags %} and {# hashes #} verbatim."),
        user("She said \"hi\" and 'bye' \\ back\nLine two\n\n   indented\tand tabbed  "),
    ],
    "empty_content": [user(""), assistant(""), user("   ")],
    "not_alternating": [user("one"), user("two")],
    "tool_role": [user("What is 6 * 7?"), {"role": "tool", "content": "42"}],
    "no_messages": [],
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city, in °C.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer", "default": 1}},
                "required": ["city"],
            },
        },
    }
]

VARS_CASES = [
    ("tools.jinja", {"messages": [user("Weather in Zürich?")], "tools": TOOLS, "add_generation_prompt": True}),
    (
        "tools.jinja",
        {
            "messages": [
                user("Weather in Oslo?"),
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}},
                        {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Bergen\"}"}},
                    ],
                },
                {"role": "tool", "content": "{\"temp\": -3.5, \"ok\": true, \"note\": null}"},
            ],
            "tools": TOOLS,
        },
    ),
    (
        "tools.jinja",
        {
            "messages": [
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in this picture?"}]}
            ],
            "documents": [{"title": "A", "text": "First doc \"quoted\"\n"}, {"title": "B", "text": ""}],
            "add_generation_prompt": True,
        },
    ),
    ("chatml.jinja", {"messages": [user("with extra keys")], "add_generation_prompt": True, "bos_token": "<BOS>"}),
    (
        "reasoning.jinja",
        {
            "messages": [
                system("Think first."),
                user("What is 3 + 4?"),
                assistant("<think>\nEasy: 7.\n</think>\n\n3 + 4 = 7."),
                user("And the weather in Oslo?"),
                {
                    "role": "assistant",
                    "content": "<think>I need the tool.</think>Let me check.",
                    "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}],
                },
                {"role": "tool", "content": "{\"temp\": 3}"},
                {"role": "tool", "content": "{\"wind\": \"strong\"}"},
                {"role": "assistant", "content": "Cold and windy.", "reasoning_content": "\nTemp 3, strong wind.\n"},
            ],
            "tools": TOOLS,
            "add_generation_prompt": True,
        },
    ),
    (
        "reasoning.jinja",
        {
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
            "add_generation_prompt": True,
            "enable_thinking": False,
        },
    ),
    ("reasoning.jinja", {"messages": [user("<result>not a query</result>"), assistant("<think>x</think>y")]}),
]

# Tools whose JSON schemas take every branch of channels.jinja's type_of macro.
SCHEMA_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_docs",
            "description": "Find documents.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for."},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "limit": {"type": "integer", "default": 5},
                    "mode": {"type": "string", "enum": ["fast", "exact"], "default": "fast"},
                    "since": {"type": ["string", "null"]},
                    "filter": {"oneOf": [{"type": "string"}, {"type": "number"}]},
                    "shape": {"oneOf": [{"type": "object"}, {"type": "string"}]},
                    "nested": {
                        "type": "object",
                        "properties": {
                            "a": {"type": "boolean", "nullable": True},
                            "b": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}},
                                                             "required": ["x"]}},
                        },
                        "required": ["a"],
                    },
                    "anything": {},
                    "rows": {"type": "array"},
                },
                "required": ["query"],
            },
        },
    },
    {"type": "function", "function": {"name": "now", "description": "", "parameters": {"type": "object", "properties": {}}}},
    {"name": "ping", "description": "Ping."},
]

CHANNEL_TURNS = [
    {"role": "developer", "content": "Answer briefly."},
    user("Find the report on tides."),
    {"role": "assistant", "thinking": "I should search.", "content": "",
     "tool_calls": [{"type": "function", "function": {"name": "search_docs", "arguments": {"query": "tides", "limit": 2}}}]},
    {"role": "tool", "content": "[\"tides-2024.pdf\"]"},
    {"role": "assistant", "content": "It is tides-2024.pdf."},
    user("Thanks. And now?"),
]

VARS_CASES += [
    ("channels.jinja", {"messages": CHANNEL_TURNS, "tools": SCHEMA_TOOLS, "add_generation_prompt": True,
                        "reasoning_effort": "high", "builtin_tools": ["search", "code"], "model_identity": "You are Tide."}),
    # The call's thinking is dropped once a final answer follows it; kept while none does.
    ("channels.jinja", {"messages": CHANNEL_TURNS[:4], "tools": SCHEMA_TOOLS, "add_generation_prompt": True}),
    # A training conversation: the last assistant turn with its thinking, ended by <|return|>.
    ("channels.jinja", {"messages": [user("2 + 2?"), {"role": "assistant", "thinking": "Four.", "content": "4"}]}),
    ("channels.jinja", {"messages": [user("x"), assistant("<|channel|>final<|message|>y")]}),
    ("channels.jinja", {"messages": [user("x"), {"role": "tool", "content": "orphan"}]}),
]

# Short templates, each exercising one corner of the language; rendered with `vars`.
M = {"messages": [system("sys"), user("Hi"), assistant("Yo")]}
SNIPPETS = [
    # Whitespace: trim_blocks, lstrip_blocks, "-" and "+", comments, raw.
    ("{% if true %}\nA\n{% endif %}\nB", {}),
    ("  {% if true %}\n  A\n  {% endif %}\n", {}),
    ("x\n  {% if true %}  y{% endif %}  \nz", {}),
    ("{{ 1 }}  {% if true %}a{% endif %}", {}),
    ("{% if true %}  {% if true %}b{% endif %}{% endif %}", {}),
    ("a\n\t {# c #}\nb", {}),
    ("a  {{- 'b' -}}  c\n", {}),
    ("a\n  {%- if true -%}\n  b  \n  {%- endif -%}\n  c", {}),
    ("a\n  {%+ if true %}b{% endif %}", {}),
    ("{% if true +%}\nb{% endif %}", {}),
    ("{% if true -%}\n\n  b{%- endif %}", {}),
    ("{{ 'x' }}\n{{ 'y' }}\n", {}),
    ("line\r\nnext\rlast\n\n", {}),
    ("{% raw %}{{ x }}{% endraw %}", {}),
    ("  {% raw -%}  a  {%- endraw %}\nb", {}),
    ("{#- c -#}   x   {#+ c +#}\n  y", {}),
    ("a {%- if true %} b {% endif -%} c", {}),
    ("  {{ 'v' }}\n  {% for i in [1, 2] %}\n    {{ i }}\n  {% endfor %}\n", {}),
    ("{% for i in [1, 2] %}{{ i }}\n{% endfor %}", {}),
    ("{% for i in [1, 2] -%}\n  {{ i }}\n{%- endfor %}", {}),
    ("\u00a0{% if true %}x{% endif %}", {}),
    # Literals and printing.
    ("{{ 1 }} {{ 1.0 }} {{ -0.0 }} {{ 0.1 }} {{ 1e-05 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 123456789.125 }} {{ 1e16 }} {{ 1e15 }}", {}),
    ("{{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_0.5e1_0 }} {{ 2.5E-3 }}", {}),
    ("{{ none }} {{ None }} {{ true }} {{ False }} {{ [1, 'a', none, true, 2.5] }} {{ ('x',) }} {{ (1, 2) }} {{ {'a': [1], 'b': {'c': none}} }}", {}),
    ("{{ \"it's\" }} {{ ['it\\'s', \"q\\\"q\", 'tab\\there', 'nl\\n', 'é', 'back\\\\slash'] }}", {}),
    ("{{ 'a' 'b' \"c\" }} {{ '\\x41\\u00e9\\U0001F600\\101\\d' }}", {}),
    ("{{ [] }} {{ {} }} {{ () }} {{ [1,] }} {{ {'k': 1,} }}", {}),
    # Arithmetic, Python's rules.
    ("{{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 // -2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 0.5 }}", {}),
    ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ** 2 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }} {{ 1 + 1.5 }} {{ true + 1 }}", {}),
    ("{{ 'ab' * 3 }} {{ 3 * [1] }} {{ [1] + [2] }} {{ (1,) + (2,) }} {{ 'a' + 'b' }} {{ 'n=' ~ 5 ~ none ~ undefined_var }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ [1] + (2,) }}", {}),
    ("{{ '%s is %d years, %.2f%%' % ('Bob', 42, 3.14159) }} {{ '%5s|%-5s|' % ('a', 'b') }} {{ '%r' % 'x' }}", {}),
    # Comparisons and logic.
    ("{{ 1 == 1.0 }} {{ true == 1 }} {{ '1' == 1 }} {{ [1, 2] == [1, 2] }} {{ [1] == (1,) }} {{ {'a': 1} == {'a': 1} }} {{ none == none }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2.0 }} {{ 'B' < 'a' }}", {}),
    ("{{ 1 < 'a' }}", {}),
    ("{{ 'a' in 'cat' }} {{ 'x' not in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 1 in {'k': 1} }} {{ not 1 in [1] }}", {}),
    ("{{ 1 in none }}", {}),
    ("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' or [] }} {{ none and 1 }} {{ not '' }} {{ not none and not 0 }}", {}),
    ("{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'only' if 0 }}] {{ 1 if 0 else 2 if 0 else 3 }}", {}),
    # Undefined values.
    ("[{{ missing }}] [{{ missing | default('d') }}] [{{ missing is defined }}] [{{ missing is undefined }}] [{{ missing | length }}]", {}),
    ("{% if missing %}T{% else %}F{% endif %} {% for x in missing %}x{% else %}empty{% endfor %} {{ 'a' in missing }}", {}),
    ("{{ missing.attr }}", {}),
    ("{{ missing + 1 }}", {}),
    ("{{ missing() }}", {}),
    ("{{ d.nokey }}|{{ d['nokey'] }}|{{ d.nokey is defined }}|{{ d.nokey | default('dflt') }}|{{ d.k }}", {"d": {"k": "v"}}),
    ("{{ d.nokey.deeper }}", {"d": {"k": "v"}}),
    ("{{ none.attr }}|{{ none['x'] }}|{{ (5).x }}|{{ [1, 2][5] }}|{{ 'abc'[10] }}", {}),
    ("{{ ''|default('empty', true) }} {{ 0|default(5) }} {{ none|default(5) }} {{ none|default(5, true) }} {{ missing|d }}", {}),
    # Subscripts and slices.
    ("{{ 'hello'[1] }} {{ 'hello'[-1] }} {{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ 'hello'[::2] }} {{ 'hello'[-3:] }} {{ 'hello'[:-10] }} {{ 'héllo'[1] }}", {}),
    ("{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[-2::-1] }} {{ xs[1:4:2] }} {{ xs[10:] }} {{ xs[-100:2] }} {{ xs.0 }} {{ xs[-1] }}", {"xs": [0, 1, 2, 3, 4]}),
    ("{{ messages[0].role }} {{ messages[1]['content'] }} {{ messages[-1].content }} {{ messages[1:] | length }}", M),
    ("{{ d['items'] is callable }} {{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }}", {"d": {"a": 1, "b": [2]}}),
    # Statements.
    ("{% set x = 1 %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = 1, 2 %}{{ t }} {% set (c, d) = [3, 4] %}{{ c + d }}", {}),
    ("{% set x %}  block {{ 1 + 1 }}  {% endset %}[{{ x }}] {% set y | upper | trim %} shout {% endset %}[{{ y }}]", {}),
    ("{% set ns = namespace(n=0, items=[]) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.n }} {{ ns.items }} {{ ns.missing is defined }}", {}),
    ("{% set n = 0 %}{% for i in range(3) %}{% set n = n + i %}[{{ n }}]{% endfor %} n={{ n }}", {}),
    ("{% for i in range(3) %}{{ y }}{% set y = i %}{% endfor %}", {}),
    ("{% set x = 5 %}{% for x in [1, 2] %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% for a, b in [[1, 2], [3, 4]] %}{{ a }}-{{ b }} {% endfor %}{% for k, v in {'x': 1, 'y': 2}.items() %}{{ k }}={{ v }} {% endfor %}", {}),
    ("{% for c in 'héy' %}[{{ c }}]{% endfor %}{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}", {}),
    ("{% for i in range(10) if i is odd %}{{ i }}:{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% endfor %}", {}),
    ("{% for i in range(6) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("{% for i in [] %}x{% else %}none{% endfor %} {% for i in [1] if false %}x{% else %}filtered{% endfor %}", {}),
    ("{% for x in 'ab' %}{% for y in [1, 2] %}{{ loop.index }}{{ x }}{{ y }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("{% for x in [1, 2, 3] %}{{ loop.previtem | default('-') }}{{ x }}{{ loop.nextitem | default('-') }} {{ loop.revindex0 }}{{ loop.cycle('a', 'b', 'c') }}{{ loop.depth }} {% endfor %}", {}),
    ("{% for x in [1, 1, 2] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}", {}),
    ("{% for a, b in [[1]] %}{% endfor %}", {}),
    ("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }} {% for i in [1] %}{% if true %}{% set y = 5 %}{% endif %}{{ y }}{% endfor %}[{{ y }}]", {}),
    ("{% for i in [1, 2] %}{% for j in [1] %}{% set k = i %}{% endfor %}[{{ k }}]{% endfor %} {% for x in 'ab' %}{{ x }}{% set x = 'z' %}{{ x }}{% endfor %}", {}),
    ("{% set x = 'top' %}{% macro show() %}{{ x }}{% endmacro %}{% for x in ['loop'] %}{{ show() }}{% endfor %}", {}),
    ("{% macro f(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ f(3) }} {{ f(3, 1) }} {% macro g() %}{% set z = 1 %}{{ z }}{% endmacro %}{{ g() }}[{{ z }}]", {}),
    ("{% set ns = namespace(a=1) %}{% macro f() %}{% set ns.a = ns.a + 1 %}{% endmacro %}{{ f() }}{{ f() }}{{ ns.a }}", {}),
    ("{% set a = [1, 2] %}{% set b = a %}{% set a = a + [3] %}{{ b }}{{ a }} {% set l = [] %}{% for x in [1, 2] %}{% set l = l + [x] %}{% endfor %}{{ l }}", {}),
    ("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    ("{% filter upper %}shout {{ 'this' }}{% endfilter %} {% filter replace('a', 'o') | title %}banana split{% endfilter %}", {}),
    ("{% print 1, 'x' %}|{% print 'y' %}", {}),
    ("{% generation %}gen {{ 1 }}{% set inner = 2 %}{% endgeneration %}[{{ inner }}]", {}),
    # Macros and call blocks.
    ("{% macro f(a, b=2, c='c') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ f(1) }} {{ f(1, 3) }} {{ f(1, c='z') }} {{ f(b=5, a=0) }} [{{ f() }}]", {}),
    ("{% macro f() %}{{ varargs }} {{ kwargs }}{% endmacro %}{{ f(1, 2, k=3) }}", {}),
    ("{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}", {}),
    ("{% macro f(a) %}{{ a }}{% endmacro %}{{ f(b=1) }}", {}),
    ("{% set g = 'outer' %}{% macro f() %}{{ g }}{% set g = 'inner' %}{{ g }}{% endmacro %}{{ f() }} {{ g }}", {}),
    ("{% macro twice() %}{{ caller() }}{{ caller() }}{% endmacro %}{% call twice() %}[x]{% endcall %}", {}),
    ("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}<{{ item }}>{% endcall %}", {}),
    ("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}", {}),
    ("{% set ns = namespace() %}{% for i in [1, 2] %}{% macro m() %}<{{ i }}>{% endmacro %}{% set ns.m = m %}{{ ns.m() }}{% endfor %}", {}),
    ("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }} {{ f | string | length > 0 }}", {}),
    # Filters.
    ("{{ ' a b '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'Hello'|upper }}|{{ 'Hello'|lower }}|{{ 'hello wORLD'|capitalize }}|{{ \"it's a-b c(d) [e]\"|title }}", {}),
    ("{{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }} {{ [1, 2]|join('-') }} {{ [1, none, 'x']|join }} {{ 'abc'|list }} {{ 'abc'|length }} {{ 'héllo'|length }}", {}),
    ("{{ 3.7|int }} {{ -3.7|int }} {{ '42'|int }} {{ ' 42 '|int }} {{ '4.5'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '0x1A'|int(0, 16) }} {{ '1_000'|int }} {{ true|int }} {{ none|int }}", {}),
    ("{{ '3.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ ' 1e3 '|float }} {{ 'inf'|float }} {{ '1_0.5'|float }}", {}),
    ("{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 0.125|round(2) }} {{ 3|round }} {{ 1.45|round(1, 'floor') }} {{ 1.41|round(1, 'ceil') }} {{ -2.5|round }} {{ 1234.5|round(-2) }}", {}),
    ("{{ -5|abs }} {{ -2.5|abs }} {{ [3, 1, 2]|max }} {{ [3, 1, 2]|min }} {{ ['b', 'A', 'c']|max }} {{ []|max is defined }} {{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum(start=10) }}", {}),
    ("{{ [3, 1, 2]|sort }} {{ ['b', 'B', 'a']|sort }} {{ ['b', 'B', 'a']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }} {{ users|sort(attribute='age')|map(attribute='name')|join }}", {"users": [{"name": "x", "age": 3}, {"name": "y", "age": 1}, {"name": "z", "age": 2}]}),
    ("{{ ['a', 'A', 'b', 'a']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }} {{ [1, 2, 1]|unique|list }} {{ 'abc'|reverse }} {{ [1, 2]|reverse|list }} {{ {'a': 1, 'b': 2}|dictsort(reverse=true) }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }}", {}),
    ("{{ users|selectattr('age', 'gt', 1)|map(attribute='name')|list }} {{ users|rejectattr('age', 'odd')|map(attribute='name')|join }} {{ users|map(attribute='nick', default='?')|list }} {{ users|selectattr('name', 'in', ['x', 'z'])|list|length }}", {"users": [{"name": "x", "age": 3}, {"name": "y", "age": 1}, {"name": "z", "age": 2}]}),
    ("{{ [0, 1, '', 'a', none]|select|list }} {{ [0, 1, '', 'a']|reject|list }} {{ [1, 2, 3, 4]|select('divisibleby', 2)|list }} {{ ['a', 'b']|map('upper')|list }} {{ [' a ']|map('trim')|first }} {{ [[1, 2]]|map('join', '-')|list }}", {}),
    ("{% if [1]|select('none') %}generators are true{% endif %} {% set g = [1, 2, 3]|select %}{{ g|first }} {{ g|list }} {{ g|list }}", {}),
    ("{{ {'a': 1}|items|list }} {{ missing|items|list }} {{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ []|first is defined }} {{ {'k': 1}|first }}", {}),
    ("{{ 'one\\ntwo\\n\\nfour'|indent }}|{{ 'one\\ntwo'|indent(2, true) }}|{{ 'one\\n\\nthree'|indent('> ', blank=true) }}", {}),
    ("{{ 'hello'|center(9) }}|{{ 'hello'|center(10) }}|{{ 'foo bar baz qux'|truncate(9) }}|{{ 'foo bar baz qux'|truncate(9, true) }}|{{ 'foo bar baz qux'|truncate(11) }}|{{ 'a b, c-d'|wordcount }}", {}),
    ("{{ 42|string + '!' }} {{ [1]|string }} {{ none|string }} {{ '<a href=\"x\">&'|e }} {{ '<b>'|safe }} {{ '%s-%s'|format(1, 'a') }} {{ d|attr('items') is callable }} {{ d|attr('k') is defined }}", {"d": {"k": 1}}),
    ("{{ x|tojson }}", {"x": {"s": "é\n\"<>&'\u2028\u0001", "n": [1, 2.5, -0.0, 1e20, 1e-7, None, True, False], "e": {}, "l": []}}),
    ("{{ x|tojson(indent=2) }}|{{ x|tojson(indent='\\t') }}|{{ x|tojson(indent=0) }}|{{ x|tojson(separators=[',', ':']) }}|{{ x|tojson(sort_keys=true) }}|{{ x|tojson(ensure_ascii=true) }}", {"x": {"b": [1, {"c": "ü🙂"}], "a": {}, "z": []}}),
    ("{{ (1, 'a')|tojson }} {{ 'plain'|tojson }} {{ 3|tojson }} {{ none|tojson }}", {}),
    ("{{ missing|tojson }}", {}),
    ("{{ [3, 1]|sort|first }}{{ 'x'|list|tojson }}", {}),
    # String methods.
    ("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a '.lstrip() }}|{{ ' a  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ '  a b  c '.split(none, 1) }}", {}),
    ("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'Hello'.upper() }} {{ 'Hello'.lower() }} {{ \"they're bill's\".title() }} {{ 'hello WORLD'.capitalize() }} {{ 'aXb'.swapcase() }} {{ 'a-a'.replace('a', 'b') }} {{ 'a-a'.replace('a', 'b', 1) }}", {}),
    ("{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ '-'.join(['a', 'b']) }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'abc'.removeprefix('ab') }} {{ '5'.zfill(3) }} {{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }}", {}),
    ("{{ '{} and {}'.format('x', 1) }} {{ '{0}{0}{name}'.format('r', name='n') }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }} {{ 'ab'.islower() }} {{ ' '.isspace() }} {{ 'AB'.isupper() }}", {}),
    ("{{ 'Grüße ΣΑΣ ЖУК'.lower() }} {{ 'grüße σας жук'.upper() }} {{ 'éclair'.capitalize() }} {{ 'ÉCLAIR'|lower }}", {}),
    ("{{ [1, 2].append }}|{{ {'a': 1}.pop }}|{{ [1, 2, 2].count(2) }} {{ [1, 2].index(2) }}", {}),
    ("{{ [1, 2].append(3) }}", {}),
    ("{{ ''.join([1]) }}", {}),
    # Tests.
    ("{{ 1 is odd }} {{ 2 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ none is none }} {{ 0 is none }} {{ 'a' is string }} {{ 1 is string }} {{ {} is mapping }} {{ [] is mapping }}", {}),
    ("{{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ 1 is true }} {{ false is false }}", {}),
    ("{{ 'a' is iterable }} {{ [] is iterable }} {{ 1 is iterable }} {{ missing is iterable }} {{ 'a' is sequence }} {{ {} is sequence }} {{ 1 is sequence }} {{ range is callable }} {{ 1 is callable }} {{ 'x'.upper is callable }}", {}),
    ("{{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is le 1 }} {{ 3 is gt 2 }} {{ 3 is greaterthan 3 }} {{ 2 is ge 2 }} {{ 1 is in [1, 2] }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'Ab' is lower }}", {}),
    ("{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ none is sameas none }} {{ true is sameas true }} {{ 1 is not defined }} {{ x is not none }}", {}),
    # Globals.
    ("{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }} {{ range(3)|length }}", {}),
    ("{{ dict(a=1, b='x') }} {{ dict([('k', 2)]) }} {{ namespace(a=1).a }} {{ namespace({'b': 2}).b }}", {}),
    ("{% set j = joiner(' | ') %}{% for x in 'abc' %}{{ j() }}{{ x }}{% endfor %}", {}),
    ("{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j %d %b %y') }}", {}),
    ("before {{ raise_exception('custom failure: ' ~ 42) }} after", {}),
    ("{% if messages[0].role != 'user' %}{{ raise_exception('the first message must be from the user') }}{% endif %}ok", M),
    ("{{ range(100001)|length }}", {}),
    # Parse errors.
    ("{{ 1 + }}", {}),
    ("{% if true %}unclosed", {}),
    ("{% for x in y %}{% endif %}", {}),
    ("{{ x | nosuchfilter }}", {}),
    ("{% if x %}{{ x | nosuchfilter }}{% endif %}ok", {}),
    ("{% if x is nosuchtest %}{% endif %}ok", {}),
    ("{{ x is nosuchtest }}", {}),
    ("{% nosuchtag %}", {}),
    ("{% break %}", {}),
    ("{{ 'unterminated }}", {}),
    ("{{ (1, 2 }}", {}),
    ("{# never closed", {}),
    ("text {{ x", {}),
    ("{% set x = 1 ", {}),
    ("{% macro f(a=1, b) %}{% endmacro %}", {}),
    ("{{ x.1.2 }}", {"x": [[0, 1, 2], [3, 4, 5]]}),
]


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "chat_templates")
    template_dir = os.path.join(out_dir, "templates")
    base_vars = {"tools": None, "documents": None, "add_generation_prompt": False}
    cases = []
    for name in sorted(os.listdir(template_dir)):
        if name in ("tools.jinja", "reasoning.jinja"):  # rendered with whole variable sets only
            continue
        with open(os.path.join(template_dir, name), encoding="utf-8") as f:
            source = f.read()
        for messages_name, messages in MESSAGES.items():
            for add_generation_prompt in (False, True):
                variables = {**base_vars, **SPECIAL_TOKENS, "messages": messages, "add_generation_prompt": add_generation_prompt}
                result = render(source, variables)
                cases.append({"template": name, "messages": messages_name, "add_generation_prompt": add_generation_prompt, **result})
    vars_cases = []
    for name, variables in VARS_CASES:
        with open(os.path.join(template_dir, name), encoding="utf-8") as f:
            source = f.read()
        vars_cases.append({"template": name, "vars": variables, **render(source, {**base_vars, **SPECIAL_TOKENS, **variables})})
    snippets = [{"source": s, "vars": v, **render(s, {**base_vars, **v})} for s, v in SNIPPETS]
    golden = {
        "generator": f"tests/text/gen_chat_golden.py, jinja2 {jinja2.__version__}",
        "clock": CLOCK.isoformat(),
        "special_tokens": SPECIAL_TOKENS,
        "messages": MESSAGES,
        "cases": cases,
        "vars_cases": vars_cases,
        "snippets": snippets,
    }
    path = os.path.join(out_dir, "goldens.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum("error" in c for c in cases + vars_cases + snippets)
    print(f"wrote {path}: {len(cases)} cases, {len(vars_cases)} variable cases, {len(snippets)} snippets ({errors} errors)")


if __name__ == "__main__":
    main()
