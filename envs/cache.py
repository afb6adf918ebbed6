"""Where agentrl keeps what it builds once and reuses (generated games, catalogues, models).

``$AGENTRL_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/agentrl``, else ``~/.cache/agentrl``.
Every cached artefact lives in a sub-folder named after its kind and keyed by its settings, so
deleting the folder only costs a rebuild.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root(kind: str | None = None) -> Path:
    """The cache folder (or its ``kind`` sub-folder); not created here."""
    if os.environ.get("AGENTRL_CACHE_DIR"):
        root = Path(os.environ["AGENTRL_CACHE_DIR"]).expanduser()
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentrl"
    return root / kind if kind else root
