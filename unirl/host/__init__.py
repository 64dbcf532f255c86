"""The plugin host: the pluggy manager, the registries its registrar hooks fill, and the built-in plugin tuple.

It loads unirl's own plugins (:mod:`unirl.host.builtin`), third-party entry points (group ``unirl``) and a
project-local ``unirlfile.py``; it never imports a plugin by name otherwise.
"""
