"""LIBERO-10 (the ``libero10`` environment family): ten long-horizon manipulation tasks of
the LIBERO benchmark, a robosuite/MuJoCo simulator rendered off-screen, and an importer for
the LIBERO team's HDF5 demonstrations. See docs/environments/libero10.md."""
