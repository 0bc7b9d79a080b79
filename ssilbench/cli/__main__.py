"""``python -m ssilbench.cli`` is the ``ssilbench`` command too."""

from ssilbench.cli import main

main()
