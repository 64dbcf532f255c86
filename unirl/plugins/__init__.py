"""unirl's own plugins, one package each (backends, schedulers, built-in rewards): they register through the same
hooks as a third party's (see :mod:`unirl.host.builtin`). The host never imports them by name.
"""
