"""What the tests share: the ``unirl`` command in this process or as its own (cli), run-directory readers and
optional components (helpers), fixtures (fixtures, slurm_cluster), golden files (golden), a Ray head (ray_head), the
adapters' parity set (parity), GPU recipes (backend_recipes), and rewards worker processes import by dotted path
(reward_fixtures)."""
