"""An example third-party unirl environment package (see README.md)."""
