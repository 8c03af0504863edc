"""``python -m cera_web generate|bench|info``: the command line lives in cera_web.tools.cli."""
import sys

from .tools.cli import main

sys.exit(main())
