"""WebShop (Yao et al., 2022) as a pure-Python text environment: ``agentrl/WebShop-v0``.

Modules: ``generate`` (seeded catalogues and instructions), ``original`` (the reference's data
files), ``store`` (the on-disk, memory-mapped catalogue shared by every env and process),
``lucene``/``porter``/``search`` (BM25 ranking identical to the reference's Lucene index), ``reward`` (the paper's purchase reward), ``pages`` (the pages as
text), ``env`` (the Gymnasium env). See ``docs/envs/webshop.md``.
"""

try:
    import rapidfuzz  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        f"agentrl/WebShop-v0 needs the 'webshop' extra: pip install 'agentrl[webshop]' ({exc})"
    ) from exc

from .env import MILESTONES, WebShopEnv  # noqa: E402
from .original import CatalogueError, load_original
from .reward import Reward, compute_reward
from .sources import default_cache_dir, generated_catalogue, original_catalogue
from .store import Catalogue, open_catalogue

__all__ = [
    "MILESTONES",
    "Catalogue",
    "CatalogueError",
    "Reward",
    "WebShopEnv",
    "compute_reward",
    "default_cache_dir",
    "generated_catalogue",
    "load_original",
    "open_catalogue",
    "original_catalogue",
]
