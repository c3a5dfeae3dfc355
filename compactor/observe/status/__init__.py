"""What `compactor status` and the console say of tables, shards and the warehouse: each table's
status word and health score, the shards' progress, the warehouse page's rows."""
