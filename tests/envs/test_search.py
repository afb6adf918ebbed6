"""agentrl/Search-v0: answer scoring, the generated world, BM25 and its server, data files, the env."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import pytest
from agentrl.envs.contract import RULES, check_contract
from agentrl.envs.search import (
    TOOLS,
    BM25Index,
    CorpusError,
    EmptyCorpusWarning,
    HTTPRetriever,
    LocalRetriever,
    RetrievalError,
    SearchEnv,
    WorldSpec,
    analyze,
    exact_match,
    f1_score,
    generate_world,
    load_questions,
    normalize_answer,
    open_corpus,
    parse_action,
    world_retriever,
)

from agentrl import envs

ROOT = Path(__file__).resolve().parents[2]


# -- answers ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("The Beatles", "beatles"),
        ("  the   Beatles!! ", "beatles"),
        ("A Tale of Two Cities", "tale of two cities"),
        ("an apple, a pear", "apple pear"),
        ("U.S.A.", "usa"),
        ("Théâtre—du Soleil", "théâtre—du soleil"),  # only ASCII punctuation goes
        ("there", "there"),  # articles only as whole words
        ("Anne", "anne"),
        ("1,000", "1000"),
        ("", ""),
    ],
)
def test_normalize_answer_as_search_r1(text, normal):
    assert normalize_answer(text) == normal


def test_exact_match_against_any_golden_answer():
    assert exact_match("the Beatles.", ["Beatles", "The Fab Four"]) == 1.0
    assert exact_match("Fab four", ["Beatles", "The Fab Four"]) == 1.0
    assert exact_match("Beatles band", ["Beatles"]) == 0.0
    assert exact_match("Paris", "paris") == 1.0


def test_f1_scores_token_overlap_and_yes_no_exactly():
    assert f1_score("the Eiffel tower", ["Eiffel Tower"]) == 1.0
    assert math.isclose(f1_score("Eiffel", ["Eiffel Tower"]), 2 / 3)
    assert f1_score("yes it is", ["yes"]) == 0.0  # yes/no/noanswer match only themselves
    assert f1_score("no", ["no"]) == 1.0
    assert f1_score("x", ["a b", "x y"]) == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("action", "parsed"),
    [
        ("search[K]", ("search", "K")),
        ("  Answer [ the  Beatles ] ", ("answer", "the Beatles")),
        ("search[a [nested] query]", ("search", "a [nested] query")),
        ("search[]", None),
        ("answer[   ]", None),
        ("search K", None),
        ("click[K]", None),
        ("search[K", None),
        ("search[" + "x" * 301 + "]", None),
        ("answer[a\x00b]", None),
        ("<action>search[K]</action>", None),
    ],
)
def test_parse_action(action, parsed):
    out = parse_action(action, 300)
    assert out == parsed if parsed else isinstance(out, str)


# -- the generated world ----------------------------------------------------------------------------
def test_world_is_a_pure_function_of_its_seed():
    a, b = generate_world(WorldSpec(seed=3)), generate_world(WorldSpec(seed=3))
    assert a.passages == b.passages and a.questions == b.questions and a.entities == b.entities
    c = generate_world(WorldSpec(seed=4))
    assert c.passages != a.passages
    words = generate_world(WorldSpec(num_entities=30, names="words", seed=1))
    assert all(len(e) >= 4 and e.isalpha() for e in words.entities)
    assert words == generate_world(WorldSpec(num_entities=30, names="words", seed=1))


def test_world_questions_follow_their_chains():
    w = generate_world(WorldSpec(seed=0))
    assert set(w.questions) == {"1-hop", "2-hop", "3-hop", "comparison"}
    for kind, hops in (("1-hop", 1), ("2-hop", 2), ("3-hop", 3), ("comparison", 2)):
        assert w.questions[kind], kind
        for q in w.questions[kind]:
            assert len(q.chain) == hops and len(set(q.chain)) == hops
    q = next(q for q in w.questions["3-hop"])  # "What is the a of the r2 of the r1 of e?"
    words = q.text.rstrip("?").split()
    a, r2, r1, e = words[3], words[6], words[9], words[11]
    assert q.answer == w.values[(w.links[(w.links[(e, r1)], r2)], a)]
    for q in w.questions["comparison"]:
        e1, e2 = q.chain
        a = q.text.split()[4].rstrip(",")
        assert int(w.values[(q.answer, a)]) == max(int(w.values[(e1, a)]), int(w.values[(e2, a)]))


def test_bad_world_settings_are_named():
    with pytest.raises(ValueError, match="num_entities"):
        WorldSpec(num_entities=30)  # 25 single letters
    with pytest.raises(ValueError, match="names"):
        WorldSpec(names="emoji")
    with pytest.raises(ValueError, match="question_types"):
        SearchEnv(question_types=["4-hop"])


# -- BM25 -------------------------------------------------------------------------------------------
def test_bm25_scores_by_the_formula():
    texts = ['"A"\napple banana apple', '"B"\nbanana cherry', '"C"\ncherry cherry date fig']
    index = BM25Index.build(texts)
    docs, scores = index.search("apple cherry", 3)
    lengths = np.array([len(analyze(t)) for t in texts], dtype=float)
    avgdl, k1, b, n = lengths.mean(), 0.9, 0.4, 3

    def term(tf, df, dl):
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))

    want = {0: term(2, 1, lengths[0]), 1: term(1, 2, lengths[1]), 2: term(2, 2, lengths[2])}
    assert docs.tolist() == sorted(want, key=lambda d: (-want[d], d))
    assert scores == pytest.approx([want[d] for d in docs.tolist()], rel=1e-6)
    assert index.search("the of", 3)[0].size == 0  # stop words only: nothing
    assert index.search("unknownword", 3)[0].size == 0


def test_bm25_matches_a_brute_force_scorer():
    """Random corpus and queries: rare terms take the sorting path, common ones the dense sum."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(200)]
    p = 1 / np.arange(1, 201)
    texts = [
        " ".join(rng.choice(words, size=rng.integers(1, 30), p=p / p.sum())) for _ in range(400)
    ]
    index = BM25Index.build(texts)
    bags = [analyze(t) for t in texts]
    avgdl, n = np.mean([len(b) for b in bags]), len(bags)
    df = {w: sum(w in b for b in bags) for w in words}
    paths = set()
    for i in range(80):
        query = list(rng.choice(words[: 20 if i % 2 else 200], size=rng.integers(2, 4)))
        paths.add(16 * sum(df[w] for w in set(query)) > n)  # the engine's dense-sum rule
        want = {}
        for d, bag in enumerate(bags):
            score = 0.0
            for w in query:
                tf = bag.count(w)
                if tf:
                    idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                    score += idf * tf * 1.9 / (tf + 0.9 * (0.6 + 0.4 * len(bag) / avgdl))
            if score:
                want[d] = score
        best = sorted(want, key=lambda d: (-round(want[d], 4), d))[:10]
        docs, scores = index.search(" ".join(query), 10)
        assert scores == pytest.approx([want[d] for d in best], rel=1e-5), query
        assert [round(want[d], 4) for d in docs.tolist()] == [round(want[d], 4) for d in best]
    assert paths == {True, False}


def test_bm25_on_disk_chunked_and_in_memory_agree(tmp_path):
    w = generate_world(WorldSpec(num_entities=25, distractors=3, seed=5))
    texts = [p.contents for p in w.passages]
    memory = BM25Index.build(texts)
    # several spilled chunks, several term ranges
    disk = BM25Index.build(texts, tmp_path / "idx", chunk_docs=7, partition_postings=10)
    assert not (tmp_path / "idx" / "_build").exists()
    reopened = BM25Index.open(tmp_path / "idx")
    assert isinstance(reopened.post_docs, np.memmap)
    for q in [*w.entities, "age of K", "boss friend", "once met"]:
        a, b, c = memory.search(q, 5), disk.search(q, 5), reopened.search(q, 5)
        assert a[0].tolist() == b[0].tolist() == c[0].tolist()
        assert a[1].tolist() == pytest.approx(b[1].tolist()) == c[1].tolist()


def test_ties_break_by_passage_number():
    index = BM25Index.build(["x y", "x y", "z", "x y"])
    assert index.search("x", 2)[0].tolist() == [0, 1]
    assert index.search("x", 10)[0].tolist() == [0, 1, 3]


def test_every_profile_ranks_first_for_its_name():
    for names, n in (("letters", 12), ("letters", 25), ("words", 40)):
        w = generate_world(WorldSpec(num_entities=n, names=names, distractors=2, seed=2))
        r = world_retriever(w)
        for e in w.entities:
            assert r.retrieve([e], 3)[0][0].passage.id == w.profile[e], (names, e)


# -- the server -------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real retrieval server on loopback serving the default world's passages from a jsonl
    corpus (so the corpus loader, its cache and the server are all on the path)."""
    pytest.importorskip("uvicorn")
    tmp = tmp_path_factory.mktemp("search_server")
    world = generate_world(WorldSpec())
    corpus = tmp / "corpus.jsonl"
    with open(corpus, "w") as f:
        for p in world.passages:
            f.write(json.dumps({"id": p.id, "contents": p.contents}) + "\n")
    port = _free_port()
    env = {**os.environ, "AGENTRL_CACHE_DIR": str(tmp / "cache"), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "agentrl.envs.search.serve_retriever", "--corpus", str(corpus)]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                assert json.loads(r.read()) == {"passages": len(world.passages)}
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the server did not start: {proc.stdout.read().decode()[-2000:]}")
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(10)


def test_server_and_local_index_give_identical_results(server):
    world = generate_world(WorldSpec())
    local, remote = world_retriever(world), HTTPRetriever(server + "/retrieve")
    queries = [*world.entities, "age of the boss", "once met whose size", "nothing matches zzz"]
    for k in (1, 3, 5):
        a, b = local.retrieve(queries, k), remote.retrieve(queries, k)
        assert [[(h.passage, h.score) for h in hs] for hs in a] == [
            [(h.passage, h.score) for h in hs] for hs in b
        ]
    assert remote.retrieve(["K"], 3) == remote.retrieve(["K"], 3)  # stable


def test_env_over_the_server_plays_like_the_local_one(server):
    local, remote = SearchEnv(), SearchEnv(retriever="http", retriever_url=server + "/retrieve")
    for tid in local.task_ids("test", 12):
        trace = []
        for env in (local, remote):
            obs, info = env.reset(options={"task_id": tid})
            steps = [(obs, info["state_key"], info["admissible_actions"])]
            for t in range(4):
                acts = info["admissible_actions"]
                action = env.expert_action() if t % 2 else acts[t % len(acts)]
                obs, reward, term, trunc, info = env.step(action)
                steps.append((obs, reward, info["state_key"], info["admissible_actions"]))
                if term or trunc:
                    break
            trace.append(steps)
        assert trace[0] == trace[1], tid


def test_server_rejects_malformed_requests(server):
    for body in (b"not json", b'{"queries": "K"}', b'{"queries": ["K"], "topk": 0}'):
        req = urllib.request.Request(server + "/retrieve", data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)
        assert err.value.code == 422
    name = generate_world(WorldSpec()).entities[0]
    body = json.dumps({"queries": [name], "topk": 2}).encode()
    req = urllib.request.Request(server + "/retrieve", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:  # without scores: bare documents
        result = json.loads(r.read())["result"]
    assert len(result) == 1 and len(result[0]) == 2 and set(result[0][0]) >= {"id", "contents"}
    with pytest.raises(RetrievalError, match="HTTP 422"):
        HTTPRetriever(server + "/retrieve").retrieve(["K"], 0)


def test_unreachable_server_is_a_clear_error():
    client = HTTPRetriever(f"http://127.0.0.1:{_free_port()}/retrieve", timeout=2, retries=1)
    with pytest.raises(RetrievalError, match="no answer after 2 tries"):
        client.retrieve(["K"], 3)


# -- data files -------------------------------------------------------------------------------------
def _write(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


CORPUS = [
    {"id": "0", "contents": '"Evan Morris"\nEvan Morris was a lobbyist in Washington.'},
    {"id": "1", "contents": '"Paris"\nParis is the capital of France.'},
    {"id": "2", "contents": '"Lyon"\nLyon is a city in France on the Rhone.'},
]


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("{not json", "not a JSON object"),
        ('["id", "contents"]', "not a JSON object"),
        ('{"id": "9"}', "no 'contents'"),
        ('{"contents": "x"}', "no 'id'"),
        ('{"id": "9", "contents": 5}', "'contents' must be a string"),
    ],
)
def test_malformed_corpus_names_file_and_line(tmp_path, line, error):
    path = _write(tmp_path / "wiki.jsonl", [CORPUS[0], "", line])
    with pytest.raises(CorpusError, match=f"wiki.jsonl:3: {error}"):
        open_corpus(path, cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("wiki-*"))  # nothing half-built is kept


@pytest.mark.parametrize(
    ("record", "error"),
    [
        ({"golden_answers": ["x"]}, "'question' must be a non-empty string"),
        ({"question": "q?"}, "no 'golden_answers'"),
        ({"question": "q?", "golden_answers": [1]}, "'golden_answers' must be a list of strings"),
        ({"question": "q?", "golden_answers": [""]}, "'golden_answers' is empty"),
        ({"question": "q?", "golden_answers": ["x"], "data_source": 3}, "'data_source'"),
    ],
)
def test_malformed_question_file_names_file_and_line(tmp_path, record, error):
    path = _write(
        tmp_path / "nq_test.jsonl", [{"question": "ok?", "golden_answers": ["x"]}, record]
    )
    with pytest.raises(CorpusError, match=f"nq_test.jsonl:2: {error}"):
        load_questions(path)


def test_question_files_in_flashrag_and_search_r1_formats(tmp_path):
    flash = _write(
        tmp_path / "hotpotqa_dev.jsonl",
        [
            {"id": "1", "question": "Capital of France?", "golden_answers": ["Paris"],
             "metadata": {"type": "bridge"}},
            {"id": "2hop__1_2", "question": "Where?", "golden_answers": "Lyon"},
        ],
    )  # fmt: skip
    qs = load_questions(flash)
    assert [q.category for q in qs] == ["hotpotqa_dev/bridge", "hotpotqa_dev/2-hop"]
    assert qs[1].golden_answers == ("Lyon",)
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [  # Search-R1's columns: golden_answers, or only reward_model's target
        {"question": "Capital of France?", "golden_answers": ["Paris"], "data_source": "nq",
         "reward_model": None},
        {"question": "Lyon river?", "golden_answers": None, "data_source": "hotpotqa",
         "reward_model": {"ground_truth": {"target": ["Rhone"]}, "style": "rule"}},
    ]  # fmt: skip
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    qs = load_questions(path)
    assert [(q.data_source, q.golden_answers) for q in qs] == [
        ("nq", ("Paris",)),
        ("hotpotqa", ("Rhone",)),
    ]
    bad = tmp_path / "bad.parquet"
    bad_row = {**rows[1], "reward_model": None}
    pq.write_table(pa.Table.from_pylist([rows[0], bad_row]), bad)
    with pytest.raises(CorpusError, match="bad.parquet: row 1: no 'golden_answers'"):
        load_questions(bad)


def test_env_on_files_with_a_cached_index(tmp_path):
    corpus = _write(tmp_path / "wiki.jsonl", CORPUS)
    train = _write(
        tmp_path / "train.jsonl",
        [{"question": "What is the capital of France?", "golden_answers": ["Paris"],
          "data_source": "nq"}],
    )  # fmt: skip
    cache = tmp_path / "cache"
    kw = dict(
        train_file=str(train), test_file=str(train), corpus_file=str(corpus), cache_dir=str(cache)
    )
    env = SearchEnv(**kw)
    (folder,) = cache.glob("wiki-*")
    built = (folder / "meta.json").stat().st_mtime_ns
    obs, info = env.reset(seed=0)
    assert info["task_id"] == "train/0" and info["category"] == "nq"
    assert info["admissible_actions"] == ["search[What is the capital of France?]"]
    obs, _r, *_ = env.step(env.expert_action())
    assert "Doc 1(Title: Paris) Paris is the capital of France." in obs
    assert "answer[Paris]" in env.admissible_actions()
    obs, reward, term, _t, info = env.step(env.expert_action())
    assert (reward, term, info["won"], info["score"]) == (1.0, True, True, 1.0)
    SearchEnv(**kw)  # the second env opens the cached index
    assert (folder / "meta.json").stat().st_mtime_ns == built
    # final_answer with nothing retrieved offers no answer: the last turn keeps its search
    one = SearchEnv(**kw, max_turns=1, final_answer=True)
    _obs, info = one.reset(seed=0)
    assert info["admissible_actions"] == ["search[What is the capital of France?]"]
    assert one.step(one.expert_action())[4]["action_valid"]
    os.utime(corpus, ns=(built + 10**9, built + 10**9))  # a changed file is indexed again
    SearchEnv(**kw)
    assert len(list(cache.glob("wiki-*"))) == 2
    index, passages = open_corpus(corpus, cache_dir=cache)
    assert passages[2].title == "Lyon" and index.num_docs == 3
    with pytest.raises(ValueError, match="corpus_file"):
        SearchEnv(train_file=str(train))


def _open_in_child(args) -> tuple[int, str]:
    index, passages = open_corpus(args[0], cache_dir=args[1])
    return index.num_docs, passages[1].title


def test_concurrent_openers_build_the_index_once(tmp_path):
    corpus = _write(tmp_path / "wiki.jsonl", CORPUS * 200)
    cache = tmp_path / "cache"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        results = pool.map(_open_in_child, [(str(corpus), str(cache))] * 3)
    assert results == [(600, "Paris")] * 3
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == [
        next(cache.glob("wiki-*")).name
    ]  # one index, no temporary folder left


# -- the env ----------------------------------------------------------------------------------------
def test_contract_with_the_tiny_models_tokenizer():
    """Every rule of python -m agentrl.check_env, the budget at the tiny preset's 8 tokens."""
    pytest.importorskip("transformers")
    from agentrl.check_env import token_counter

    count, budget = token_counter("tiny")
    assert budget == 8
    results = check_contract(
        lambda: envs.make("Search-v0"), seeds=(0, 1, 2, 3), max_steps=4, token_count=count,
        max_new_tokens=budget,
    )  # fmt: skip
    assert [r.rule for r in results] == list(RULES)
    assert all(r.ok is not False for r in results), [r.line() for r in results if not r.ok]
    # a single-agent env skips only the multi-agent rules
    assert {r.rule for r in results if r.ok is None} == {"agents", "hidden"}


def test_expert_answers_every_held_out_question():
    env = SearchEnv()
    ids = env.task_ids("test")
    cats = {}
    for tid in ids:
        _obs, info = env.reset(options={"task_id": tid})
        for _ in range(4):
            _obs, reward, term, trunc, info = env.step(env.expert_action())
            assert info["action_valid"]
            if term or trunc:
                break
        assert info["won"] and reward == 1.0, tid
        cats[info["category"]] = cats.get(info["category"], 0) + 1
    assert set(cats) == {f"synthetic/{k}" for k in ("1-hop", "2-hop", "3-hop", "comparison")}
    assert not set(ids) & set(env.task_ids("train"))
    assert [tid.split("/")[0] for tid in ids[:4]] == ["1-hop", "2-hop", "3-hop", "comparison"]


def test_admissible_actions_are_few_short_and_contain_the_experts():
    env = SearchEnv()
    for tid in env.task_ids("test"):
        _obs, info = env.reset(options={"task_id": tid})
        while True:
            acts = info["admissible_actions"]
            assert 1 <= len(acts) <= 12 and len(set(acts)) == len(acts)
            assert env.expert_action() in acts
            _obs, _r, term, trunc, info = env.step(env.expert_action())
            if term or trunc:
                break


def test_state_key_is_the_question_and_the_set_of_passages():
    env = SearchEnv()
    tid = next(t for t in env.task_ids("test") if t.startswith("comparison"))
    _obs, info = env.reset(options={"task_id": tid})
    e1, e2 = env._task.chain
    keys = []
    for order in ((e1, e2), (e2, e1)):
        env.reset(options={"task_id": tid})
        for e in order:
            info = env.step(f"search[{e}]")[4]
        keys.append(info["state_key"])
        again = env.step(f"search[{e1}]")[4]  # nothing new: the same state
        assert again["state_key"] == info["state_key"]
    assert keys[0] == keys[1] and keys[0].startswith(tid + "|")
    last = SearchEnv(state_key="last")
    a = [last.reset(options={"task_id": tid})[1]["state_key"]]
    for e in (e1, e2):
        a.append(last.step(f"search[{e}]")[4]["state_key"])
    assert a[0] == tid + "|" and a[1] != a[2]


def test_invalid_actions_rewards_and_the_turn_limit():
    env = SearchEnv(max_turns=3, format_reward=0.1)
    tid = env.task_ids("test")[0]
    _obs, start = env.reset(options={"task_id": tid})
    obs, reward, term, trunc, info = env.step("dance[now]")
    assert not info["action_valid"] and reward == 0.0 and not (term or trunc)
    assert info["state_key"] == start["state_key"]
    assert "Invalid action" in obs
    obs, *_ = env.step("search[nothing like this zzz]")
    assert "No passage matches" in obs
    *_, term, trunc, info = env.step("search[qqq]")  # the third action: cut
    assert trunc and not term and not info["won"]
    # a wrong, well-formed answer gets format_reward; after an invalid action it gets 0
    env.reset(options={"task_id": tid})
    assert env.step("answer[certainly wrong]")[1] == pytest.approx(0.1)
    env.reset(options={"task_id": tid})
    env.step("junk")
    assert env.step("answer[certainly wrong]")[1] == 0.0
    f1 = SearchEnv(reward="f1")
    f1.reset(options={"task_id": tid})
    assert f1.step(f"answer[{f1._task.answers[0]} so]")[1] == pytest.approx(2 / 3)


def test_tools_are_declared_on_reset():
    _obs, info = SearchEnv().reset(seed=0)
    assert [t["function"]["name"] for t in info["tools"]] == ["search", "answer"]
    for tool in info["tools"]:
        params = tool["function"]["parameters"]
        assert tool["type"] == "function" and params["type"] == "object"
        assert params["required"] == list(params["properties"])
    assert info["tools"] == [dict(t) for t in TOOLS]
    assert info["tool_actions"]["search"].format(query="K") == "search[K]"
    json.dumps(info["tools"])  # JSON-serialisable (HTTP env servers send infos as JSON)


def test_local_retriever_checks_its_sizes():
    index = BM25Index.build(["a b", "c d"])
    with pytest.raises(ValueError, match="index of 2 passages"):
        LocalRetriever(index, [])


def test_final_answer_turn_lists_only_answers_and_refuses_a_search():
    """``final_answer=True``: the last turn of ``max_turns`` lists only answers (Search-R1's
    answer round) and a search there is an invalid action that ends the episode unanswered;
    earlier turns are unchanged, and the expert answers on the last turn."""
    env = SearchEnv(max_turns=2, final_answer=True)
    tid = next(t for t in env.task_ids("test") if t.startswith("3-hop"))
    _obs, info = env.reset(options={"task_id": tid})
    first = info["admissible_actions"]
    assert any(a.startswith("search[") for a in first)  # turn 1 of 2: searches listed
    entity = env._task.chain[0]
    _obs, _r, term, trunc, info = env.step(f"search[{entity}]")
    assert not (term or trunc) and info["admissible_actions"]
    assert all(a.startswith("answer[") for a in info["admissible_actions"])
    assert env.expert_action() == f"answer[{env._task.answers[0]}]"
    obs, reward, term, trunc, info = env.step("search[anything]")
    assert not info["action_valid"] and reward == 0.0 and trunc and not term
    assert "last turn takes an answer" in obs
    plain = SearchEnv(max_turns=2)  # the default keeps every command on the last turn
    _obs, info = plain.reset(options={"task_id": tid})
    _obs, _r, _t, _tr, info = plain.step(f"search[{entity}]")
    assert any(a.startswith("search[") for a in info["admissible_actions"])


def test_an_empty_corpus_is_named_in_a_warning(tmp_path):
    """Every search on it would answer that no passage matches: the env says so once, naming
    the file; a corpus with passages opens silently."""
    train = _write(tmp_path / "train.jsonl", [{"question": "Who?", "golden_answers": ["x"]}])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    kw = dict(train_file=str(train), cache_dir=str(tmp_path / "cache"))
    with pytest.warns(EmptyCorpusWarning, match=f"corpus_file {empty} holds no passages"):
        env = SearchEnv(**kw, corpus_file=str(empty))
    env.reset(seed=0)
    assert "No passage" in env.step("search[Who?]")[0]  # what the warning announces
    full = _write(tmp_path / "wiki.jsonl", CORPUS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SearchEnv(**kw, corpus_file=str(full))
