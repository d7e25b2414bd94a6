"""The one console every command prints its tables, progress and notes on, so that
``octune --quiet`` silences them all; errors (stderr) and ``--json`` output (stdout, through
``print``) go around it. Logs (``--verbose``) go to stderr.
"""

import logging

from rich.console import Console
from rich.logging import RichHandler

console = Console()


def log_to_stderr(level: int) -> None:
    """octune's loggers at ``level`` (``--verbose``: DEBUG), through rich on stderr, so that
    stdout stays what the command prints (``--json -``).
    """
    logger = logging.getLogger("octune")
    logger.setLevel(level)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = RichHandler(
        console=Console(stderr=True), show_path=False, markup=False, log_time_format="%H:%M:%S"
    )
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
