"""The plugin host: the pluggy manager (:mod:`~unirl.host.manager`), the registries its registrar hooks fill and
the protocols they enforce (:mod:`~unirl.host.registry`), how hooks are called and traced (:mod:`~unirl.host.calls`),
where plugins come from (:mod:`~unirl.host.loading`: the built-in tuple in :mod:`~unirl.host.builtin`, third-party
entry points in group ``unirl``, a project's ``unirlfile.py``, a recipe's reward files), and planning: the one place
the recipe meets the loaded plugins (:mod:`~unirl.host.planning`). It never imports a plugin by name.

``calls``, ``loading`` and ``registry`` are what a native backend's own processes use too (to fire the run-record
hooks into the plugins the host staged for them); they never import the manager.
"""
