"""Slurm integration: HealthCheckProgram / NHC check, prolog, epilog, and job requeue for ``run``."""
