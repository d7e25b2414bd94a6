"""`python -m octune`: the `octune` command where its script is not on the PATH."""

from octune.cli import main

main()
