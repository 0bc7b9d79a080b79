"""ssilbench-example: the ``corridor`` environment and the ``nearest_idm`` method.

Only :mod:`ssilbench_example.plugin` is imported when ssilbench discovers plugins; the
method and environment modules are imported when a run needs them.
"""

__version__ = "0.2.0"
