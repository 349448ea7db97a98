"""Reading manifests from YAML or JSON with the source line of every key kept for error messages.

Manifests come from users and from other programs, so reading one is bounded: a file larger than
`MAX_MANIFEST_BYTES`, nesting deeper than `MAX_DEPTH` levels, more than `MAX_VALUES` values
(counted with every alias expanded, which stops "billion laughs" alias bombs before anything is
expanded) and aliases that refer to a collection containing them are refused with a located
`ManifestError`, as are keys that are not text (`0x10:`, `1:30:`, `yes:`, `null:`, `[1, 2]:`) and
duplicate keys. Nothing a file contains ends in a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

import yaml

from agile_core.errors import ManifestError, ManifestIssue, Path

MAX_MANIFEST_BYTES = 256 * 1024
"""Largest manifest read (files, `from_text` and `--set` values alike)."""
MAX_DEPTH = 100
"""Deepest nesting of lists and mappings, aliases expanded."""
MAX_VALUES = 2_000
"""Most values (scalars, lists and mappings) in one manifest, aliases expanded."""

_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_KINDS = {
    "tag:yaml.org,2002:int": "a number",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "a boolean (YAML reads yes/no/on/off/true/false as booleans)",
    "tag:yaml.org,2002:null": "null",
    "tag:yaml.org,2002:timestamp": "a date",
    "tag:yaml.org,2002:binary": "binary data",
}

_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class _Refused(Exception):
    """A manifest refused while it is read (too deep, too large, recursive)."""

    def __init__(self, issue: ManifestIssue) -> None:
        super().__init__(issue.message)
        self.issue = issue


def _line(node_or_mark: Any) -> int | None:
    mark = getattr(node_or_mark, "start_mark", node_or_mark)
    return mark.line + 1 if mark is not None else None


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads `1e-4` (no dot) as a float, as YAML 1.2 and JSON do, and refuses
    nesting deeper than `MAX_DEPTH`, more than `MAX_VALUES` nodes and recursive aliases while it
    composes (before anything is constructed)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._composed = 0
        self._open_anchors: list[str] = []

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        self._composed += 1
        if self._composed > MAX_VALUES:
            raise _Refused(ManifestIssue((), f"the manifest has more than {MAX_VALUES:,} values", line=_line(event)))
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:
                raise _Refused(ManifestIssue(
                    (), f"recursive alias: *{event.anchor} refers to a collection that contains it", line=_line(event)))
            return super().compose_node(parent, index)
        if not isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(ManifestIssue((), f"lists and mappings nest deeper than {MAX_DEPTH} levels", line=_line(event)))
        self._open_anchors.append(event.anchor or "")
        try:
            return super().compose_node(parent, index)
        finally:
            self._open_anchors.pop()
            self._depth -= 1

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # refused here, while scanning: PyYAML scans `[[[[...` ahead in quadratic time
        if self.flow_level >= MAX_DEPTH:
            raise _Refused(ManifestIssue((), f"lists and mappings nest deeper than {MAX_DEPTH} levels",
                                         line=self.line + 1))
        super().fetch_flow_collection_start(TokenClass)

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:
            # PyYAML's own constructors fail on e.g. a 5,000-digit integer, `2021-02-30` read as a date
            # or an empty `!!timestamp`; each becomes a located error
            shown = node.value if isinstance(node, yaml.ScalarNode) else node.tag
            kind = _KINDS.get(node.tag, f"a value tagged {node.tag}")
            reason = str(exc).split("; use sys.set_int_max_str_digits")[0]
            detail = f": {reason}" if isinstance(exc, ValueError | ArithmeticError) else ""
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {str(shown)[:60]!r} as {kind}{detail}", node.start_mark) from None


_INT = re.compile(
    r"""^(?:[-+]?0b[0-1_]+
    |[-+]?0[0-7_]+
    |[-+]?(?:0|[1-9][0-9_]*)
    |[-+]?0x[0-9a-fA-F_]+)$""",
    re.X,
)
"""YAML 1.1's integers without its base-60 form: `1:30` stays the string it looks like, not 90."""

_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag not in ("tag:yaml.org,2002:float", "tag:yaml.org,2002:int")]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))


@dataclass
class ManifestSource:
    """Parsed manifest data plus where each key came from."""

    data: Any
    filename: str = "<manifest>"
    lines: dict[Path, int] = field(default_factory=dict)
    base_dir: FsPath | None = None
    search_cwd: bool = True
    """Whether a relative file the manifest names may also be found in the working directory
    (False for a server validating a tenant's manifest: only its own folder counts)."""
    origins: dict[Path, str] = field(default_factory=dict)
    """Paths set from outside the file (`--set key=value`), with the argument that set them."""

    def line_of(self, path: Path) -> int | None:
        """Line of the deepest key on `path` that exists in the source."""
        for end in range(len(path), 0, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return self.lines.get((), None)

    def origin_of(self, path: Path) -> str | None:
        """The `--set` argument that set `path` (or a mapping above it), if one did."""
        for end in range(len(path), 0, -1):
            if path[:end] in self.origins:
                return self.origins[path[:end]]
        return None

    def locate(self, issues: list[ManifestIssue]) -> list[ManifestIssue]:
        """Attach source lines (or the `--set` argument responsible) to issues."""
        located = []
        for issue in issues:
            origin = issue.origin or self.origin_of(issue.path)
            if origin is not None:
                located.append(dataclasses.replace(issue, origin=origin, line=None, column=None))
            else:
                located.append(dataclasses.replace(issue, line=issue.line or self.line_of(issue.path)))
        return sorted(located, key=lambda issue: issue.line if issue.line is not None else 1 << 30)


class _YamlSyntaxError(Exception):
    def __init__(self, issue: ManifestIssue) -> None:
        super().__init__(issue.message)
        self.issue = issue


def parse_text(text: str, filename: str = "<manifest>") -> ManifestSource:
    """Parse YAML (or JSON) text, recording line numbers and rejecting duplicate and non-text
    keys, recursive aliases and input beyond the size limits."""
    try:
        return _parse_yaml(text, filename)
    except _YamlSyntaxError as exc:
        raise ManifestError([exc.issue], filename) from None


def _parse_yaml(text: str, filename: str) -> ManifestSource:
    """Like `parse_text`, but YAML syntax errors raise `_YamlSyntaxError` (JSON files fall back)."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError([_too_large()], filename)
    loader: _Loader | None = None
    try:
        loader = _Loader(text)
        node = loader.get_single_node()
        walker = _Walker()
        if node is not None:
            walker.lines[()] = node.start_mark.line + 1
            walker.walk(node, (), 1)
        if walker.issues:
            raise ManifestError(walker.issues, filename)
        data = loader.construct_document(node) if node is not None else None
    except _Refused as exc:
        raise ManifestError([exc.issue], filename) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.context and problem.startswith("but "):  # "expected a single document..., but found another"
            problem = f"{exc.context}, {problem}"
        raise _YamlSyntaxError(ManifestIssue((), f"invalid YAML: {problem}", line=_line(mark))) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        character = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        raise _YamlSyntaxError(ManifestIssue((), f"invalid YAML: unacceptable character {character}: {exc.reason}",
                                             line=line)) from None
    except yaml.YAMLError as exc:
        raise _YamlSyntaxError(ManifestIssue((), f"invalid YAML: {' '.join(str(exc).split())}")) from None
    except RecursionError:  # last resort: the limits above should make this unreachable
        raise ManifestError([ManifestIssue((), "the manifest nests too deeply to read")], filename) from None
    finally:
        if loader is not None:
            loader.dispose()
    return ManifestSource(data=data, filename=filename, lines=walker.lines)


def _too_large() -> ManifestIssue:
    return ManifestIssue((), f"larger than {MAX_MANIFEST_BYTES // 1024} KiB; a manifest is a small YAML or JSON file")


class _Walker:
    """Walks the composed node graph (aliases expanded, within the limits), recording the line of
    every key and collecting duplicate and non-text keys."""

    def __init__(self) -> None:
        self.lines: dict[Path, int] = {}
        self.issues: list[ManifestIssue] = []
        self.visited = 0

    def walk(self, node: yaml.Node, path: Path, depth: int, merged: bool = False) -> None:
        self.visited += 1
        if self.visited > MAX_VALUES:
            raise _Refused(ManifestIssue((), f"aliases expand the manifest to more than {MAX_VALUES:,} values "
                                             "(an alias bomb?); refusing to expand it", line=_line(node)))
        if depth > MAX_DEPTH and isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            raise _Refused(ManifestIssue((), f"lists and mappings nest deeper than {MAX_DEPTH} levels once "
                                             "aliases are expanded", line=_line(node)))
        if isinstance(node, yaml.MappingNode):
            self._mapping(node, path, depth, merged)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                if not merged:
                    self.lines[(*path, index)] = _line(item) or 0
                self.walk(item, (*path, index), depth + 1, merged)

    def _mapping(self, node: yaml.MappingNode, path: Path, depth: int, merged: bool) -> None:
        # `<<: *base` merges first, so the mapping's own keys (which win) overwrite their lines
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    self.visited += 1
                    if isinstance(source, yaml.MappingNode):
                        self._mapping(source, path, depth, merged=True)
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                continue
            key = _key_text(key_node)
            line = _line(key_node)
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _STR:
                if not merged:
                    self.issues.append(ManifestIssue((*path, key) if key else path, _key_problem(key_node), line=line))
                continue
            assert key is not None
            child = (*path, key)
            if key in seen and not merged:
                self.issues.append(ManifestIssue(child, "duplicate key (each key may appear once)", line=line))
            seen.add(key)
            if not merged or child not in self.lines:
                self.lines[child] = line or 0
            self.walk(value_node, child, depth + 1, merged)


def _key_text(node: yaml.Node) -> str | None:
    return str(node.value) if isinstance(node, yaml.ScalarNode) else None


def _key_problem(node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode):
        return "a key is a list; keys must be text"
    if isinstance(node, yaml.MappingNode):
        return "a key is a mapping; keys must be text"
    if node.tag == "tag:yaml.org,2002:null" and node.value == "":
        return "a key is empty (null); keys must be text"
    kind = _KINDS.get(node.tag, f"a value tagged {node.tag}")
    return f"this key reads as {kind}, not text; quote it (\"{node.value}\") if it is meant as a name"


STREAM_WAIT_SECONDS = 5.0
"""How long a manifest given as a FIFO may stay silent before reading it fails."""


def _read_stream(file: FsPath) -> bytes:
    """Everything a FIFO's writer sends, up to one byte past the size limit; ManifestError when
    it stays silent for :data:`STREAM_WAIT_SECONDS` (no writer: the pipe would block forever)."""
    import select

    fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    chunks: list[bytes] = []
    size = 0
    try:
        while size <= MAX_MANIFEST_BYTES:
            ready, _, _ = select.select([fd], [], [], STREAM_WAIT_SECONDS)
            if not ready:
                raise ManifestError([ManifestIssue((), f"nothing to read for {STREAM_WAIT_SECONDS:g} s: a FIFO "
                                                       "without a writer? give a manifest file")], str(file))
            chunk = os.read(fd, 65536)
            if not chunk and chunks:
                break
            if not chunk:  # no writer has opened it yet: a non-blocking read of such a FIFO ends at once
                raise ManifestError([ManifestIssue((), "nothing to read: a FIFO without a writer? give a "
                                                       "manifest file")], str(file))
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_manifest_file(path: str | FsPath) -> ManifestSource:
    """Read a YAML or JSON manifest file; any problem becomes a ManifestError, never a traceback."""
    file = FsPath(path)
    name = str(path)
    try:
        if not file.exists():
            raise ManifestError([ManifestIssue((), "no such file")], name)
        if file.is_dir():
            raise ManifestError([ManifestIssue((), "is a directory, expected a YAML or JSON manifest file")], name)
        if file.is_file():
            with file.open("rb") as stream:
                raw = stream.read(MAX_MANIFEST_BYTES + 1)
        else:  # a FIFO or socket (`agile train <(...)`): read what a writer sends, never wait forever
            raw = _read_stream(file)
    except ManifestError:
        raise
    except OSError as exc:
        raise ManifestError([ManifestIssue((), f"cannot read file: {exc.strerror or exc}")], name) from None
    except ValueError:  # e.g. a NUL character in the path
        raise ManifestError([ManifestIssue((), "cannot read file: the path is not valid")], name) from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ManifestError([_too_large()], name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ManifestError([ManifestIssue((), "not a text file (it is not valid UTF-8)")], name) from None
    if file.suffix.lower() == ".json":
        source = _parse_json(text.removeprefix("\ufeff"), name)
    else:
        source = parse_text(text, name)
    if source.data is None:
        raise ManifestError([ManifestIssue((), "the manifest is empty; it needs at least `algorithm` and `environment`", line=1)], name)
    source.base_dir = file.resolve().parent
    return source


def _parse_json(text: str, filename: str) -> ManifestSource:
    """JSON is read as JSON (its errors with line and column); key lines come from reading the same
    text as YAML where that works (tabs made spaces), else only the top-level line is known."""
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                duplicates.append(key)
            out[key] = value
        return out

    if not text.strip():
        return ManifestSource(data=None, filename=filename)
    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise ManifestError([ManifestIssue((), f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno)], filename) from None
    except RecursionError:
        raise ManifestError([ManifestIssue((), f"invalid JSON: nesting deeper than {MAX_DEPTH} levels")], filename) from None
    except ValueError as exc:  # e.g. an integer with more than 4,300 digits
        reason = str(exc).split("; use sys.set_int_max_str_digits")[0]
        raise ManifestError([ManifestIssue((), f"invalid JSON: {reason}")], filename) from None
    try:
        lines = _parse_yaml(text.replace("\t", " "), filename).lines
    except _YamlSyntaxError:  # valid JSON that YAML cannot read (e.g. keys over 1,024 characters)
        _check_json_size(data, filename)
        if duplicates:
            raise ManifestError([ManifestIssue((), f"duplicate key {key[:60]!r} (each key may appear once)")
                                 for key in dict.fromkeys(duplicates)], filename) from None
        lines = {(): 1}
    return ManifestSource(data=data, filename=filename, lines=lines)


def _check_json_size(data: Any, filename: str) -> None:
    """The depth and value limits, for JSON data read without the YAML composer."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    count = 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ManifestError([ManifestIssue((), f"the manifest has more than {MAX_VALUES:,} values")], filename)
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise ManifestError([ManifestIssue((), f"lists and mappings nest deeper than {MAX_DEPTH} levels")], filename)
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))
