"""unirl plugin: NeMo RL 0.7 as a backend."""
