"""`agile plot` and the generation history it reads, on a tiny real DQN CartPole run."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agile_cli.main import main
from agile_core.training.reporting import GenerationHistory, history_path_for

ROOT = Path(__file__).resolve().parents[2]
DQN = ROOT / "configs" / "training" / "dqn_cartpole.yaml"
TINY = ["--set", "training.pop_size=2", "--set", "training.max_steps=3000", "--set", "training.evo_steps=1000",
        "--set", "training.learning_delay=200", "--set", "training.eval_loop=1", "--set", "training.target_score=null",
        "--set", "mutation.probabilities.no_mut=0.1", "--quiet", "--checkpoint-steps", "1000"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def agile(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agile_cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.history.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """Three generations of two DQN agents (about 15 s)."""
    path = tmp_path_factory.mktemp("plot") / "run"
    result = agile("train", str(DQN), *TINY, "--run-dir", str(path))
    assert result.returncode == 0, result.stderr
    return path


def test_history_records_every_generation(run_dir):
    lines = history(run_dir)
    assert [line["generation"] for line in lines] == [1, 2, 3]
    assert [line["step"] for line in lines] == [2000, 4000, 6000]  # population steps
    for previous, line in zip([None, *lines], lines, strict=False):
        assert line["mutable"] == ["batch_size", "learn_step", "lr"]
        assert [a["slot"] for a in line["agents"]] == [0, 1]
        best = max(line["agents"], key=lambda a: a["fitness"])
        assert line["elite_id"] == best["id"]
        for agent in line["agents"]:
            assert {"id", "parent_id", "fitness", "mutation", "operator", "hyperparameters", "steps"} <= set(agent)
            assert {"lr", "batch_size", "learn_step"} <= set(agent["hyperparameters"])
            if previous is None:
                assert agent["parent_id"] is None and agent["mutation"] == "None"
                continue
            earlier = {a["id"] for a in previous["agents"]}
            # every agent either survived or was cloned from an agent of the previous generation
            assert agent["id"] in earlier or agent["parent_id"] in earlier
            if agent["operator"] is not None:
                assert agent["id"] not in earlier and agent["mutation"] != "None"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [a["fitness"] for a in summary["agents"]] == pytest.approx([a["fitness"] for a in lines[-1]["agents"]])
    assert [a["id"] for a in summary["agents"]] == [a["id"] for a in lines[-1]["agents"]]


def test_plot_writes_three_non_trivial_pngs(run_dir, tmp_path, capsys):
    from PIL import Image

    assert main(["plot", str(run_dir), "--out", str(tmp_path / "figures")]) == 0
    written = capsys.readouterr().out.split()
    names = ["fitness.png", "hyperparameters.png", "lineage.png"]
    assert written == [str(tmp_path / "figures" / name) for name in names]
    for name in names:
        path = tmp_path / "figures" / name
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        assert path.stat().st_size > 10_000
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            width, height = image.size
            colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
        assert width >= 600 and height >= 300
        assert colours is not None and len(colours) > 50  # lines, markers and text, not a blank canvas


def test_plot_default_out_dir_and_console_script(run_dir):
    result = agile("plot", str(run_dir))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(run_dir / "plots" / n) for n in ("fitness.png", "hyperparameters.png",
                                                                         "lineage.png")]
    assert all((run_dir / "plots" / n).is_file() for n in ("fitness.png", "hyperparameters.png", "lineage.png"))


def test_bad_run_dir_exits_2_with_the_reason(tmp_path, capsys):
    cases = {}
    cases["missing"] = tmp_path / "missing"
    cases["no history"] = tmp_path / "empty"
    cases["no history"].mkdir()
    (tmp_path / "file").write_text("x")
    cases["a file"] = tmp_path / "file"
    for name, text in (("no generation", ""), ("corrupt", '{"generation": 1, "agents": []}\nnot json\n')):
        folder = tmp_path / name.replace(" ", "_")
        folder.mkdir()
        (folder / "metrics.history.jsonl").write_text(text)
        cases[name] = folder
    expected = {"missing": "is not a directory", "no history": "has no metrics.history.jsonl",
                "a file": "is not a directory", "no generation": "records no generation",
                "corrupt": "metrics.history.jsonl:2: not a generation record"}
    for name, path in cases.items():
        assert main(["plot", str(path)]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith("agile plot: ") and expected[name] in err, (name, err)
        assert "Traceback" not in err


def _edited_history(run_dir: Path, target: Path, edit) -> Path:
    shutil.copytree(run_dir, target, ignore=shutil.ignore_patterns("checkpoints", "plots"))
    records = history(target)
    edit(records[0]["agents"][0])
    (target / "metrics.history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return target


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda agent: agent.update(fitness="high"), "agents[0].fitness must be a number or null, got 'high'"),
    (lambda agent: agent.update(slot=10**12), "agents[0].slot must be an integer in 0..99999"),
    (lambda agent: agent.update(hyperparameters=[1]), "agents[0].hyperparameters is not an object"),
], ids=["string-fitness", "huge-slot", "list-hyperparameters"])
def test_a_damaged_history_exits_2_naming_line_and_field(run_dir, tmp_path, capsys, edit, expected):
    target = _edited_history(run_dir, tmp_path / "run", edit)
    assert main(["plot", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"metrics.history.jsonl:1: not a generation record ({expected}" in err and "Traceback" not in err


def test_unplottable_values_are_left_out_and_invalid_utf8_is_refused(run_dir, tmp_path, capsys):
    huge = _edited_history(run_dir, tmp_path / "huge", lambda agent: agent.update(fitness=1e308))
    assert main(["plot", str(huge)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.split()) == 3 and "Warning" not in captured.err
    (tmp_path / "bytes").mkdir()
    (tmp_path / "bytes" / "metrics.history.jsonl").write_bytes(b'{"generation": 1, "agents": []}\n\xff\xfe\n')
    assert main(["plot", str(tmp_path / "bytes")]) == 2
    assert "not UTF-8 text (byte 32); the file is damaged" in capsys.readouterr().err


def test_plot_ignores_the_line_a_running_run_is_writing(run_dir, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("checkpoints", "plots"))
    with open(copy / "metrics.history.jsonl", "a") as handle:
        handle.write('{"generation": 4, "step": 80')
    assert main(["plot", str(copy)]) == 0
    assert len(capsys.readouterr().out.split()) == 3


def test_plot_help(capsys):
    assert main(["plot", "--help"]) == 0
    out = capsys.readouterr().out
    assert "RUN_DIR" in out and "--out DIR" in out and "lineage" in out
    assert main(["--help"]) == 0 and "plot" in capsys.readouterr().out


def test_resumed_run_continues_the_history(run_dir, tmp_path):
    """Resuming from the first checkpoint into the same run directory drops the later lines and
    appends the same generations again (a seeded resume repeats the run)."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    original = history(copy)
    first = sorted((copy / "checkpoints").glob("checkpoint_*"))[0]  # after generation 1
    result = agile("train", str(DQN), *TINY, "--run-dir", str(copy), "--resume-from-checkpoint", str(first))
    assert result.returncode == 0, result.stderr
    resumed = history(copy)
    assert [line["generation"] for line in resumed] == [1, 2, 3]
    assert resumed[0] == original[0]  # kept as it was, time stamp included
    for before, after in zip(original[1:], resumed[1:], strict=True):
        before.pop("time"), after.pop("time")
        assert after == before


def test_generation_history_file_semantics(tmp_path):
    path = history_path_for(tmp_path / "metrics.csv")
    assert path == tmp_path / "metrics.history.jsonl"
    first = GenerationHistory(path)
    for generation in (1, 2, 3):
        first.append({"generation": generation, "step": 100 * generation, "agents": []})
    first.close()
    with open(path, "a") as handle:
        handle.write('{"generation": 4, "step": 4')  # torn by a crash
    resumed = GenerationHistory(path)
    resumed.append({"generation": 3, "step": 300, "agents": []}, resume_step=200)
    resumed.close()
    assert [json.loads(line)["generation"] for line in path.read_text().splitlines()] == [1, 2, 3]
    fresh = GenerationHistory(path)  # a new run (resume_step 0) starts the file afresh
    fresh.append({"generation": 1, "step": 100, "agents": []})
    fresh.close()
    assert len(path.read_text().splitlines()) == 1
    with pytest.raises(ValueError):
        GenerationHistory(tmp_path / "nan.jsonl").append({"fitness": float("nan")})


def test_plot_of_a_long_run_summarises_the_lineage(tmp_path, capsys):
    """500 generations of 8 agents: the lineage becomes one fitness image with elite and clone marks."""
    import random

    rng = random.Random(0)
    ids, next_id, lines = list(range(8)), 8, []
    for generation in range(1, 501):
        agents = []
        for slot in range(8):
            cloned = generation > 1 and rng.random() < 0.3
            parent = ids[rng.randrange(8)] if cloned else None
            if cloned:
                ids[slot], next_id = next_id, next_id + 1
            agents.append({"slot": slot, "id": ids[slot], "parent_id": parent, "fitness": rng.random() * generation,
                           "mutation": "lr" if cloned else "None", "operator": "rl_hp" if cloned else None,
                           "hyperparameters": {"lr": 1e-3}, "steps": generation * 100})
        elite = max(agents, key=lambda a: a["fitness"])["id"]
        lines.append(json.dumps({"generation": generation, "step": generation * 800, "time": 0.0, "mutable": ["lr"],
                                 "elite_id": elite, "agents": agents}))
    folder = tmp_path / "long"
    folder.mkdir()
    (folder / "metrics.history.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["plot", str(folder), "--out", str(tmp_path / "plots")]) == 0
    lineage = tmp_path / "plots" / "lineage.png"
    assert lineage.read_bytes().startswith(PNG_SIGNATURE) and lineage.stat().st_size < 2_000_000
