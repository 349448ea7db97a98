"""The Starlette application: the /v1 routes of the arena contract (docs/arena.md)."""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import unicodedata
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from anyio import to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agile_arena.server import files, logs, uploads
from agile_arena.server.auth import bearer_token, hash_key
from agile_arena.server.errors import ApiError
from agile_arena.server.limits import DEFAULT_MAX_UPLOAD_BYTES, BodyLimit
from agile_arena.server.paths import UnsafePath, resolve_inside
from agile_arena.server.progress import ProgressReader
from agile_arena.server.runner import DeleteRefused, ResumeRefused, Runner
from agile_arena.server.sandbox import Sandbox
from agile_arena.server.store import Job, Store
from agile_arena.server.validation import InvalidManifest, validate_manifest_text

RESOURCE_ID = "local"
_JOB_ID = re.compile(r"[0-9a-f]{16}")
_TEXT_FIELDS = {"filename": 255, "experiment_name": 200, "project": 200, "resource_id": 100}
MAX_PATH_CHARS = 4096
MIN_PREFIX = 3
"""Characters of an id or name an experiment can be named by (`agile arena status 3f2a`)."""
MAX_REFERENCE_CHARS = 200
logger = logging.getLogger("uvicorn.error")


def version() -> str:
    """The installed agile-arena version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("agile-arena")
    except PackageNotFoundError:
        return "unknown"


def create_app(data_dir: Path, slots: int = 1, max_request_bytes: int = 1_048_576, device: str = "cpu",
               stop_grace: float = 20.0, sandbox: Sandbox | None = None,
               max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES) -> Starlette:
    """The app for one data directory; `slots` jobs run at once, bodies over `max_request_bytes` get 413
    (submissions that carry files: over `max_upload_bytes`); each job's worker runs in `sandbox`
    (None: no sandbox, for in-process tests only)."""
    data_dir = data_dir.resolve()
    store = Store(data_dir)
    runner = Runner(store, data_dir, slots, device=device, stop_grace=stop_grace, sandbox=sandbox)
    progress = ProgressReader()
    uploads.remove_stale(runner.jobs_dir)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await runner.start()
        try:
            yield
        finally:
            await runner.shutdown()
            store.close()

    def owner(request: Request) -> int:
        key = bearer_token(request.headers.get("authorization"))
        key_id = store.key_id_for_hash(hash_key(key)) if key else None
        if key_id is None:
            raise ApiError("unauthorized", "a valid API key is required (Authorization: Bearer <key>)")
        return key_id

    def own_job(request: Request) -> Job:
        return find_job(store, owner(request), request.path_params["job_id"])

    def experiment(job: Job) -> dict[str, Any]:
        """The Experiment object, with the progress its run directory shows."""
        return job.public(progress.read(job.id, runner.job_dir(job.id)))

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "version": version(), "max_request_bytes": max_request_bytes,
                             "max_upload_bytes": max_upload_bytes})

    async def resources(request: Request) -> Response:
        owner(request)
        running, queued = runner.counts()
        return JSONResponse([{"id": RESOURCE_ID, "slots": slots, "running": running, "queued": queued}])

    async def submit(request: Request) -> Response:
        key_id = owner(request)
        job_id = secrets.token_hex(8)
        job_dir = runner.job_dir(job_id)
        staging = uploads.staging_dir(job_dir) if uploads.is_upload(request) else None
        try:
            if staging is not None:
                archive = await uploads.receive(request, staging)
                fields = _submission(await to_thread.run_sync(uploads.unpack, archive, staging, max_request_bytes))
            else:
                fields = _submission(await request.body())
            filename = os.path.basename(fields["filename"] or "manifest.yaml") or "manifest.yaml"
            try:
                valid = await to_thread.run_sync(validate_manifest_text, fields["manifest"], filename,
                                                 staging or job_dir)
            except InvalidManifest as exc:
                raise ApiError("validation", f"{filename}: the manifest is invalid", exc.errors) from None
            if staging is not None:
                os.replace(staging, job_dir)
            else:
                job_dir.mkdir(parents=True, mode=0o700)
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
        _write_atomically(job_dir / "manifest.yaml", fields["manifest"])
        (job_dir / "log.txt").touch()
        job = store.add_job(job_id, key_id, fields["experiment_name"], fields["project"], RESOURCE_ID,
                            valid.algorithm, valid.environment)
        runner.wake()
        return JSONResponse(job.public(), status_code=201)

    async def list_jobs(request: Request) -> Response:
        jobs = store.list_for_key(owner(request))
        return JSONResponse(await to_thread.run_sync(lambda: [experiment(job) for job in jobs]))

    async def get_job(request: Request) -> Response:
        job = own_job(request)
        return JSONResponse(await to_thread.run_sync(experiment, job))

    async def delete_job(request: Request) -> Response:
        job = own_job(request)
        try:
            trash = runner.delete(job.id)
        except DeleteRefused as exc:
            raise ApiError("conflict", str(exc)) from None
        progress.forget(job.id)
        if trash is not None:
            try:
                await to_thread.run_sync(files.remove_tree, trash)
            except (OSError, RecursionError) as exc:  # gone for the API; removed again at the next start
                logger.warning("arena: cannot remove the folder of deleted job %s yet: %s", job.id, exc)
        return JSONResponse({"id": job.id, "deleted": True})

    async def job_logs(request: Request) -> Response:
        job = own_job(request)
        offset = _int_param(request, "offset", 0)
        follow = _bool_param(request, "follow", False)
        path = runner.job_dir(job.id) / "log.txt"
        size = logs.log_size(path)
        if offset > size:
            raise ApiError("bad_request", f"offset {offset} is beyond the end of the log ({size} bytes)")

        def status() -> str | None:
            current = store.get(job.id)
            return None if current is None else current.status

        stream = logs.stream_log(path, offset, follow, status, lambda: runner.closing,
                                 logs.job_replacements(runner.job_dir(job.id), data_dir))
        return StreamingResponse(stream, media_type="application/x-ndjson")

    async def stop(request: Request) -> Response:
        job = own_job(request)
        await runner.stop(job.id)
        return JSONResponse(experiment(_fresh(store, job)))

    async def resume(request: Request) -> Response:
        job = own_job(request)
        try:
            runner.resume(job.id)
        except ResumeRefused as exc:
            raise ApiError("conflict", str(exc)) from None
        if not job.started:
            progress.forget(job.id)
        return JSONResponse(experiment(_fresh(store, job)))

    async def checkpoints(request: Request) -> Response:
        job = own_job(request)
        found = await to_thread.run_sync(files.list_checkpoints, runner.job_dir(job.id) / "run")
        return JSONResponse(found)

    async def metrics(request: Request) -> Response:
        job = own_job(request)
        try:
            path = resolve_inside(runner.job_dir(job.id) / "run", "metrics.csv")
            handle = open(path, "rb")  # noqa: SIM115 (closed by the stream)
        except (UnsafePath, OSError):
            raise ApiError("not_found", "no metrics yet") from None
        return StreamingResponse(files.chunks(handle), media_type="text/csv")

    async def download(request: Request) -> Response:
        job = own_job(request)
        relative = request.query_params.get("path")
        if relative is None:
            raise ApiError("bad_request", "give the file or folder to download as ?path= (relative to the run directory)")
        if len(relative) > MAX_PATH_CHARS:
            raise ApiError("bad_request", f"the path is longer than {MAX_PATH_CHARS} characters")
        run_dir = runner.job_dir(job.id) / "run"
        try:
            target = resolve_inside(run_dir, relative)
        except UnsafePath as exc:
            raise ApiError("bad_request", f"path {display_safe(relative[:200])!r} refused: {exc}") from None
        name = target.name or job.id
        missing = ApiError("not_found", f"{display_safe(relative[:200])!r} does not exist in the run directory")
        try:
            if target.is_dir():
                handle = await to_thread.run_sync(files.tar_directory, target)
                media, name = "application/x-tar", f"{name}.tar"
            elif target.is_file():
                handle = open(target, "rb")  # noqa: SIM115 (closed by the stream)
                media = "application/octet-stream"
            else:
                raise missing
        except OSError:  # a name too long for the file system, a folder that vanished meanwhile
            raise missing from None
        headers = {"content-length": str(files.size_of(handle)),
                   "content-disposition": f"attachment; filename=\"{_header_safe(name)}\""}
        return StreamingResponse(files.chunks(handle), media_type=media, headers=headers)

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return JSONResponse(exc.body(), status_code=exc.status)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = {401: "unauthorized", 404: "not_found", 413: "too_large", 409: "conflict"}.get(exc.status_code)
        status = exc.status_code if kind else 400 if exc.status_code < 500 else 500
        body = ApiError(kind or ("bad_request" if status == 400 else "server"), str(exc.detail)).body()
        return JSONResponse(body, status_code=status)

    async def server_error(request: Request, exc: Exception) -> Response:
        return JSONResponse(ApiError("server", "internal server error").body(), status_code=500)

    job_route = "/v1/experiments/{job_id}"
    routes = [
        Route("/v1/health", health, methods=["GET"]),
        Route("/v1/resources", resources, methods=["GET"]),
        Route("/v1/experiments", submit, methods=["POST"]),
        Route("/v1/experiments", list_jobs, methods=["GET"]),
        Route(job_route, get_job, methods=["GET"]),
        Route(job_route, delete_job, methods=["DELETE"]),
        Route(f"{job_route}/logs", job_logs, methods=["GET"]),
        Route(f"{job_route}/stop", stop, methods=["POST"]),
        Route(f"{job_route}/resume", resume, methods=["POST"]),
        Route(f"{job_route}/checkpoints", checkpoints, methods=["GET"]),
        Route(f"{job_route}/metrics", metrics, methods=["GET"]),
        Route(f"{job_route}/download", download, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(BodyLimit, limit=max_request_bytes, upload_limit=max_upload_bytes)],
                    exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: server_error})
    app.state.store = store
    app.state.runner = runner
    return app


def _submission(body: bytes) -> dict[str, Any]:
    """The fields of a POST /v1/experiments body, type-checked."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ApiError("bad_request", "the body must be a JSON object (at most a few hundred levels deep)") from None
    if not isinstance(data, dict):
        raise ApiError("bad_request", "the body must be a JSON object")
    manifest = data.get("manifest")
    if not isinstance(manifest, str) or not manifest.strip():
        raise ApiError("bad_request", "`manifest` (the manifest's YAML or JSON text) is required",
                       [{"path": "manifest", "message": "required: a non-empty string"}])
    _check_encodable("manifest", manifest)
    fields: dict[str, Any] = {"manifest": manifest}
    for name, longest in _TEXT_FIELDS.items():
        value = data.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > longest):
            raise ApiError("bad_request", f"`{name}` must be a string of at most {longest} characters",
                           [{"path": name, "message": f"a string of at most {longest} characters"}])
        if value is not None:
            _check_encodable(name, value)
            value = display_safe(value) if name != "resource_id" else value
        fields[name] = value
    if fields["resource_id"] not in (None, RESOURCE_ID):
        raise ApiError("bad_request", f"unknown resource {fields['resource_id']!r}; this server has {RESOURCE_ID!r}",
                       [{"path": "resource_id", "message": f"must be {RESOURCE_ID!r} or null"}])
    return fields


def _check_encodable(name: str, text: str) -> None:
    """Refuse text that is not valid Unicode (lone surrogates from JSON escapes such as \\ud800)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError("bad_request", f"`{name}` is not valid Unicode (it holds a lone surrogate)",
                       [{"path": name, "message": "must be valid Unicode text"}]) from None


def display_safe(text: str) -> str:
    """`text` with control and format characters (terminal escapes, newlines, bidirectional
    overrides) replaced by U+FFFD, so a name cannot rewrite a client's terminal or log line."""
    return "".join("\ufffd" if unicodedata.category(char).startswith("C") else char for char in text)


def _fresh(store: Store, job: Job) -> Job:
    return store.get(job.id) or job


def find_job(store: Store, key_id: int, reference: str) -> Job:
    """The key's experiment that `reference` names: its id; else its name, or the start of exactly one
    id or name (at least MIN_PREFIX characters). Several matches: 400 listing them; none: 404."""
    if _JOB_ID.fullmatch(reference):
        job = store.get(reference, key_id)
        if job is not None:
            return job
    missing = ApiError("not_found", f"no experiment {display_safe(reference[:200])!r}")
    try:
        reference.encode("utf-8")
    except UnicodeEncodeError:
        raise missing from None
    if not reference or len(reference) > MAX_REFERENCE_CHARS:
        raise missing
    candidates = store.matching(reference, key_id)
    exact = [job for job in candidates if reference in (job.id, job.name)]
    found = exact or (candidates if len(reference) >= MIN_PREFIX else [])
    if len(found) == 1:
        return found[0]
    if not found:
        raise missing
    listed = "; ".join(f"{job.id}" + (f" {job.name!r}" if job.name else "") + f" ({job.status}, {job.created_at[:19]})"
                       for job in found[:10])
    more = f"; and {len(found) - 10} more" if len(found) > 10 else ""
    raise ApiError("bad_request", f"{display_safe(reference[:200])!r} matches {len(found)} experiments: {listed}{more}; "
                                  "give the id (or more of it)")


def _int_param(request: Request, name: str, default: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise ApiError("bad_request", f"`{name}` must be a non-negative integer (ASCII digits), got {text[:40]!r}")
    return int(text)


def _bool_param(request: Request, name: str, default: bool) -> bool:
    text = request.query_params.get(name)
    if text is None:
        return default
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise ApiError("bad_request", f"`{name}` must be true or false, got {text[:40]!r}")


def _header_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:200]


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
