"""``python -m ssilbench`` is the ``ssilbench`` command."""

from ssilbench.cli import main

main()
