"""One rank of :func:`~double_backward.distributed.launch.launch`: ``python -m`` runs this."""

import sys

from double_backward.distributed.launch import run_rank

if __name__ == "__main__":
    run_rank(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
