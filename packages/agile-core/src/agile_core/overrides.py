"""`--set dotted.key=value` overrides applied to manifest data before validation."""

from __future__ import annotations

import copy
from collections.abc import Iterable

from agile_core.errors import ManifestError, ManifestIssue
from agile_core.yaml_source import ManifestSource, parse_text


def apply_overrides(source: ManifestSource, overrides: Iterable[str]) -> ManifestSource:
    """A copy of `source` with each `key.path=value` set (values parsed as YAML scalars or lists)."""
    data = copy.deepcopy(source.data)
    issues: list[ManifestIssue] = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        path = tuple(part for part in key.strip().split(".") if part)
        if not sep or not path:
            issues.append(ManifestIssue((), f"--set expects dotted.key=value, got {item!r}"))
            continue
        try:
            value = parse_text(raw, "--set").data if raw.strip() else None
        except ManifestError as exc:
            issues.append(ManifestIssue(path, f"--set value is not valid YAML: {exc.issues[0].message}"))
            continue
        if not isinstance(data, dict):
            issues.append(ManifestIssue((), "the manifest is not a mapping; --set cannot apply"))
            break
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                issues.append(ManifestIssue(path, f"--set cannot descend into '{part}': it is not a mapping"))
                break
            node = child
        else:
            node[path[-1]] = value
    if issues:
        raise ManifestError(issues, source.filename)
    lines = {p: line for p, line in source.lines.items()}
    return ManifestSource(data=data, filename=source.filename, lines=lines, base_dir=source.base_dir)
