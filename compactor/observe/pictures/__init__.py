"""Pictures of a table's history: its segments over time (the timeline) and a replay's plot."""
