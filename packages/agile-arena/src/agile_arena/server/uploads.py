"""Submissions that carry files (agile_arena.bundle): the upload is streamed to disk inside the job
folder being prepared, checked member by member, and unpacked into its `inputs/` folder.

The archive is an uncompressed tar (so its size bounds what it unpacks to), with
`submission.json` and files or folders under `inputs/` only: no links, devices, sparse files,
absolute names, `..` or repeated names. A refused upload leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path, PurePosixPath

from starlette.requests import Request

from agile_arena.archive import check_member
from agile_arena.bundle import MAX_FILES, SUBMISSION_MEMBER, UPLOAD_FOLDER
from agile_arena.errors import UnsafeArchiveError
from agile_arena.server.errors import ApiError

UPLOAD_TYPE = "application/x-tar"
STAGING_SUFFIX = ".upload"
_ARCHIVE_NAME = ".upload.tar"


def is_upload(request: Request) -> bool:
    """Whether the request body is an upload archive (else a JSON submission)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower() == UPLOAD_TYPE


def staging_dir(job_dir: Path) -> Path:
    """The hidden folder a job with uploads is prepared in (renamed to `job_dir` once accepted)."""
    return job_dir.with_name(f".{job_dir.name}{STAGING_SUFFIX}")


def remove_stale(jobs_dir: Path) -> None:
    """Remove staging folders a stopped server left half-prepared."""
    try:
        entries = list(jobs_dir.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(".") and entry.name.endswith(STAGING_SUFFIX):
            shutil.rmtree(entry, ignore_errors=True)


async def receive(request: Request, staging: Path) -> Path:
    """Stream the body into `staging` (created, mode 0700); return the archive's path. The size
    limit is the BodyLimit middleware's."""
    staging.mkdir(parents=True, mode=0o700)
    archive = staging / _ARCHIVE_NAME
    with open(archive, "wb") as out:
        async for chunk in request.stream():
            out.write(chunk)
    return archive


def unpack(archive: Path, staging: Path, max_submission_bytes: int) -> bytes:
    """Check every member, unpack `inputs/` into `staging`, delete the archive; return the bytes of
    `submission.json`. ApiError (bad_request or too_large) names the first problem."""
    try:
        with tarfile.open(archive, mode="r:") as tar:
            members = _checked_members(tar)
            submission = _read_submission(tar, members, max_submission_bytes)
            for member, relative in members:
                if relative.parts[0] == UPLOAD_FOLDER:
                    _extract(tar, member, staging.joinpath(*relative.parts))
    except tarfile.TarError as exc:
        raise ApiError("bad_request", f"the upload is not a readable tar archive ({exc})") from None
    except UnsafeArchiveError as exc:
        raise ApiError("bad_request", f"the upload was refused: {exc}") from None
    finally:
        archive.unlink(missing_ok=True)
    return submission


def _checked_members(tar: tarfile.TarFile) -> list[tuple[tarfile.TarInfo, PurePosixPath]]:
    members: list[tuple[tarfile.TarInfo, PurePosixPath]] = []
    seen: set[PurePosixPath] = set()
    for member in tar:
        if len(members) > MAX_FILES:
            raise ApiError("too_large", f"the upload holds more than {MAX_FILES:,} files")
        relative = check_member(member)
        if member.issparse():
            raise UnsafeArchiveError(f"refusing archive member {member.name!r}: sparse files are not allowed")
        if relative in seen:
            raise UnsafeArchiveError(f"refusing archive member {member.name!r}: the name appears twice")
        seen.add(relative)
        top = relative.parts[0] if relative.parts else ""
        if str(relative) != SUBMISSION_MEMBER and top != UPLOAD_FOLDER:
            raise UnsafeArchiveError(f"refusing archive member {member.name!r}: files go under {UPLOAD_FOLDER}/")
        members.append((member, relative))
    return members


def _read_submission(tar: tarfile.TarFile, members: list[tuple[tarfile.TarInfo, PurePosixPath]],
                     limit: int) -> bytes:
    for member, relative in members:
        if str(relative) == SUBMISSION_MEMBER and member.isfile():
            if member.size > limit:
                raise ApiError("too_large", f"{SUBMISSION_MEMBER} is larger than the server's limit of {limit} bytes")
            handle = tar.extractfile(member)
            if handle is not None:
                with handle:
                    return handle.read()
    raise ApiError("bad_request", f"the upload has no {SUBMISSION_MEMBER} (the manifest and the submission's fields)")


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, destination: Path) -> None:
    if member.isdir():
        destination.mkdir(parents=True, exist_ok=True, mode=0o755)
        return
    destination.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    source = tar.extractfile(member)
    if source is None:
        raise UnsafeArchiveError(f"refusing archive member {member.name!r}: no file data")
    with source, open(destination, "xb") as out:
        shutil.copyfileobj(source, out)
    os.chmod(destination, 0o755 if member.mode & 0o100 else 0o644)
