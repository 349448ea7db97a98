"""API keys: `arena_` + 43 url-safe characters, stored only as their SHA-256."""

from __future__ import annotations

import hashlib
import re
import secrets

KEY_PREFIX = "arena_"
KEY_PATTERN = re.compile(r"arena_[A-Za-z0-9_-]{43}")
"""What a key looks like (also used to scrub keys from log records)."""


def new_key() -> str:
    """A fresh random key (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """The hex SHA-256 of a key: what the store keeps."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def bearer_token(header: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header, or None when absent or malformed."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not KEY_PATTERN.fullmatch(token):
        return None
    return token
