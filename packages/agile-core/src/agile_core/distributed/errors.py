"""Errors of the distributed backends."""


class BackendError(ValueError):
    """A backend that cannot run this training: not installed, a paradigm it does not support,
    resources the cluster lacks. The CLI reports it as a usage error (exit 2)."""


class WorkerLostError(RuntimeError):
    """A member's work failed on every worker it was retried on (workers kept dying)."""


class WorkerStartError(RuntimeError):
    """A Ray worker failed in its constructor (rebuilding the env or the phase from the manifest):
    retrying would fail the same way, so the run stops with the worker's error."""
