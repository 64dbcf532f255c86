"""An example tracker plugin for unirl."""
