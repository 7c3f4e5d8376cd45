// Chat templates: the Jinja engine feature by feature against hand-written strings, errors,
// ChatTemplate::load on small model folders, and renders byte for byte equal to Python's jinja2
// configured as transformers configures it (tests/text/gen_chat_golden.py wrote
// tests/data/chat_templates/goldens.json: our own templates in the styles of real chat models
// with many message lists, whole variable sets with tools, and short snippets).
#include "tensorgrad/chat.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensorgrad/errors.h"

namespace {

using nlohmann::ordered_json;
using Messages = std::vector<tg::ChatMessage>;

const std::string kTemplates = std::string(TG_TEST_DATA_DIR) + "/chat_templates";

std::string read_template(const std::string& path) {
  std::stringstream s;
  s << std::ifstream(path, std::ios::binary).rdbuf();
  return s.str();
}

// The clock the goldens were rendered with: 2024-07-26 14:05:09 (a Friday).
std::tm golden_clock() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 14;
  tm.tm_min = 5;
  tm.tm_sec = 9;
  const std::time_t t = timegm(&tm);  // fills in the weekday and the day of the year
  gmtime_r(&t, &tm);
  return tm;
}

// `source` rendered with the variables of a JSON object.
std::string render(std::string_view source, std::string_view vars = "{}") {
  return tg::ChatTemplate::parse(source).render_json(vars);
}

// The message of the TemplateError that `fn` throws ("" if it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const tg::TemplateError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- The engine, feature by feature ----

TEST(ChatTemplateEngine, TextAndExpressions) {
  EXPECT_EQ(render("plain text"), "plain text");
  EXPECT_EQ(render("{{ 1 + 2 }}|{{ 'a' ~ 1 ~ none }}|{{ \"q\" + 'r' }}"), "3|a1None|qr");
  EXPECT_EQ(render("{{ x }}", R"({"x": "from json"})"), "from json");
  EXPECT_EQ(render("{# a comment #}x{#- trimmed -#}  y"), "xy");
  EXPECT_EQ(render("{{ [1, 'a', none, true] }} {{ {'k': 'v'} }} {{ (1,) }}"),
            "[1, 'a', None, True] {'k': 'v'} (1,)");
  EXPECT_EQ(render("{{ 'it\\'s' }} {{ ['it\\'s'] }} {{ 'a\\tb\\n'|length }}"), "it's [\"it's\"] 4");
  EXPECT_EQ(render("{{ 1 if x else 2 }} {{ 'y' if true else 'n' }} [{{ 'z' if false }}]"), "2 y []");
  EXPECT_EQ(render("{{ 0 or 'a' }} {{ 1 and 'b' }} {{ not none }} {{ 2 in [1, 2] }} {{ 'c' not in 'abc' }}"),
            "a b True True False");
}

TEST(ChatTemplateEngine, PythonFloatPrinting) {
  EXPECT_EQ(
      render(
          "{{ 1.0 }} {{ 0.1 }} {{ 1e-05 }} {{ 0.0001 }} {{ 100000000000000000000.0 }} {{ 1e16 }} {{ 1e15 }}"),
      "1.0 0.1 1e-05 0.0001 1e+20 1e+16 1000000000000000.0");
  EXPECT_EQ(render("{{ 0.1 + 0.2 }} {{ -0.0 }} {{ 2.5e-7 }} {{ 1/3 }} {{ 123456.789 }}"),
            "0.30000000000000004 -0.0 2.5e-07 0.3333333333333333 123456.789");
  EXPECT_EQ(render("{{ x }} {{ y }}", R"({"x": 1e300, "y": 12.0})"), "1e+300 12.0");
}

TEST(ChatTemplateEngine, Arithmetic) {
  EXPECT_EQ(
      render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }}"),
      "3 -4 3.5 2.0 2 -2 3.0");
  EXPECT_EQ(render("{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 + 2 * 3 }} {{ -2 ** 2 }} {{ true + 1 }} {{ 'ab' * 2 }} "
                   "{{ [1] + [2] }}"),
            "1024 0.5 7 4 2 abab [1, 2]");
  EXPECT_TRUE(contains(error_of([] { render("{{ 1 // 0 }}"); }), "division or modulo by zero"));
  EXPECT_TRUE(contains(error_of([] { render("{{ 'a' + 1 }}"); }), "can only concatenate str"));
}

TEST(ChatTemplateEngine, SubscriptsAndSlices) {
  const char* xs = R"({"xs": [0, 1, 2, 3, 4], "s": "héllo"})";
  EXPECT_EQ(
      render("{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[-2:] }} {{ xs[-4:-1:2] }} {{ xs[-1] }}", xs),
      "[1, 2, 3, 4] [0, 1, 2, 3] [4, 3, 2, 1, 0] [3, 4] [1, 3] 4");
  EXPECT_EQ(render("{{ s[1] }} {{ s[::-1] }} {{ s[-3:] }} {{ s|length }} [{{ xs[9] }}]", xs),
            "é olléh llo 5 []");
  EXPECT_EQ(render("{{ d.a }} {{ d['a'] }} {{ d.get('b', 0) }} [{{ d.b }}] {{ d.items()|list }}",
                   R"({"d": {"a": 1}})"),
            "1 1 0 [] [('a', 1)]");
}

TEST(ChatTemplateEngine, LoopVariables) {
  EXPECT_EQ(
      render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
             "{{ loop.first|int }}{{ loop.last|int }}{{ loop.length }} {% endfor %}"),
      "1032103 2121003 3210013 ");
  EXPECT_EQ(
      render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }}{% else %}none{% endfor %}"),
      "2/24/2");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(
      render(
          "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }}{{ ',' if not loop.last }}{% endfor %}"),
      "a=1,b=2");
  EXPECT_EQ(render("{% for i in range(9) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break "
                   "%}{% endif %}"
                   "{{ i }}{% endfor %}"),
            "02");
  EXPECT_EQ(
      render(
          "{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{{ loop.previtem|default('-') }}{% endfor %}"),
      "a-b1a2");
}

TEST(ChatTemplateEngine, ScopesAndNamespaces) {
  // A set inside a loop lasts one iteration; a namespace carries values out.
  EXPECT_EQ(render("{% set n = 0 %}{% for i in [1, 2] %}{% set n = n + i %}{{ n }}{% endfor %}{{ n }}"),
            "120");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% endfor "
                   "%}{{ ns.n }}"),
            "3");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }} {% set x %}[{{ a }}]{% endset %}{{ x }}"), "21 [1]");
  EXPECT_TRUE(contains(error_of([] { render("{% set x = 1 %}{% set x.a = 2 %}"); }), "non-namespace"));
}

TEST(ChatTemplateEngine, IsDefinedAndUndefined) {
  EXPECT_EQ(render("{{ x is defined }} {{ x is undefined }} [{{ x }}] {{ x|default('d') }} {{ x|length }}"),
            "False True [] d 0");
  EXPECT_EQ(
      render("{{ d.k is defined }} {{ d.z is defined }} {{ d.z is not defined }}", R"({"d": {"k": 1}})"),
      "True False True");
  EXPECT_EQ(render("{% if x %}t{% else %}f{% endif %}{% for i in x %}i{% endfor %}"), "f");
  // Using an undefined value in most operations is an error, as with jinja2's Undefined.
  EXPECT_TRUE(contains(error_of([] { render("{{ x.y }}"); }), "'x' is undefined"));
  EXPECT_TRUE(contains(error_of([] { render("{{ x + 1 }}"); }), "'x' is undefined"));
}

TEST(ChatTemplateEngine, Tests) {
  EXPECT_EQ(
      render(
          "{{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 1 is number }} "
          "{{ 'a' is sequence }} {{ true is boolean }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 1 is in "
          "[1] }}"),
      "True True True True True True True True True True");
  EXPECT_EQ(
      render(
          "{{ 1 is string }} {{ [] is mapping }} {{ true is integer }} {{ 'x' is number }} {{ 2 is eq 3 }}"),
      "False False False False False");
}

TEST(ChatTemplateEngine, Filters) {
  EXPECT_EQ(render("{{ '  a  '|trim }}|{{ 'ab'|upper }}|{{ 'AB'|lower }}|{{ 'hi there'|title }}|{{ "
                   "'hI'|capitalize }}"),
            "a|AB|ab|Hi There|Hi");
  EXPECT_EQ(
      render(
          "{{ [1, 2]|join(', ') }} {{ 'abc'|length }} {{ [3, 1]|first }} {{ [3, 1]|last }} {{ '7'|int + 1 }} "
          "{{ 2.5|round }} {{ 2.675|round(2) }} {{ 'a-a'|replace('a', 'b') }} {{ 'x'|list }} {{ 5|string }}"),
      "1, 2 3 3 1 8 2.0 2.67 b-b ['x'] 5");
  EXPECT_EQ(
      render("{{ x|selectattr('role', 'equalto', 'user')|map(attribute='c')|join }} "
             "{{ x|rejectattr('role', 'eq', 'user')|list|length }} {{ x|map(attribute='role')|unique|list }}",
             R"({"x": [{"role": "user", "c": "a"}, {"role": "bot", "c": "b"}, {"role": "user", "c": "c"}]})"),
      "ac 1 ['user', 'bot']");
  EXPECT_EQ(render("{{ x|tojson }}|{{ x|tojson(indent=2) }}", R"({"x": {"a": [1, "é\n"], "b": {}}})"),
            "{\"a\": [1, \"é\\n\"], \"b\": {}}|{\n  \"a\": [\n    1,\n    \"é\\n\"\n  ],\n  \"b\": {}\n}");
  // A generator (select, map, ...) is true even when it yields nothing, as in Python.
  EXPECT_EQ(
      render("{{ 'yes' if [1]|select('none') else 'no' }} {{ 'yes' if [1]|select('none')|list else 'no' }}"),
      "yes no");
}

TEST(ChatTemplateEngine, StringMethods) {
  EXPECT_EQ(
      render("{{ ' a '.strip() }}|{{ 'a,b'.split(',') }}|{{ ' a  b '.split() }}|{{ 'ab'.startswith('a') }}|"
             "{{ 'ab'.endswith(('x', 'b')) }}|{{ 'ab'.upper() }}|{{ \"it's\".title() }}|{{ "
             "'aXa'.replace('a', '') }}"),
      "a|['a', 'b']|['a', 'b']|True|True|AB|It'S|X");
}

TEST(ChatTemplateEngine, Macros) {
  EXPECT_EQ(
      render("{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}"),
      "<1B><12><43>");
  EXPECT_EQ(render("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}"), "[in]");
  EXPECT_TRUE(
      contains(error_of([] { render("{% macro m() %}{% endmacro %}{{ m(1) }}"); }), "takes not more than 0"));
}

// jinja2's whitespace rules with trim_blocks and lstrip_blocks, as transformers sets them.
TEST(ChatTemplateEngine, TrimAndLstripBlocks) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before it.
  EXPECT_EQ(render("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(render("  {% if true %}\n  A\n  {% endif %}\n"), "  A\n");
  // Not after {{ }}, and not before a tag that does not start its line.
  EXPECT_EQ(render("{{ 'x' }}\n{{ 'y' }}"), "x\ny");
  EXPECT_EQ(render("a  {% if true %}b{% endif %}"), "a  b");
  // A tag is at the start of a line also when the newline before it was eaten by trim_blocks.
  EXPECT_EQ(render("{% if true %}\n    {% if true %}x{% endif %}{% endif %}"), "x");
  EXPECT_EQ(render("{{ 1 }}    {% if true %}x{% endif %}"), "1    x");
  // "-" strips all whitespace on its side, newlines included; "+" turns the rules off.
  EXPECT_EQ(render("a\n  {{- 'b' -}}  \n  c"), "abc");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
  // Comments follow the block rules; one trailing newline of the template is dropped.
  EXPECT_EQ(render("a\n    {# note #}\nb\n"), "a\nb");
  EXPECT_EQ(render("a\r\nb\n\n"), "a\nb\n");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(ChatTemplateEngine, Globals) {
  EXPECT_EQ(render("{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ dict(a=1) }} {{ namespace(a=2).a }}"),
            "[0, 1, 2] [1, 3, 5] {'a': 1} 2");
  auto t = tg::ChatTemplate::parse("{{ strftime_now('%Y-%m-%d %a') }}");
  t.set_clock(golden_clock);
  EXPECT_EQ(t.render_json("{}"), "2024-07-26 Fri");
}

TEST(ChatTemplateEngine, Errors) {
  // Parse errors name the line and column.
  const std::string unterminated = error_of([] { tg::ChatTemplate::parse("line one\nab {{ x "); });
  EXPECT_TRUE(contains(unterminated, "[ChatTemplate::parse] line 2, column 4")) << unterminated;
  EXPECT_TRUE(contains(unterminated, "never closed")) << unterminated;
  const std::string filter = error_of([] { tg::ChatTemplate::parse("{{ x }}\n{{ x | nosuch }}"); });
  EXPECT_TRUE(contains(filter, "line 2, column 8: no filter named 'nosuch'")) << filter;
  const std::string tag =
      error_of([] { tg::ChatTemplate::parse("{% for x in y %}\n{% nosuch %}{% endfor %}"); });
  EXPECT_TRUE(contains(tag, "line 2, column 4: unknown tag 'nosuch'")) << tag;
  EXPECT_TRUE(contains(tag, "'for' from line 1")) << tag;
  const std::string eof = error_of([] { tg::ChatTemplate::parse("{% if x %}\nopen"); });
  EXPECT_TRUE(contains(eof, "expected 'elif' or 'else' or 'endif' to close the 'if' at line 1")) << eof;
  EXPECT_TRUE(contains(error_of([] { tg::ChatTemplate::parse("{% include 'x' %}"); }), "not supported"));
  // Inside an if an unknown filter fails only when it runs, as in jinja2.
  EXPECT_EQ(render("{% if false %}{{ x | nosuch }}{% endif %}ok"), "ok");
  EXPECT_TRUE(contains(error_of([] { render("{% if true %}{{ 1 | nosuch }}{% endif %}"); }),
                       "no filter named 'nosuch'"));
  // Run-time errors name the line.
  const std::string call = error_of([] { render("ok\n{{ nosuch_function(1) }}"); });
  EXPECT_TRUE(contains(call, "[ChatTemplate::render_json] line 2: 'nosuch_function' is undefined")) << call;
  const std::string raised = error_of([] {
    tg::ChatTemplate::parse(
        "{% if messages[0].role != 'system' %}\n{{ raise_exception('no system message!') }}{% endif %}")
        .render(Messages{{"user", "hi"}});
  });
  EXPECT_EQ(raised, "[ChatTemplate::render] line 2: the template raised an error: no system message!");
  EXPECT_TRUE(contains(error_of([] { render("{{ [1].append(2) }}"); }), "unsafe"));
  // Nesting is bounded (no stack overflow on a hostile template); real templates nest little.
  EXPECT_EQ(render("{{ " + std::string(40, '(') + "1" + std::string(40, ')') + " }}"), "1");
  const std::string deep =
      error_of([] { render("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}"); });
  EXPECT_TRUE(contains(deep, "nests too deeply")) << deep;
  const std::string brackets = error_of([] { render("{{ " + std::string(100000, '[') + " }}"); });
  EXPECT_TRUE(contains(brackets, "line 1, column 100005: unexpected '}', expected ']'")) << brackets;
  const std::string macro = error_of([] { render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"); });
  EXPECT_TRUE(contains(macro, "macro calls nest more than")) << macro;
  EXPECT_TRUE(
      contains(error_of([] { tg::ChatTemplate::parse("{{ 1 }}").render_json("[1]"); }), "JSON object"));
}

// ---- Hostile templates: errors, never a crash ----

// `n` copies of `part`.
std::string repeat(const std::string& part, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += part;
  return out;
}

TEST(ChatTemplateEngine, SlicesWithHugeSteps) {
  // Python's results; stepping past the end must not overflow.
  EXPECT_EQ(
      render(
          "{{ 'abc'[1::9223372036854775807] }}|{{ 'abc'[::-9223372036854775807 - 1] }}|"
          "{{ 'abc'[-9223372036854775807::9223372036854775807] }}|{{ 'abcdef'[5:0:-9223372036854775807] }}"),
      "b|c|a|f");
  EXPECT_EQ(render("{{ [1, 2, 3][-1::-9223372036854775807] }} {{ [1, 2, 3][0:3:9223372036854775807] }} "
                   "{{ (1, 2, 3)[::-9223372036854775807 - 1] }} {{ 'abcdef'[::-2] }}"),
            "[3] [1] (3,) fdb");
}

TEST(ChatTemplateEngine, LongChainsAreBoundedWhenParsed) {
  // Chains of operators, attributes and filters build trees as deep as they are long.
  EXPECT_EQ(render("{{ 1" + repeat(" + 1", 99) + " }}"), "100");
  EXPECT_EQ(render("{{ ' x '" + repeat("|trim", 50) + " }}"), "x");
  for (const std::string& source :
       {"{{ 1" + repeat(" + 1", 200000) + " }}", "{{ 1" + repeat(" * 1", 200000) + " }}",
        "{{ x" + repeat(" or x", 200000) + " }}", "{{ x" + repeat(" and x", 200000) + " }}",
        "{{ x" + repeat(".b", 200000) + " }}", "{{ x" + repeat("[0]", 200000) + " }}",
        "{{ x" + repeat("|trim", 200000) + " }}", "{{ x" + repeat("()", 200000) + " }}",
        "{% filter trim" + repeat("|trim", 200000) + " %}{% endfilter %}",
        "{{ 1 if x" + repeat(" if x", 200000) + " }}"}) {
    const std::string e = error_of([&] { tg::ChatTemplate::parse(source); });
    EXPECT_TRUE(contains(e, "line 1, column ")) << e;
    EXPECT_TRUE(contains(e, "the template nests too deeply")) << e;
  }
}

TEST(ChatTemplateEngine, NamespaceHoldingItself) {
  // Printed as Python prints a dict that holds itself.
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.x = ns %}{{ ns }}"),
            "<Namespace {'x': <Namespace {...}>}>");
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% set ns.x = ns %}{{ [ns] }}"),
            "[<Namespace {'a': 1, 'x': <Namespace {...}>}>]");
}

TEST(ChatTemplateEngine, DeepValuesAreBounded) {
  const std::string loop = "{% set ns = namespace(x=[]) %}\n{% for i in range(100000) %}";
  for (const char* step :
       {"{% set ns.x = [ns.x] %}", "{% set ns.x = {'k': ns.x} %}", "{% set ns.x = (ns.x,) %}",
        "{% set ns.x = [ns.x]|reverse %}", "{% set ns.x = {'k': ns.x}.get %}"}) {
    const std::string e = error_of([&] { render(loop + step + "{% endfor %}{{ ns.x }}"); });
    EXPECT_TRUE(contains(e, "line 2: values nest more than 256 levels deep")) << step << ": " << e;
  }
  EXPECT_EQ(
      render("{% set ns = namespace(x=[]) %}{% for i in range(200) %}{% set ns.x = [ns.x] %}{% endfor %}"
             "{{ ns.x|string|length }} {{ ns.x == ns.x }}"),
      "402 True");
  // Namespaces and loop objects may chain without bound; printing one is an error, freeing
  // them is no recursion.
  const std::string chain =
      "{% set h = namespace(x=none) %}{% for i in range(30000) %}{% set h.x = namespace(x=h.x) %}{% endfor "
      "%}";
  EXPECT_EQ(render(chain + "done"), "done");
  EXPECT_TRUE(
      contains(error_of([&] { render(chain + "\n{{ h }}"); }), "line 2: maximum recursion depth exceeded"));
  EXPECT_EQ(render("{% set h = namespace(x=none) %}{% for i in range(100000) %}{% for j in [h.x, 0] %}"
                   "{% set h.x = loop %}{% endfor %}{% endfor %}done"),
            "done");
  EXPECT_EQ(
      render("{% set h = namespace(x=none) %}{% for i in range(20000) %}{% for j in [0] %}"
             "{% if loop.changed(h.x) %}{% endif %}{% set h.x = loop.changed %}{% endfor %}{% endfor %}done"),
      "done");
  // Variables from JSON nest no deeper than values may.
  const std::string deep_json = "{\"x\": " + repeat("[", 100000) + repeat("]", 100000) + "}";
  const std::string e = error_of([&] { render("{{ x }}", deep_json); });
  EXPECT_TRUE(contains(e, "nest more than 256 levels deep")) << e;
}

TEST(ChatTemplateEngine, RecursionDepthIsBounded) {
  EXPECT_EQ(render("{% macro m(n) %}{{ m(n - 1) if n > 0 else 'end' }}{% endmacro %}{{ m(20) }}"), "end");
  // Macro calls 250 deep, each evaluating 200 nested expressions: deeper than the stack allows.
  const std::string source = "{% macro m(n) %}{% if n > 0 %}\n{{ " + repeat("not ", 200) +
                             "m(n - 1) }}{% endif %}{% endmacro %}{{ m(250) }}";
  const std::string e = error_of([&] { render(source); });
  EXPECT_TRUE(contains(e, "line 2: maximum recursion depth exceeded")) << e;
  // Loops inside a recursive macro: the statements count too.
  const std::string loops = error_of([] {
    render(
        "{% macro m(n) %}{% for i in [1] %}{% for j in [1] %}{% with k = 1 %}{% if true %}{{ m(n - 1) }}"
        "{% endif %}{% endwith %}{% endfor %}{% endfor %}{% endmacro %}{{ m(250) }}");
  });
  EXPECT_TRUE(contains(loops, "maximum recursion depth exceeded")) << loops;
}

TEST(ChatTemplateEngine, HugeResultsAreErrors) {
  const auto error = [](const std::string& source) {
    const std::string e = error_of([&] { render("\n" + source); });
    EXPECT_TRUE(contains(e, "line 2: ")) << source << ": " << e;
    return e;
  };
  for (const char* source :
       {"{{ '%9999999999s' % 'x' }}", "{{ '%.9999999999f' % 1.5 }}", "{{ 'ab' * 9999999999999 }}",
        "{{ [1, 2] * 9999999999999 }}", "{{ 'x'|center(9999999999999) }}",
        "{{ 'x'.ljust(9223372036854775807) }}", "{{ 'x'.zfill(99999999999) }}",
        "{{ 'x\\ny'|indent(9999999999999, true) }}", "{{ [1]|tojson(indent=9999999999999) }}"}) {
    const std::string e = error(source);
    EXPECT_TRUE(contains(e, "larger than 64 MiB")) << source << ": " << e;
  }
  // Doubling a string: an error once past the limit, not an exhausted memory.
  EXPECT_TRUE(
      contains(error("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                     "{% endfor %}"),
               "larger than 64 MiB"));
  EXPECT_TRUE(
      contains(error("{{ range(-9223372036854775807, 9223372036854775807, 3)|length }}"), "Range too big"));
  EXPECT_EQ(render("{{ range(0, 9223372036854775807, 9223372036854775807)|list }} "
                   "{{ range(9223372036854775807, -9223372036854775807, -9223372036854775807)|list }}"),
            "[0] [9223372036854775807, 0]");
  EXPECT_EQ(render("{{ '%d' % 1e18 }} {{ '%5d|%-4s|%.2f' % (3, 'a', 2.5) }} {{ ('%300d' % 1)|length }}"),
            "1000000000000000000     3|a   |2.50 300");
  EXPECT_TRUE(contains(error("{{ '%d' % 1e300 }}"), "does not fit in 64 bits"));
  EXPECT_TRUE(contains(error("{{ '%d' % (1e300 * 1e300) }}"), "cannot convert float infinity to integer"));
  // An index too large for 64 bits finds nothing, as jinja2's getitem.
  EXPECT_EQ(render("{{ [{'a': 1}]|map(attribute='99999999999999999999')|list }} "
                   "{{ [[1, 2]]|map(attribute='0000000000000000000001')|list }}"),
            "[Undefined] [2]");
  EXPECT_EQ(render("{{ 'abc'|truncate(9223372036854775807) }} {{ 'abcdefghij'|truncate(5, "
                   "leeway=9223372036854775807) }}"),
            "abc abcdefghij");
  EXPECT_TRUE(contains(error("{{ 'abc'|truncate(3, leeway=-1) }}"), "expected leeway >= 0, got -1"));
}

TEST(ChatTemplateEngine, UnicodeEscapesPastTheLastCodePoint) {
  EXPECT_EQ(render("{{ '\\U0010FFFF' }}"), "\xF4\x8F\xBF\xBF");
  const std::string e = error_of([] { tg::ChatTemplate::parse("{{ 'a' }}\n{{ '\\U00110000' }}"); });
  EXPECT_TRUE(contains(e, "line 2, column ")) << e;
  EXPECT_TRUE(contains(e, "illegal Unicode character")) << e;
  EXPECT_FALSE(error_of([] { tg::ChatTemplate::parse("{{ '\\UFFFFFFFF' }}"); }).empty());
}

TEST(ChatTemplate, RenderPassesTransformersVariables) {
  tg::SpecialTokens tokens;
  tokens.bos_token = "<s>";
  const auto t = tg::ChatTemplate::parse(
      "{{ bos_token }}|{{ eos_token is defined }}|{{ tools is none }}|{{ documents is none }}|{{ "
      "add_generation_prompt }}|"
      "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}",
      tokens);
  EXPECT_EQ(t.render(Messages{{"user", "a"}, {"assistant", "b"}}),
            "<s>|False|True|True|True|user:a;assistant:b;");
  EXPECT_EQ(t.render(Messages{}, false), "<s>|False|True|True|False|");
  EXPECT_EQ(t.render_json(R"({"messages": [{"role": "x", "content": "y"}], "bos_token": "<B>"})"),
            "<B>|False|True|True|False|x:y;");
}

// ---- Model folders ----

TEST(ChatTemplate, LoadFolderWithJinjaFile) {
  const auto t = tg::ChatTemplate::load(kTemplates + "/folder_jinja");
  EXPECT_EQ(t.special_tokens().bos_token, "<s>");
  EXPECT_EQ(t.special_tokens().eos_token, "</s>");
  EXPECT_EQ(t.special_tokens().unk_token, "<unk>");
  EXPECT_FALSE(t.special_tokens().pad_token.has_value());
  EXPECT_EQ(t.render(Messages{{"user", "Hi"}, {"assistant", "Hello"}}),
            "<s>[user] Hi</s>\n[assistant] Hello</s>\n[assistant] ");
  EXPECT_EQ(t.render(Messages{{"user", "Hi"}}, false), "<s>[user] Hi</s>\n");
}

TEST(ChatTemplate, LoadFolderWithConfigString) {
  const auto t = tg::ChatTemplate::load(kTemplates + "/folder_config_string");
  EXPECT_EQ(t.render(Messages{{"user", "Hi"}}), "<|begin|><|user|>\nHi<|end|>\n<|assistant|>\n<|pad|>False");
}

TEST(ChatTemplate, LoadFolderWithConfigListTakesDefault) {
  const auto t = tg::ChatTemplate::load(kTemplates + "/folder_config_list");
  EXPECT_EQ(t.render(Messages{{"system", "S"}, {"user", "U"}}), "system: S\nuser: U\nassistant: ");
  EXPECT_EQ(t.render(Messages{{"user", "U"}}, false), "user: U\n");
}

TEST(ChatTemplate, LoadSpecialTokensMap) {
  // A config without "added_tokens_decoder": special_tokens_map.json's tokens replace its own.
  const auto t = tg::ChatTemplate::load(kTemplates + "/folder_special_tokens_map");
  EXPECT_EQ(t.special_tokens().bos_token, "<s>");
  EXPECT_EQ(t.special_tokens().eos_token, "</s>");
  EXPECT_EQ(t.special_tokens().mask_token, "<mask>");
  EXPECT_FALSE(t.special_tokens().sep_token.has_value());
  EXPECT_EQ(t.render(Messages{}), "<s>|</s>|<unk>|<pad>|<mask>|False");
  // With "added_tokens_decoder" transformers does not read special_tokens_map.json.
  const auto u = tg::ChatTemplate::load(kTemplates + "/folder_special_tokens_map_unused");
  EXPECT_EQ(u.render(Messages{}), "<s>|False");
}

TEST(ChatTemplate, LoadErrors) {
  const std::string none = error_of([] { tg::ChatTemplate::load(kTemplates + "/folder_no_template"); });
  EXPECT_TRUE(contains(none, "[ChatTemplate::load]")) << none;
  EXPECT_TRUE(contains(none, "no chat template")) << none;
  EXPECT_TRUE(contains(none, "tokenizer_config.json has no \"chat_template\"")) << none;
  const std::string bad = error_of([] { tg::ChatTemplate::load(kTemplates + "/folder_bad_template"); });
  EXPECT_TRUE(contains(bad, "folder_bad_template/chat_template.jinja: line 3")) << bad;
  EXPECT_TRUE(contains(bad, "to close the 'if' at line 3")) << bad;
  EXPECT_TRUE(contains(error_of([] { tg::ChatTemplate::load(kTemplates + "/no_such_folder"); }),
                       "neither a folder nor a GGUF file"));
}

// ---- Goldens from Python's jinja2 ----

class Goldens : public testing::Test {
 protected:
  static void SetUpTestSuite() { golden_ = ordered_json::parse(read_template(kTemplates + "/goldens.json")); }

  static tg::SpecialTokens tokens() {
    tg::SpecialTokens t;
    const ordered_json& j = golden_["special_tokens"];
    t.bos_token = j["bos_token"].get<std::string>();
    t.eos_token = j["eos_token"].get<std::string>();
    t.unk_token = j["unk_token"].get<std::string>();
    t.pad_token = j["pad_token"].get<std::string>();
    return t;
  }

  static tg::ChatTemplate load_template(const std::string& name, const tg::SpecialTokens& t) {
    auto chat = tg::ChatTemplate::parse(read_template(kTemplates + "/templates/" + name), t);
    chat.set_clock(golden_clock);
    return chat;
  }

  // Checks what `fn` gives against a golden: its output, or a TemplateError (with the
  // template's own message where raise_exception raised it).
  template <typename Fn>
  static void check(const ordered_json& golden, Fn&& fn, const std::string& what) {
    if (golden.contains("output")) {
      std::string out;
      try {
        out = fn();
      } catch (const tg::TemplateError& e) {
        ADD_FAILURE() << what << ": threw " << e.what();
        return;
      }
      EXPECT_EQ(out, golden["output"].get<std::string>()) << what;
      return;
    }
    const std::string message = error_of([&] { fn(); });
    EXPECT_FALSE(message.empty()) << what << ": no error; jinja2 raised " << golden["error"];
    if (golden["raised"].get<bool>()) {
      EXPECT_TRUE(contains(message, "the template raised an error: " + golden["error"].get<std::string>()))
          << what << ": " << message;
    }
  }

  static ordered_json golden_;
};
ordered_json Goldens::golden_;

TEST_F(Goldens, TemplatesWithMessageLists) {
  const tg::SpecialTokens t = tokens();
  size_t n = 0;
  for (const ordered_json& c : golden_["cases"]) {
    const auto chat = load_template(c["template"].get<std::string>(), t);
    const ordered_json& list = golden_["messages"][c["messages"].get<std::string>()];
    Messages messages;
    for (const ordered_json& m : list)
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    const bool gen = c["add_generation_prompt"].get<bool>();
    const std::string what = c["template"].get<std::string>() + " with " + c["messages"].get<std::string>() +
                             (gen ? ", add_generation_prompt" : "");
    check(
        c, [&] { return chat.render(messages, gen); }, what);
    // The same through render_json.
    const ordered_json vars = {{"messages", list}, {"add_generation_prompt", gen}};
    check(
        c, [&] { return chat.render_json(vars.dump()); }, what + " (render_json)");
    ++n;
  }
  EXPECT_EQ(n, 220u);
}

TEST_F(Goldens, TemplatesWithVariables) {
  const tg::SpecialTokens t = tokens();
  for (const ordered_json& c : golden_["vars_cases"]) {
    const auto chat = load_template(c["template"].get<std::string>(), t);
    check(
        c, [&] { return chat.render_json(c["vars"].dump()); },
        c["template"].get<std::string>() + " with " + c["vars"].dump());
  }
}

TEST_F(Goldens, Snippets) {
  size_t n = 0;
  for (const ordered_json& c : golden_["snippets"]) {
    const std::string source = c["source"].get<std::string>();
    const std::string what = "snippet " + ordered_json(source).dump();
    if (c.contains("stage") && c["stage"] == "parse") {
      EXPECT_FALSE(error_of([&] { tg::ChatTemplate::parse(source); }).empty())
          << what << ": parses; jinja2 said " << c["error"];
      continue;
    }
    std::optional<tg::ChatTemplate> chat;
    const std::string parse_error = error_of([&] { chat = tg::ChatTemplate::parse(source); });
    if (!parse_error.empty()) {
      ADD_FAILURE() << what << ": " << parse_error;
      continue;
    }
    chat->set_clock(golden_clock);
    check(
        c, [&] { return chat->render_json(c["vars"].dump()); }, what);
    ++n;
  }
  EXPECT_GT(n, 100u);
}

}  // namespace
