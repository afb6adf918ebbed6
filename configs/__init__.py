"""agentrl's Hydra configs: presets over the typed schema in :mod:`agentrl.config`.

Importing this package (Hydra does, to read ``pkg://agentrl.configs``) registers the schema as
``train_schema`` in Hydra's ConfigStore, where ``train.yaml``'s defaults list starts.
"""

from agentrl.config import register_schema

register_schema()
