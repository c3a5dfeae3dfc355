"""Spark entry points: build the session and start the compaction query."""
