"""unirl's own environments (registered lazily by :mod:`.plugin`)."""
