"""Property-based fuzzing of `agile validate`: mutated shipped manifests, random YAML text and
hostile YAML/JSON. Every input must end in exit code 0 or 2 within a second, with no traceback
and bounded memory; at least 1,000 inputs are tried per run."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import resource
import time
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agile_cli.main import main

EXAMPLES = 1000
SECONDS = 1.0
CONFIGS = sorted(Path(__file__).resolve().parents[2].glob("configs/training/*.yaml"))
BASES: list[Any] = [yaml.safe_load(path.read_text(encoding="utf-8")) for path in CONFIGS]


def _keys(data: Any, out: set[str]) -> set[str]:
    if isinstance(data, dict):
        for key, value in data.items():
            out.add(str(key))
            _keys(value, out)
    elif isinstance(data, list):
        for item in data:
            _keys(item, out)
    return out


KNOWN_KEYS = sorted(_keys(BASES, set()) | {"wandb_api_key", "replay_buffer", "selection_strategy", "tournament_selection",
                                           "mutation", "network", "rl_hp_selection", "probabilities", "n_step"})
WORDS = ["DQN", "PPO", "TD3", "RainbowDQN", "CartPole-v1", "Pendulum-v1", "", "1e9", "yes", "0x10", "1:30", "~",
         "multi_frequency", "tournament", "ReLU", "mlp", "cnn", "../x.py", "pkg.mod:Env", "sk-secret"]

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-3, max_value=1 << 12),
    st.integers(),
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.floats(),  # NaN and infinities included
    st.floats(min_value=-2.0, max_value=2.0),
    st.text(max_size=12),
    st.sampled_from(WORDS),
)
keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.sampled_from(KNOWN_KEYS), st.text(max_size=10),
                st.integers(), st.booleans(), st.none(), st.floats())  # YAML writes these as `1:`, `true:`, `null:`
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=8,
)


def _containers(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path] if isinstance(data, dict | list) else []
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else []
    for key, value in items:
        found.extend(_containers(value, (*path, key)))
    return found


def _at(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


@st.composite
def mutated_manifests(draw: st.DrawFn) -> tuple[str, str]:
    """A shipped manifest with values and keys replaced, deleted or inserted, as YAML or JSON."""
    data = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        containers = _containers(data)
        if not containers:
            break
        parent = _at(data, draw(st.sampled_from(containers)))
        operation = draw(st.sampled_from(["replace", "delete", "insert", "rename"]))
        if isinstance(parent, dict):
            if operation == "rename" and parent:
                parent[draw(keys)] = parent.pop(draw(st.sampled_from(sorted(parent, key=str))))
            elif operation == "insert" or not parent:
                parent[draw(keys)] = draw(values)
            elif operation == "delete":
                del parent[draw(st.sampled_from(sorted(parent, key=str)))]
            else:
                parent[draw(st.sampled_from(sorted(parent, key=str)))] = draw(values)
        elif isinstance(parent, list):
            if operation == "insert" or not parent:
                parent.insert(draw(st.integers(0, len(parent))), draw(values))
            elif operation == "delete":
                parent.pop(draw(st.integers(0, len(parent) - 1)))
            else:
                parent[draw(st.integers(0, len(parent) - 1))] = draw(values)
    if draw(st.booleans()):
        return "m.json", json.dumps(data, indent=draw(st.sampled_from([None, 2, "\t"])))
    return "m.yaml", yaml.safe_dump(data, sort_keys=False, allow_unicode=draw(st.booleans()))


FRAGMENTS = ["algorithm:", "  name: DQN", "environment:", "  name: CartPole-v1", "training:", "  pop_size: ",
             "network:", "- ", "&a ", "*a", "&b ", "*b", "[", "]", "{", "}", ", ", ": ", ":", "\n", "  ", "    ",
             "!!int ", "!!str ", "!!float ", "!!binary ", "!!set ", "!!omap ", "!!timestamp ", "!!python/name:os.system ",
             "!custom ", "<<: ", "? ", "---\n", "...\n", "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "0x1F", "0o17", "1:30",
             ".inf", "-.inf", ".nan", "yes", "on", "~", "null", "'q'", '"q\\x41"', '"\\ud800"', "|\n  ", ">-\n  ", "#c",
             "\t", "\x00", "\ufeff", "\x85", "2001-02-30", "2001-12-14t21:59:43.10-05:00", "1e400", "7" * 5000,
             "-1", "0", "1e9", "true", "DQN", "PPO"]


def _random_texts() -> st.SearchStrategy[tuple[str, str]]:
    characters = st.text(alphabet=st.sampled_from(list(":-[]{},&*!|>'\"#%@`?~.eE+_<=\\ \n\t0123456789abcxyzDQN")),
                         max_size=200)
    pieces = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)
    return st.tuples(st.sampled_from(["m.yaml", "m.json"]), st.one_of(characters, pieces, st.text(max_size=100)))


GOOD = "algorithm:\n  name: DQN\nenvironment:\n  name: CartPole-v1\ntraining:\n  pop_size: 4\n"


@st.composite
def hostile_manifests(draw: st.DrawFn) -> tuple[str, str]:
    """Alias bombs, recursive aliases, deep nesting, odd keys and corrupted JSON, alone or in a manifest."""
    levels, width = draw(st.integers(2, 12)), draw(st.integers(2, 12))
    depth = draw(st.sampled_from([50, 99, 100, 101, 150, 1000, 3000]))
    bomb = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    bomb += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    merge = ["m0: &m0 {" + ", ".join(f"k{i}: v" for i in range(width)) + "}"]
    merge += [f"m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * width) + f"], x{i}: 1}}" for i in range(1, levels)]
    snippets = [
        "\n".join(bomb), "\n".join(merge),
        "a: &a [*a]", "a: &a {b: *a}", "a: &a {<<: *a}", "a: &a\n  b: [1, {c: *a}]",
        "a: " + "[" * depth + "]" * depth, "a: " + "{a: " * depth + "1" + "}" * depth, "[" * depth,
        "".join(" " * i + f"k{i}:\n" for i in range(min(depth, 300))) + " " * min(depth, 300) + "v: 1",
        "0x10: 1", "1:30: 1", "yes: 1", "null: 1", "~: 1", "[1, 2]: 1", "? {a: 1}\n: 2", "2001-01-01: 1", "1.5: 1",
        "algorithm: {name: PPO}", "training: {pop_size: " + "9" * 5000 + "}", "training: {seed: 2021-02-30}",
        "network: !!python/object/apply:os.system [echo]", "network: *undefined", "network: !!binary '%%%'",
    ]
    snippet = draw(st.sampled_from(snippets))
    where = draw(st.sampled_from(["alone", "appended", "as-a-section", "json"]))
    if where == "alone":
        return "m.yaml", snippet + "\n"
    if where == "appended":
        return "m.yaml", GOOD + snippet + "\n"
    if where == "as-a-section":
        return "m.yaml", GOOD + "network:\n" + "".join("  " + line + "\n" for line in snippet.splitlines())
    text = json.dumps(yaml.safe_load(GOOD), indent=2)
    position = draw(st.integers(0, len(text)))
    junk = draw(st.sampled_from(["", ",", "}", "]", '"', ":", "[" * depth, "NaN", "Infinity", "\t", "\x00", "//c"]))
    cut = draw(st.integers(0, 2))
    return "m.json", text[:position] + junk + text[position + cut:]


manifests = st.one_of(mutated_manifests(), _random_texts(), hostile_manifests())


def test_validate_survives_1000_generated_manifests(tmp_path: Path) -> None:
    tried: list[str] = []
    folder = tmp_path
    started_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(manifests)
    def check(case: tuple[str, str]) -> None:
        name, text = case
        file = folder / name
        file.write_bytes(text.encode("utf-8", errors="surrogatepass"))
        out, err = io.StringIO(), io.StringIO()
        started = time.process_time()  # CPU time: the work validate does, whatever else runs on the machine
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["validate", str(file)])
        elapsed = time.process_time() - started
        tried.append(name)
        assert code in (0, 2), (code, text[:500])
        assert "Traceback" not in err.getvalue(), err.getvalue()
        reported = [line for line in err.getvalue().splitlines() if line.strip()]
        warnings_only = all(": warning: " in line for line in reported)
        assert (code == 0) == warnings_only, err.getvalue()  # a valid file may draw warnings, never errors
        if code == 0:
            assert ": valid (" in out.getvalue(), out.getvalue()
        assert elapsed < SECONDS, f"{elapsed:.2f} CPU s for {text[:300]!r}"

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["validate", *map(str, CONFIGS)])  # imports every paradigm's specs before anything is timed
    check()
    assert len(tried) >= EXAMPLES
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - started_rss
    assert grown_kib < 512 * 1024, f"peak memory grew by {grown_kib // 1024} MiB"
