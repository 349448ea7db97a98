"""docs/architecture.md cites only what exists, and its traced path is the one Python takes.

Citations are the backticked tokens of a page, in three forms:

* a file or folder: a token with a ``/`` whose first part is an entry of the repository root
  (``packages/agile-core/src/agile_core/trainer.py``), which must exist;
* a name: ``module.path:Name`` or ``module.path:Class.attribute``; the module must import and
  every attribute resolve;
* a module, or a name in dotted form: a dotted path under one of the workspace's import packages
  (``agile_core.training``, ``agile_core.registry.register_paradigm``); its longest importable
  prefix must import and the rest resolve as attributes.

Anything else in backticks (commands, manifest keys, metric names, the ``agile.paradigms``
entry-point group, the hypothetical ``my_sarsa/`` package) is prose. Relative Markdown links must
point at existing files. docs/writing-an-algorithm.md is held to the same rules. The path
section's counts (files, package crossings) must match the steps and the call stack it lists,
and that call stack is checked against a real, short `agile train` of DQN.
"""

from __future__ import annotations

import importlib
import itertools
import re
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PAGES = {DOC: 100, ROOT / "docs" / "writing-an-algorithm.md": 30}
"""Pages checked, with the fewest distinct citations each is expected to hold (a parser that
stopped finding citations would otherwise pass)."""

PACKAGES = ("agile_core", "agile_offpolicy", "agile_onpolicy", "agile_marl", "agile_offline", "agile_llm",
            "agile_arena", "agile_cli")
"""Import packages whose modules the page may cite by dotted path."""

_TOKEN = re.compile(r"`([^`\n]+)`")
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_NAME = re.compile(rf"^(?P<module>{_IDENT}(?:\.{_IDENT})*):(?P<attr>{_IDENT}(?:\.{_IDENT})*)$")
_MODULE = re.compile(rf"^(?:{'|'.join(PACKAGES)})(?:\.{_IDENT})*$")
_PATH = re.compile(r"^[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)+/?$")
_ROOT_ENTRIES = frozenset(entry.name for entry in ROOT.iterdir())
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@dataclass(frozen=True)
class Citation:
    """One cited thing: `kind` is "path", "name" or "module"."""

    kind: str
    text: str


def citations(markdown: str) -> list[Citation]:
    """Every citation in `markdown` (code blocks included), in order, repeats kept."""
    found = []
    for token in _TOKEN.findall(markdown):
        token = token.strip()
        if "://" in token or " " in token:
            continue
        if _NAME.match(token):
            found.append(Citation("name", token))
        elif _MODULE.match(token):
            found.append(Citation("module", token))
        elif _PATH.match(token) and token.split("/")[0] in _ROOT_ENTRIES:
            found.append(Citation("path", token))
    for block in re.findall(r"```text\n(.*?)```", markdown, flags=re.S):  # paths in the traced stack
        found += [Citation("path", line.split()[0]) for line in block.splitlines() if line.startswith("packages/")]
    return found


def problem(citation: Citation, root: Path = ROOT) -> str | None:
    """Why `citation` does not resolve, or None when it does."""
    if citation.kind == "path":
        return None if (root / citation.text).exists() else "no such file or folder"
    if citation.kind == "name":
        module_name, _, attr = citation.text.partition(":")
        try:
            target: object = importlib.import_module(module_name)
        except ImportError as error:
            return f"module does not import: {error}"
        rest = attr.split(".")
    else:
        parts = citation.text.split(".")
        try:
            target = importlib.import_module(parts[0])
        except ImportError as error:
            return f"module does not import: {error}"
        rest = []
        for index, part in enumerate(parts[1:], start=1):
            name = ".".join(parts[:index + 1])
            if rest or not hasattr(target, "__path__"):  # below a module: attributes only
                rest.append(part)
                continue
            try:
                target = importlib.import_module(name)
            except ModuleNotFoundError as error:
                if error.name != name:
                    return f"module does not import: {error}"
                rest.append(part)
            except ImportError as error:
                return f"module does not import: {error}"
    for part in rest:
        if not hasattr(target, part):
            return f"{getattr(target, '__name__', target)!s} has no attribute {part!r}"
        target = getattr(target, part)
    return None


def broken_links(markdown: str, folder: Path) -> list[str]:
    """Relative Markdown links of a page in `folder` that point at nothing (code left out)."""
    prose = _TOKEN.sub("", re.sub(r"```.*?```", "", markdown, flags=re.S))
    return [link for link in _LINK.findall(prose) if "://" not in link and not (folder / link).exists()]


# ---------------------------------------------------------------------- the parser can fail


def test_the_parser_tells_the_three_kinds_apart() -> None:
    text = ("`agile_core.registry:Paradigm.run_loop`, `agile_core.training.generations`, "
            "`packages/agile-core/src/agile_core/trainer.py`, `agile train m.yaml`, `agile.paradigms`, "
            "`training.pop_size=2`, `https://example.org/a/b`")
    assert citations(text) == [Citation("name", "agile_core.registry:Paradigm.run_loop"),
                               Citation("module", "agile_core.training.generations"),
                               Citation("path", "packages/agile-core/src/agile_core/trainer.py")]


def test_made_up_citations_are_caught() -> None:
    bad = citations("`agile_core.registry:Paradigm.fly`, `agile_core.registry:Nowhere`, "
                    "`agile_core.no_such_module:Paradigm`, `agile_core.no_such_module`, "
                    "`agile_core.registry.Paradigm.fly`, `packages/agile-core/src/agile_core/no_such_file.py`")
    assert len(bad) == 6
    assert {c.text: problem(c) is not None for c in bad} == {c.text: True for c in bad}
    good = citations("`agile_core.registry:Paradigm.run_loop`, `agile_core.registry.Paradigm.run_loop`, "
                     "`agile_core.training`, `docs/architecture.md`, `my_sarsa/spec.py`, `train/loss`")
    assert [c.text for c in good] == ["agile_core.registry:Paradigm.run_loop", "agile_core.registry.Paradigm.run_loop",
                                      "agile_core.training", "docs/architecture.md"]
    assert [problem(c) for c in good] == [None] * 4
    assert broken_links("[a](architecture.md) [b](no-such-page.md) [c](https://example.org/x) `x[0](y)`\n"
                        "```py\nnets[0](inputs)\n```", DOC.parent) == ["no-such-page.md"]


# ---------------------------------------------------------------------- the page


@pytest.mark.parametrize("page", list(PAGES), ids=[page.name for page in PAGES])
def test_every_citation_of_the_page_exists(page: Path) -> None:
    text = page.read_text()
    found = citations(text)
    assert len({c.text for c in found}) >= PAGES[page], "the page cites far less than expected: is the parser broken?"
    problems = {c.text: why for c in found if (why := problem(c)) is not None}
    assert problems == {}
    assert broken_links(text, page.parent) == []


def _path_section() -> str:
    text = DOC.read_text()
    start = text.index("## The path of a manifest")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def _package(path: str) -> str:
    return path.split("/")[1]


def _stack_lines() -> list[tuple[str, list[str]]]:
    """The traced call stack of the page: (file, function names) per line."""
    block = re.search(r"```text\n(packages/.*?)```", _path_section(), flags=re.S)
    assert block is not None, "the path section lists no call stack"
    lines = []
    for line in block.group(1).splitlines():
        path, _, names = line.partition(" ")
        lines.append((path, [name.strip().split(".")[-1] for name in names.split(",")]))
    return lines


def test_the_stated_counts_match_the_listed_path() -> None:
    section = _path_section()
    steps = re.findall(r"^\d+\. `(packages/[^`]+\.py)`", section, flags=re.M)
    files = list(dict.fromkeys(steps))
    stated = re.search(r"\*\*(\d+)\s+files\*\*", section)
    assert stated is not None and int(stated.group(1)) == len(files), files
    for count, package in re.findall(r"(\d+) in (agile-[a-z]+)", section):
        assert sum(_package(path) == package for path in files) == int(count), package
    stack = [path for path, _ in _stack_lines()]
    crossings = sum(_package(a) != _package(b) for a, b in itertools.pairwise(stack))
    stated = re.search(r"\*\*(\d+)\s+times\*\*", section)
    assert stated is not None and int(stated.group(1)) == crossings


class _Reached(Exception):
    """Raised at the first DQN learning step, once its call stack is recorded."""


def test_the_listed_call_stack_is_the_one_python_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Train DQN briefly through the CLI's entry function and stop inside the first learning step."""
    from agile_cli.main import main
    from agile_core.algorithms import q_learning

    seen: list[traceback.FrameSummary] = []

    def recording_td_loss(*args, **kwargs):  # called from QLearner.learn_population
        seen.extend(traceback.extract_stack()[:-1])
        raise _Reached

    monkeypatch.setattr(q_learning, "td_loss", recording_td_loss)
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # `main` installs its own
    manifest = ROOT / "configs" / "training" / "dqn_cartpole.yaml"
    main(["train", str(manifest), "--set", "training.pop_size=2", "--set", "training.learning_delay=0",
          "--set", "algorithm.batch_size=16", "--run-dir", str(tmp_path / "run"), "--quiet"])
    assert seen, "the run never reached a learning step"
    frames = [(match.group(1), frame.name) for frame in seen
              if (match := re.search(r"(packages/agile-[a-z]+/src/.+)$", Path(frame.filename).as_posix()))]
    shown: list[tuple[str, list[str]]] = []
    for path, name in frames:
        if shown and shown[-1][0] == path:
            shown[-1][1].append(name)
        else:
            shown.append((path, [name]))
    assert shown == _stack_lines()
