"""Hostile YAML and JSON manifests: each is refused with a clean `FILE:LINE: path: message`, exit code
2, within a second and without expanding anything into memory."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest

from agile_cli.main import main
from agile_core.errors import ManifestError
from agile_core.yaml_source import (
    MAX_DEPTH,
    MAX_MANIFEST_BYTES,
    MAX_VALUES,
    parse_text,
    read_manifest_file,
)

GOOD = "algorithm:\n  name: DQN\nenvironment:\n  name: CartPole-v1\ntraining:\n  pop_size: 4\n"
SECONDS = 1.0
PEAK_BYTES = 64 * 1024 * 1024


def _billion_laughs(levels: int = 9, width: int = 9) -> str:
    """The classic alias bomb: `width ** levels` strings once expanded."""
    lines = ["lol0: &lol0 [" + ", ".join(['"lol"'] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"lol{level}: &lol{level} [" + ", ".join([f"*lol{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def _merge_bomb(levels: int = 9, width: int = 9) -> str:
    """The same blow-up through merge keys (`<<: [*a, *a, ...]`), which copy mappings."""
    lines = ["m0: &m0 {" + ", ".join(f"k{i}: v" for i in range(width)) + "}"]
    for level in range(1, levels):
        lines.append(f"m{level}: &m{level} {{<<: [" + ", ".join([f"*m{level - 1}"] * width) + f"], x{level}: 1}}")
    return "\n".join(lines) + "\n"


def _alias_depth_chain() -> str:
    """Each level nests the previous one 60 deep: fine as written, 300 levels once expanded."""
    lines = ["d0: &d0 " + "[" * 60 + "1" + "]" * 60]
    for level in range(1, 5):
        lines.append(f"d{level}: &d{level} " + "[" * 60 + f"*d{level - 1}" + "]" * 60)
    return "\n".join(lines) + "\n"


def _deep_block(levels: int) -> str:
    return "".join(" " * i + f"k{i}:\n" for i in range(levels)) + " " * levels + "v: 1\n"


# (id, file name, content, text every reported line must contain (after FILE[:LINE]: ))
CASES: list[tuple[str, str, str | bytes, str]] = [
    ("billion-laughs-9-levels", "m.yaml", _billion_laughs(), f"aliases expand the manifest to more than {MAX_VALUES:,} values"),
    ("billion-laughs-in-a-section", "m.yaml", GOOD + "network:\n" + "".join("  " + line + "\n" for line in _billion_laughs().splitlines()),
     "aliases expand the manifest"),
    ("merge-key-bomb", "m.yaml", _merge_bomb(), "aliases expand the manifest"),
    ("recursive-alias-list", "m.yaml", "a: &a [*a]\n", "1: recursive alias: *a refers to a collection that contains it"),
    ("recursive-alias-mapping", "m.yaml", "algorithm: &a\n  name: DQN\n  again: *a\n", "3: recursive alias: *a"),
    ("recursive-alias-merge", "m.yaml", "a: &a {<<: *a}\n", "1: recursive alias: *a"),
    ("recursive-alias-nested", "m.yaml", "a: &a\n  b:\n    - c: [1, *a]\n", "3: recursive alias: *a"),
    ("nesting-3000-lists", "m.yaml", "a: " + "[" * 3000 + "]" * 3000 + "\n", f"1: lists and mappings nest deeper than {MAX_DEPTH} levels"),
    ("nesting-3000-mappings", "m.yaml", "a: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n", "1: lists and mappings nest deeper than"),
    ("nesting-3000-unclosed", "m.yaml", "[" * 3000, "1: lists and mappings nest deeper than"),
    ("nesting-block-200", "m.yaml", _deep_block(200), "101: lists and mappings nest deeper than"),
    ("nesting-through-aliases", "m.yaml", _alias_depth_chain(), "nest deeper than 100 levels once aliases are expanded"),
    ("key-hex-0x10", "m.yaml", GOOD + "0x10: 1\n", '7: 0x10: this key reads as a number, not text; quote it ("0x10")'),
    ("key-sexagesimal-1:30", "m.yaml", GOOD + "1:30: 1\n", "7: 1:30: unknown section"),  # text, not 90
    ("key-yes", "m.yaml", GOOD + "yes: 1\n", "7: yes: this key reads as a boolean"),
    ("key-on-in-section", "m.yaml", GOOD + "  on: 1\n", "7: training.on: this key reads as a boolean"),
    ("key-null", "m.yaml", GOOD + "null: 1\n", "7: null: this key reads as null"),
    ("key-tilde", "m.yaml", GOOD + "~: 1\n", "7: ~: this key reads as null"),
    ("key-empty", "m.yaml", GOOD + "network: {? : 1}\n", "7: network: a key is empty (null)"),
    ("key-int", "m.yaml", GOOD + "  1: x\n", "7: training.1: this key reads as a number"),
    ("key-float", "m.yaml", GOOD + "1.5: x\n", "7: 1.5: this key reads as a number"),
    ("key-date", "m.yaml", GOOD + "2001-01-01: x\n", "7: 2001-01-01: this key reads as a date"),
    ("key-list", "m.yaml", GOOD + "[1, 2]: 1\n", "7: a key is a list; keys must be text"),
    ("key-mapping", "m.yaml", GOOD + "? {a: 1}\n: 2\n", "7: a key is a mapping; keys must be text"),
    ("key-binary", "m.yaml", GOOD + "!!binary aGVsbG8=: 1\n", "7: aGVsbG8=: this key reads as binary data"),
    ("duplicate-key", "m.yaml", GOOD + "algorithm: {name: PPO}\n", "7: algorithm: duplicate key"),
    ("duplicate-key-nested", "m.yaml", GOOD + "  pop_size: 8\n", "7: training.pop_size: duplicate key"),
    ("duplicate-key-quoted", "m.yaml", GOOD + '"training": {}\n', "7: training: duplicate key"),
    ("integer-5000-digits", "m.yaml", GOOD + "  seed: " + "7" * 5000 + "\n", "7: invalid YAML: cannot read '777"),
    ("impossible-date", "m.yaml", GOOD + "  seed: 2021-02-30\n", "7: invalid YAML: cannot read '2021-02-30' as a date"),
    ("empty-timestamp", "m.yaml", GOOD + "  seed: !!timestamp\n", "7: invalid YAML: cannot read '' as a date"),
    ("bad-boolean-tag", "m.yaml", GOOD + "  seed: !!bool maybe\n", "7: invalid YAML: cannot read 'maybe' as a boolean"),
    ("undefined-alias", "m.yaml", GOOD + "network: *nowhere\n", "7: invalid YAML: found undefined alias"),
    ("python-tag", "m.yaml", GOOD + "network: !!python/object/apply:os.system [echo hi]\n", "7: invalid YAML: could not determine a constructor"),
    ("nul-character", "m.yaml", GOOD + "network: a\x00b\n", "7: invalid YAML: unacceptable character #x0000"),
    ("too-large", "m.yaml", GOOD + "#" * MAX_MANIFEST_BYTES + "\n", f"larger than {MAX_MANIFEST_BYTES // 1024} KiB"),
    ("too-many-values", "m.yaml", "a: [" + "0," * (MAX_VALUES + 10) + "]\n", f"1: the manifest has more than {MAX_VALUES:,} values"),
    ("two-documents", "m.yaml", GOOD + "---\n" + GOOD, "7: invalid YAML: expected a single document in the stream, but found another document"),
    ("json-missing-comma", "m.json", '{\n  "algorithm": {"name": "DQN"},\n  "environment": {"name": "CartPole-v1" "num_envs": 2}\n}\n',
     "3:41: invalid JSON: Expecting ',' delimiter"),
    ("json-trailing-comma", "m.json", '{\n  "algorithm": {"name": "DQN"},\n}\n', "3:1: invalid JSON: Expecting property name"),
    ("json-single-quotes", "m.json", "{'algorithm': 'DQN'}\n", "1:2: invalid JSON: Expecting property name"),
    ("json-nesting-3000", "m.json", '{"a": ' + "[" * 3000 + "]" * 3000 + "}\n", "invalid JSON: nesting deeper than"),
    ("json-nesting-150", "m.json", '{"a": ' + "[" * 150 + "]" * 150 + "}\n", "1: lists and mappings nest deeper than"),
    ("json-duplicate-key", "m.json", '{\n  "algorithm": {"name": "DQN"},\n  "algorithm": {"name": "PPO"}\n}\n', "3: algorithm: duplicate key"),
    ("json-tabs-and-bad-value", "m.json", '{\n\t"algorithm": {"name": "DQN"},\n\t"environment": {"name": "CartPole-v1",\n\t\t"num_envs": 0}\n}\n',
     "4: environment.num_envs: input should be greater than or equal to 1"),
    ("json-long-key-duplicate", "m.json", '{"' + "k" * 1100 + '": 1, "' + "k" * 1100 + '": 2}', "duplicate key 'kkk"),
    ("json-integer-5000-digits", "m.json", '{"algorithm": ' + "7" * 5000 + "}", "invalid JSON: Exceeds the limit (4300 digits)"),
    ("not-utf8", "m.yaml", b"algorithm: \xff\xfe\n", "not a text file"),
]


def _reported(file: Path, err: str) -> list[str]:
    """Every stderr line, checked to start with the file's name; the rest of each line."""
    lines = err.strip().splitlines()
    assert lines, "nothing reported"
    for line in lines:
        assert line.startswith(f"{file}:"), line
    return [line[len(str(file)) + 1:] for line in lines]


@pytest.fixture(scope="module", autouse=True)
def _imports_done(tmp_path_factory):
    """Validate a good manifest once, so the timings below leave out the first import of the specs."""
    file = tmp_path_factory.mktemp("warm") / "good.yaml"
    file.write_text(GOOD)
    assert main(["validate", str(file)]) == 0


@pytest.mark.parametrize(("case", "name", "content", "expected"), CASES, ids=[case[0] for case in CASES])
def test_hostile_manifest_is_refused_cleanly(tmp_path, capsys, case, name, content, expected):
    file = tmp_path / name
    if isinstance(content, bytes):
        file.write_bytes(content)
    else:
        file.write_text(content, encoding="utf-8")
    started = time.perf_counter()
    code = main(["validate", str(file)])
    elapsed = time.perf_counter() - started
    captured = capsys.readouterr()
    assert code == 2, captured
    assert "Traceback" not in captured.err and captured.out == ""
    reported = _reported(file, captured.err)
    assert any(expected in line for line in reported), captured.err
    assert elapsed < SECONDS, f"{case}: {elapsed:.2f} s"
    tracemalloc.start()  # a second run, traced (tracing slows it too much to time it)
    try:
        assert main(["validate", str(file)]) == 2
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        capsys.readouterr()
    assert peak < PEAK_BYTES, f"{case}: {peak / 2**20:.0f} MiB"


@pytest.mark.parametrize(("case", "name", "content", "expected"), [c for c in CASES if isinstance(c[2], str) and c[1].endswith(".yaml")],
                         ids=[c[0] for c in CASES if isinstance(c[2], str) and c[1].endswith(".yaml")])
def test_hostile_text_raises_manifest_error(case, name, content, expected):
    """The library entry point (`parse_text`, used by `TrainingManifest.from_text` and `--set`)
    refuses the same inputs with a ManifestError (not the ones only validation rejects)."""
    if expected.split(": ", 1)[-1].startswith(("input should", "unknown")) or ": unknown section" in expected:
        pytest.skip("rejected by validation, not by reading")
    with pytest.raises(ManifestError):
        parse_text(content, "m.yaml")


def test_every_file_is_checked_even_when_one_is_hostile(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_billion_laughs())
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 3000 + "]" * 3000 + "\n")
    broken = tmp_path / "broken.json"
    broken.write_text('{"algorithm": }')
    keys = tmp_path / "keys.yaml"
    keys.write_text(GOOD + "0x10: 1\n")
    files = [good, bomb, deep, broken, keys, good]
    assert main(["validate", *map(str, files)]) == 2
    captured = capsys.readouterr()
    assert captured.out.count(f"{good}: valid (DQN, off_policy)") == 2
    for file in (bomb, deep, broken, keys):
        assert f"{file}:" in captured.err
    assert "Traceback" not in captured.err
    assert main(["validate", "--json", *map(str, files)]) == 2
    verdicts = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [v["valid"] for v in verdicts] == [True, False, False, False, False, True]
    assert verdicts[3]["errors"][0] == {"path": "", "line": 1, "column": 15,
                                        "message": "invalid JSON: Expecting value"}


def test_bomb_is_read_quickly_by_the_library(tmp_path):
    text = _billion_laughs()
    assert len(text.encode()) < 1024
    started = time.perf_counter()
    with pytest.raises(ManifestError, match="alias bomb"):
        parse_text(text, "bomb.yaml")
    assert time.perf_counter() - started < SECONDS


def test_aliases_and_merge_keys_within_the_limits_still_work():
    source = parse_text(
        "base: &base {name: DQN, lr: 0.001}\n"
        "algorithm:\n  <<: *base\n  lr: 0.01\n"
        "sizes: &s [64, 64]\nnetwork: {encoder_config: {hidden_size: *s}}\n",
        "m.yaml",
    )
    assert source.data["algorithm"] == {"name": "DQN", "lr": 0.01}
    assert source.data["network"]["encoder_config"]["hidden_size"] == [64, 64]
    assert source.lines[("algorithm", "lr")] == 4
    assert source.lines[("algorithm", "name")] == 1  # merged in from the anchor's line


def test_quoted_keys_are_text(tmp_path):
    source = parse_text('"0x10": 1\n"yes": 2\n"null": 3\n', "m.yaml")
    assert source.data == {"0x10": 1, "yes": 2, "null": 3}


def test_oversized_stream_is_read_only_up_to_the_limit(tmp_path):
    """A device or huge file is not read whole: reading stops one byte past the limit."""
    with pytest.raises(ManifestError, match="larger than"):
        read_manifest_file("/dev/zero")


def test_unusable_paths_are_reported():
    with pytest.raises(ManifestError, match=r"no such file|the path is not valid"):
        read_manifest_file("bad\x00name.yaml")
    with pytest.raises(ManifestError, match="cannot read file"):
        read_manifest_file("x" * 5000 + ".yaml")


def test_set_errors_name_the_set_argument(tmp_path, capsys):
    file = tmp_path / "m.yaml"
    file.write_text(GOOD)
    code = main(["validate", str(file), "--set", "training.pop_size=-1", "--set", "training.wandb_api_key=sk-123"])
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert "--set training.pop_size=-1: training.pop_size: input should be greater than or equal to 1 (got -1)" in err
    assert any(line.startswith("--set training.wandb_api_key=***: training.wandb_api_key: unknown field") for line in err)
    assert "sk-123" not in "\n".join(err)
    assert main(["validate", str(file), "--set", "network=&a [*a]"]) == 2
    assert "--set network=&a [*a]: network: the value is not valid YAML: recursive alias" in capsys.readouterr().err
    assert main(["validate", str(file), "--set", "training.pop_size=6"]) == 0


def test_set_replacing_a_section_forgets_the_files_lines(tmp_path, capsys):
    file = tmp_path / "m.yaml"
    file.write_text(GOOD)
    assert main(["validate", str(file), "--set", "training.pop_size=-1", "--set", "training={max_steps: x}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["--set training={max_steps: x}: training.max_steps: input should be a valid integer, "
                   "unable to parse string as an integer (got 'x')"]


def test_json_verdicts_never_hold_infinity_or_nan(tmp_path, capsys):
    file = tmp_path / "m.yaml"
    file.write_text(GOOD.replace("pop_size: 4", "pop_size: .inf") + "  target_score: .nan\nnetwork: {latent_dim: -.inf}\n")
    assert main(["validate", "--json", str(file)]) == 2
    out = capsys.readouterr().out

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} written to JSON")

    verdict = json.loads(out, parse_constant=refuse)
    assert verdict["valid"] is False


def test_an_override_can_carry_its_own_label():
    """A flag applied as an override (as `agile train --seed` is) is named as the user typed it."""
    from agile_core.overrides import apply_overrides
    from agile_core.specs.manifest import validate_source

    source = apply_overrides(parse_text(GOOD, "m.yaml"), [("training.pop_size=-5", "--pop -5")])
    with pytest.raises(ManifestError) as caught:
        validate_source(source)
    assert caught.value.report().startswith("--pop -5: training.pop_size: ")


def test_colon_numbers_stay_strings_and_other_integers_read_as_before() -> None:
    """YAML 1.1 reads `1:30` as 90 (base 60); a manifest means the text, which then fails validation."""
    from agile_core.yaml_source import parse_text

    data = parse_text("a: 1:30\nb: 0x10\nc: 1_000\nd: -5\ne: 1.5e3\nf: 190:20:30\n", "m.yaml").data
    assert data == {"a": "1:30", "b": 16, "c": 1000, "d": -5, "e": 1500.0, "f": "190:20:30"}
