"""The Slurm scheduler: submits a plan as an sbatch job, follows it, and records how it ended (no sacct needed)."""
