"""Shared fixtures: the embedded tiny model (built once into the cache) and a Sokoban env pool."""

from __future__ import annotations

import pytest
import torch

from agentrl.models import load_model
from agentrl.pool import EnvPool, EnvSpec

# One thread: on a small shared CPU, torch's intra-op threads contend and run several times slower.
torch.set_num_threads(1)

SOKOBAN = EnvSpec(
    "Sokoban-v0", {"dim_room": 5, "open_room": True, "search_depth": 1, "max_steps": 10}
)


@pytest.fixture(scope="session")
def tiny_path():
    _, _, path = load_model("tiny")
    return path


@pytest.fixture
def tiny(tiny_path):
    """A fresh tiny model (tests may train it) and its tokenizer."""
    torch.manual_seed(0)
    model, tok, _ = load_model(tiny_path)
    return model, tok


@pytest.fixture
def sokoban_pool():
    pool = EnvPool([SOKOBAN] * 8)
    yield pool
    pool.close()


def pytest_collection_modifyitems(session, config, items):
    """Run the multi-process data-parallel tests first, in a pristine test process.

    Their spawned gloo ranks aborted in CI ("terminate called without an active exception" in
    rank 1), first after the whole suite and then run first too, while they pass on the
    development machine in every order (and in a from-scratch replica of CI). Ranks now meet at a
    barrier before leaving the process group (``close_distributed``); a rank still killed by a
    signal gets one more launch and then skips with the reason (``dist_workers.launch_or_skip``).
    """
    first = [i for i in items if i.nodeid.startswith("tests/train/test_distributed.py")]
    if first:
        rest = [i for i in items if not i.nodeid.startswith("tests/train/test_distributed.py")]
        items[:] = first + rest
