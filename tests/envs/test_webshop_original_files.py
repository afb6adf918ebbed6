"""Malformed original-format WebShop files: every one gives a CatalogueError naming the file (and
the record) or is skipped by the reference's rules with a counted warning; nothing else escapes
(TypeError, RecursionError, IsADirectoryError, inf and negative prices)."""

from __future__ import annotations

import json
import logging
import math

import pytest
from agentrl.envs.webshop import CatalogueError, WebShopEnv, load_original
from agentrl.envs.webshop.original import MAX_GOALS_PER_PRODUCT, MAX_PRICE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def item(asin="B000000001", **extra):
    rec = {
        "asin": asin,
        "name": "Acme Tea Tree Shampoo",
        "category": "beauty",
        "query": "shampoo",
        "product_category": "Beauty › Hair Care › Shampoo",
        "full_description": "A shampoo.",
        "small_description": ["feature one"],
        "pricing": "$12.99",
        "customization_options": {"Size": [{"value": "8 fl oz"}, {"value": "16 fl oz"}]},
    }
    rec.update(extra)
    return rec


HUMAN = {
    "B000000001": [
        {"instruction": "i need a tea tree shampoo", "instruction_attributes": ["tea tree"]}
    ]
}
ATTRS = {
    "B000000001": {
        "attributes": ["tea tree"],
        "instruction": "i want a shampoo",
        "instruction_attributes": ["tea tree"],
    }
}


def write(tmp_path, items, attrs=None, human=None):
    files = []
    for name, data in (
        ("items_shuffle.json", items),
        ("items_ins_v2.json", ATTRS if attrs is None else attrs),
        ("items_human_ins.json", HUMAN if human is None else human),
    ):
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        files.append(path)
    return files


def load(files, **kw):
    return load_original(*files, **kw)


# -- the classes named in the issue ----------------------------------------------------------------


@pytest.mark.parametrize("reviews", [5, "five", 1.5, {"a": 1}, [1, 2], [{"stars": 5}], None, True])
def test_a_products_own_reviews_and_rating_are_ignored_as_in_the_reference(tmp_path, reviews):
    files = write(tmp_path, [item(Reviews=reviews, average_rating=reviews)])
    (p,), _ = load(files)
    assert p["Reviews"] == [] and p["Rating"] == "N.A."


@pytest.mark.parametrize("which", [0, 1, 2])
@pytest.mark.parametrize("depth", [10_000, 200_000])
def test_deep_nesting_names_the_file(tmp_path, which, depth):
    files = write(tmp_path, [item()])
    files[which].write_text("[" * depth + "]" * depth)
    with pytest.raises(
        CatalogueError, match=rf"{files[which].name}: (JSON nested too deeply|expected)"
    ):
        load(files)
    # nested inside a record, too
    nested = "[" * depth + "]" * depth
    files[0].write_text('[{"asin": "B000000001", "name": ' + nested + "}]")
    with pytest.raises(CatalogueError, match=files[0].name):
        load(files)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_directory_given_as_a_file_names_it(tmp_path, which):
    files = write(tmp_path, [item()])
    files[which].unlink()
    files[which].mkdir()
    with pytest.raises(CatalogueError, match=rf"{files[which].name}: is a directory"):
        load(files)
    if which == 0:
        with pytest.raises(CatalogueError, match="is a directory"):
            WebShopEnv(
                product_file=str(files[0]),
                attribute_file=str(files[1]),
                human_instruction_file=str(files[2]),
                cache_dir=str(tmp_path / "cache"),
            )


@pytest.mark.parametrize(
    "pricing, message",
    [
        ("$" + "9" * 400, "price out of range"),
        ("$" + "9" * 10, "price out of range"),
        (f"${MAX_PRICE:.0f}", "price out of range"),
        ("$1e999", None),  # the reference's parse drops the 'e' like any non-digit: $1999
        ("$-5.00", "negative price"),
        ("$ -5.00", "negative price"),
        ("$10.00 - $-2", "negative price"),
        ("$1.2.3", "cannot parse"),
        ("$", "cannot parse"),
        ("12.99", "cannot parse"),
        (12.99, "'pricing' must be a string"),
        (["$1"], "'pricing' must be a string"),
    ],
)
def test_bad_prices_name_the_record(tmp_path, pricing, message):
    files = write(tmp_path, [item(), item("B000000002", pricing=pricing)])
    if message is None:
        products, _ = load(files)
        assert products[1]["price"] == 1999.0
        return
    with pytest.raises(
        CatalogueError, match=rf"items_shuffle.json: record 1 \(asin 'B000000002'\): {message}"
    ):
        load(files)


@given(st.text(max_size=40))
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_pricing_string_gives_a_finite_price_or_a_clear_error(tmp_path, text):
    files = write(tmp_path, [item(pricing=text)])
    try:
        (p,), _ = load(files)
    except CatalogueError as exc:
        assert "items_shuffle.json: record 0 (asin 'B000000001')" in str(exc)
        return
    assert math.isfinite(p["price"]) and 0.0 <= p["price"] < MAX_PRICE
    assert all(math.isfinite(x) and x >= 0 for x in p["pricing"])


# -- any JSON value in any field ---------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3)
    ),
    max_leaves=8,
)
PRODUCT_FIELDS = [
    "asin", "name", "category", "query", "product_category", "full_description",
    "small_description", "pricing", "customization_options", "Reviews", "average_rating",
]  # fmt: skip


@given(st.sampled_from(PRODUCT_FIELDS), json_values, st.booleans())
@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_value_in_any_product_field_loads_or_names_file_and_record(
    tmp_path, field, value, human
):
    broken = item("B000000002")
    broken[field] = value
    files = write(tmp_path, [item(), broken])
    try:
        products, goals = load(files, human_goals=human)
    except CatalogueError as exc:
        msg = str(exc)
        assert (
            ("items_shuffle.json" in msg or "items_ins_v2.json" in msg)
            and "record" in msg
            or ("no usable" in msg)
        ), msg
        return
    for p in products:
        assert isinstance(p["Title"], str) and isinstance(p["Description"], str)
        assert all(isinstance(b, str) for b in p["BulletPoints"])
        assert all(isinstance(v, str) for vs in p["options"].values() for v in vs)
        assert math.isfinite(p["price"])
    assert goals


@given(json_values, st.sampled_from(["entry", "attributes", "options", "instruction", "list"]))
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_value_in_the_instruction_files_loads_or_names_file_and_record(tmp_path, value, where):
    human = json.loads(json.dumps(HUMAN))
    attrs = json.loads(json.dumps(ATTRS))
    entry = human["B000000001"][0]
    if where == "entry":
        human["B000000001"] = value
    elif where == "attributes":
        entry["instruction_attributes"] = value
        attrs["B000000001"]["attributes"] = value
    elif where == "options":
        entry["instruction_options"] = value
        attrs["B000000001"]["instruction_attributes"] = value
    elif where == "instruction":
        entry["instruction"] = value
        attrs["B000000001"]["instruction"] = value
    else:
        human["B000000001"] = [value]
        attrs["B000000001"] = value
    files = write(tmp_path, [item()], attrs=attrs, human=human)
    for human_goals in (True, False):
        try:
            _, goals = load(files, human_goals=human_goals)
        except CatalogueError as exc:
            msg = str(exc)
            assert any(n in msg for n in ("items_ins_v2.json", "items_human_ins.json")), msg
            continue
        assert all(isinstance(a, str) for g in goals for a in g["attributes"])
        assert all(isinstance(g["instruction_text"], str) for g in goals)


# -- skips and limits ----------------------------------------------------------------------------------


def test_skipped_records_are_counted_in_one_warning_each(tmp_path, caplog):
    items = [item(), item("nan"), item("B0000000011111"), item("B000000001"), item("B000000001")]
    human = {
        "B000000001": [*HUMAN["B000000001"], {"instruction": "x", "instruction_attributes": []}]
    }
    files = write(tmp_path, items, human=human)
    with caplog.at_level(logging.WARNING):
        products, goals = load(files)
    assert len(products) == 1 and len(goals) == 1
    text = caplog.text
    assert "skipped 2 product records with ASIN 'nan' or longer than 10 characters" in text
    assert "skipped 2 product records repeating an earlier ASIN" in text
    assert "skipped 1 human instructions without attributes" in text


def test_too_many_option_combinations_is_an_error_not_a_hang(tmp_path):
    options = {f"o{k}": [{"value": f"v{j}"} for j in range(8)] for k in range(7)}  # 8**7 goals
    assert MAX_GOALS_PER_PRODUCT < 8**7
    files = write(tmp_path, [item(customization_options=options)])
    with pytest.raises(CatalogueError, match=r"record \(asin 'B000000001'\): 2097152 option"):
        load(files, human_goals=False)
