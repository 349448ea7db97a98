"""Reading manifests from YAML or JSON with the source line of every key kept for error messages."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

import yaml

from agile_core.errors import ManifestError, ManifestIssue, Path

_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-4` (no dot) as a float, as YAML 1.2 and JSON do."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


@dataclass
class ManifestSource:
    """Parsed manifest data plus where each key came from."""

    data: Any
    filename: str = "<manifest>"
    lines: dict[Path, int] = field(default_factory=dict)
    base_dir: FsPath | None = None

    def line_of(self, path: Path) -> int | None:
        """Line of the deepest key on `path` that exists in the source."""
        for end in range(len(path), 0, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return self.lines.get((), None)

    def locate(self, issues: list[ManifestIssue]) -> list[ManifestIssue]:
        """Attach source lines to issues."""
        located = [ManifestIssue(i.path, i.message, i.value, i.line or self.line_of(i.path)) for i in issues]
        return sorted(located, key=lambda issue: issue.line if issue.line is not None else 1 << 30)


def parse_text(text: str, filename: str = "<manifest>") -> ManifestSource:
    """Parse YAML (or JSON) text, recording line numbers and rejecting duplicate keys."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise ManifestError([ManifestIssue((), f"invalid YAML: {problem}", line=line)], filename) from None
    except yaml.YAMLError as exc:
        raise ManifestError([ManifestIssue((), f"invalid YAML: {exc}")], filename) from None
    finally:
        loader.dispose()
    lines: dict[Path, int] = {}
    duplicates: list[ManifestIssue] = []
    if node is not None:
        lines[()] = node.start_mark.line + 1
        _walk(node, (), lines, duplicates)
    if duplicates:
        raise ManifestError(duplicates, filename)
    return ManifestSource(data=data, filename=filename, lines=lines)


def _walk(node: yaml.Node, path: Path, lines: dict[Path, int], duplicates: list[ManifestIssue]) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key_node.tag == "tag:yaml.org,2002:int":
                key = int(key.replace("_", ""))
            child = (*path, key)
            line = key_node.start_mark.line + 1
            if key in seen:
                duplicates.append(ManifestIssue(child, "duplicate key (each key may appear once)", line=line))
            seen.add(key)
            lines[child] = line
            _walk(value_node, child, lines, duplicates)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _walk(item, (*path, index), lines, duplicates)


def read_manifest_file(path: str | FsPath) -> ManifestSource:
    """Read a YAML or JSON manifest file; any problem becomes a ManifestError, never a traceback."""
    file = FsPath(path)
    name = str(path)
    if not file.exists():
        raise ManifestError([ManifestIssue((), "no such file")], name)
    if file.is_dir():
        raise ManifestError([ManifestIssue((), "is a directory, expected a YAML or JSON manifest file")], name)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ManifestError([ManifestIssue((), f"cannot read file: {exc.strerror or exc}")], name) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ManifestError([ManifestIssue((), "not a text file (it is not valid UTF-8)")], name) from None
    source = parse_text(text, name)
    if source.data is None:
        raise ManifestError([ManifestIssue((), "the manifest is empty; it needs at least `algorithm` and `environment`", line=1)], name)
    source.base_dir = file.resolve().parent
    return source
