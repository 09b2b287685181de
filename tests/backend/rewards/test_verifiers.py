"""Verifiers and local rules on tricky strings."""

import pytest

from backend.core.errors import InputError
from backend.rewards import evaluate, get_verifier, register_verifier, verifier_names
from backend.rewards.answers import extract_answer, parse_int
from backend.rewards.rules import format_spans, style_spans, token_offsets, token_penalties, token_spans


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7+5=12\n#### 132", 132),
        ("####132", 132),
        ("#### 1,234", 1234),
        ("#### -7", -7),
        ("#### 12.0", 12),
        ("#### 12.5", None),  # not an integer answer
        ("#### \nthen 5", None),  # an empty marker is not rescued by a later number
        ("#### 5\n#### 6", 6),  # the last marker wins
        (r"so \boxed{ 42 }", 42),
        (r"\boxed{\frac{1}{2}}", None),
        (r"\boxed{7} but #### 9", 9),  # the explicit marker is preferred
        ("the answer is 17.", 17),
        ("version 1.2", None),
        ("no digits", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_parse_int_forms():
    assert [parse_int(x) for x in ("-1,234", "+7", "12.0", "$5", "1,23", "12a", 9, 3.0, 2.5, True)] == [
        -1234,
        7,
        12,
        5,
        None,
        None,
        9,
        3,
        None,
        None,
    ]


def test_answer_match_and_strict():
    match, strict = get_verifier("answer_match"), get_verifier("answer_match_strict")
    assert match("7+5=12\n#### 12", "12") == 1.0
    assert match("7+5=12\n#### 12", 13) == 0.0
    assert match("answer 132", 132) == 1.0 and strict("answer 132", 132) == 0.0
    assert match("#### 1,234", "The answer\n#### 1234") == 1.0  # GSM8K-style ground truth
    assert get_verifier("answer_and_format")("answer 132", 132) == 0.0


def test_format_rule():
    assert format_spans("3+4=7\n#### 7") == []
    assert format_spans("3+4=7\n#### 7\n") == []  # a trailing newline is fine
    assert [s.rule for s in format_spans("3+4=7\nanswer 7")] == ["no final answer line `#### n`"]
    assert [s.rule for s in format_spans("####7")] == ["answer line malformed"]
    assert [s.rule for s in format_spans("Obviously!!! #### 7")] == ["answer line malformed"]
    assert [s.rule for s in format_spans("#### 7\n#### 7")] == ["answer line before the end"]


def test_style_spans_find_each_kind():
    text = "Obviously!!! 7+5=12\nbasically 4+8=12\nso so so 3+4=7\n1+1=2\n1+1=2\n#### 132!!"
    found = {(s.rule, text[s.start : s.end]) for s in style_spans(text)}
    assert ("over-excited", "Obviously!!!") in found
    assert ("filler", "basically") in found
    assert ("repeated n-gram", " so so") in found
    assert ("repeated line", "1+1=2") in found
    assert ("over-excited", "!!") in found
    assert style_spans("12+12=24\n2+2=4\n#### 24") == []  # digits repeating is arithmetic, not style


def test_character_spans_map_to_tokens():
    tokens = ["Obv", "iously", "!!!", " 7", "+5", "\n", "#### 12"]
    text = "".join(tokens)
    offsets = token_offsets(tokens)
    spans = style_spans(text)
    assert [(a, b) for a, b, _ in token_spans(spans, offsets)] == [(0, 3)]
    assert token_penalties(spans, offsets, "style") == [-1.0, -1.0, -1.0, 0.0, 0.0, 0.0, 0.0]


def test_evaluate_channels_and_token_rewards():
    response = "Wow!!! 7+5=12\n#### 13"
    result = evaluate(response, 12, list(response))
    assert result.scores == {"task": 0.0, "format": 0.0, "style": -1.0, "length": 0.0}
    assert result.token_rewards["style"][:6] == [-1.0] * 6 and result.token_rewards["style"][6] == 0.0
    assert sum(result.token_rewards["format"]) == 0.0
    slipped = evaluate("7+5=12\n= 12", 12, list("7+5=12\n= 12"))
    assert slipped.scores["format"] == -1.0 and slipped.scores["task"] == 1.0
    assert slipped.token_rewards["format"] == [0.0] * 7 + [-1.0] * 4
    assert evaluate("x" * 100, 1, list("x" * 100), length_budget=64).scores["length"] == pytest.approx(
        -36 / 64
    )


def test_registry_errors_and_user_verifiers():
    assert "answer_match" in verifier_names()
    with pytest.raises(InputError, match="unknown verifier 'nope'.*answer_match"):
        get_verifier("nope")
    with pytest.raises(InputError, match="cannot import module"):
        get_verifier("no_such_module_xyz:fn")
    with pytest.raises(InputError, match="has no attribute"):
        get_verifier("json:no_such_function")
    with pytest.raises(InputError, match="not callable"):
        get_verifier("math:pi")
    with pytest.raises(InputError, match="module.path:function"):
        get_verifier("os; rm -rf /:x")
    assert get_verifier("tests.backend.rewards.test_verifiers:always_half")("x", None) == 0.5
    with pytest.raises(ValueError, match="already registered"):
        register_verifier("answer_match", "again")(lambda r, g: 0.0)


def test_user_verifier_must_return_a_number():
    with pytest.raises(InputError, match="returned 'yes'"):
        evaluate("x", 1, verifier="tests.backend.rewards.test_verifiers:returns_text")


def always_half(response, ground_truth):
    return 0.5


def returns_text(response, ground_truth):
    return "yes"
