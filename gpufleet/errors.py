"""The command line's errors, below every command: each becomes one line on stderr and an exit code."""
from __future__ import annotations


class UsageError(Exception):
    """A bad argument, or a file handed to gpufleet that cannot be used: one line, exit code 2."""
