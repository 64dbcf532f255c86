"""unirl plugin: openrlhf as a backend."""
