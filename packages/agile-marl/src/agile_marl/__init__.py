"""agile_marl."""
