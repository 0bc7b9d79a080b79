"""The record of a run: its spec and identity, the results store, export and merge.

Everything that reads or writes what a run produced stands on this layer: the runner that
records runs, the leaderboards and studies that read them, and the commands that move them
between machines."""
