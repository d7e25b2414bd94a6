"""The one console every command prints its tables, progress and notes on, so that
``octune --quiet`` silences them all; errors (stderr) and ``--json`` output (stdout, through
``print``) go around it.
"""

from rich.console import Console

console = Console()
