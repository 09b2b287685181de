"""Token classes are the user's: regex or phrase lists, first match wins, `other` for the rest, saved with
the run in the store and used by every credit-by-class table."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from backend.core.errors import InputError
from backend.credit import credit_shares, token_classes
from backend.demo.subword import subword_records
from backend.ingest import import_records
from backend.store import Store
from tests.backend.test_analysis import small_batch
from tests.conftest import make_records, run_cli_here

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_end_in_other_and_filler_phrases_come_before_style_spans():
    names = token_classes.names()
    assert names[-1] == "other"
    assert names.index("filler") < names.index("style span")  # first match wins: filler by its words
    filler = token_classes.DEFAULT_CLASSES[names.index("filler")]
    assert filler.kind == "phrases" and "i hope this helps" in filler.phrases


def test_phrases_match_across_tokens_and_user_regex_wins_by_order():
    batch = small_batch()  # tokens: "Hi" "," "12" "\n" / "Hi" "," "x"
    classes = (
        token_classes.TokenClass("greeting", "phrases", "hi,"),  # spans two tokens
        *token_classes.DEFAULT_CLASSES,
        token_classes.TokenClass("letters", "regex", r"^[a-z]$"),
    )
    assert token_classes.labels(batch, 0, classes) == ["greeting", "greeting", "digits", "step end"]
    assert token_classes.labels(batch, 1, classes) == ["greeting", "greeting", "letters"]
    mass = credit_shares.credit_mass_by_class(
        {"a": batch.response_mask.float()},
        token_classes.class_ids(batch, classes),
        batch.response_mask,
        token_classes.names(classes),
    )
    assert set(mass["token_class"]) == {"greeting", "digits", "step end", "letters"}
    assert mass["credit_share"].sum() == pytest.approx(1.0)


@pytest.mark.parametrize(
    "bad",
    [
        ("", "regex", "x"),
        ("other", "regex", "x"),
        ("a", "regex", "("),
        ("a", "phrases", "  \n "),
        ("a", "marker", "nope"),
        ("a", "glob", "*"),
    ],
)
def test_bad_classes_are_input_errors(bad):
    with pytest.raises(InputError):
        token_classes.TokenClass(*bad)


def test_classes_are_saved_with_the_run_and_the_cli_edits_them(tmp_path):
    db = tmp_path / "runs.duckdb"
    with Store(db) as store:
        import_records(store, "r", make_records(n_groups=1, group_size=2), content_key="r")
    cli = ["token-classes", "--db", str(db), "--run", "r"]
    out = run_cli_here(*cli, "--add", "hedges", "phrases", "obviously|let me", "--json")
    assert out.returncode == 0, out.stderr
    with Store(db, read_only=True) as store:
        saved = token_classes.from_json(store.run_info("r")["meta"]["token_classes"])
    assert saved[-1] == token_classes.TokenClass("hedges", "phrases", "obviously\nlet me")
    bad = run_cli_here(*cli, "--add", "x", "regex", "(")
    assert bad.returncode == 2 and "not a regex" in bad.stderr
    reset = run_cli_here(*cli, "--reset")
    assert reset.returncode == 0
    with Store(db, read_only=True) as store:
        assert "token_classes" not in store.run_info("r")["meta"]


def test_classes_travel_in_a_link_and_a_bad_one_is_named():
    classes = (
        token_classes.TokenClass("hedges", "phrases", "obviously\nlet me"),
        token_classes.TokenClass("numbers; ok", "regex", r"^\s*\d+[,:]?$"),
        token_classes.TokenClass("key", "marker", "key"),
    )
    text = token_classes.to_link(classes)
    assert token_classes.from_link(text) == classes
    assert token_classes.to_link(token_classes.DEFAULT_CLASSES) == "default"
    assert token_classes.from_link("default") == token_classes.DEFAULT_CLASSES
    with pytest.raises(InputError, match="'broken'.*not a regex"):
        token_classes.from_link('[["fine","regex","a"],["broken","regex","("]]')
    with pytest.raises(InputError, match="marker must be one of"):
        token_classes.from_link('[["k","marker","nope"]]')
    with pytest.raises(InputError, match="class 2 is not a"):
        token_classes.from_link('[["a","regex","a"],["b","regex"]]')
    with pytest.raises(InputError, match="names must be unique"):
        token_classes.from_link('[["a","regex","a"],["a","regex","b"]]')
    for bad in ("{not json", "[]", '{"a": 1}'):
        with pytest.raises(InputError, match="triples"):
            token_classes.from_link(bad)


def _reference_class_ids(tokens: list[list[str]], lengths: list[int], classes) -> list[list[int]]:
    """The per-token definition, written out: first matching class wins; a phrase class holds tokens that
    overlap an occurrence in the response's lowered text; markers are not used here."""
    other = len(classes)
    out = []
    for row, length in zip(tokens, lengths, strict=True):
        row = row[:length]
        text = "".join(row).lower()
        starts = [sum(len(t) for t in row[:i]) for i in range(len(row) + 1)]
        ids = [other] * length
        for k in reversed(range(len(classes))):
            c = classes[k]
            for i, tok in enumerate(row):
                if c.kind == "regex" and re.search(c.pattern, tok):
                    ids[i] = k
                elif c.kind == "phrases":
                    spans = [(m.start(), m.end()) for p in c.phrases for m in re.finditer(re.escape(p), text)]
                    if any(a < starts[i + 1] and starts[i] < b for a, b in spans):
                        ids[i] = k
        out.append(ids)
    return out


def test_class_ids_from_arrow_text_equal_the_per_token_definition(tmp_path):
    """Streamed estimates classify tokens from the store's Arrow text (one regex call per distinct token);
    the views from python lists. Both equal the definition on byte-level BPE text, with a phrase that
    spans tokens and one that starts inside a token."""
    records = subword_records(groups=3)  # the first three groups hold a token of every class checked below
    with Store(tmp_path / "s.duckdb") as store:
        import_records(store, "subword", records, content_key="subword")
        as_lists = store.load_batch("subword", fields={"tokens"})
        as_arrow = store.load_batch("subword", fields={"token_text"})
    assert as_arrow.tokens is None and as_lists.token_text is None
    classes = (
        token_classes.TokenClass("carries", "phrases", "rry 1\n=1"),
        *[c for c in token_classes.DEFAULT_CLASSES if c.kind == "regex"],
        token_classes.TokenClass("capital", "regex", r"^\s?[A-Z]"),
    )
    lengths = as_lists.lengths.tolist()
    expected = _reference_class_ids(as_lists.tokens, lengths, classes)
    for batch in (as_lists, as_arrow):
        ids = token_classes.class_ids(batch, classes)
        got = [ids[i, :length].tolist() for i, length in enumerate(lengths)]
        assert got == expected
    seen = {k for row in expected for k in row}
    assert {0, 1, 2, len(classes)} <= seen  # the phrase, a regex, digits and other all occur


def test_style_span_leaves_format_penalties_and_filler_is_found_by_its_words():
    from backend.core.batch import batch_from_records  # noqa: PLC0415 - only this test builds its own batch

    tokens = ["Great", " question", "!", " 4", "\n", "#", "##", " x"]
    batch = batch_from_records(
        [
            {
                "token_ids": list(range(len(tokens))),
                "group_id": 0,
                "tokens": tokens,
                "scores": {"task": 1.0},
                "token_rewards": {"format": [0.0] * 5 + [-1.0] * 3, "style": [0.0] * 8},
            }
        ]
    )
    labels = token_classes.labels(batch, 0)
    assert labels[:2] == ["filler", "filler"]  # "great question" spans two tokens
    assert "style span" not in labels  # a format penalty is not a style span
    assert labels[5:] == ["punctuation", "punctuation", "other"]


def test_move_reorders_and_phrases_show_as_phrases():
    moved = token_classes.move(token_classes.DEFAULT_CLASSES, "style span", "up")
    assert token_classes.names(moved)[:3] == ("key", "style span", "filler")
    assert token_classes.names(token_classes.move(moved, "key", "last"))[-2:] == ("key", "other")
    with pytest.raises(InputError, match="no such class"):
        token_classes.move(moved, "nope", "up")
    shown = token_classes.shown_pattern(token_classes.TokenClass("f", "phrases", "let me think\nyou know"))
    assert shown == "let me think | you know"
    assert token_classes.parse_pattern("phrases", shown) == "let me think\nyou know"
    assert token_classes.parse_pattern("regex", "a|b") == "a|b"


def test_the_cli_moves_a_class_and_prints_phrases_as_phrases(tmp_path):
    db = tmp_path / "runs.duckdb"
    with Store(db) as store:
        import_records(store, "r", make_records(n_groups=1, group_size=2), content_key="r")
    cli = ["token-classes", "--db", str(db), "--run", "r"]
    out = run_cli_here(*cli, "--add", "hedges", "phrases", "obviously|let me", "--move", "hedges", "first")
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0].split()
    assert first[:2] == ["hedges", "phrases"] and "obviously | let me" in out.stdout.splitlines()[0]
    up = run_cli_here(*cli, "--move", "style span", "up", "--json")
    names = [c["name"] for c in json.loads(up.stdout)]
    assert names.index("style span") < names.index("filler")
    bad = run_cli_here(*cli, "--move", "nope", "up")
    assert bad.returncode == 2 and "no such class" in bad.stderr


def test_estimate_rows_carry_each_tokens_class(tmp_path):
    """Before: `creditlens estimate` rows and `Run.estimate` had no class, so credit could not be weighed by
    class without redoing the classification (issue 42 item 10). The rows use the run's own classes."""
    import creditlens  # noqa: PLC0415 - the notebook API, only here

    db = tmp_path / "runs.duckdb"
    with Store(db) as store:
        import_records(store, "r", make_records(n_groups=2, group_size=3), content_key="r")
    added = run_cli_here(
        "token-classes", "--db", db, "--run", "r", "--add", "ones", "regex", "^t1", "--move", "ones", "first"
    )
    assert added.returncode == 0, added.stderr
    with Store(db, read_only=True) as store:
        batch = store.load_batch("r")
        classes = token_classes.from_json(store.run_info("r")["meta"]["token_classes"])
    want = [label for row in range(batch.B) for label in token_classes.labels(batch, row, classes)]
    assert {"ones", "style span", "other"} <= set(want)  # t1*, the style token rewards, the rest
    for cached in (False, True):  # computed, then read back from the store's cache
        out = tmp_path / f"rows_{cached}.parquet"
        args = ["estimate", "--db", db, "--run", "r", "--estimator", "grpo", "--out", out]
        done = run_cli_here(*args, *([] if cached else ["--no-cache"]))
        assert done.returncode == 0, done.stderr
        written = pd.read_parquet(out)
        assert list(written.columns) == [
            "rollout_id",
            "group_id",
            "pos",
            "token_id",
            "token",
            "token_class",
            "advantage",
        ]
        assert written["token_class"].tolist() == want
    assert all(t.startswith("t1") for t in written.loc[written["token_class"] == "ones", "token"])
    frame = creditlens.open(db).run("r").estimate("grpo")
    assert frame["token_class"].tolist() == want
    by_class = frame.groupby("token_class")["advantage"].apply(lambda a: a.abs().sum())
    assert by_class.sum() == pytest.approx(frame["advantage"].abs().sum())


def _each_responses_own_search(tokens: list[str], phrases: list[str]) -> list[bool]:
    """The reference: one regex of every phrase tried at every character of the response's lowered text (a
    lookahead, so overlapping occurrences are found too); a token is hit when it overlaps an occurrence."""
    text = "".join(tokens).lower()
    starts = np.cumsum([0] + [len(t) for t in tokens])
    pattern = re.compile(
        "(?=(" + "|".join(re.escape(p) for p in sorted(set(phrases), key=len, reverse=True)) + "))"
    )
    hits = np.zeros(len(tokens), dtype=bool)
    for m in pattern.finditer(text):
        first = int(np.searchsorted(starts, m.start(1), side="right")) - 1
        last = int(np.searchsorted(starts, m.end(1), side="left")) - 1
        hits[max(first, 0) : last + 1] = True
    return hits.tolist()


def test_a_batchs_phrase_hits_equal_each_responses_own_search():
    """The whole batch searched at once (responses joined, `str.find` per phrase, occurrences mapped to
    tokens in one step) marks the tokens that searching each response's lowered text alone marks: phrases
    split over tokens, overlapping occurrences ("well well well"), upper case, empty and missing tokens,
    empty responses, non-ASCII text."""
    phrases = [*token_classes.FILLER_PHRASES, "well well"]
    pieces = ["Let", " me", " THINK", " well", " well", "", " ", "W", "ELL", " I", " mean", "!", "Σ", "é",
              " you", " know", "certainly", "x", "\n", " so", " yeah", " basically", None]  # fmt: skip
    rng = random.Random(4)
    marked = 0
    for _ in range(200):
        lengths = np.array([rng.randint(0, 30) for _ in range(rng.randint(1, 6))])
        tokens = [rng.choice(pieces) for _ in range(int(lengths.sum()))]
        batch = token_classes._flat_phrase_hits(pa.array(tokens, pa.string()), lengths, phrases)
        rows, at = [], 0
        for n in lengths.tolist():
            row = [t or "" for t in tokens[at : at + n]]
            rows.append(_each_responses_own_search(row, phrases))
            at += n
        assert batch.tolist() == [hit for row in rows for hit in row]
        marked += int(batch.sum())
    assert marked > 500  # the draws do hit phrases
