"""Specs of the multi-agent paradigm: its environment, network and algorithm sections."""
