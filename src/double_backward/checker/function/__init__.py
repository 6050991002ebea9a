"""Check one custom Function: :func:`~double_backward.check` and its command line."""
