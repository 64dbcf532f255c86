"""An example reward package for unirl."""
