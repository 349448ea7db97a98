"""agile_core."""
