"""`--set dotted.key=value` overrides applied to manifest data before validation.

Every path an override sets remembers its `--set` argument (`ManifestSource.origins`), so a problem
with the value is reported as `--set training.pop_size=-1: training.pop_size: ...`, not against a
line of the file that no longer holds it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from agile_core.errors import ManifestError, ManifestIssue, Path, is_secret_path
from agile_core.yaml_source import ManifestSource, parse_text


def override_label(item: str) -> str:
    """How an override is named in errors: the `--set` argument, its value hidden for secrets."""
    key, sep, _ = item.partition("=")
    path = tuple(part for part in key.strip().split(".") if part)
    if sep and is_secret_path(path):
        return f"--set {key}=***"
    return f"--set {item}"


def apply_overrides(source: ManifestSource, overrides: Iterable[str | tuple[str, str]]) -> ManifestSource:
    """A copy of `source` with each `key.path=value` set (values parsed as YAML scalars or lists).

    An override may be given as `(assignment, label)` to be named by `label` in errors, e.g.
    `("training.seed=5", "--seed 5")` for a flag that sets a field; a plain string is named
    `--set key.path=value`."""
    data = copy.deepcopy(source.data)
    lines = dict(source.lines)
    origins = dict(source.origins)
    issues: list[ManifestIssue] = []
    for override in overrides:
        item, label = override if isinstance(override, tuple) else (override, override_label(override))
        key, sep, raw = item.partition("=")
        path: Path = tuple(part for part in key.strip().split(".") if part)
        if not sep or not path:
            issues.append(ManifestIssue((), "--set expects dotted.key=value", origin=label))
            continue
        try:
            value = parse_text(raw, label).data if raw.strip() else None
        except ManifestError as exc:
            issues.append(ManifestIssue(path, f"the value is not valid YAML: {exc.issues[0].message.removeprefix('invalid YAML: ')}", origin=label))
            continue
        if not isinstance(data, dict):
            issues.append(ManifestIssue((), "the manifest is not a mapping; --set cannot apply", origin=label))
            break
        node = data
        for depth, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                issues.append(ManifestIssue(path[: depth + 1], f"--set cannot descend into '{part}': it is not a mapping",
                                            origin=label))
                break
            node = child
        else:
            node[path[-1]] = value
            # what the file had at and below this path is gone; its lines no longer apply
            for known in [p for p in (*lines, *origins) if p[: len(path)] == path]:
                lines.pop(known, None)
                origins.pop(known, None)
            origins[path] = label
    if issues:
        raise ManifestError(issues, source.filename)
    return ManifestSource(data=data, filename=source.filename, lines=lines, base_dir=source.base_dir, origins=origins)
