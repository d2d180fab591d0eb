// claw's Jinja interpreter (data/jinja.h) on the constructs chat templates
// use, each expected output written as Jinja2 3.1 (trim_blocks and
// lstrip_blocks on, as transformers renders) prints it.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "claw/data/jinja.h"
#include "expect_error.h"

namespace claw::data::jinja {
namespace {

using json = nlohmann::ordered_json;

std::string render(const std::string& src, const json& ctx = json::object()) {
  return Template(src, "t.jinja").render(ctx);
}

TEST(Jinja, TextExpressionsAndPythonValues) {
  EXPECT_EQ(render("a{{ 1 + 2 }}b"), "a3b");
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1.0 }} {{ 1e20 }}"),
            "3.5 3 -4 2 1024 1.0 1e+20");
  EXPECT_EQ(render("{{ true }} {{ none }} {{ [1, 'a', none] }} {{ {'k': 'v'} }} {{ \"it's\" }}"),
            "True None [1, 'a', None] {'k': 'v'} it's");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }}|{{ 'ab' * 3 }}|{{ [1] + [2] }}"), "a1None|ababab|[1, 2]");
  EXPECT_EQ(render("{{ x }}|{{ x.y is defined }}|{{ y is undefined }}", {{"x", {{"z", 1}}}}), "{'z': 1}|False|True");
  EXPECT_EQ(render("{{ 'yes' if a else 'no' }}{{ 'x' if b }}", {{"a", 0}, {"b", false}}), "no");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 3] }} {{ 1 == 1.0 }}"), "True True True True");
  EXPECT_EQ(render("{{ 'héllo'[1] }}{{ 'héllo'[1:3] }}{{ 'abc'[::-1] }}{{ [1,2,3][-1] }}"), "éélcba3");
}

TEST(Jinja, WhitespaceControlAsTransformers) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the
  // indentation before it.
  EXPECT_EQ(render("{% if true %}\n  yes\n  {% endif %}\nend"), "  yes\nend");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}  c"), "ab  c");
  EXPECT_EQ(render("{{ 'a' }}\n{{- 'b' }} {# note #}\nc"), "ab c");
  EXPECT_EQ(render("x {% if true %}y{% endif %}"), "x y");  // not at a line's start: kept
  EXPECT_EQ(render("  {%+ if true %}y{% endif %}"), "  y");
  EXPECT_EQ(render("{% raw %}{{ not rendered }}{% endraw %}"), "{{ not rendered }}");
}

TEST(Jinja, LoopsScopesAndNamespaces) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
                   {{"xs", {"a", "b", "c"}}}),
            "1a,2b,3c");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"a", 1}, {"b", 2}}}}),
            "a=1;b=2;");
  EXPECT_EQ(render("{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}", {{"xs", {1, 2, 3}}}),
            "2232");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}"
                   "{% endif %}{{ x }}{% endfor %}"),
            "02");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in range(4) %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set s %}in {{ 1 }}{% endset %}[{{ s }}]"), "[in 1]");
  EXPECT_EQ(render("{% macro m(x, y='d') %}<{{ x }}{{ y }}>{% endmacro %}{{ m(1) }}{{ m(2, y='e') }}"), "<1d><2e>");
  EXPECT_EQ(render("{% filter upper %}abc{% endfilter %}"), "ABC");
}

TEST(Jinja, FiltersTestsAndMethods) {
  const json ctx = {{"msgs", {{{"role", "user"}, {"content", " hi "}}, {{"role", "tool"}, {"content", "x"}}}}};
  EXPECT_EQ(render("{{ msgs | length }} {{ msgs | selectattr('role', 'equalto', 'tool') | list | length }} "
                   "{{ msgs | map(attribute='role') | join(',') }} {{ (msgs | first).content | trim }}",
                   ctx),
            "2 1 user,tool hi");
  EXPECT_EQ(render("{{ {'b': [1, 2.5, none, true], 'a': 'é\"'} | tojson }}"),
            R"({"b": [1, 2.5, null, true], "a": "é\""})");
  EXPECT_EQ(render("{{ {'a': [1]} | tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ x | default('d') }}{{ '' | default('e', true) }}{{ 'AbC' | lower }}{{ 'ab' | upper }}"),
            "deabcAB");
  EXPECT_EQ(render("{{ ' a b '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ 'x y  z'.split() }}|{{ 'abc'.startswith('ab') }}"
                   "|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXbX'.replace('X', '-') }}|{{ 'hi there' | title }}"),
            "a b|['a', 'b', '', 'c']|['x', 'y', 'z']|True|True|a-b-|Hi There");
  EXPECT_EQ(render("{{ 3 is odd }}{{ x is string }}{{ [] is iterable }}{{ {} is mapping }}{{ 4 is divisibleby 2 }}"
                   "{{ none is none }}{{ 1 is not string }}",
                   {{"x", "s"}}),
            "TrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ d.get('a') }}{{ d.get('z', 0) }}{{ d.keys() | list }}{{ [3, 1, 2] | sort }}{{ 'ab' | reverse }}",
                   {{"d", {{"a", 1}}}}),
            "10['a'][1, 2, 3]ba");
}

// A ChatML template in the shape Qwen 2.5 ships (system default, tools
// listed as JSON, tool calls and tool responses), rendered for a
// conversation as transformers' apply_chat_template prints it.
TEST(Jinja, ChatmlWithToolsAsQwenShips) {
  const std::string tmpl = R"({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {{- '<|im_start|>user\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)";
  const json ctx = {
      {"messages",
       {{{"role", "user"}, {"content", "Weather in Paris?"}},
        {{"role", "assistant"},
         {"content", ""},
         {"tool_calls", {{{"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}}}},
        {{"role", "tool"}, {"content", "22C"}}}},
      {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", json::object()}}}}}},
      {"add_generation_prompt", true}};
  EXPECT_EQ(render(tmpl, ctx),
            "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\n<tools>\n"
            R"({"type": "function", "function": {"name": "get_weather", "parameters": {}}})"
            "\n</tools><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
            R"({"name": "get_weather", "arguments": {"city": "Paris"}})"
            "\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n22C\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(Jinja, ErrorsNameTheTemplateAndLine) {
  EXPECT_CLAW_ERROR(render("a\n{% if x %}b"), "t.jinja", "endif");
  EXPECT_CLAW_ERROR(render("{{ 1 + }}"), "t.jinja line 1", "expected a value");
  EXPECT_CLAW_ERROR(render("\n\n{{ raise_exception('Only user and assistant roles') }}"), "t.jinja line 3",
                    "the template raised: Only user and assistant roles");
  EXPECT_CLAW_ERROR(render("{% extends 'base' %}"), "t.jinja line 1", "unsupported tag", "extends");
  EXPECT_CLAW_ERROR(render("{{ x | frobnicate }}"), "unknown filter 'frobnicate'");
  EXPECT_CLAW_ERROR(render("{{ xs.append(1) }}", {{"xs", json::array()}}), "sandbox");
  // As Python: map/select give generators, which have no JSON and no len().
  EXPECT_CLAW_ERROR(render("{{ [1] | map('string') | tojson }}"), "Object of type generator is not JSON serializable");
  EXPECT_CLAW_ERROR(render("{{ [1] | select | length }}"), "has no len()");
  EXPECT_EQ(render("{{ [1] | map('string') | list | tojson }}{{ 'yes' if [] | select else 'no' }}"), "[\"1\"]yes");
}

}  // namespace
}  // namespace claw::data::jinja
