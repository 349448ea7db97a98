"""Weights & Biases backend. The API key is used for authentication only and never stored."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from typing import Any

from ._optional import require
from ._params import is_secret_name, scrub_secrets
from .backend import MetricsBackend

_NO_AUTH_MODES = frozenset({"offline", "disabled", "dryrun"})


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _contains(secret: str | None) -> Callable[[str], bool] | None:
    if not secret:
        return None
    return lambda text: secret in text


def _resolve_mode(mode: str | None, kwargs: Mapping[str, Any]) -> str:
    chosen = mode or kwargs.get("mode") or os.environ.get("WANDB_MODE") or "online"
    return str(chosen)


class WandbBackend(MetricsBackend):
    """Logs to a W&B run; ``run_id`` lets a resumed training continue the same run.

    The API key comes from ``api_key`` or the ``WANDB_API_KEY`` environment
    variable.  It is handed to ``wandb.init`` through ``wandb.Settings(api_key=...)``
    only in online mode (so it is never written to ``~/.netrc``) and is not kept
    on this object (only its SHA-256 digest, to recognise it in later input);
    the configuration sent to W&B has every key/token/secret field removed.
    ``mode`` is ``"online"``, ``"offline"`` or ``"disabled"`` (default:
    ``wandb_kwargs["mode"]``, then ``WANDB_MODE``, then online).
    ``wandb_kwargs`` are passed to ``wandb.init`` (``entity``, ``name``, ``group``,
    ``tags``, ``config``, ``dir``, ``settings``, ...).  On resume, pass the stored
    ``run_id``: the run is opened with ``resume="allow"`` and logging continues at
    the caller's global steps (W&B ignores steps below the run's last logged
    step).  Requires ``pip install "agile-core[wandb]"``.
    """

    def __init__(
        self,
        api_key: str | None = None,
        *,
        project: str = "agile",
        mode: str | None = None,
        run_id: str | None = None,
        wandb_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        wandb = require("wandb", package="wandb", extra="wandb")
        kwargs = dict(wandb_kwargs or {})
        key = api_key or kwargs.pop("api_key", None) or os.environ.get("WANDB_API_KEY") or None
        for name in [k for k in kwargs if is_secret_name(k)]:
            kwargs.pop(name)
        resolved_mode = _resolve_mode(mode, kwargs)
        kwargs["mode"] = resolved_mode
        kwargs.setdefault("project", project)
        kwargs["config"] = scrub_secrets(
            dict(kwargs.get("config") or {}), is_secret_value=_contains(key)
        )
        if run_id:
            kwargs["id"] = run_id
        kwargs["resume"] = "allow"
        settings = kwargs.pop("settings", None)
        if isinstance(settings, Mapping):
            settings = wandb.Settings(
                **{k: v for k, v in settings.items() if not is_secret_name(k)}
            )
        if key and resolved_mode not in _NO_AUTH_MODES:
            settings = settings.model_copy() if settings is not None else wandb.Settings()
            settings.api_key = key
        if settings is not None:
            kwargs["settings"] = settings
        # Only a digest of the key is kept, to recognise it in later configs or texts.
        self._key_digest = _digest(key) if key else None
        self._run = wandb.init(**kwargs)

    @property
    def run_id(self) -> str | None:
        """The W&B run id; store it in checkpoints and pass it back when resuming."""
        return str(self._run.id) if self._run is not None and self._run.id else None

    @property
    def run(self) -> Any:
        """The underlying ``wandb`` run object (``None`` once closed)."""
        return self._run

    def _active_run(self) -> Any:
        if self._run is None:
            raise RuntimeError("WandbBackend is closed")
        return self._run

    def _holds_key(self, text: str) -> bool:
        if self._key_digest is None:
            return False
        return any(_digest(part) == self._key_digest for part in (text, *text.split()))

    def _redact(self, text: str) -> str:
        if self._key_digest is None:
            return text
        return " ".join(
            "***" if _digest(part) == self._key_digest else part for part in text.split(" ")
        )

    def log_scalars(self, step: int, metrics: Mapping[str, float]) -> None:
        """Log the metrics at ``step`` (W&B drops steps lower than the run's current step)."""
        self._active_run().log(dict(metrics), step=step)

    def log_text(self, step: int, name: str, text: str) -> None:
        """Log a text event as a string value at ``step``."""
        self._active_run().log({name: self._redact(text)}, step=step)

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        """Merge the (secret-free) configuration into the run config."""
        self._active_run().config.update(
            scrub_secrets(params, is_secret_value=self._holds_key), allow_val_change=True
        )

    def close(self) -> None:
        """Finish the run (idempotent)."""
        if self._run is not None:
            run, self._run = self._run, None
            run.finish()
