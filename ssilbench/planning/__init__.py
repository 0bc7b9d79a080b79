"""From what a user asks for to the runs to train: the settings of a sweep (flags or a
sweep file), checked, then resolved into run specs (pure) and prepared (datasets opened)."""
