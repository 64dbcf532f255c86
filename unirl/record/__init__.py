"""The run record: the run directory's layout and JSON-lines I/O, the recorder and progress plugins fed by the
lifecycle hooks, the manifest, trajectory sampling, and plots.
"""
