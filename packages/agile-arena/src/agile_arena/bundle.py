"""The files a manifest names, carried with its submission.

A manifest trained on Arena may name files of the submitting machine: a model folder
(`network.pretrained_model_name_or_path`), datasets (`environment.dataset`, `path`, `features`,
`targets`), a reward module (`environment.reward_file_path`), a custom environment
(`environment.entrypoint: my_env.py:make`) or wrapper. Each value under one of core's file keys
(:data:`agile_core.specs.manifest.PATH_KEYS`) in the `environment` and `network` sections that names
an existing file or folder here is packed under `inputs/` of the job folder, and the value is
rewritten to that job-relative path. Values that name nothing here (module names such as
`agile_llm.tiny`, environment ids, model ids) are sent unchanged.

Rewriting keeps the manifest's lines: each value is replaced where it stands in the text, so the
server's field errors still point at the lines of the user's file.

The upload is an uncompressed tar: `submission.json` (the fields of a JSON submission) first, then
`inputs/...`. Symbolic links are followed (a Hugging Face cache folder is made of them); links and
special files are never put in the archive itself.
"""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

import yaml

from agile_core.specs.manifest import PATH_KEYS

UPLOAD_FOLDER = "inputs"
"""Folder of the job (beside its manifest) that holds the uploaded files."""
SUBMISSION_MEMBER = "submission.json"
"""The archive member with the submission's fields (`manifest`, `filename`, `experiment_name`...)."""
MAX_FILES = 10_000
"""Most files one submission carries."""
SKIPPED_FOLDERS = frozenset({"__pycache__", ".git"})
"""Folders left out when a named folder is packed."""
FieldPath = tuple[str | int, ...]


class BundleError(ValueError):
    """A named file that cannot be carried (unreadable, too many files, a folder that loops)."""


@dataclass(frozen=True)
class NamedFile:
    """One manifest value that names a local file or folder."""

    field: FieldPath
    """Where the value stands in the manifest (`("environment", "dataset", 0)`)."""
    local: Path
    """The file or folder on this machine (links resolved)."""
    name: str
    """Its place in the job folder (`inputs/sft.jsonl`)."""
    value: str
    """The value the server sees (`inputs/sft.jsonl`, or `inputs/env.py:make` for code)."""


@dataclass(frozen=True)
class Bundle:
    """What a submission carries beside its manifest."""

    files: tuple[NamedFile, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.files)

    def members(self) -> list[tuple[Path, str]]:
        """Every regular file to pack, as (local file, archive name), folders expanded."""
        found: list[tuple[Path, str]] = []
        done: set[str] = set()
        for named in self.files:
            if named.name in done:
                continue
            done.add(named.name)
            if named.local.is_dir():
                found.extend(_folder_files(named.local, named.name))
            else:
                found.append((named.local, named.name))
            if len(found) > MAX_FILES:
                raise BundleError(f"{_where(named.field)}: the named files hold more than {MAX_FILES:,} files")
        return found

    def size(self) -> int:
        """Bytes of the files to pack (before the archive's headers)."""
        return sum(_size(path) for path, _ in self.members())

    def rewritten(self, data: Any) -> Any:
        """`data` (parsed manifest) with each named value replaced by its job-folder value."""
        replaced = _copy(data)
        for named in self.files:
            _set(replaced, named.field, named.value)
        return replaced


def collect(data: Any, base_dir: Path, *, search_cwd: bool = True) -> Bundle:
    """The files that the manifest `data` (read from a file in `base_dir`) names here.

    A relative value is looked up in `base_dir`, then (with `search_cwd`) in the working
    directory, as core's own loaders do; an absolute one as given."""
    if not isinstance(data, dict):
        return Bundle()
    names: dict[Path, str] = {}
    taken: set[str] = set()
    files: list[NamedFile] = []
    for field, value in _file_values(data):
        file, colon, attribute = _split_reference(field, value)
        local = _find(file, base_dir, search_cwd)
        if local is None or (_names_code(field) and not (local.is_file() and local.suffix == ".py")):
            continue  # not here, or a module or package name that is imported, not read as a file
        if local not in names:
            names[local] = _unique_name(local, taken)
        job_value = names[local] + (colon + attribute if colon else "")
        files.append(NamedFile(field, local, names[local], job_value))
    return Bundle(tuple(files))


def rewrite_text(text: str, bundle: Bundle) -> str | None:
    """`text` with every named value replaced in place (lines kept); None when the text cannot be
    edited in place (JSON that YAML does not read), so the caller sends rewritten data instead."""
    if not bundle:
        return text
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    edits: dict[int, tuple[int, str]] = {}
    for named in bundle.files:
        node = _node_at(root, named.field)
        if not isinstance(node, yaml.ScalarNode):
            return None
        start, end = node.start_mark.index, node.end_mark.index
        prefix = _anchor_and_tag(text[start:end])
        old = text[start + len(prefix):end]
        edits[start + len(prefix)] = (end, json.dumps(named.value) + "\n" * old.count("\n"))
    for start in sorted(edits, reverse=True):
        end, new = edits[start]
        text = text[:start] + new + text[end:]
    return text


def write_upload(out: BinaryIO, submission: dict[str, Any], bundle: Bundle) -> None:
    """Write the upload archive: `submission.json`, then every file of `bundle` (links followed,
    owner and times left out)."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        payload = json.dumps(submission, allow_nan=False).encode("utf-8")
        tar.addfile(_info(SUBMISSION_MEMBER, len(payload), 0o644), io.BytesIO(payload))
        for local, name in bundle.members():
            try:
                with open(local, "rb") as handle:
                    size = os.fstat(handle.fileno()).st_size
                    mode = 0o755 if os.access(local, os.X_OK) else 0o644
                    tar.addfile(_info(name, size, mode), handle)
            except OSError as exc:
                raise BundleError(f"cannot read {local}: {exc.strerror or exc}") from None


def _info(name: str, size: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type = size, mode, tarfile.REGTYPE
    return info


def _file_values(data: dict[str, Any]) -> Iterator[tuple[FieldPath, str]]:
    """(field path, value) of every string under a file key of `environment` and `network`
    (list items one by one; a wrapper given as a mapping by its `name`)."""
    for section in ("environment", "network"):
        yield from _walk(data.get(section), (section,), "")


def _walk(node: Any, where: FieldPath, key: str) -> Iterator[tuple[FieldPath, str]]:
    if isinstance(node, dict):
        for child, value in node.items():
            if isinstance(child, str):
                yield from _walk(value, (*where, child), child if child in PATH_KEYS else "")
        if key == "wrappers" and isinstance(node.get("name"), str):
            yield (*where, "name"), node["name"]
    elif isinstance(node, list):
        for index, value in enumerate(node):
            if isinstance(value, dict) and key == "wrappers":
                yield from _walk(value, (*where, index), key)
            elif isinstance(value, str) and key:
                yield (*where, index), value
    elif isinstance(node, str) and node and key:
        yield where, node


CODE_KEYS = frozenset({"entrypoint", "wrappers", "reward_file_path"})
"""File keys whose value is code: only a `.py` file is carried (a module name is imported there)."""


def _names_code(field: FieldPath) -> bool:
    return any(part in CODE_KEYS for part in field if isinstance(part, str))


def _split_reference(field: FieldPath, value: str) -> tuple[str, str, str]:
    """(file, ":", attribute) of a code reference (`env.py:make`), else (value, "", "")."""
    if _names_code(field) and field[-1] != "reward_file_path" and ":" in value:
        file, colon, attribute = value.partition(":")
        return file, colon, attribute
    return value, "", ""


def _find(value: str, base_dir: Path, search_cwd: bool) -> Path | None:
    """The existing file or folder `value` names, links resolved; None when it names none."""
    if "\x00" in value:
        return None
    path = Path(value).expanduser()
    candidates = [path] if path.is_absolute() else [base_dir / path, *([Path.cwd() / path] if search_cwd else [])]
    for candidate in candidates:
        try:
            if candidate.is_file() or candidate.is_dir():
                return candidate.resolve()
        except OSError:
            continue
    return None


def _unique_name(local: Path, taken: set[str]) -> str:
    """`inputs/<name>`, numbered when another file already has that name."""
    stem, suffix = (local.name, "") if local.is_dir() else (local.stem, local.suffix)
    name = f"{UPLOAD_FOLDER}/{stem or 'file'}{suffix}"
    number = 2
    while name in taken:
        name = f"{UPLOAD_FOLDER}/{stem}_{number}{suffix}"
        number += 1
    taken.add(name)
    return name


def _folder_files(folder: Path, name: str) -> list[tuple[Path, str]]:
    """Every regular file below `folder` (links followed, each real folder once) with its archive name."""
    found: list[tuple[Path, str]] = []
    seen: set[Path] = set()
    for root, dirs, files in os.walk(folder, followlinks=True, onerror=_raise):
        real = Path(root).resolve()
        if real in seen:
            raise BundleError(f"{folder}: a link inside it leads back to a folder it contains")
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS)
        relative = PurePosixPath(*Path(root).relative_to(folder).parts)
        for file in sorted(files):
            path = Path(root) / file
            try:
                regular = stat.S_ISREG(path.stat().st_mode)
            except OSError:
                raise BundleError(f"{path}: a broken link or an unreadable file") from None
            if not regular:
                raise BundleError(f"{path}: only regular files can be uploaded")
            found.append((path, str(PurePosixPath(name) / relative / file)))
            if len(found) > MAX_FILES:
                raise BundleError(f"{folder}: more than {MAX_FILES:,} files to upload")
    return found


def _raise(error: OSError) -> None:
    raise BundleError(f"cannot read {error.filename}: {error.strerror or error}")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror or exc}") from None


def _where(field: FieldPath) -> str:
    return ".".join(str(part) for part in field)


def _copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {key: _copy(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_copy(value) for value in data]
    return data


def _set(data: Any, field: FieldPath, value: str) -> None:
    node = data
    for part in field[:-1]:
        node = node[part]
    node[field[-1]] = value


def _node_at(node: Any, field: FieldPath) -> Any:
    """The composed YAML node at `field` (merge keys followed)."""
    for part in field:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            node = _mapping_value(node, part)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return None
        if node is None:
            return None
    return node


def _mapping_value(node: yaml.MappingNode, key: str) -> Any:
    merged: list[Any] = []
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag == "tag:yaml.org,2002:merge":
            merged.extend(value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node])
        elif isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return value_node
    for mapping in merged:
        if isinstance(mapping, yaml.MappingNode):
            found = _mapping_value(mapping, key)
            if found is not None:
                return found
    return None


def _anchor_and_tag(span: str) -> str:
    """The `&anchor ` / `!tag ` prefix of a scalar's source span (kept when the value is replaced)."""
    prefix = ""
    rest = span
    while rest[:1] in ("&", "!"):
        head, _, tail = rest.partition(" ")
        stripped = tail.lstrip()
        prefix += rest[: len(rest) - len(stripped)]
        rest = stripped
        if not head:
            break
    return prefix
