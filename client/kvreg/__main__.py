"""``python -m kvreg``: the same as the ``kvreg`` script (the CLI re-executes itself this way)."""

from kvreg.cli.main import main

if __name__ == "__main__":
    main()
