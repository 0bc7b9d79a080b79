"""ssilbench-ring: the ``ring`` environment family and the ``ring_idm`` method."""

__version__ = "0.1.0"
