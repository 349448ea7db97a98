"""agile_onpolicy."""
