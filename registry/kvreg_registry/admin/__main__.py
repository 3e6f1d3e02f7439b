"""``python -m kvreg_registry.admin``: the same as the ``kvreg-admin`` script."""

from kvreg_registry.admin import main

main()
