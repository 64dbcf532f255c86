"""unirl's built-in rewards, shipped as an ordinary plugin (entry point ``unirl:rewards``)."""
