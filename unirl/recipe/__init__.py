"""The recipe: its typed schema, validation, Hydra composition (``conf/`` and the shipped ``recipes/``), and what a
composition error means in the recipe's terms. Imports no backend, no plugin and no runtime.
"""
