"""The ``procgen`` environment family of ssilbench: the 16 Procgen games (paper section 5.1 and
its appendix "ProcGen Experiments").

Heavy modules (procgen, torch) are imported only inside the functions that need them, so
``ssilbench list`` works without the ``procgen`` extra installed.
"""
