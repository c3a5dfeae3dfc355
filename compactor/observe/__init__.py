"""What an operator sees of the running job: metrics, health and readiness."""
