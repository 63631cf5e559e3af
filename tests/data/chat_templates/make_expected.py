#!/usr/bin/env python3
"""Writes expected.json: the reference renderings of the chat templates in this directory.

Renders each case with Python's Jinja2 configured as Hugging Face transformers configures it for
apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, a
tojson filter without HTML escaping, raise_exception and strftime_now globals), with strftime_now
reading a fixed time so the output does not depend on the day. chat_template_test renders the same
cases with specdec::chat::ChatTemplate and compares.

Usage: python3 tests/data/chat_templates/make_expected.py   (needs jinja2; 3.1.6 wrote the file)
"""

import datetime
import json
import os

import jinja2
import jinja2.ext
import jinja2.sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
# The time strftime_now() sees; the test's clock returns the same.
NOW = datetime.datetime(2025, 3, 14, 9, 26, 53)

TEMPLATES = {
    "qwen3": {"file": "qwen3.jinja", "bos_token": "", "eos_token": "<|im_end|>"},
    "llama3": {"file": "llama3.jinja", "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama3_2": {"file": "llama3_2.jinja", "bos_token": "<|begin_of_text|>",
                 "eos_token": "<|eot_id|>"},
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What is the capital of France?"}
ASSISTANT = {"role": "assistant", "content": "The capital of France is Paris."}
USER2 = {"role": "user", "content": "  And of Germany?\n"}
WEATHER_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string",
                                                                "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}


def tool_call_turns(arguments_as_string):
    call = json.loads(json.dumps(WEATHER_CALL))
    if arguments_as_string:
        call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    return [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "{\"temperature\": 18, \"sky\": \"clear\"}"},
    ]


def cases():
    """(template, name, messages, add_generation_prompt, extra variables or None)."""
    out = []
    for t in TEMPLATES:
        out += [
            (t, "system_user", [SYSTEM, USER], True, None),
            (t, "multi_turn", [SYSTEM, USER, ASSISTANT, USER2], True, None),
            (t, "no_system", [USER], True, None),
            (t, "no_generation_prompt", [USER, ASSISTANT], False, None),
            (t, "tool_call", tool_call_turns(False), True, None),
            (t, "tools", [SYSTEM, USER], True, {"tools": [WEATHER_TOOL]}),
        ]
    reasoning = {"role": "assistant", "content": "Paris.", "reasoning_content": "\nThe user asks.\n"}
    think = {"role": "assistant", "content": "<think>\nRecall: Paris.\n</think>\n\nIt is Paris."}
    out += [
        ("qwen3", "reasoning_content_last", [USER, reasoning], False, None),
        ("qwen3", "think_in_content_last", [USER, think], False, None),
        ("qwen3", "think_dropped_before_last_query", [SYSTEM, USER, think, USER2], True, None),
        ("qwen3", "tool_call_string_arguments", tool_call_turns(True) + [
            {"role": "tool", "content": "second result"},
            {"role": "assistant", "content": "It is 18 degrees and clear."}], False, None),
        ("qwen3", "system_later_and_thinking_off", [USER, ASSISTANT, SYSTEM, USER2], True,
         {"enable_thinking": False}),
        ("llama3", "date_string", [USER], True, {"date_string": "01 Jan 2030"}),
        ("llama3", "builtin_tools", [
            SYSTEM, {"role": "user", "content": "Search for the news."},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                "name": "brave_search", "arguments": {"query": "news"}}}]},
            {"role": "ipython", "content": "No news."}], True,
         {"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]}),
        ("llama3", "tools_in_system_message", [SYSTEM, USER], True,
         {"tools": [WEATHER_TOOL], "tools_in_user_message": False}),
        ("llama3", "two_tool_calls_raise", [USER, {"role": "assistant", "content": "",
                                                   "tool_calls": [WEATHER_CALL, WEATHER_CALL]}],
         False, None),
    ]
    return out


def environment():
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = NOW.strftime
    return env


def main():
    env = environment()
    compiled = {}
    for name, t in TEMPLATES.items():
        with open(os.path.join(HERE, t["file"]), encoding="utf-8") as f:
            compiled[name] = env.from_string(f.read())
    results = []
    for template, name, messages, add_generation_prompt, extra in cases():
        t = TEMPLATES[template]
        case = {"template": template, "name": name, "messages": messages,
                "add_generation_prompt": add_generation_prompt, "extra": extra}
        try:
            case["expected"] = compiled[template].render(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=t["bos_token"], eos_token=t["eos_token"], **(extra or {}))
        except jinja2.exceptions.TemplateError as e:
            case["expected_error"] = str(e)
        results.append(case)
    now = [NOW.year, NOW.month, NOW.day, NOW.hour, NOW.minute, NOW.second]
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "now": now, "templates": TEMPLATES,
                   "cases": results}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
