"""``python -m double_backward.checker``: see :mod:`double_backward.checker.function.cli`."""

import sys

from .function.cli import main

sys.exit(main())
