"""WebShop search = Lucene 8 (pyserini): the analyser, the norm encoding and BM25 scores, checked
against values worked out by hand from Lucene's rules (and confirmed with Lucene 8.7 itself by
``scripts/compare_lucene.py``)."""

from __future__ import annotations

import math

import numpy as np
from agentrl.envs.webshop.lucene import (
    analyze,
    byte4_to_int,
    int_to_byte4,
    lowercase,
    possessive,
    tokenize,
)
from agentrl.envs.webshop.porter import porter_stem
from agentrl.envs.webshop.search import BM25Index, idf, norm_inverse_table
from hypothesis import given, settings
from hypothesis import strategies as st

# -- SmallFloat.intToByte4 / byte4ToInt ------------------------------------------------------------


def test_norm_encoding_hand_values():
    # 0..23 are stored exactly (NUM_FREE_VALUES = 255 - longToInt4(2^31 - 1) = 255 - 231 = 24).
    for n in range(24):
        assert int_to_byte4(n) == n and byte4_to_int(n) == n
    # 24 + longToInt4(0) = 24; 40 - 24 = 16 = 0b10000: shift 1, mantissa 0, exponent 2 -> 16 + 24.
    assert int_to_byte4(24) == 24 and int_to_byte4(40) == 40 and byte4_to_int(40) == 40
    # 41 - 24 = 17 = 0b10001 keeps four bits 0b1000 -> same byte as 40: lengths round down.
    assert int_to_byte4(41) == 40
    # 100 - 24 = 76 = 0b1001100: 7 bits, shift 3, top four 0b1001 -> (1 | 4 << 3) = 33 -> byte 57,
    # decoded (0b1001 << 3) + 24 = 96.
    assert int_to_byte4(100) == 57 and byte4_to_int(57) == 96
    # 1000 - 24 = 976 = 0b1111010000: shift 6, 0b1111 -> (7 | 7 << 3) = 63 -> byte 87 -> 960 + 24.
    assert int_to_byte4(1000) == 87 and byte4_to_int(87) == 984
    assert int_to_byte4(2**31 - 1) == 255 and byte4_to_int(255) == 2013265944


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1))
def test_norm_encoding_rounds_down_and_is_monotonic(a, b):
    assert byte4_to_int(int_to_byte4(a)) <= a
    if a <= b:
        assert int_to_byte4(a) <= int_to_byte4(b)


def test_norm_encoding_round_trips_every_byte():
    assert [int_to_byte4(byte4_to_int(b)) for b in range(256)] == list(range(256))


# -- StandardTokenizer + filters -------------------------------------------------------------------


def test_standard_tokenizer_ascii_rules():
    text = "The runner's 16.9 fl oz i'm charger_cable a.b 3,000 1:2 a:b _ __x x__ e-mail U.S.A."
    assert tokenize(text) == [
        "The", "runner's", "16.9", "fl", "oz", "i'm", "charger_cable", "a.b", "3,000",
        "1", "2", "a:b", "__x", "x__", "e", "mail", "U.S.A",
    ]  # fmt: skip
    # a mid character joins only letter-letter (. ' :) or digit-digit (. ' , ;)
    assert tokenize("a1.2 1a.b a.1 1.a x..y 1,,2 a;b 5;6") == [
        "a1.2", "1a.b", "a", "1", "1", "a", "x", "y", "1", "2", "a", "b", "5;6",
    ]  # fmt: skip


def test_standard_tokenizer_unicode_rules():
    assert tokenize("東京タワーへ行く") == ["東", "京", "タワー", "へ", "行", "く"]
    assert tokenize("ひらがなカタカナ 한국어") == ["ひ", "ら", "が", "な", "カタカナ", "한국어"]
    assert tokenize("ภาษาไทย ok") == ["ภาษาไทย", "ok"]
    assert tokenize("café e\u0301cole a\u00adb a\u200bb a\u200db") == [
        "café", "e\u0301cole", "a\u00adb", "a", "b", "a\u200db",
    ]  # fmt: skip
    emoji = "😀 ❤️ ★ © ™ 👍🏽 👨\u200d👩\u200d👧 🇺🇸 ½ ² #1"
    assert tokenize(emoji) == ["😀", "❤️", "★", "©", "™", "👍🏽", "👨\u200d👩\u200d👧", "🇺🇸", "1"]


def test_long_tokens_are_cut_at_255_characters():
    assert [len(t) for t in tokenize("x" * 600)] == [255, 255, 90]


def test_possessive_lowercase_and_stop_words():
    assert possessive("dog's") == "dog" and possessive("DOG'S") == "DOG"
    assert possessive("it\u2019s") == "it" and possessive("'s") == "" and possessive("s") == "s"
    # Java's per-character lower case: final sigma stays σ, dotted I becomes i.
    assert lowercase("ΟΔΟΣ İstanbul ǅ") == "οδοσ istanbul ǆ"
    assert analyze("it’s a dog’s life, and THE end") == ["dog", "life", "end"]
    assert analyze("The runner's 16.9 fl oz i'm charger_cable") == [
        "runner", "16.9", "fl", "oz", "i'm", "charger_c",
    ]  # fmt: skip


def test_porter_stems_as_lucene():
    # Lucene's PorterStemmer (Porter's own release): note -bli -> -ble and -logi -> -log.
    cases = {
        "generalization": "gener", "probabilities": "probabl", "archaeology": "archaeolog",
        "sensibility": "sensibl", "hopping": "hop", "hoping": "hope", "falling": "fall",
        "conditional": "condit", "relational": "relat", "cats": "cat", "ponies": "poni",
        "caresses": "caress", "agreed": "agre", "happy": "happi", "sky": "sky",
        "electrical": "electr", "hopefulness": "hope", "adjustment": "adjust", "revival": "reviv",
        "controllable": "control", "roll": "roll", "rate": "rate", "xy": "xy", "yes": "ye",
        "buyer": "buyer", "radically": "radic", "feeling": "feel", "message": "messag",
    }  # fmt: skip
    assert {w: porter_stem(w) for w in cases} == cases


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_analysis_never_crashes_and_terms_come_from_the_text(text):
    terms = analyze(text)
    assert all(0 < len(t) <= 255 for t in terms)
    for tok in tokenize(text):
        assert tok in text and 0 < len(tok) <= 255


# -- BM25 ------------------------------------------------------------------------------------------


def _bits(x: float) -> int:
    return int(np.float32(x).view(np.int32))


def test_bm25_scores_match_lucene_bit_for_bit(tmp_path):
    docs = ["red running shoes", "blue running shoes for men", "red red dress", "green hat"]
    ids = ["B3", "A1", "C2", "D4"]
    BM25Index.build(docs, ids, tmp_path)
    index = BM25Index(tmp_path)
    # lengths 3, 4 (for is a stop word), 3, 2: avgdl = 12 / 4 = 3.
    assert index.avgdl == np.float32(3.0) and list(index.norms) == [3, 4, 3, 2]

    # By hand, in float32 as Lucene: idf(red) = log(1 + (4 - 2 + .5) / (2 + .5)) = log 2.
    f32 = np.float32
    inv3 = f32(1) / (f32(0.9) * ((f32(1) - f32(0.4)) + f32(0.4) * f32(3) / f32(3)))
    w_red = f32(2) * f32(math.log(2.0))  # "red" twice in the query: boost 2
    w_shoe = f32(1) * f32(math.log(1 + 2.5 / 2.5))
    red_in_b3 = w_red - w_red / (f32(1) + f32(1) * inv3)
    shoe_in_b3 = w_shoe - w_shoe / (f32(1) + f32(1) * inv3)
    expected_b3 = f32(float(red_in_b3) + float(shoe_in_b3))
    assert norm_inverse_table(f32(3.0))[3] == inv3 and idf(2, 4) == f32(math.log(2.0))

    docs_, scores = index.scores("red shoes red")
    got = {ids[d]: _bits(s) for d, s in zip(docs_, scores)}
    assert got["B3"] == _bits(expected_b3)
    # Lucene 8.7's own scores (Float.floatToIntBits) for the same index and queries:
    assert got == {"B3": 1066145461, "C2": 1064616110, "A1": 1051701332}
    assert [ids[d] for d in index.search("red shoes red")] == ["B3", "C2", "A1"]
    # "shoes": B3 and A1; "hat": D4 only; unknown words and stop words match nothing.
    assert {ids[d]: _bits(s) for d, s in zip(*index.scores("shoes"))} == {
        "B3": 1052428529, "A1": 1051701332,
    }  # fmt: skip
    assert [ids[d] for d in index.search("hat")] == ["D4"]
    assert index.search("the zzz") == [] and index.search("shoes", 0) == []


def test_ties_are_broken_by_id_string(tmp_path):
    docs = ["lamp"] * 5
    ids = ["B9", "B10", "A5", "b1", "B1"]
    BM25Index.build(docs, ids, tmp_path)
    index = BM25Index(tmp_path)
    assert [ids[d] for d in index.search("lamp")] == ["A5", "B1", "B10", "B9", "b1"]
    assert [ids[d] for d in index.search("lamp", 2)] == ["A5", "B1"]
