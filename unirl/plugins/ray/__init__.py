"""unirl plugin: Ray jobs as a scheduler."""
