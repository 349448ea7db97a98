"""agile-core: specs, registry, evolution engine, checkpoints and logging shared by every paradigm.

Importing this package is cheap (no torch); submodules load what they need.
"""

__version__ = "0.1.0"
