"""``python -m fed``: the ``fed`` command line."""

from fed.cli import main

main()
