"""agentrl: reinforcement learning for LLM agents in multi-turn text environments.

Import namespace: ``agentrl`` (trainer, rollout, backends, learner, evaluation),
``agentrl.envs`` (the environments), ``agentrl.credit`` (advantage estimators) and
``agentrl.configs`` (the Hydra configs). The package imports no torch at the top level; training
pieces load it on use.
"""

import importlib.abc
import importlib.util
import sys
from pathlib import Path

__version__ = "0.1.0"

#: Subpackages whose source lives in a top-level folder of the repository (the layout is fixed:
#: ``envs/``, ``credit/``, ``configs/``); installed, they are ordinary subpackages of agentrl.
_TOP_LEVEL = {"envs": "envs", "credit": "credit", "configs": "configs"}


class _SourceCheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds ``agentrl.envs``/``agentrl.credit``/``agentrl.configs`` in a source checkout.

    From a wheel these folders are installed inside ``agentrl/`` (``[tool.setuptools.package-dir]``)
    and this finder is never installed. Imported from a checkout (the repository root first on
    ``sys.path``, as pytest and ``python -m agentrl.train`` run there, or an editable install)
    the folders sit beside this package; this finder maps the three names to them. Their own
    submodules are then found through the package's ``__path__`` as usual.
    """

    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, name = fullname.partition(".")
        if prefix != __name__ or name not in _TOP_LEVEL:
            return None
        folder = self.root / _TOP_LEVEL[name]
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


def _install_source_finder() -> None:
    here = Path(__file__).resolve().parent
    root = here.parent
    in_checkout = (root / "pyproject.toml").is_file() and all(
        (root / folder / "__init__.py").is_file() and not (here / folder).exists()
        for folder in _TOP_LEVEL.values()
    )
    if in_checkout and not any(isinstance(f, _SourceCheckoutFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceCheckoutFinder(root))


_install_source_finder()
