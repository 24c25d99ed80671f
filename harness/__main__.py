"""`python -m harness` is the `layerbench` command."""

from harness.cli import main

main()
