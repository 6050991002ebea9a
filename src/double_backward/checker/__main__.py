"""``python -m double_backward.checker``: see :mod:`double_backward.checker.cli`."""

import sys

from .cli import main

sys.exit(main())
