"""agile: manifest-driven reinforcement learning with evolutionary hyperparameter optimisation."""
