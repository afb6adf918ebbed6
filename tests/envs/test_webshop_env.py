"""WebShop-v0: pages, actions, bad input, tasks, milestones, expert, and pool workers."""

from __future__ import annotations

import gymnasium as gym
import pytest
from agentrl.envs.base import INFO_KEYS
from agentrl.envs.webshop import MILESTONES, WebShopEnv
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl import envs
from agentrl.pool import EnvPool, EnvSpec


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("webshop-cache"))


@pytest.fixture(scope="module")
def env(cache):
    return WebShopEnv(num_products=300, cache_dir=cache)


def run_expert(env, task_id):
    obs, info = env.reset(options={"task_id": task_id})
    infos = [info]
    while True:
        obs, reward, terminated, truncated, info = env.step(env.expert_action())
        infos.append(info)
        if terminated or truncated:
            return reward, infos


def test_registered_and_made_through_gymnasium(cache):
    assert "agentrl/WebShop-v0" in envs.list_envs()
    e = gym.make("agentrl/WebShop-v0", num_products=300, cache_dir=cache).unwrapped
    assert isinstance(e, WebShopEnv)


def test_check_env(cache):
    check_env(WebShopEnv(num_products=300, cache_dir=cache))


def test_expert_wins_at_least_99_percent_of_500_test_instructions(cache):
    env = WebShopEnv(num_products=1000, cache_dir=cache)
    tids = env.task_ids("test")
    assert tids == [str(i) for i in range(500)]
    wins = [run_expert(env, t)[1][-1]["won"] for t in tids]
    assert sum(wins) >= 0.99 * len(tids)


def test_pages_navigation_and_observation_format(env):
    obs, info = env.reset(options={"task_id": "3"})
    instr = info["instruction"]
    assert obs == f"WebShop [SEP] Instruction: [SEP] {instr} [SEP] Search"
    assert info["admissible_actions"] == ["search[<your query>]"]
    assert set(INFO_KEYS) <= set(info) and info["state_key"] == ("search",)

    obs, r, term, trunc, info = env.step("search[quality value for daily use]")
    assert info["action_valid"] and r == 0.0 and not (term or trunc)
    assert obs.startswith(
        f"Instruction: [SEP] {instr} [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next >"
    )
    kind, page_no, shown = info["state_key"]
    assert (kind, page_no, len(shown)) == ("results", 1, 10)
    assert info["admissible_actions"][:2] == ["click[back to search]", "click[next >]"]
    assert [a for a in info["admissible_actions"][2:]] == [f"click[{a.lower()}]" for a in shown]
    page1 = info["state_key"]

    obs, _, _, _, info = env.step("click[Next >]")  # labels are case-insensitive
    assert (
        "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in obs and info["state_key"][1] == 2
    )
    _, _, _, _, info = env.step("click[< prev]")
    assert info["state_key"] == page1

    asin = shown[0]
    obs, _, _, _, info = env.step(f"click[{asin}]")
    assert info["state_key"] == ("item", asin, ())
    assert obs.startswith(f"Instruction: [SEP] {instr} [SEP] Back to Search [SEP] < Prev")
    assert obs.endswith("[SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now")
    assert "Price: $" in obs and "Rating: " in obs
    product = env.catalogue.product(env.catalogue.search("quality value for daily use")[0])
    for name, values in product["options"].items():
        assert f"[SEP] {name} [SEP] " + " [SEP] ".join(values) in obs
        assert f"click[{values[0]}]" in info["admissible_actions"]
    if product["options"]:
        name, values = next(iter(product["options"].items()))
        _, _, _, _, info = env.step(f"click[{values[-1]}]")
        assert info["state_key"] == ("item", asin, ((name, values[-1]),))
    item_key = info["state_key"]

    obs, _, _, _, info = env.step("click[description]")
    assert obs.endswith(product["Description"]) and info["state_key"][0] == "description"
    obs, _, _, _, info = env.step("click[features]")  # not on a sub-page
    assert not info["action_valid"]
    _, _, _, _, info = env.step("click[< prev]")
    assert info["state_key"] == item_key  # back on the item, options kept
    _, _, _, _, info = env.step("click[reviews]")
    assert info["state_key"][0] == "reviews"
    _, _, _, _, info = env.step("click[back to search]")
    assert info["state_key"] == ("search",)


@pytest.mark.parametrize(
    "action",
    [
        "click[nonexistent]",
        "search[]",
        "search[   ]",
        "search[shoes",
        "search[a]b]",
        "click[[x]]",
        "search" + "[" + "x" * 10_000 + "]",
        "buy now",
        "",
        "click[]",
        "CLICK",
        None,
        42,
    ],
)
def test_bad_input_is_invalid_and_changes_nothing(env, action):
    obs0, info0 = env.reset(options={"task_id": "1"})
    obs, reward, term, trunc, info = env.step(action)
    assert (obs, reward, term, trunc) == (obs0, 0.0, False, False)
    assert (
        not info["action_valid"] and info["state_key"] == info0["state_key"] and info["steps"] == 1
    )


def test_clicking_on_the_wrong_page_and_searching_without_a_search_box(env):
    env.reset(options={"task_id": "1"})
    for action in ("click[buy now]", "click[next >]", "click[< prev]", "click[back to search]"):
        _, _, _, _, info = env.step(action)  # the search page has no buttons
        assert not info["action_valid"] and info["state_key"] == ("search",)
    _, _, _, _, info = env.step("search[shoes]")
    obs, _, _, _, info2 = env.step("search[socks]")  # no search box on the results page
    assert not info2["action_valid"] and info2["state_key"] == info["state_key"]
    _, _, _, _, info = env.step("click[buy now]")  # no Buy Now on results
    assert not info["action_valid"]


def test_step_cap_truncates(cache):
    env = WebShopEnv(num_products=300, cache_dir=cache, max_steps=4)
    env.reset(seed=0)
    for k in range(4):
        _, _, term, trunc, _ = env.step("click[nothing]")
        assert not term and trunc == (k == 3)


def test_purchase_terminates_with_the_score_and_later_steps_are_invalid(env):
    reward, infos = run_expert(env, "7")
    last = infos[-1]
    assert reward == 1.0 and last["won"] and last["score"] == 1.0
    assert last["milestones"] == MILESTONES
    assert last["state_key"][0] == "done" and last["admissible_actions"] == []
    assert last["reward_info"]["r_type"] == 1.0
    obs, r, term, trunc, info = env.step("click[buy now]")
    assert (r, term, info["action_valid"], info["score"]) == (0.0, True, False, 1.0)


def test_wrong_purchase_scores_below_one_and_milestones_stay_in_order(env):
    env.reset(options={"task_id": "5"})
    other = (
        "gummy candy sour"
        if env.catalogue.goal(5)["category"] == "furniture"
        else "wooden bookshelf"
    )
    _, _, _, _, info = env.step(f"search[{other}]")
    env.step(f"click[{info['state_key'][2][0]}]")  # a product of another type
    _, reward, term, _, info = env.step("click[buy now]")
    assert term and reward < 1.0 and not info["won"] and info["score"] == reward
    assert info["reward_info"]["r_type"] < 1.0
    assert info["milestones"] == ("purchased",)


def test_milestones_follow_the_expert_in_order(env):
    _, infos = run_expert(env, "11")
    seen = [tuple(i["milestones"]) for i in infos]
    assert seen[0] == ()
    assert all(a == b[: len(a)] for a, b in zip(seen, seen[1:]))  # only ever appended
    assert seen[-1] == MILESTONES


def test_reset_by_seed_picks_a_training_instruction_deterministically(env):
    a = [env.reset(seed=s)[1]["task_id"] for s in range(20)]
    b = [env.reset(seed=s)[1]["task_id"] for s in range(20)]
    assert a == b and len(set(a)) > 10
    train = set(env.task_ids("train"))
    assert set(a) <= train and not train & set(env.task_ids("test"))
    assert env.task_ids("train", limit=3) == ["500", "501", "502"]


def test_task_id_replays_the_same_task_and_bad_ids_fail_clearly(env):
    o1, i1 = env.reset(options={"task_id": "42"})
    o2, i2 = env.reset(seed=9, options={"task_id": "42"})
    assert (o1, i1["task_id"], i1["category"]) == (o2, "42", i2["category"])
    assert i1["category"] in {"beauty", "electronics", "fashion", "furniture", "grocery"}
    with pytest.raises(ValueError, match="task_id"):
        env.reset(options={"task_id": "nope"})
    with pytest.raises(ValueError, match="out of range"):
        env.reset(options={"task_id": str(10**9)})
    with pytest.raises(ValueError, match="splits"):
        env.task_ids("valid")


def test_state_key_ignores_the_path_taken(env):
    env.reset(options={"task_id": "2"})
    _, _, _, _, info = env.step("search[coffee]")
    asin = info["state_key"][2][0]
    _, _, _, _, a = env.step(f"click[{asin}]")
    env.step("click[features]")
    _, _, _, _, b = env.step("click[< prev]")
    assert a["state_key"] == b["state_key"]


ACTIONS = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "click[next >]",
            "click[< prev]",
            "click[back to search]",
            "click[buy now]",
            "click[description]",
            "search[shoes]",
            "search[organic coffee]",
            "click[black]",
        ]
    ),
    st.integers(0, 9).map(lambda k: f"#{k}"),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(actions=st.lists(ACTIONS, max_size=15), task=st.integers(0, 1999))
def test_any_action_sequence_keeps_the_contract(env, actions, task):
    obs, info = env.reset(options={"task_id": str(task)})
    for a in actions:
        if a.startswith("#") and a[1:].isdigit():  # "#k": pick the k-th admissible action
            adm = info["admissible_actions"]
            a = adm[int(a[1:]) % len(adm)] if adm else "click[x]"
        before = (obs, info["state_key"])
        obs, reward, term, trunc, info = env.step(a)
        assert 0.0 <= info["score"] <= 1.0 and 0.0 <= reward <= 1.0
        if not info["action_valid"]:
            assert (obs, info["state_key"]) == before and reward == 0.0
        if term or trunc:
            break


@pytest.mark.parametrize("start_method", ["forkserver", "spawn", "fork"])
def test_pool_workers_share_the_catalogue_files(cache, start_method):
    spec = EnvSpec("WebShop-v0", {"num_products": 300, "cache_dir": cache})
    with EnvPool([spec] * 2, num_workers=2, mp_context=start_method) as pool:
        pool.reset(options=[{"task_id": "0"}, {"task_id": "1"}])
        for _ in range(15):
            results = pool.step([0, 1], pool.call(None, "expert_action"))
            if all(r.terminated for r in results):
                break
        assert all(r.info["won"] for r in results)
        root = str(WebShopEnv(num_products=300, cache_dir=cache).catalogue.path)
        for pid in pool.worker_pids():
            with open(f"/proc/{pid}/maps") as f:
                mapped = f.read()
            # the records and the index are memory-mapped from the one catalogue on disk
            assert f"{root}/products.bin" in mapped and f"{root}/index/post_docs.npy" in mapped
