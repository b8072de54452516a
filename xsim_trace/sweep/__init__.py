"""Parameter sweeps over (plan, cluster, backend) and backend comparisons."""
