"""Leaderboards: results store -> one Table model -> renderers (Markdown, CSV, JSON)."""
