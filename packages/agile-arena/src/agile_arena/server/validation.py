"""Manifest checks before a job is accepted: the loader `agile validate` uses, plus confinement of
every path the manifest names to the job directory."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ValidManifest:
    """What the server needs from an accepted manifest."""

    algorithm: str
    environment: str


class InvalidManifest(ValueError):
    """A manifest refused before anything runs; `errors` as the API reports them."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{e['path']}: {e['message']}" if e["path"] else e["message"] for e in errors))


def validate_manifest_text(text: str, filename: str, job_dir: Path) -> ValidManifest:
    """Validate manifest `text` (YAML or JSON) as if it were `job_dir/filename`.

    Raises InvalidManifest listing every problem with its dotted field path (`algorithm.lr`), its
    line when known, and the value (hidden for secret-like fields), as `agile validate --json` does.
    """
    from agile_arena.manifests import refuse_mf_pbt
    from agile_arena.server.paths import manifest_path_issues
    from agile_core.errors import ManifestError, ManifestIssue
    from agile_core.specs.manifest import validate_source
    from agile_core.yaml_source import parse_text

    try:
        source = parse_text(text, filename)
        source.base_dir = job_dir
        source.search_cwd = False  # the server's working directory is not the tenant's
        refused = manifest_path_issues(source.data, job_dir) + stdlib_import_issues(source.data)
        if refused:
            raise ManifestError(source.locate([ManifestIssue(path, message, value)
                                               for path, message, value in refused]), filename)
        manifest = validate_source(source, emit_warnings=False)
        refuse_mf_pbt(manifest, source)  # as Arena: tournament selection only
    except ManifestError as exc:
        raise InvalidManifest([_scrubbed(_entry(issue.to_dict()), job_dir) for issue in exc.issues]) from None
    except Exception as exc:  # a loader bug must not become a 500 with a traceback
        detail = " ".join(str(exc).split())[:200]
        raise InvalidManifest([_scrubbed({"path": "", "message": f"internal error while validating "
                                                                 f"({type(exc).__name__}: {detail})"}, job_dir)]) from None
    return ValidManifest(algorithm=manifest.algorithm.name, environment=manifest.environment.name)


def stdlib_import_issues(data: Any) -> list[tuple[tuple[str | int, ...], str, str]]:
    """Environment entrypoints and wrappers that name a standard-library callable (`os:system`,
    `subprocess.Popen`...): refused, since no environment lives there. (This narrows, but does not
    close, what a key holder can run: any installed package's callable can still be named.)"""
    environment = data.get("environment") if isinstance(data, dict) else None
    if not isinstance(environment, dict):
        return []
    found: list[tuple[tuple[str | int, ...], str]] = []
    if isinstance(environment.get("entrypoint"), str):
        found.append((("environment", "entrypoint"), environment["entrypoint"]))
    wrappers = environment.get("wrappers")
    if isinstance(wrappers, list):
        for index, wrapper in enumerate(wrappers):
            if isinstance(wrapper, str):
                found.append((("environment", "wrappers", index), wrapper))
            elif isinstance(wrapper, dict) and isinstance(wrapper.get("name"), str):
                found.append((("environment", "wrappers", index, "name"), wrapper["name"]))
    issues = []
    for path, reference in found:
        top = reference.split(":", 1)[0].split(".", 1)[0]
        if (":" in reference or "." in reference) and top in sys.stdlib_module_names:
            issues.append((path, f"this server does not run standard-library callables ('{top}')", reference))
    return issues


def _scrubbed(entry: dict[str, Any], job_dir: Path) -> dict[str, Any]:
    """`entry` with the server's job folder left out of its texts (`/srv/data/jobs/ab12/x.py` reads
    `x.py`, the folder itself "the job folder"): errors never show where the server keeps jobs."""
    folders = sorted({str(job_dir), os.path.realpath(job_dir)}, key=len, reverse=True)

    def scrub(text: str) -> str:
        for folder in folders:
            text = text.replace(folder + os.sep, "").replace(folder, "the job folder")
        return text

    return {key: scrub(value) if isinstance(value, str) else value for key, value in entry.items()}


def _entry(issue: dict[str, Any]) -> dict[str, Any]:
    """An API `errors` entry: path and message first, then line/column/got when known."""
    entry: dict[str, Any] = {"path": issue["path"], "message": issue["message"]}
    entry.update({k: v for k, v in issue.items() if k not in entry and v is not None})
    return entry
