"""unirl's built-in rewards, an ordinary plugin (``rewards`` in :mod:`unirl.host.builtin`): math answers, formats,
code execution in the sandbox."""
