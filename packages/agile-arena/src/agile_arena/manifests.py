"""Checking a manifest on this machine before it is submitted.

When the algorithm's paradigm is installed here the manifest is validated exactly as `agile
validate` does (same `FILE:LINE: path: message` errors). When it is not, core checks what it can
without the paradigm (the sections, `training`, `mutation`, `replay_buffer`, the selection
strategy) and the server checks the rest. Either way Arena runs tournament selection only, so an
MF-PBT (`strategy: multi_frequency`) manifest is refused here.

The files the manifest names on this machine (a model folder, datasets, a reward or environment
module) travel with it: see :mod:`agile_arena.bundle`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from pydantic import ValidationError

from agile_arena.bundle import Bundle, collect, rewrite_text
from agile_arena.errors import FieldError
from agile_core.errors import ManifestError, ManifestIssue, issues_from_validation_error
from agile_core.overrides import apply_overrides
from agile_core.specs.manifest import SELECTION_KEYS, TrainingManifest, validate_source
from agile_core.specs.mutation import MutationSpec
from agile_core.specs.selection import MultiFrequencySelectionSpec, TournamentSelectionSpec
from agile_core.specs.training import ReplayBufferSpec, TrainingSpec
from agile_core.yaml_source import ManifestSource, parse_text, read_manifest_file

MF_PBT_REFUSED = ("Arena runs tournament selection only, so MF-PBT (strategy: multi_frequency) is not "
                  "supported; use `strategy: tournament`")
_SECTIONS = ("algorithm", "environment", "training", "network", "mutation", "replay_buffer", *SELECTION_KEYS)
_CORE_SECTIONS: dict[str, Any] = {"training": TrainingSpec, "mutation": MutationSpec,
                                  "replay_buffer": ReplayBufferSpec}


@dataclass(frozen=True)
class PreparedManifest:
    """A manifest ready to send: its text, the name the server reports errors against, and what the
    local check found."""

    text: str
    filename: str
    algorithm: str
    """The algorithm's name."""
    validated_locally: bool
    """True when fully validated here; False when the paradigm is not installed and only core's
    part was checked."""
    source: ManifestSource | None = None
    """Parsed source with key lines, to place the server's field errors on lines of the file."""
    display_name: str = "<manifest>"
    """How errors name the manifest: the path as given, else `<manifest>`."""
    bundle: Bundle = field(default_factory=Bundle)
    """The local files the manifest names, sent with it (the text names their job-folder paths)."""

    def locate(self, errors: list[FieldError]) -> list[FieldError]:
        """`errors` with the line of each path in the local file, where known (none when the text
        sent was generated here, as its lines are not the user's, nor for values set by `--set`)."""
        if self.source is None:
            return [FieldError(e.path, e.message) for e in errors]
        located = []
        for error in errors:
            path = parse_dotted(error.path)
            line = None if self.source.origin_of(path) else error.line or self.source.line_of(path)
            located.append(FieldError(error.path, error.message, line))
        return located


def parse_dotted(text: str) -> tuple[str | int, ...]:
    """`a.b[0].c` -> ('a', 'b', 0, 'c') (the inverse of how errors print paths)."""
    parts: list[str | int] = []
    for piece in text.split("."):
        match = re.fullmatch(r"([^\[\]]*)((?:\[\d+\])*)", piece)
        if match is None:
            parts.append(piece)
            continue
        if match.group(1):
            parts.append(match.group(1))
        parts.extend(int(index) for index in re.findall(r"\[(\d+)\]", match.group(2)))
    return tuple(parts)


def prepare_manifest(manifest: str | Path | dict[str, Any] | TrainingManifest,
                     overrides: list[str] | None = None) -> PreparedManifest:
    """Check a manifest file path, dict or TrainingManifest, with `--set key=value` `overrides`
    applied first; ManifestError when it is invalid.

    A file is sent as written (the server's errors then point at its lines), but for the files it
    names, whose values now name their place in the job folder, and for overrides (then the
    result is sent as JSON). A dict or a validated manifest is sent as JSON (a TrainingManifest as
    its resolved, redacted `to_json`).
    """
    if isinstance(manifest, TrainingManifest):
        if overrides:
            raise TypeError("overrides apply to a manifest file or dict, not to a TrainingManifest")
        refuse_mf_pbt(manifest)
        data = json.loads(manifest.to_json())
        bundle = collect(data, manifest.base_dir, search_cwd=False)
        return PreparedManifest(_json_text(bundle.rewritten(data)), "manifest.json", manifest.algorithm.name,
                                True, bundle=bundle)
    if isinstance(manifest, dict):
        source = apply_overrides(ManifestSource(data=manifest, filename="<manifest>"), overrides or [])
        if _installed(source.data):
            validated = validate_source(source)
            refuse_mf_pbt(validated)
            data = json.loads(validated.to_json())
            bundle = collect(data, validated.base_dir, search_cwd=False)
            return PreparedManifest(_json_text(bundle.rewritten(data)), "manifest.json", validated.algorithm.name,
                                    True, bundle=bundle)
        check_without_paradigm(source)
        bundle = collect(source.data, Path.cwd())
        return PreparedManifest(_json_text(bundle.rewritten(source.data)), "manifest.json",
                                _algorithm_name(source.data) or "", False, bundle=bundle)
    if isinstance(manifest, str | Path):
        source = read_manifest_file(manifest)
        text = Path(manifest).read_text(encoding="utf-8")
        return _prepare_source(source, text, Path(manifest).name, str(manifest), overrides or [])
    raise TypeError(f"expected a manifest path, a dict or a TrainingManifest, got {type(manifest).__name__}")


def prepare_text(text: str, filename: str = "manifest.yaml", overrides: list[str] | None = None) -> PreparedManifest:
    """Check manifest text (YAML or JSON) and send it as is (but for named files and overrides)."""
    source = parse_text(text, filename)
    if source.data is None:
        raise ManifestError([ManifestIssue((), "the manifest is empty; it needs at least `algorithm` and `environment`",
                                           line=1)], filename)
    return _prepare_source(source, text, PurePath(filename).name or "manifest.yaml", filename, overrides or [])


def _prepare_source(source: ManifestSource, text: str, filename: str, display_name: str,
                    overrides: list[str]) -> PreparedManifest:
    if overrides:
        source = apply_overrides(source, overrides)
    if _installed(source.data):
        validated = validate_source(source)
        refuse_mf_pbt(validated, source)
        algorithm, checked = validated.algorithm.name, True
    else:
        check_without_paradigm(source)
        algorithm, checked = _algorithm_name(source.data) or "", False
    bundle = collect(source.data, source.base_dir or Path.cwd(), search_cwd=source.search_cwd)
    sent = None if overrides else rewrite_text(text, bundle)
    if sent is None:
        sent = _json_text(bundle.rewritten(source.data))
    return PreparedManifest(sent, filename, algorithm, checked, source, display_name, bundle)


def _json_text(data: Any) -> str:
    return json.dumps(data, indent=2, allow_nan=False)


def _algorithm_name(data: Any) -> str | None:
    section = data.get("algorithm") if isinstance(data, dict) else None
    name = section.get("name") if isinstance(section, dict) else section
    return name if isinstance(name, str) else None


def _installed(data: Any) -> bool:
    """Whether core can validate fully: the algorithm is installed here (or the manifest is so
    broken that core's own messages say best what is wrong)."""
    from agile_core.registry import algorithm_names

    name = _algorithm_name(data)
    return name is None or name in algorithm_names()


def refuse_mf_pbt(manifest: TrainingManifest, source: ManifestSource | None = None) -> None:
    """ManifestError when the manifest asks for MF-PBT selection."""
    if isinstance(manifest.selection_strategy, MultiFrequencySelectionSpec):
        data = source.data if source is not None else {}
        key = next((k for k in SELECTION_KEYS if isinstance(data, dict) and data.get(k) is not None),
                   "selection_strategy")
        issues = [ManifestIssue((key, "strategy"), MF_PBT_REFUSED)]
        filename = source.filename if source is not None else "<manifest>"
        raise ManifestError(source.locate(issues) if source is not None else issues, filename)


def check_without_paradigm(source: ManifestSource) -> None:
    """What core checks of a manifest whose algorithm is not installed here; ManifestError listing
    every problem found."""
    data = source.data
    issues: list[ManifestIssue] = []
    for key in data:
        if key not in _SECTIONS:
            issues.append(ManifestIssue((key,), f"unknown section; valid sections: {', '.join(_SECTIONS)}"))
    environment = data.get("environment")
    if environment is None:
        issues.append(ManifestIssue(("environment",), "required section is missing"))
    elif not isinstance(environment, dict):
        issues.append(ManifestIssue(("environment",), "must be a mapping with a `name`", environment))
    elif not isinstance(environment.get("name"), str):
        issues.append(ManifestIssue(("environment", "name"), "required field is missing"
                                    if "name" not in environment else "must be a string", environment.get("name")))
    for key, spec in _CORE_SECTIONS.items():
        issues.extend(_section_issues(data, key, spec))
    issues.extend(_selection_issues(data))
    if issues:
        raise ManifestError(source.locate(issues), source.filename)


def _section_issues(data: dict[str, Any], key: str, spec: Any) -> list[ManifestIssue]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, dict):
        return [ManifestIssue((key,), f"must be a mapping of {spec.__name__} fields", value)]
    try:
        spec.model_validate(value)
    except ValidationError as exc:
        return issues_from_validation_error(exc, value, (key,))
    return []


def _selection_issues(data: dict[str, Any]) -> list[ManifestIssue]:
    given = [key for key in SELECTION_KEYS if data.get(key) is not None]
    if len(given) > 1:
        return [ManifestIssue((given[1],), "give the selection strategy once: `selection_strategy` and "
                                           "`tournament_selection` are the same section")]
    if not given:
        return []
    key = given[0]
    value = data[key]
    if not isinstance(value, dict):
        return [ManifestIssue((key,), "must be a mapping (tournament_size, elitism)", value)]
    strategy = value.get("strategy", "tournament")
    if strategy == "multi_frequency":
        return [ManifestIssue((key, "strategy"), MF_PBT_REFUSED)]
    if strategy != "tournament":
        return [ManifestIssue((key, "strategy"), "must be 'tournament'", strategy)]
    try:
        TournamentSelectionSpec.model_validate(value)
    except ValidationError as exc:
        return issues_from_validation_error(exc, value, (key,))
    return []
