"""Fixtures come from tests/support as plugins: every test runs in its own directory with its own runs directory and
a fresh plugin host (fixtures); the ``slurm_cluster`` session fixture for the slurm tests (slurm_cluster)."""

pytest_plugins = ["tests.support.fixtures", "tests.support.slurm_cluster"]
