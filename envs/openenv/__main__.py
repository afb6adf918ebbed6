"""``python -m agentrl.envs.openenv serve ENV ...`` (see ``cli``)."""

import sys

from .cli import main

sys.exit(main())
