"""agile_arena."""
