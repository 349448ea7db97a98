"""Where the client finds its server URL and API key, and the private file `agile arena login` writes.

Precedence, first found wins:
- API key: the `api_key` argument, `$AGILE_ARENA_API_KEY`, `$ARENA_API_KEY`, the credentials file.
- URL: the `url` argument, `$AGILE_ARENA_URL`, the credentials file, `DEFAULT_URL`.

The credentials file is `$AGILE_ARENA_CONFIG` when set, else `$XDG_CONFIG_HOME/agile/arena.json`
(`~/.config/agile/arena.json` without XDG). It is JSON (`{"url": ..., "api_key": ...}`), written
atomically with mode 0600 in a directory created with mode 0700.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agile_arena.errors import ArenaConfigError

DEFAULT_URL = "http://127.0.0.1:8470"
KEY_ENV_VARS = ("AGILE_ARENA_API_KEY", "ARENA_API_KEY")
URL_ENV_VAR = "AGILE_ARENA_URL"
CONFIG_ENV_VAR = "AGILE_ARENA_CONFIG"


class CredentialsFileError(ArenaConfigError):
    """The credentials file exists but cannot be read or is not what `agile arena login` writes."""


def credentials_path() -> Path:
    """The credentials file this process uses (it may not exist yet)."""
    override = os.environ.get(CONFIG_ENV_VAR)
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "agile" / "arena.json"


@dataclass(frozen=True)
class StoredCredentials:
    """What the credentials file holds (either part may be missing)."""

    url: str | None = None
    api_key: str | None = None

    def __repr__(self) -> str:
        return f"StoredCredentials(url={self.url!r}, api_key={'***' if self.api_key else None})"


def load_credentials(path: Path | None = None) -> StoredCredentials:
    """The stored URL and key; empty when the file does not exist."""
    file = path or credentials_path()
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return StoredCredentials()
    except OSError as exc:
        raise CredentialsFileError(f"cannot read {file}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise CredentialsFileError(f"{file} is not valid JSON; run `agile arena login` again") from None
    if not isinstance(data, dict):
        raise CredentialsFileError(f"{file} must hold a JSON object; run `agile arena login` again")
    url, key = data.get("url"), data.get("api_key")
    if (url is not None and not isinstance(url, str)) or (key is not None and not isinstance(key, str)):
        raise CredentialsFileError(f"{file}: `url` and `api_key` must be strings; run `agile arena login` again")
    return StoredCredentials(url=url or None, api_key=key or None)


def save_credentials(url: str | None, api_key: str | None, path: Path | None = None) -> Path:
    """Write the credentials file atomically (mode 0600; missing directories made with mode 0700);
    return its path."""
    file = path or credentials_path()
    _make_private_dirs(file.parent, default_location=path is None and CONFIG_ENV_VAR not in os.environ)
    payload = json.dumps({"url": url, "api_key": api_key}, indent=2) + "\n"
    descriptor, temporary = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".tmp", dir=file.parent)
    try:
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            stream.write(payload)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, file)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _fsync_dir(file.parent)
    return file


def delete_credentials(path: Path | None = None) -> bool:
    """Remove the credentials file; whether there was one."""
    file = path or credentials_path()
    try:
        file.unlink()
    except FileNotFoundError:
        return False
    return True


def _make_private_dirs(folder: Path, default_location: bool) -> None:
    """Create missing folders with mode 0700; the default `agile` config folder is made 0700 even
    when it exists (a folder named by $AGILE_ARENA_CONFIG is left as it is)."""
    missing = []
    current = folder
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        directory.mkdir(mode=0o700)
        os.chmod(directory, 0o700)  # mkdir's mode is reduced by the umask
    if default_location:
        os.chmod(folder, 0o700)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def resolve_api_key(api_key: str | None = None, path: Path | None = None) -> str | None:
    """The key to use: the argument, then the environment, then the credentials file."""
    if api_key:
        return api_key
    for name in KEY_ENV_VARS:
        value = os.environ.get(name)
        if value:
            return value
    return load_credentials(path).api_key


def resolve_url(url: str | None = None, path: Path | None = None) -> str:
    """The server URL to use: the argument, then `$AGILE_ARENA_URL`, the credentials file, the default."""
    chosen = url or os.environ.get(URL_ENV_VAR) or load_credentials(path).url or DEFAULT_URL
    return chosen.rstrip("/")
