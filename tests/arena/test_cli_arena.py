"""`agile arena ...` against a scripted server: output, --json, exit codes (auth 2 with how to log in,
not found 1, invalid manifest 2), login storing the key privately and never echoing it, and the
messages when agile-arena or its server extra is missing."""

from __future__ import annotations

import io
import json
import stat
import sys

import httpx
import pytest

from agile_arena import ArenaClient
from agile_cli.commands import arena as arena_command
from agile_cli.main import main
from tests.arena.cli_fakes import run
from tests.arena.test_client import EXPERIMENT, KEY, PPO, ndjson, tar_bytes, tar_response

pytestmark = pytest.mark.usefixtures("isolated_settings")


@pytest.mark.parametrize("action", ["login", "logout", "submit", "list", "resources", "status", "logs", "stop",
                                    "resume", "checkpoints", "metrics", "download", "serve", "create-key"])
def test_every_action_has_help(capsys, action):
    assert main(["arena", action, "--help"]) == 0
    assert "usage: agile arena" in capsys.readouterr().out


def test_no_action_prints_usage(capsys):
    code, _, err = run(capsys)
    assert code == 2 and "login" in err and "submit" in err


def test_submit_prints_the_id_and_json(fake, capsys):
    fake.on("POST", "/v1/experiments", httpx.Response(201, json=EXPERIMENT))
    code, out, _ = run(capsys, "submit", str(PPO), "--resource-id", "local", "--name", "cp", "--project", "demo")
    assert code == 0 and "exp1" in out and "agile arena logs exp1 --follow" in out
    body = json.loads(fake.requests[0].content)
    assert (body["resource_id"], body["experiment_name"], body["project"]) == ("local", "cp", "demo")
    code, out, _ = run(capsys, "submit", str(PPO), "--json")
    assert code == 0 and json.loads(out) == EXPERIMENT


def test_submit_follow_streams_the_log_and_exits_with_the_outcome(fake, capsys):
    fake.on("POST", "/v1/experiments", httpx.Response(201, json=EXPERIMENT))
    fake.on("GET", "/v1/experiments/exp1/logs", ndjson({"type": "status", "status": "running"},
                                                       {"type": "log", "offset": 9, "line": "step 100"},
                                                       {"type": "status", "status": "completed"}))
    fake.on("GET", "/v1/experiments/exp1", httpx.Response(200, json={**EXPERIMENT, "status": "completed"}))
    code, out, err = run(capsys, "submit", str(PPO), "--follow")
    assert code == 0 and "step 100" in out and "completed" in err
    fake.on("GET", "/v1/experiments/exp1", httpx.Response(200, json={**EXPERIMENT, "status": "failed", "error": "boom"}))
    fake.on("GET", "/v1/experiments/exp1/logs", ndjson({"type": "status", "status": "failed"}))
    code, _, err = run(capsys, "logs", "exp1", "--follow")
    assert code == 1 and "boom" in err


def test_logs_json_prints_one_event_per_line(fake, capsys):
    fake.on("GET", "/v1/experiments/exp1/logs", ndjson({"type": "status", "status": "running"},
                                                       {"type": "log", "offset": 4, "line": "abc"}))
    code, out, _ = run(capsys, "logs", "exp1", "--json")
    assert code == 0
    assert [json.loads(line) for line in out.splitlines()] == [{"type": "status", "status": "running"},
                                                                {"type": "log", "line": "abc", "offset": 4}]


def test_an_invalid_manifest_exits_2_with_file_and_line(fake, capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm:\n  name: PPO\n  lr: -1\nenvironment:\n  name: CartPole-v1\n")
    code, out, err = run(capsys, "submit", str(bad))
    assert code == 2 and f"{bad}:3: algorithm.lr:" in err and fake.requests == []
    code, out, err = run(capsys, "submit", str(bad), "--json")
    assert code == 2 and json.loads(out)["errors"][0]["path"] == "algorithm.lr"


def test_server_validation_errors_exit_2_with_lines(fake, capsys):
    fake.on("POST", "/v1/experiments", httpx.Response(422, json={
        "error": "validation", "message": "invalid manifest", "errors": [{"path": "environment.name", "message": "nope"}]}))
    code, _, err = run(capsys, "submit", str(PPO))
    line = next(i for i, text in enumerate(PPO.read_text().splitlines(), 1) if text.strip() == "name: CartPole-v1")
    assert code == 2 and f"{PPO}:{line}: environment.name: nope" in err


def test_auth_errors_exit_2_and_say_how_to_log_in(fake, capsys, monkeypatch):
    fake.on("GET", "/v1/experiments", httpx.Response(401, json={"error": "unauthorized", "message": "invalid API key"}))
    code, out, err = run(capsys, "list")
    assert code == 2 and "agile arena login" in err and KEY not in out + err
    monkeypatch.delenv("AGILE_ARENA_API_KEY")
    code, out, err = run(capsys, "list", "--json")
    assert code == 2 and "agile arena login" in err and json.loads(out)["error"] == "unauthorized"


@pytest.mark.parametrize(("status", "code"), [(404, 1), (409, 1), (500, 1), (400, 2)])
def test_exit_codes(fake, capsys, status, code):
    fake.on("POST", "/v1/experiments/exp1/resume", httpx.Response(status, json={"error": "x", "message": "no way"}))
    assert run(capsys, "resume", "exp1")[0] == code


def test_an_unreachable_server_exits_1(capsys, monkeypatch):
    monkeypatch.setenv("AGILE_ARENA_API_KEY", KEY)
    monkeypatch.setattr(arena_command, "_client", lambda args, api_key=None: ArenaClient(
        url="http://127.0.0.1:9", retries=0, transport=httpx.MockTransport(_refuse)))
    code, _, err = run(capsys, "status", "exp1")
    assert code == 1 and "cannot reach" in err


def _refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused")


def test_list_status_checkpoints_and_resources_print_tables(fake, capsys):
    fake.on("GET", "/v1/experiments", httpx.Response(200, json=[EXPERIMENT]))
    fake.on("GET", "/v1/experiments/exp1", httpx.Response(200, json=EXPERIMENT))
    fake.on("GET", "/v1/experiments/exp1/checkpoints", httpx.Response(200, json=[
        {"path": "elite", "kind": "elite", "bytes": 1234, "modified": "2026-01-01T00:00:00Z"}]))
    fake.on("GET", "/v1/resources", httpx.Response(200, json=[{"id": "local", "slots": 2, "running": 1, "queued": 0}]))
    assert "exp1" in run(capsys, "list")[1]
    assert "CartPole-v1" in run(capsys, "status", "exp1")[1]
    assert "elite" in run(capsys, "checkpoints", "exp1")[1]
    assert "local" in run(capsys, "resources")[1]
    assert json.loads(run(capsys, "checkpoints", "exp1", "--json")[1])[0]["kind"] == "elite"


def test_metrics_and_download(fake, capsys, tmp_path):
    fake.on("GET", "/v1/experiments/exp1/metrics", httpx.Response(200, text="step,fitness\n1,2.5\n"))
    fake.on("GET", "/v1/experiments/exp1/download", tar_response(tar_bytes(("attributes.json", b"", b"{}"))))
    assert run(capsys, "metrics", "exp1")[1] == "step,fitness\n1,2.5\n"
    assert json.loads(run(capsys, "metrics", "exp1", "--json")[1]) == [{"step": "1", "fitness": "2.5"}]
    out_file = tmp_path / "m.csv"
    assert run(capsys, "metrics", "exp1", "--output", str(out_file))[0] == 0
    assert out_file.read_text() == "step,fitness\n1,2.5\n"
    code, _, err = run(capsys, "metrics", "exp1", "--output", str(out_file))
    assert code == 2 and "--force" in err
    assert run(capsys, "metrics", "exp1", "--output", str(out_file), "--force")[0] == 0
    code, out, _ = run(capsys, "download", "exp1", "elite", "--output", str(tmp_path / "dl"), "--json")
    assert code == 0 and json.loads(out)["path"] == str(tmp_path / "dl" / "elite")
    assert (tmp_path / "dl" / "elite" / "attributes.json").read_text() == "{}"


def test_login_reads_stdin_checks_the_key_and_stores_it_privately(fake, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("AGILE_ARENA_API_KEY")
    fake.on("GET", "/v1/experiments", httpx.Response(200, json=[]))
    monkeypatch.setattr(sys, "stdin", io.StringIO(KEY + "\n"))
    code, out, err = run(capsys, "login", "--api-key-stdin", "--url", "http://127.0.0.1:8470")
    assert code == 0 and KEY not in out + err
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"
    stored = tmp_path / "config" / "arena.json"
    assert json.loads(stored.read_text()) == {"url": "http://127.0.0.1:8470", "api_key": KEY}
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o700


def test_login_with_a_refused_key_stores_nothing(fake, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("AGILE_ARENA_API_KEY")
    fake.on("GET", "/v1/experiments", httpx.Response(401, json={"error": "unauthorized", "message": "invalid key"}))
    monkeypatch.setattr(sys, "stdin", io.StringIO("arena_wrong\n"))
    code, out, err = run(capsys, "login", "--api-key-stdin")
    assert code == 2 and "refused" in err and "arena_wrong" not in out + err
    assert not (tmp_path / "config" / "arena.json").exists()


def test_login_never_takes_the_key_from_argv_and_needs_a_terminal_to_prompt(capsys, monkeypatch):
    assert main(["arena", "login", "--api-key", KEY]) == 2
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, _, err = run(capsys, "login")
    assert code == 2 and "--api-key-stdin" in err


def test_logout_removes_the_stored_key(capsys, tmp_path):
    from agile_arena.config import save_credentials

    save_credentials("http://127.0.0.1:8470", KEY)
    assert run(capsys, "logout")[0] == 0
    assert not (tmp_path / "config" / "arena.json").exists()


def test_without_agile_arena_the_command_says_what_to_install(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "agile_arena", None)  # makes `import agile_arena` fail
    code, _, err = run(capsys, "list")
    assert code == 2 and "install agile-arena" in err
    code, _out, err = run(capsys, "create-key", "alice", "--data-dir", "x")
    assert code == 2 and "install agile-arena[server]" in err


def test_without_the_server_extra_serve_says_what_to_install(capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    code, _, err = run(capsys, "serve", "--data-dir", "x")
    assert code == 2 and "install agile-arena[server]" in err and "uvicorn" in err


def test_create_key_prints_only_the_key(capsys, tmp_path):
    code, out, _err = run(capsys, "create-key", "alice", "--data-dir", str(tmp_path / "data"))
    assert code == 0 and out.strip().startswith("arena_") and len(out.strip().splitlines()) == 1
    code, out, _ = run(capsys, "create-key", "bob", "--data-dir", str(tmp_path / "data"), "--json")
    assert code == 0 and json.loads(out)["name"] == "bob"
    assert run(capsys, "create-key", " ", "--data-dir", str(tmp_path / "data"))[0] == 2


def test_serve_checks_its_arguments(capsys):
    code, _, err = run(capsys, "serve", "--data-dir", "x", "--slots", "0")
    assert code == 2 and "--slots" in err


def test_num_nodes_above_one_is_sent_with_a_warning_and_below_one_refused(fake, capsys):
    fake.on("POST", "/v1/experiments", httpx.Response(201, json=EXPERIMENT))
    code, out, err = run(capsys, "submit", str(PPO), "--num-nodes", "2")
    assert code == 0 and "exp1" in out and len(fake.calls("POST", "/v1/experiments")) == 1
    assert [line for line in err.splitlines() if "warning" in line] == [
        "agile arena: warning: --num-nodes 2: this Arena server trains each experiment on one node; "
        "the job runs on one node"]
    code, _, err = run(capsys, "submit", str(PPO), "--num-nodes", "0")
    assert code == 2 and "--num-nodes" in err and len(fake.calls("POST", "/v1/experiments")) == 1


def test_missing_manifest_file(fake, capsys):
    code, _, err = run(capsys, "submit", "no/such.yaml")
    assert code == 2 and "no such file" in err


def test_help_mentions_arena(capsys):
    assert main(["--help"]) == 0
    assert "arena" in capsys.readouterr().out


def test_an_unexpected_error_is_one_line_not_a_traceback(capsys, monkeypatch):
    class Broken:
        def list_experiments(self) -> list[object]:
            raise RuntimeError("boom")

    monkeypatch.setattr(arena_command, "_client", lambda args, api_key=None: Broken())
    code, _, err = run(capsys, "list")
    assert code == 1 and "unexpected error: RuntimeError: boom" in err and "Traceback" not in err
    monkeypatch.setenv("AGILE_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["arena", "list"])
