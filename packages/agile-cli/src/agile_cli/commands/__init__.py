"""Subcommands of `agile`, one module each."""
