"""unirl plugin: verl 0.9 as a backend."""
