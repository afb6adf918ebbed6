"""agentrl: reinforcement learning for LLM agents in multi-turn text environments.

The package imports no torch at the top level; training pieces load it on use.
"""

import importlib.util
import sys
from pathlib import Path

__version__ = "0.1.0"


def _expose_source_configs() -> None:
    """Make ``agentrl.configs`` importable when agentrl is imported from a source checkout.

    Installed (wheel or editable), the repository's ``configs/`` folder *is* the package
    ``agentrl.configs`` (see ``[tool.setuptools.package-dir]``). Imported straight from a
    checkout (the repository root first on ``sys.path``, as with ``python -m agentrl.train`` run
    there) the folder sits beside this package instead; register it under the same name so Hydra's
    ``pkg://agentrl.configs`` finds the same files either way.
    """
    name = f"{__name__}.configs"
    if name in sys.modules or importlib.util.find_spec(name) is not None:
        return
    folder = Path(__file__).resolve().parent.parent / "configs"
    if not (folder / "__init__.py").is_file():
        return
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    globals()["configs"] = module  # what the import system does for a submodule it loads


_expose_source_configs()
