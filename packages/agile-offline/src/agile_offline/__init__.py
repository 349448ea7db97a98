"""agile_offline."""
