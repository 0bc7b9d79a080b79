"""Names the plugin contract renamed or removed keep working, with a warning, until the next
major API version (``docs/plugin-authors.md``, "Versions of the contract").

Each shim calls :func:`deprecated` with the name as a plugin uses it and what to write
instead; ``CHANGELOG.md`` lists them under "Plugin authors".
"""

from __future__ import annotations

import warnings

REMOVED_IN = "2.0"
"""The API version that drops every deprecated name."""


def deprecated(old: str, replacement: str, since: str, stacklevel: int = 3) -> None:
    """Warn (DeprecationWarning) that ``old`` is deprecated since API ``since``, naming its
    ``replacement``; ``stacklevel`` points at the plugin's line (3: the caller's caller)."""
    warnings.warn(
        f"{old} is deprecated since ssilbench API {since} and goes in API {REMOVED_IN}: "
        f"{replacement}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def deprecated_module(old: str, replacement: str, since: str) -> None:
    """:func:`deprecated`, called from a deprecated module's body: the warning points at the
    statement that imported it (``warnings`` skips the import machinery's frames)."""
    deprecated(old, replacement, since, stacklevel=4)
