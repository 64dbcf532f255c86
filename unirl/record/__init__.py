"""The run record: the run directory's layout and JSON-lines I/O, the :class:`RunRecorder` every backend's side of a
run feeds, the recorder (run-directory writer) and progress plugins it fires into, the manifest, trajectory
sampling, and plots.
"""
