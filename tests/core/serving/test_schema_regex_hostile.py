"""Schema patterns from a client never run unbounded: the attack is a 300-byte schema whose string items must match
``^.*.*...X$`` (16 stacked ``.*``; 37.8 s of CPU in Python's re on a 17-character answer, the GIL held all the
while) and an alternation ``^(a|aa)*$`` against 36 characters. The match runs in ``regex`` with one time budget per
validation and without the GIL, so the request is refused within its budget and ``GET /v1/models`` answers at once.
"""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from embeval.errors import InvalidInputError
from embeval.serving import openai_server
from embeval.serving.runner import serve_in_thread
from embeval.subjects.json_output import PATTERN_BUDGET_S, MAX_PATTERN_SUBJECT, parse_and_validate
from embeval.subjects.scripted import ScriptedLLM

STACKED = {"type": "object", "properties": {"dimensions": {"type": "array", "items": {
    "type": "string", "pattern": "^" + ".*" * 16 + "X$"}}}}


@pytest.mark.parametrize("schema,text,why", [
    (STACKED, '{"dimensions": ["spatial reasoning and more words"]}', "does not match"),  # regex needs no backtracking
    ({"type": "string", "pattern": "^(a|aa)*$"}, '"' + "a" * 36 + 'b"', "took over .* s to match"),
    ({"type": "object", "patternProperties": {"^(a|aa)*$": {}}, "additionalProperties": False},
     '{"' + "a" * 36 + 'b": 1}', "took over .* s to match"),
])
def test_catastrophic_patterns_are_refused_within_the_budget(schema, text, why):
    t = time.monotonic()
    with pytest.raises(InvalidInputError, match=why):
        parse_and_validate(text, schema)
    assert time.monotonic() - t < PATTERN_BUDGET_S + 2.0


def test_ordinary_patterns_still_validate_and_long_strings_are_capped():
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": r"^[a-z]+-\d+$"}},
              "patternProperties": {"^x_": {"type": "integer"}}, "additionalProperties": False}
    assert parse_and_validate('{"id": "item-12", "x_a": 3}', schema) == {"id": "item-12", "x_a": 3}
    with pytest.raises(InvalidInputError, match="does not match"):
        parse_and_validate('{"id": "Item 12"}', schema)
    with pytest.raises(InvalidInputError, match="Additional properties"):
        parse_and_validate('{"id": "a-1", "y": 1}', schema)
    with pytest.raises(InvalidInputError, match="does not match the schema"):
        parse_and_validate('{"id": "a-1", "x_a": "no"}', schema)
    with pytest.raises(InvalidInputError, match="over the limit"):
        parse_and_validate('"' + "a" * (MAX_PATTERN_SUBJECT + 1) + '"', {"type": "string", "pattern": "a"})


def test_server_stays_responsive_while_a_hostile_pattern_is_matched():
    schema = {"type": "object", "properties": {"dimensions": {"type": "array", "items": {
        "type": "string", "pattern": "^(a|aa)*$"}}}}
    llm = ScriptedLLM(rules=[{"match": "propose", "response": '{"dimensions": ["' + "a" * 40 + 'b"]}'}])
    app = openai_server.create_app(llm)
    body = {"messages": [{"role": "user", "content": "propose"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    with serve_in_thread(app) as srv:
        box: dict = {}

        def bad():
            t = time.monotonic()
            box["r"] = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=120)
            box["s"] = time.monotonic() - t

        th = threading.Thread(target=bad)
        th.start()
        time.sleep(0.1)  # the bad request is at the model by now
        worst = 0.0
        while th.is_alive():
            t = time.monotonic()
            assert httpx.get(srv.url + "/v1/models", timeout=30).status_code == 200
            worst = max(worst, time.monotonic() - t)
            time.sleep(0.05)
        th.join()
    assert box["r"].status_code in (400, 422, 502), box["r"].text
    assert "took over" in box["r"].text
    assert box["s"] < PATTERN_BUDGET_S + 3.0  # before: minutes (Python's re on 40 characters)
    assert worst < PATTERN_BUDGET_S  # before: as long as the match, the GIL held
