"""Merge scheduling: plans waiting for a slot, merges in flight on worker threads, the job's one
account of merge slots, and the scheduler over them (it plans, commits and announces nothing)."""
