"""agile_offpolicy."""
