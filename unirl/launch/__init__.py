"""Launching a plan and owning its run directory: the scheduler protocol and job records, the run lock, resume,
and sweeps.
"""
