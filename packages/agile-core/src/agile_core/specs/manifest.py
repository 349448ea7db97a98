"""`TrainingManifest`: one validated training run, dispatched through the paradigm registry."""

from __future__ import annotations

import difflib
import json
import math
import types
import typing
import warnings
from pathlib import Path as FsPath
from typing import Annotated, Any, get_args, get_origin

from pydantic import (
    AliasChoices,
    BaseModel,
    Field,
    PrivateAttr,
    SerializeAsAny,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agile_core.errors import _MISSING as _MISSING_VALUE
from agile_core.errors import (
    ManifestError,
    ManifestIssue,
    ManifestWarning,
    Path,
    is_secret_path,
    issues_from_validation_error,
)
from agile_core.specs._base import Spec
from agile_core.specs.algorithm import AlgorithmSpec, Mutable
from agile_core.specs.env import EnvSpec, GymEnvSpec
from agile_core.specs.mutation import MutationSpec
from agile_core.specs.network import NetworkSpec
from agile_core.specs.selection import (
    MultiFrequencySelectionSpec,
    SelectionStrategySpec,
    TournamentSelectionSpec,
)
from agile_core.specs.training import COMMON_TRAINING_FIELDS, ReplayBufferSpec, TrainingSpec
from agile_core.yaml_source import ManifestSource, parse_text, read_manifest_file

SELECTION_KEYS = ("selection_strategy", "tournament_selection")
_FIXED_SECTIONS: dict[str, Any] = {
    "training": TrainingSpec,
    "mutation": MutationSpec,
    "replay_buffer": ReplayBufferSpec,
}


class TrainingManifest(Spec):
    """A whole training run: algorithm, environment, training loop, network, HPO, buffer."""

    algorithm: SerializeAsAny[AlgorithmSpec]
    """Algorithm `name` plus its hyperparameters (validated by that algorithm's spec)."""
    environment: SerializeAsAny[EnvSpec]
    """Where and how environments are made (validated by the algorithm's paradigm)."""
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    """Training loop, population and evolution schedule."""
    network: SerializeAsAny[Spec] | None = None
    """Network section, validated by the `network_spec` of the algorithm's paradigm (`NetworkSpec`
    unless the paradigm registers its own)."""
    mutation: MutationSpec | None = None
    """Mutation operators and hyperparameter ranges (defaults when HPO is on and this is null)."""
    selection_strategy: SelectionStrategySpec | None = Field(
        default=None, validation_alias=AliasChoices(*SELECTION_KEYS)
    )
    """Selection strategy (alias: `tournament_selection`): `strategy: tournament` (default) or
    `strategy: multi_frequency` (MF-PBT)."""
    replay_buffer: ReplayBufferSpec | None = None
    """Replay buffer of off-policy algorithms (a 100,000-transition buffer when null)."""

    _base_dir: FsPath | None = PrivateAttr(default=None)
    _filename: str = PrivateAttr(default="<manifest>")
    _warnings: list[ManifestIssue] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _dispatch_sections(cls, data: Any, handler: Any) -> TrainingManifest:
        notes: list[ManifestIssue] = []
        if isinstance(data, dict):
            data = _validated_sections(data, notes)
        manifest = handler(data)
        manifest._warnings = notes
        return manifest

    @property
    def warnings(self) -> list[ManifestIssue]:
        """Fields accepted but not acted on (or accepted with a caveat), one issue each, located
        in the source when validated from a file; validation also emits each as a
        :class:`~agile_core.errors.ManifestWarning`."""
        return list(self._warnings)

    @classmethod
    def get_validated(cls, source: str | FsPath | dict[str, Any] | TrainingManifest) -> TrainingManifest:
        """Validate a YAML/JSON path, a dict or a manifest; raise ManifestError listing every problem."""
        if isinstance(source, TrainingManifest):
            return source
        if isinstance(source, str | FsPath):
            return validate_source(read_manifest_file(source))
        if isinstance(source, dict):
            return validate_source(ManifestSource(data=source))
        raise ManifestError([ManifestIssue((), f"expected a path, a dict or a TrainingManifest, got {type(source).__name__}")])

    @classmethod
    def from_text(cls, text: str, filename: str = "<manifest>") -> TrainingManifest:
        """Validate manifest text (YAML or JSON)."""
        return validate_source(parse_text(text, filename))

    @property
    def base_dir(self) -> FsPath:
        """Directory relative paths in the manifest are resolved against."""
        return self._base_dir or FsPath.cwd()

    @property
    def paradigm_name(self) -> str:
        """Name of the paradigm that trains this manifest's algorithm."""
        from agile_core.registry import paradigm_of

        return paradigm_of(self.algorithm.name).name

    @property
    def evo_steps(self) -> int:
        """Evolution interval: `training.evo_steps`, or the algorithm's default."""
        return self.training.evo_steps or type(self.algorithm).default_evo_steps

    def resolved_mutation(self) -> MutationSpec:
        """The mutation spec with `rl_hp_selection` filled from the algorithm's defaults,
        `rand_seed` from `training.seed` when the section gives none, and the weights of the
        operators the algorithm cannot apply (`AlgorithmSpec.mutation_operators`) at 0."""
        mutation = self.mutation or MutationSpec()
        operators = type(self.algorithm).mutation_operators
        if operators is not None:
            mutation = mutation.restricted_to(operators)
        if mutation.rl_hp_selection is None:
            mutation = mutation.model_copy(update={"rl_hp_selection": self.algorithm.default_rl_hp_selection()})
        if mutation.rand_seed is None and self.training.seed is not None:
            mutation = mutation.model_copy(update={"rand_seed": self.training.seed})
        return mutation

    def resolved_selection(self) -> TournamentSelectionSpec | MultiFrequencySelectionSpec:
        """The selection spec (tournament by default), MF-PBT counts resolved against pop_size."""
        selection = self.selection_strategy or TournamentSelectionSpec()
        if isinstance(selection, MultiFrequencySelectionSpec):
            return selection.resolve(self.training.pop_size)
        return selection

    def resolved_replay_buffer(self) -> ReplayBufferSpec:
        """The replay buffer section, from the top level or `training.replay_buffer`."""
        return self.replay_buffer or self.training.replay_buffer or ReplayBufferSpec()

    def to_dict(self) -> dict[str, Any]:
        """Every field with its resolved value, in manifest form (YAML/JSON-ready); the weights of
        mutation operators the algorithm cannot apply at 0, as training uses them."""
        data = self.model_dump(mode="json", exclude_none=True)
        operators = type(self.algorithm).mutation_operators
        if operators is not None and self.mutation is not None:
            data["mutation"]["probabilities"] = self.mutation.probabilities.restricted_to(operators).model_dump(
                mode="json")
        return data

    def to_json(self) -> str:
        """The resolved manifest as JSON text, values of secret-like keys (`*api_key*`, `*token*`,
        `*secret*`, `*password*`...; e.g. inside an env's `config`) shown as "***", and the files
        it names as absolute paths, so the text works from any folder (a run directory's
        `manifest.resolved.json` fed back to `agile train` repeats the run)."""
        return json.dumps(_redacted(_absolute_paths(self.to_dict(), self.base_dir)), indent=2, allow_nan=False)


def validate_source(source: ManifestSource, *, emit_warnings: bool = True) -> TrainingManifest:
    """Validate parsed data, attaching source lines to every problem and warning; each warning is
    also emitted as a :class:`ManifestWarning` unless `emit_warnings` is false (the CLI prints
    them in its own format)."""
    try:
        manifest = TrainingManifest.model_validate(source.data, context={"base_dir": source.base_dir})
    except ValidationError as exc:
        issues = issues_from_validation_error(exc, source.data, suggest=_suggester(TrainingManifest))
        raise ManifestError(source.locate(issues), source.filename) from None
    manifest._base_dir = source.base_dir
    manifest._filename = source.filename
    problems = _check_paths(manifest, source.search_cwd)
    if problems:
        raise ManifestError(source.locate(problems), source.filename)
    manifest._warnings = source.locate(manifest._warnings)
    for note in manifest._warnings if emit_warnings else ():
        warnings.warn(note.format(source.filename, severity="warning"), ManifestWarning, stacklevel=2)
    return manifest


def _as_validation_error(issues: list[ManifestIssue]) -> ValidationError:
    """Pack collected issues into one pydantic ValidationError (exact paths, messages kept)."""
    line_errors: list[Any] = []
    for issue in issues:
        has_value = issue.value is not _MISSING_VALUE
        line_errors.append({
            "type": PydanticCustomError("manifest_issue", "{message}", {"message": issue.message, "has_value": has_value}),
            "loc": issue.path,
            "input": issue.value if has_value else None,
        })
    return ValidationError.from_exception_data("TrainingManifest", line_errors)


def _validated_sections(data: dict[str, Any], notes: list[ManifestIssue]) -> dict[str, Any]:
    """Validate every section with its spec, collecting all problems before raising (and the
    fields accepted but not acted on into `notes`)."""
    issues: list[ManifestIssue] = []
    out: dict[str, Any] = {}
    allowed = {"algorithm", "environment", "network", *SELECTION_KEYS, *_FIXED_SECTIONS}
    for key in data:
        if key not in allowed:
            issues.append(ManifestIssue((key,), _unknown_key_message(str(key), [*sorted(allowed - {"tournament_selection"}), "tournament_selection"])))
    for key in ("algorithm", "environment"):
        if key not in data:
            issues.append(ManifestIssue((key,), "required section is missing"))

    spec_class = _validate_algorithm(data, issues, out)
    paradigm = _paradigm_for(spec_class)
    env_class: type[EnvSpec] = paradigm.env_spec if paradigm else GymEnvSpec
    if "environment" in data and (spec_class is not None or "algorithm" not in data):
        _validate_section(data, "environment", env_class, issues, out)
    network_class = paradigm.network_spec if paradigm else NetworkSpec
    if data.get("network") is not None:
        _validate_section(data, "network", network_class, issues, out)
    for key, spec in _FIXED_SECTIONS.items():
        if data.get(key) is not None:
            _validate_section(data, key, spec, issues, out)
    _validate_selection(data, issues, out)
    if spec_class is not None:
        issues.extend(_cross_field_issues(data, out, spec_class))
        notes.extend(_rl_hp_notes(out))
        notes.extend(_paradigm_field_notes(out, paradigm, spec_class))
        notes.extend(_algorithm_notes(out))
    if issues:
        raise _as_validation_error(issues)
    notes.extend(_section_notes(data, out))
    return out


def _section_notes(data: dict[str, Any], out: dict[str, Any]) -> list[ManifestIssue]:
    """Every validated section's (and nested spec's) `field_warnings`, with whole-manifest paths."""
    def walk(spec: Any, prefix: Path) -> list[ManifestIssue]:
        found = [ManifestIssue((*prefix, *path), message, value) for path, message, value in spec.field_warnings()]
        for name in spec.model_fields_set:
            value = getattr(spec, name)
            if isinstance(value, Spec):
                found.extend(walk(value, (*prefix, name)))
            elif isinstance(value, dict):
                found.extend(note for key, item in value.items() if isinstance(item, Spec)
                             for note in walk(item, (*prefix, name, key)))
        return found

    notes: list[ManifestIssue] = []
    for key, section in out.items():
        if isinstance(section, Spec):
            where = next((k for k in SELECTION_KEYS if k in data), key) if key == "selection_strategy" else key
            notes.extend(walk(section, (where,)))
    return notes


def _validate_section(data: dict[str, Any], key: str, spec: Any, issues: list[ManifestIssue], out: dict[str, Any]) -> None:
    value = data[key]
    if isinstance(value, spec):
        out[key] = value
        return
    if not isinstance(value, dict):
        issues.append(ManifestIssue((key,), f"must be a mapping of {spec.__name__} fields", value))
        return
    try:
        out[key] = spec.model_validate(value)
    except ValidationError as exc:
        issues.extend(issues_from_validation_error(exc, value, (key,), suggest=_suggester(spec)))


def _validate_algorithm(
    data: dict[str, Any], issues: list[ManifestIssue], out: dict[str, Any]
) -> type[AlgorithmSpec] | None:
    """Validate the algorithm section; return its spec class when the name is registered."""
    from agile_core.registry import UnknownAlgorithmError, algorithm_spec

    section = data.get("algorithm")
    if section is None:
        return None
    if isinstance(section, AlgorithmSpec):
        out["algorithm"] = section
        return type(section)
    if isinstance(section, str):
        section = {"name": section}
    if not isinstance(section, dict):
        issues.append(ManifestIssue(("algorithm",), "must be a mapping with a `name` and hyperparameters", section))
        return None
    name = section.get("name")
    if name is None:
        issues.append(ManifestIssue(("algorithm", "name"), "required field is missing"))
        return None
    if not isinstance(name, str):
        issues.append(ManifestIssue(("algorithm", "name"), "must be a string naming a registered algorithm", name))
        return None
    try:
        spec_class = algorithm_spec(name)
    except UnknownAlgorithmError as exc:
        issues.append(ManifestIssue(("algorithm", "name"), str(exc), name))
        return None
    try:
        out["algorithm"] = spec_class.model_validate(section)
    except ValidationError as exc:
        issues.extend(issues_from_validation_error(exc, section, ("algorithm",), suggest=_suggester(spec_class)))
    return spec_class


def _paradigm_for(spec_class: type[AlgorithmSpec] | None) -> Any:
    if spec_class is None:
        return None
    from agile_core.registry import paradigm_of

    return paradigm_of(spec_class.registered_name())


def _validate_selection(data: dict[str, Any], issues: list[ManifestIssue], out: dict[str, Any]) -> None:
    given = [key for key in data if key in SELECTION_KEYS and data[key] is not None]
    if len(given) > 1:
        issues.append(ManifestIssue((given[1],), "give the selection strategy once: `selection_strategy` and `tournament_selection` are the same section"))
        return
    if not given:
        return
    key = given[0]
    value = data[key]
    if isinstance(value, TournamentSelectionSpec | MultiFrequencySelectionSpec):
        out["selection_strategy"] = value
        return
    if not isinstance(value, dict):
        issues.append(ManifestIssue((key,), "must be a mapping (tournament_size, elitism, or an MF-PBT layout)", value))
        return
    strategy = value.get("strategy", "tournament")
    specs: dict[str, type[BaseModel]] = {"tournament": TournamentSelectionSpec,
                                         "multi_frequency": MultiFrequencySelectionSpec}
    spec = specs.get(strategy)
    if spec is None:
        issues.append(ManifestIssue((key, "strategy"), "must be 'tournament' or 'multi_frequency'", strategy))
        return
    try:
        out["selection_strategy"] = spec.model_validate(value)
    except ValidationError as exc:
        issues.extend(issues_from_validation_error(exc, value, (key,), suggest=_suggester(spec)))


def _cross_field_issues(
    data: dict[str, Any], out: dict[str, Any], spec_class: type[AlgorithmSpec]
) -> list[ManifestIssue]:
    """Rules that involve more than one section (each checked where its parts are valid)."""
    issues = _rl_hp_issues(data, out, spec_class)
    training: TrainingSpec = out.get("training", TrainingSpec())
    selection = out.get("selection_strategy")
    sel_key = next((k for k in SELECTION_KEYS if data.get(k) is not None), "selection_strategy")
    if isinstance(selection, MultiFrequencySelectionSpec):
        try:
            selection.resolve(training.pop_size)
        except ValueError as exc:
            issues.append(ManifestIssue((sel_key,), f"{exc} (training.pop_size={training.pop_size})"))
    elif isinstance(selection, TournamentSelectionSpec) and training.pop_size >= 2 and selection.tournament_size > training.pop_size:
        issues.append(ManifestIssue((sel_key, "tournament_size"),
                                    f"must not exceed training.pop_size ({training.pop_size})", selection.tournament_size))
    if out.get("replay_buffer") is not None and training.replay_buffer is not None:
        issues.append(ManifestIssue(("training", "replay_buffer"), "the replay buffer is given twice; keep the top-level `replay_buffer` section only"))
    buffer = data.get("replay_buffer") or {}
    if isinstance(buffer, dict) and "n_step" in buffer and "n_step_buffer_args" in buffer:
        inner = buffer["n_step_buffer_args"]
        if isinstance(inner, dict) and "n_step" in inner and inner["n_step"] != buffer["n_step"]:
            issues.append(ManifestIssue(("replay_buffer", "n_step"), "conflicts with n_step_buffer_args.n_step; give one of them", buffer["n_step"]))
    algorithm = out.get("algorithm")
    if isinstance(algorithm, AlgorithmSpec):
        sections = {**out, "training": training}
        issues.extend(ManifestIssue(path, message, value) for path, message, value in algorithm.section_issues(sections))
    return issues


def _algorithm_notes(out: dict[str, Any]) -> list[ManifestIssue]:
    """The algorithm's own cross-section warnings (:meth:`AlgorithmSpec.section_warnings`)."""
    algorithm = out.get("algorithm")
    if not isinstance(algorithm, AlgorithmSpec):
        return []
    sections = {**out, "training": out.get("training", TrainingSpec())}
    return [ManifestIssue(path, message, value) for path, message, value in algorithm.section_warnings(sections)]


def _paradigm_field_notes(out: dict[str, Any], paradigm: Any, spec_class: type[AlgorithmSpec]) -> list[ManifestIssue]:
    """A `training` field the algorithm's paradigm does not read, set to anything but its default,
    is accepted (manifests written for other paradigms or for the reference trainer carry them)
    and reported, not silently ignored."""
    training = out.get("training")
    if training is None or paradigm is None:
        return []
    allowed = COMMON_TRAINING_FIELDS | paradigm.training_fields
    return [ManifestIssue(("training", name), f"is not used by the {paradigm.name.replace('_', '-')} paradigm "
                                              f"({spec_class.registered_name()}); ignored", getattr(training, name))
            for name in sorted(training.model_fields_set - allowed)
            if getattr(training, name) != type(training).model_fields[name].get_default(call_default_factory=True)]


def _rl_hp_issues(data: dict[str, Any], out: dict[str, Any], spec_class: type[AlgorithmSpec]) -> list[ManifestIssue]:
    """Every `rl_hp_selection` key must be a numeric hyperparameter of the algorithm."""
    mutation = data.get("mutation")
    selection = mutation.get("rl_hp_selection") if isinstance(mutation, dict) else None
    if not isinstance(selection, dict):
        return []
    numeric = spec_class.numeric_hyperparameters()
    name = spec_class.registered_name()
    issues = []
    for hp, bounds in selection.items():
        if hp not in numeric:
            close = difflib.get_close_matches(str(hp), list(numeric), n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'? " if close else ""
            issues.append(ManifestIssue(("mutation", "rl_hp_selection", hp),
                                        f"{name} has no numeric hyperparameter '{hp}'; {hint}"
                                        f"choose from: {', '.join(sorted(numeric))}"))
        elif isinstance(bounds, dict):
            issues += _range_bound_issues(spec_class, hp, numeric[hp], bounds)
    return issues


def _range_bound_issues(spec_class: type[AlgorithmSpec], hp: str, kind: type,
                        bounds: dict[str, Any]) -> list[ManifestIssue]:
    """A mutation range must hold only values the hyperparameter itself accepts (no `gamma` of 2,
    no negative `lr`, no `batch_size` of 0): each bound is checked against the field's own rules."""
    field = spec_class.model_fields[hp]
    rules = [item for item in field.metadata if not isinstance(item, Mutable)]
    constrained: Any = Annotated[field.annotation, *rules] if rules else field.annotation  # type and its rules
    adapter: TypeAdapter[Any] = TypeAdapter(constrained)
    issues = []
    for end in ("min", "max"):
        value = bounds.get(end)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue  # the range spec reports a missing or non-numeric bound itself
        candidate = round(value) if kind is int and math.isfinite(value) else value
        try:
            adapter.validate_python(candidate)
        except ValidationError as exc:
            reason = exc.errors()[0]["msg"]
            reason = reason[0].lower() + reason[1:] if reason else reason
            issues.append(ManifestIssue(("mutation", "rl_hp_selection", hp, end),
                                        f"mutation could set {hp} to {candidate:g}, which {hp} itself refuses: "
                                        f"{reason}", value))
    return issues


def _rl_hp_notes(out: dict[str, Any]) -> list[ManifestIssue]:
    """An initial value outside its mutation range is accepted (training starts from it; the
    first mutation of that hyperparameter moves it into the range) and reported; so is a range
    for a hyperparameter the algorithm does not mark mutable (ignored)."""
    algo: AlgorithmSpec | None = out.get("algorithm")
    validated: MutationSpec | None = out.get("mutation")
    if algo is None or validated is None or not validated.rl_hp_selection:
        return []
    numeric = type(algo).numeric_hyperparameters()
    mutable = type(algo).mutable_hyperparameters()
    notes = []
    for hp, bounds in validated.rl_hp_selection.items():
        value = getattr(algo, hp, None)
        if hp in numeric and hp not in mutable:
            notes.append(ManifestIssue(("mutation", "rl_hp_selection", hp),
                                       f"{algo.registered_name()} fixes {hp} for the whole run (members do not "
                                       f"hold their own); the range is ignored. Mutable: {', '.join(mutable)}"))
        elif hp in numeric and value is not None and not bounds.min <= value <= bounds.max:
            notes.append(ManifestIssue(("mutation", "rl_hp_selection", hp),
                                       f"the initial value algorithm.{hp}={value:g} lies outside "
                                       f"[{bounds.min:g}, {bounds.max:g}]; training starts from it and "
                                       f"mutation keeps {hp} inside the range once it moves it"))
    return notes


def _check_paths(manifest: TrainingManifest, search_cwd: bool = True) -> list[ManifestIssue]:
    """Files the manifest names must exist: a relative path is looked up in the manifest's folder,
    then (with `search_cwd`) in the working directory, where a path found only there is made
    absolute, so every reader finds the same file. Then the environment's own
    :meth:`~agile_core.specs.env.EnvSpec.file_issues`."""
    env = manifest.environment
    issues = []
    for field in ("path", "features", "targets"):
        value = getattr(env, field, None)
        if not isinstance(value, str):
            continue
        found = find_manifest_file(value, manifest.base_dir, search_cwd)
        if found is None:
            folders = (manifest.base_dir, FsPath.cwd()) if search_cwd else (manifest.base_dir,)
            places = " and ".join(dict.fromkeys(str(p) for p in folders))
            issues.append(ManifestIssue(("environment", field), f"file not found (looked in {places})", value))
        elif not (manifest.base_dir / FsPath(value).expanduser()).is_file():
            setattr(env, field, str(found))
    issues.extend(ManifestIssue(("environment", *path), message, value)
                  for path, message, value in env.file_issues(manifest.base_dir))
    return issues


def find_manifest_file(value: str, base_dir: FsPath, search_cwd: bool = True) -> FsPath | None:
    """The file a manifest names: an absolute path as given; a relative one in the manifest's
    folder `base_dir`, else (with `search_cwd`) in the working directory; None when none holds it."""
    path = FsPath(value).expanduser()
    candidates = [path] if path.is_absolute() else [base_dir / path, *([FsPath.cwd() / path] if search_cwd else [])]
    return next((candidate.resolve() for candidate in candidates if candidate.is_file()), None)


PATH_KEYS = frozenset({"path", "features", "targets", "dataset", "dataset_path", "reward_file_path", "entrypoint",
                       "pretrained_model_name_or_path", "wrappers"})
"""Keys of the `environment` and `network` sections whose values may name files relative to the
manifest's folder (a file, a folder, or ``file.py:attribute``)."""


def _absolute_paths(data: dict[str, Any], base_dir: FsPath) -> dict[str, Any]:
    """`data` with every relative file named under :data:`PATH_KEYS` of its `environment` and
    `network` sections made absolute (values naming no existing file stay as they are: module
    paths, dataset ids, model ids)."""
    def absolute(value: Any) -> Any:
        if isinstance(value, list):
            return [absolute(item) for item in value]
        if not isinstance(value, str) or not value:
            return value
        file, colon, attribute = value.partition(":")
        candidate = FsPath(file).expanduser()
        if candidate.is_absolute() or not (base_dir / candidate).exists():
            return value
        return str((base_dir / candidate).resolve()) + colon + attribute

    def walk(section: Any) -> Any:
        if isinstance(section, dict):
            return {key: absolute(item) if key in PATH_KEYS else walk(item) for key, item in section.items()}
        if isinstance(section, list):
            return [walk(item) for item in section]
        return section

    return {key: walk(value) if key in ("environment", "network") else value for key, value in data.items()}


def _unknown_key_message(key: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown section; {hint}valid sections: {', '.join(allowed)}"


def _suggester(root: type[BaseModel]) -> Any:
    """Build a did-you-mean hint function for unknown keys under the spec `root`."""

    def suggest(model_path: Path, key: str) -> str | None:
        fields = _fields_at(root, model_path)
        if not fields:
            return None
        close = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
        if close:
            return f"did you mean '{close[0]}'?"
        shown = ", ".join(sorted(fields)[:24])
        return f"valid fields: {shown}" + (", ..." if len(fields) > 24 else "")

    return suggest


def _fields_at(root: type[BaseModel], path: Path) -> list[str]:
    """Field names (and aliases) of the spec reached from `root` along `path`."""
    model: Any = root
    for part in path:
        if model is None:
            return []
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part) or _field_by_alias(model, part)
        model = _model_in(info.annotation) if info else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    names = [n for n in model.model_fields if n != "name" or model is not root]
    for info in model.model_fields.values():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names.extend(str(c) for c in alias.choices if isinstance(c, str) and c not in names)
    return names


def _field_by_alias(model: type[BaseModel], key: str) -> Any:
    for info in model.model_fields.values():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices) and key in alias.choices:
            return info
    return None


def _model_in(annotation: Any) -> Any:
    origin = get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if origin in (typing.Union, types.UnionType, typing.Annotated, list, dict):
        for arg in reversed(get_args(annotation)) if origin in (list, dict) else get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _redacted(value: Any, path: tuple[str, ...] = ()) -> Any:
    """`value` with every value under a secret-like key replaced by "***"."""
    if isinstance(value, dict):
        return {key: "***" if is_secret_path((*path, str(key))) and item is not None else _redacted(item, (*path, str(key)))
                for key, item in value.items()}
    if isinstance(value, list):
        return [_redacted(item, path) for item in value]
    return value
