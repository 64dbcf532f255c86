"""Experiment trackers: unirl's own run record fanned out to TensorBoard, W&B, MLflow and trackio.

:mod:`unirl.plugins.trackers.plugin` is what they share (when a tracker acts, what it receives, how it ends); one
module per tracker holds that tracker's writer. Each is a built-in plugin of its own (``unirl/host/builtin.py``), so
the host isolates and counts each one separately.
"""
