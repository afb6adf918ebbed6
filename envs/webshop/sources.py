"""Where a catalogue comes from: the seeded generator or the reference's files, cached on disk.

Catalogues live under ``$AGENTRL_CACHE_DIR/webshop/`` (default ``~/.cache/agentrl/webshop/``),
one directory per recipe, named by its settings and a hash of them (plus the generator version,
or the source files' paths, sizes and modification times), so a changed recipe or file gets a
new catalogue and an unchanged one is reused by every env and process.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..cache import cache_root
from .generate import generate_goal, generate_product
from .original import load_original
from .store import Catalogue, ensure_catalogue, write_catalogue

__all__ = ["GENERATOR_VERSION", "default_cache_dir", "generated_catalogue", "original_catalogue"]

#: Bump when the generator's output changes, so cached catalogues are rebuilt.
GENERATOR_VERSION = 1


def default_cache_dir() -> Path:
    return cache_root("webshop")


def _digest(settings: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def default_num_goals(num_products: int) -> int:
    """2,000 instructions (500 test + 1,500 train), or one per ten products when that is more."""
    return max(2000, num_products // 10)


def generated_catalogue(
    num_products: int = 1000,
    seed: int = 0,
    num_goals: int | None = None,
    test_size: int = 500,
    cache_dir: str | Path | None = None,
) -> Catalogue:
    """The generated catalogue for these settings (built on first use, then read from cache)."""
    if not 1 <= int(num_products) <= 10_000_000:
        raise ValueError(f"num_products must be in [1, 10_000_000], got {num_products}")
    num_goals = default_num_goals(num_products) if num_goals is None else int(num_goals)
    if num_goals < 2:
        raise ValueError(f"num_goals must be >= 2, got {num_goals}")
    settings = {
        "source": "generated",
        "generator": GENERATOR_VERSION,
        "num_products": int(num_products),
        "seed": int(seed),
        "num_goals": num_goals,
        "test_size": int(test_size),
    }
    path = (
        Path(cache_dir or default_cache_dir())
        / f"generated-n{num_products}-s{seed}-{_digest(settings)}"
    )

    def build(target: Path) -> None:
        n = int(num_products)
        write_catalogue(
            target,
            (generate_product(seed, i) for i in range(n)),
            lambda _n: (generate_goal(seed, j, n) for j in range(num_goals)),
            settings,
            test_size,
        )

    return ensure_catalogue(path, build)


def original_catalogue(
    product_file: str | Path,
    attribute_file: str | Path | None = None,
    human_instruction_file: str | Path | None = None,
    human_goals: bool = True,
    num_products: int | None = None,
    seed: int = 0,
    test_size: int = 500,
    cache_dir: str | Path | None = None,
) -> Catalogue:
    """A catalogue converted from the reference's files (converted once, then read from cache)."""
    files = [
        f
        for f in (product_file, attribute_file, human_instruction_file if human_goals else None)
        if f
    ]
    stamps = []
    for f in files:
        p = Path(f).resolve()
        st = p.stat() if p.exists() else None
        stamps.append([str(p), st.st_size if st else -1, st.st_mtime_ns if st else -1])
    settings = {
        "source": "original",
        "files": stamps,
        "human_goals": bool(human_goals),
        "num_products": num_products,
        "seed": int(seed),
        "test_size": int(test_size),
    }
    path = (
        Path(cache_dir or default_cache_dir())
        / f"original-{Path(product_file).stem}-{_digest(settings)}"
    )

    def build(target: Path) -> None:
        products, goals = load_original(
            product_file,
            attribute_file,
            human_instruction_file,
            human_goals=human_goals,
            num_products=num_products,
            seed=seed,
        )
        write_catalogue(target, products, goals, settings, test_size)

    return ensure_catalogue(path, build)
