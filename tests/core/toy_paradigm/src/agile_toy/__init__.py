"""A toy paradigm for the registry tests."""
