"""`ArenaClient`: the HTTP client of an Arena server (submit, follow, stop, resume, download).

Reads (GET) are retried with exponential backoff after connection failures and 5xx responses;
writes (POST: submit, stop, resume) are sent once, never repeated. Failures raise the typed
errors of :mod:`agile_arena.errors`; the API key never appears in their messages, in `repr` or
in log records.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar
from urllib.parse import quote, urlsplit

import httpx

from agile_arena import archive
from agile_arena.config import resolve_api_key, resolve_url
from agile_arena.errors import (
    ArenaAuthError,
    ArenaConfigError,
    ArenaConflictError,
    ArenaConnectionError,
    ArenaError,
    ArenaNotFoundError,
    ArenaRequestError,
    ArenaServerError,
    ArenaValidationError,
    FieldError,
)
from agile_arena.events import Event, LogEvent, MalformedEventError, StatusEvent, parse_event

if TYPE_CHECKING:
    from agile_arena.manifests import PreparedManifest
    from agile_core.specs.manifest import TrainingManifest

logger = logging.getLogger("agile_arena.client")
T = TypeVar("T")

LOGIN_HINT = "log in with `agile arena login` or set AGILE_ARENA_API_KEY (in Python: ArenaClient(api_key=...))"
_RETRYABLE = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
_TAR_TYPES = ("application/x-tar", "application/tar")
UPLOAD_TYPE = "application/x-tar"
"""Content type of a submission that carries files (see agile_arena.bundle)."""


def one_node_warning(asked: str) -> str:
    """The warning for more than one node: this server trains each job on one."""
    return f"{asked}: this Arena server trains each experiment on one node; the job runs on one node"


class _Retry(Exception):
    """A 5xx response: retried for GET, raised as its ArenaServerError otherwise."""

    def __init__(self, error: ArenaError) -> None:
        super().__init__(error.message)
        self.error = error


class ArenaClient:
    """Client of one Arena server, authenticated with one API key.

    Args:
        api_key: the key (default: $AGILE_ARENA_API_KEY, $ARENA_API_KEY, then the credentials
            file `agile arena login` writes).
        url: the server (default: $AGILE_ARENA_URL, the credentials file, http://127.0.0.1:8470).
        timeout: seconds to connect and for each read of an ordinary call.
        retries: extra attempts of a GET after a connection failure or a 5xx response.
        backoff: the first pause between attempts, doubled each time up to `max_backoff`.
        stream_read_timeout: seconds a followed log stream may stay silent before the client
            reconnects (it resumes at the last offset, so nothing is lost or repeated).
        reconnect_window: seconds a followed log keeps reconnecting after it lost the server (a
            restart, a dropped tunnel), with pauses growing from `backoff` to `max_backoff`;
            ArenaConnectionError only when no event came for that long.
        stop_timeout: seconds to wait for `stop` (the server answers when the worker has exited).
        transport: an httpx transport (tests pass `httpx.MockTransport`).
        credentials_file: read this credentials file instead of the default location.
        sleep, clock: how to pause and read the time (tests pass fakes).
    """

    def __init__(self, api_key: str | None = None, url: str | None = None, *, timeout: float = 30.0,
                 retries: int = 3, backoff: float = 0.5, max_backoff: float = 8.0,
                 stream_read_timeout: float = 60.0, stop_timeout: float = 120.0, transport: httpx.BaseTransport | None = None,
                 credentials_file: str | Path | None = None, sleep: Callable[[float], None] = time.sleep,
                 reconnect_window: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        if retries < 0 or backoff < 0 or timeout <= 0 or reconnect_window < 0:
            raise ArenaConfigError("retries, backoff and reconnect_window must be >= 0 and timeout > 0")
        file = Path(credentials_file) if credentials_file is not None else None
        self._credentials_file = file
        self.url = _checked_url(resolve_url(url, file))
        self._api_key = _checked_key(resolve_api_key(api_key, file))
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.stream_read_timeout = stream_read_timeout
        self.stop_timeout = stop_timeout
        self.reconnect_window = reconnect_window
        self._sleep = sleep
        self._clock = clock
        self._http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport,
                                  headers={"User-Agent": "agile-arena-client"}, follow_redirects=False)
        if self._api_key and _plain_http_to_remote(self.url):
            warnings.warn(f"sending the Arena API key over plain HTTP to {urlsplit(self.url).hostname}; "
                          "put the server behind HTTPS", UserWarning, stacklevel=2)

    def __repr__(self) -> str:
        return f"ArenaClient(url={self.url!r}, api_key={'***' if self._api_key else None})"

    @property
    def has_api_key(self) -> bool:
        """Whether a key was found (the key itself is never exposed)."""
        return bool(self._api_key)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> ArenaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ calls
    def health(self) -> dict[str, Any]:
        """`{"status": "ok", "version": ...}` (needs no key)."""
        return dict(self._json("GET", "/v1/health", auth=False))

    def resources(self) -> list[dict[str, Any]]:
        """Where jobs can run: `[{"id", "slots", "running", "queued"}]`."""
        return list(self._json("GET", "/v1/resources"))

    def submit(self, manifest: str | Path | dict[str, Any] | TrainingManifest | PreparedManifest, *,
               resource_id: str | int | None = None, experiment_name: str | None = None,
               project: str | None = None) -> dict[str, Any]:
        """Check `manifest` (a path, dict, TrainingManifest or PreparedManifest) here, then submit it;
        return the new Experiment. A local problem raises `ManifestError` (nothing is sent); the
        server's raises ArenaValidationError with the lines of the local file where known."""
        from agile_arena.manifests import PreparedManifest, prepare_manifest

        prepared = manifest if isinstance(manifest, PreparedManifest) else prepare_manifest(manifest)
        body = {"manifest": prepared.text, "filename": prepared.filename,
                "resource_id": None if resource_id is None else str(resource_id),
                "experiment_name": experiment_name, "project": project}
        try:
            if prepared.bundle:
                return self._submit_upload(body, prepared)
            return dict(self._json("POST", "/v1/experiments", body=body))
        except ArenaValidationError as exc:
            raise ArenaValidationError(exc.message, prepared.locate(exc.errors), status=exc.status, kind=exc.kind,
                                       filename=prepared.display_name) from None

    def _submit_upload(self, body: dict[str, Any], prepared: PreparedManifest) -> dict[str, Any]:
        """POST the submission with the files its manifest names, as one tar archive streamed from a
        temporary file (checked against the server's upload limit first, when it states one)."""
        from agile_arena.bundle import BundleError, write_upload

        try:
            size = prepared.bundle.size()
        except BundleError as exc:
            raise ArenaRequestError(str(exc)) from None
        limit = self.health().get("max_upload_bytes")
        if isinstance(limit, int) and size > limit:
            raise ArenaRequestError(f"the files the manifest names hold {_bytes(size)}, more than this server's "
                                    f"upload limit of {_bytes(limit)} (agile arena serve --max-upload-bytes)",
                                    kind="too_large")
        with tempfile.TemporaryFile(prefix="agile-arena-upload-") as archive_file:
            try:
                write_upload(archive_file, body, prepared.bundle)
            except BundleError as exc:
                raise ArenaRequestError(str(exc)) from None
            length = archive_file.tell()
            archive_file.seek(0)

            def once() -> Any:
                response = self._http.post("/v1/experiments", content=_file_chunks_of(archive_file),
                                           headers={**self._headers(), "Content-Type": UPLOAD_TYPE,
                                                    "Content-Length": str(length)},
                                           timeout=httpx.Timeout(self.timeout, write=None))
                self._checked(response)
                return response.json()

            return dict(self._call("POST", "/v1/experiments", once))

    def submit_text(self, text: str, filename: str = "manifest.yaml", **options: Any) -> dict[str, Any]:
        """Submit manifest text (YAML or JSON), checked here first like a file."""
        from agile_arena.manifests import prepare_text

        return self.submit(prepare_text(text, filename), **options)

    def list_experiments(self) -> list[dict[str, Any]]:
        """This key's experiments, newest first."""
        return list(self._json("GET", "/v1/experiments"))

    def status(self, experiment_id: str) -> dict[str, Any]:
        """One experiment (its `status` among queued, running, completed, failed, stopped, interrupted)."""
        return dict(self._json("GET", _experiment(experiment_id)))

    get_experiment = status

    def stop(self, experiment_id: str) -> dict[str, Any]:
        """Stop a queued or running experiment (sent once, never retried). The server answers once
        the worker has saved a checkpoint and exited, so this waits up to `stop_timeout` seconds."""
        return dict(self._json("POST", _experiment(experiment_id, "stop"), timeout=max(self.timeout, self.stop_timeout)))

    def resume(self, experiment_id: str) -> dict[str, Any]:
        """Queue a stopped, interrupted or failed experiment again from its last checkpoint (one that
        was stopped before it started runs from the beginning)."""
        return dict(self._json("POST", _experiment(experiment_id, "resume")))

    def delete(self, experiment_id: str) -> dict[str, Any]:
        """Delete a finished (completed, failed, stopped or interrupted) experiment: its record and
        its files on the server, for good. A queued or running one raises ArenaConflictError (stop
        it first). Sent once, never retried."""
        return dict(self._json("DELETE", _experiment(experiment_id)))

    def login(self, api_key: str | None = None, *, store: bool = True, verify: bool = True) -> Path | None:
        """Authenticate this client: check `api_key` (asked for with a hidden prompt when None) with
        the server, use it from now on and, with `store`, save it with the URL in the credentials
        file as `agile arena login` does. Returns that file (None when not stored). A refused key
        raises ArenaAuthError and nothing is stored. (The server has no device login: keys come
        from `agile arena create-key` on the server.)"""
        from agile_arena.config import save_credentials

        if api_key is None:
            import getpass

            api_key = getpass.getpass("Arena API key: ")
        key = _checked_key(api_key)
        if key is None:
            raise ArenaAuthError("no API key given", kind="unauthorized")
        previous, self._api_key = self._api_key, key
        if verify:
            try:
                self.list_experiments()
            except ArenaAuthError:
                self._api_key = previous
                raise ArenaAuthError(f"{self.url} refused this API key; nothing was stored", status=401,
                                     kind="unauthorized") from None
            except BaseException:
                self._api_key = previous
                raise
        return save_credentials(self.url, key, self._credentials_file) if store else None

    def checkpoints(self, experiment_id: str) -> list[dict[str, Any]]:
        """Saved checkpoints and the elite: `[{"path", "kind", "bytes", "modified"}]`."""
        return list(self._json("GET", _experiment(experiment_id, "checkpoints")))

    def metrics(self, experiment_id: str) -> str:
        """The run's metrics CSV as text."""
        path = _experiment(experiment_id, "metrics")
        return self._call("GET", path, lambda: self._checked(self._http.get(path, headers=self._headers())).text)

    def download_metrics(self, experiment_id: str, destination: str | Path, *, overwrite: bool = False) -> Path:
        """Write the metrics CSV to `destination` atomically; return its path."""
        target = Path(destination)
        if target.exists() and not overwrite:
            raise FileExistsError(f"{target} exists (pass overwrite=True to replace it)")
        text = self.metrics(experiment_id)
        return archive.write_chunks_atomically([text.encode("utf-8")], target, overwrite=overwrite)

    def download(self, experiment_id: str, path: str, destination: str | Path, *, overwrite: bool = False) -> Path:
        """Fetch a file or folder of the run directory (e.g. `elite`, `checkpoints/<name>`,
        `metrics.csv`) into the folder `destination`, named after the last part of `path`;
        return where it landed. All or nothing: a refused archive or a dropped connection leaves
        nothing behind."""
        name = PurePosixPath(path).name
        target = Path(destination) / (name if name not in ("", ".", "..") else f"{experiment_id}-run")
        if target.exists() and not overwrite:
            raise FileExistsError(f"{target} exists (pass overwrite=True to replace it)")
        route = _experiment(experiment_id, "download")
        return self._call("GET", route, lambda: self._download_once(route, path, target, overwrite))

    def logs(self, experiment_id: str, *, follow: bool = False, offset: int = 0) -> Iterator[Event]:
        """The experiment's log as events: status changes, log lines, server errors.

        With `follow` the stream lasts until the job reaches a terminal status. A dropped
        connection is reopened with `?offset=` of the last line received, so nothing is lost or
        repeated; while the server cannot be reached (a restart, a proxy answering 502) the client
        keeps trying, pausing `backoff` doubling up to `max_backoff` seconds, for `reconnect_window`
        seconds since it last reached it, then raises ArenaConnectionError. Without `follow`, a
        dropped stream is retried `retries` times."""
        route = _experiment(experiment_id, "logs")
        status: str | None = None
        failures = 0
        connected = False
        lost_since: float | None = None  # when the server was last reached, while it cannot be
        while True:
            finished = False
            try:
                with self._open_log_stream(route, offset, follow) as response:
                    connected = True
                    lost_since = None
                    for raw in response.iter_lines():
                        if not raw.strip():
                            continue
                        event = self._parse_event(raw)
                        if isinstance(event, LogEvent):
                            if event.offset <= offset:
                                continue  # already delivered before a reconnect
                            offset = event.offset
                            failures = 0
                        elif isinstance(event, StatusEvent):
                            finished = event.terminal
                            if event.status == status:
                                continue  # repeated at the start of every connection
                            status = event.status
                            failures = 0
                        yield event
            except _RETRYABLE as exc:
                quiet = follow and isinstance(exc, httpx.ReadTimeout)  # alive but silent: just reconnect
                failures += 0 if quiet else 1
                reason = f"{type(exc).__name__}: {exc}"
            except (ArenaConnectionError, ArenaServerError) as exc:
                if not connected or (isinstance(exc, ArenaServerError) and not follow):
                    raise  # the first connection failed (after its retries): nothing to resume
                failures += 1  # a server restarting takes longer than one round of retries
                reason = exc.message
            else:
                if not follow or finished:
                    return
                failures += 1  # the stream ended before the job did: reconnect
                reason = "stream ended before the experiment finished"
            if failures and lost_since is None:
                lost_since = self._clock()
            if follow:
                gone = self._clock() - lost_since if lost_since is not None else 0.0
                if gone > self.reconnect_window:
                    raise ArenaConnectionError(self._scrub(
                        f"lost the log stream of {experiment_id} at offset {offset} ({reason}): the server "
                        f"could not be reached for {gone:.0f} s; run `agile arena logs {experiment_id} --follow "
                        f"--offset {offset}` to continue"))
            elif failures > self.retries:
                raise ArenaConnectionError(self._scrub(
                    f"lost the log stream of {experiment_id} at offset {offset} ({reason}) after "
                    f"{self.retries} reconnects"))
            delay = self._delay(max(failures - 1, 0)) if failures else 0.0
            logger.info("log stream of %s dropped at offset %d (%s); reconnecting in %.1fs",
                        experiment_id, offset, self._scrub(reason), delay)
            if delay:
                self._sleep(delay)

    def wait(self, experiment_id: str) -> dict[str, Any]:
        """Block until the experiment reaches a terminal status; return it."""
        for _ in self.logs(experiment_id, follow=True):
            pass
        return self.status(experiment_id)

    # ------------------------------------------------------------------ plumbing
    def _headers(self, auth: bool = True) -> dict[str, str]:
        if not auth:
            return {}
        if not self._api_key:
            raise ArenaAuthError(f"no Arena API key: {LOGIN_HINT}", kind="unauthorized")
        return {"Authorization": f"Bearer {self._api_key}"}

    def _json(self, method: str, path: str, *, body: dict[str, Any] | None = None, auth: bool = True,
              timeout: float | None = None) -> Any:
        def once() -> Any:
            response = self._http.request(method, path, json=body, headers=self._headers(auth),
                                          timeout=timeout if timeout is not None else self.timeout)
            self._checked(response)
            try:
                return response.json()
            except ValueError:
                raise ArenaServerError(f"{method} {path}: the server's answer is not JSON",
                                       status=response.status_code) from None

        return self._call(method, path, once)

    def _call(self, method: str, path: str, operation: Callable[[], T]) -> T:
        """Run `operation`; GET is retried with backoff after connection failures and 5xx."""
        attempts = self.retries + 1 if method == "GET" else 1
        for attempt in range(attempts):
            error: ArenaError
            try:
                return operation()
            except _RETRYABLE as exc:
                error = ArenaConnectionError(self._scrub(
                    f"{method} {self.url}{path}: cannot reach the Arena server ({type(exc).__name__}: {exc})"))
            except _Retry as exc:
                error = exc.error
            except httpx.TransportError as exc:  # e.g. an unsupported URL scheme: retrying cannot help
                raise ArenaConnectionError(self._scrub(f"{method} {self.url}{path}: {type(exc).__name__}: {exc}")) \
                    from None
            if attempt + 1 == attempts:
                raise error
            delay = self._delay(attempt)
            logger.warning("retry %d/%d in %.1fs after: %s", attempt + 1, self.retries, delay, error.message)
            self._sleep(delay)
        raise AssertionError("unreachable")

    def _delay(self, attempt: int) -> float:
        return float(min(self.max_backoff, self.backoff * 2 ** min(attempt, 60)))

    def _checked(self, response: httpx.Response) -> httpx.Response:
        """The response when it succeeded; otherwise the matching ArenaError (5xx as _Retry)."""
        if response.is_success:
            return response
        if not response.is_closed:
            response.read()
        error = self._error_for(response)
        if response.status_code >= 500:
            raise _Retry(error)
        raise error

    def _error_for(self, response: httpx.Response) -> ArenaError:
        status = response.status_code
        kind, message, fields = None, "", []
        try:
            data = response.json()
        except ValueError:
            data = None
        if isinstance(data, dict):
            kind = data.get("error") if isinstance(data.get("error"), str) else None
            message = str(data.get("message") or "")
            for item in data.get("errors") or []:
                if isinstance(item, dict):
                    line = item.get("line")
                    fields.append(FieldError(self._scrub(str(item.get("path", ""))),
                                             self._scrub(str(item.get("message", ""))),
                                             line if isinstance(line, int) and not isinstance(line, bool) else None))
        if not message:
            message = " ".join(response.text.split())[:200] or response.reason_phrase or f"HTTP {status}"
        message = self._scrub(message)
        where = f"{response.request.method} {response.request.url.path}"
        if status in (401, 403):
            return ArenaAuthError(f"{message} ({LOGIN_HINT})", status=status, kind=kind)
        if status == 404:
            return ArenaNotFoundError(message, status=status, kind=kind)
        if status == 422:
            return ArenaValidationError(message, fields, status=status, kind=kind)
        if status == 409:
            return ArenaConflictError(message, status=status, kind=kind)
        if status in (400, 413):
            return ArenaRequestError(message, status=status, kind=kind)
        if status >= 500:
            return ArenaServerError(f"{where}: server error {status}: {message}", status=status, kind=kind)
        return ArenaError(f"{where}: unexpected HTTP {status}: {message}", status=status, kind=kind)

    def _scrub(self, text: str) -> str:
        """`text` with the API key (should it ever appear) replaced by ***."""
        return text.replace(self._api_key, "***") if self._api_key else text

    def _parse_event(self, raw: str) -> Event:
        try:
            return parse_event(raw)
        except MalformedEventError as exc:
            raise ArenaServerError(f"malformed log event from the server: {exc}") from None

    @contextlib.contextmanager
    def _open_log_stream(self, route: str, offset: int, follow: bool) -> Iterator[httpx.Response]:
        """An open NDJSON log response (connecting is retried like any GET)."""
        params = {"offset": str(offset), "follow": "true" if follow else "false"}
        timeout = httpx.Timeout(self.timeout, read=self.stream_read_timeout if follow else self.timeout)

        def connect() -> httpx.Response:
            request = self._http.build_request("GET", route, params=params, headers=self._headers(), timeout=timeout)
            response = self._http.send(request, stream=True)
            try:
                return self._checked(response)
            except BaseException:
                response.close()
                raise

        response = self._call("GET", route, connect)
        try:
            yield response
        finally:
            response.close()

    def _download_once(self, route: str, path: str, target: Path, overwrite: bool) -> Path:
        """One attempt at a download: stream to a temporary file, then put it in place."""
        request = self._http.build_request("GET", route, params={"path": path}, headers=self._headers())
        response = self._http.send(request, stream=True)
        try:
            self._checked(response)
            content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            partial = archive.temporary_beside(target, ".download")
            try:
                with open(partial, "wb") as out:
                    for chunk in response.iter_bytes():
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
                if content_type in _TAR_TYPES:
                    return archive.install_tar_atomically(partial, target, overwrite=overwrite)
                return archive.write_chunks_atomically(_file_chunks(partial), target, overwrite=overwrite)
            finally:
                partial.unlink(missing_ok=True)
        finally:
            response.close()


def _file_chunks_of(handle: BinaryIO, size: int = 1 << 20) -> Iterator[bytes]:
    while chunk := handle.read(size):
        yield chunk


def _bytes(count: int) -> str:
    """`count` bytes for people (`1.5 GiB`)."""
    value = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{count} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _file_chunks(path: Path, size: int = 1 << 20) -> Iterator[bytes]:
    with open(path, "rb") as stream:
        while chunk := stream.read(size):
            yield chunk


def _experiment(experiment_id: str, action: str | None = None) -> str:
    if not isinstance(experiment_id, str) or not experiment_id or experiment_id in (".", ".."):
        raise ArenaConfigError(f"invalid experiment id {experiment_id!r}")
    route = f"/v1/experiments/{quote(experiment_id, safe='')}"
    return f"{route}/{action}" if action else route


def _checked_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ArenaConfigError(f"invalid Arena server URL {url!r}: expected http://HOST:PORT or https://HOST")
    if parts.username or parts.password:
        raise ArenaConfigError("the Arena server URL must not contain a user name or password")
    return url


def _checked_key(key: str | None) -> str | None:
    if key is None:
        return None
    key = key.strip()
    if not key:
        return None
    if len(key) > 512 or any(not (33 <= ord(char) <= 126) for char in key):
        raise ArenaConfigError("the Arena API key contains spaces, control or non-ASCII characters; "
                               "check what was pasted")
    return key


def _plain_http_to_remote(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme != "http":
        return False
    host = parts.hostname or ""
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True
