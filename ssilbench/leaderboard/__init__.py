"""Leaderboards: recorded runs -> one Table model -> renderers (Markdown, CSV, JSON, LaTeX,
HTML) and training curves."""
