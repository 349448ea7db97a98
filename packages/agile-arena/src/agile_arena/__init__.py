"""agile_arena: submit agile manifests to an Arena server, follow them and fetch their results.

`from agile_arena import ArenaClient, ArenaTrainer`. Importing the package is cheap: each name
loads its module on first use (no torch, no server dependencies). The self-hosted server is
`agile_arena.server` (the `agile-arena[server]` extra).
"""

from __future__ import annotations

from agile_core.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "ArenaClient": "agile_arena.client",
    "ArenaTrainer": "agile_arena.trainer",
    "ArenaError": "agile_arena.errors",
    "ArenaAuthError": "agile_arena.errors",
    "ArenaNotFoundError": "agile_arena.errors",
    "ArenaValidationError": "agile_arena.errors",
    "ArenaRequestError": "agile_arena.errors",
    "ArenaConflictError": "agile_arena.errors",
    "ArenaServerError": "agile_arena.errors",
    "ArenaConnectionError": "agile_arena.errors",
    "ArenaConfigError": "agile_arena.errors",
    "UnsafeArchiveError": "agile_arena.errors",
    "FieldError": "agile_arena.errors",
    "LogEvent": "agile_arena.events",
    "StatusEvent": "agile_arena.events",
    "ErrorEvent": "agile_arena.events",
    "TERMINAL_STATUSES": "agile_arena.events",
    "credentials_path": "agile_arena.config",
    "save_credentials": "agile_arena.config",
    "load_credentials": "agile_arena.config",
    "DEFAULT_URL": "agile_arena.config",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
