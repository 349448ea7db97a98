"""agile_cli."""
