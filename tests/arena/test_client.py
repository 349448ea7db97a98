"""ArenaClient against `httpx.MockTransport`: retries (GET only) with backoff, error mapping, the
key kept out of messages, credentials precedence and file mode, safe downloads, log reconnects."""

from __future__ import annotations

import io
import json
import logging
import os
import stat
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from agile_arena import (
    ArenaAuthError,
    ArenaClient,
    ArenaConfigError,
    ArenaConflictError,
    ArenaConnectionError,
    ArenaError,
    ArenaNotFoundError,
    ArenaRequestError,
    ArenaServerError,
    ArenaValidationError,
    LogEvent,
    StatusEvent,
    UnsafeArchiveError,
)
from agile_arena.config import credentials_path, load_credentials, save_credentials
from agile_core.errors import ManifestError

KEY = "arena_" + "k" * 43
ROOT = Path(__file__).resolve().parents[2]
PPO = ROOT / "configs" / "training" / "ppo_cartpole.yaml"
EXPERIMENT = {"id": "exp1", "name": None, "project": None, "resource_id": "local", "status": "queued",
              "created_at": "2026-01-01T00:00:00Z", "started_at": None, "finished_at": None, "exit_code": None,
              "algorithm": "PPO", "environment": "CartPole-v1", "error": None}


pytestmark = pytest.mark.usefixtures("isolated_settings")


class FakeArena:
    """A scripted server: `routes[(METHOD, path)]` is a list of responses (or exceptions, or
    callables of the request) served in order, the last one repeated."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[object]] = {}
        self.requests: list[httpx.Request] = []

    def on(self, method: str, path: str, *responses: object) -> FakeArena:
        self.routes[(method, path)] = list(responses)
        return self

    def calls(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path == path]

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        queue = self.routes.get((request.method, request.url.path))
        if not queue:
            return httpx.Response(404, json={"error": "not_found", "message": "no such route"})
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, Exception):
            raise item
        if callable(item):
            item = item(request)
        assert isinstance(item, httpx.Response)
        return item

    def client(self, api_key: str | None = KEY, **options: object) -> tuple[ArenaClient, list[float]]:
        sleeps: list[float] = []
        options.setdefault("retries", 3)
        client = ArenaClient(api_key=api_key, url="http://127.0.0.1:8470", transport=httpx.MockTransport(self.handler),
                             sleep=sleeps.append, **options)  # type: ignore[arg-type]
        return client, sleeps


def error(status: int, kind: str, message: str, errors: list[dict[str, str]] | None = None) -> httpx.Response:
    return httpx.Response(status, json={"error": kind, "message": message, "errors": errors or []})


def ndjson(*events: dict[str, object], drop: bool = False) -> Callable[[httpx.Request], httpx.Response]:
    """A log response streaming `events`, then (with `drop`) a broken connection."""

    def body() -> Iterator[bytes]:
        for event in events:
            yield (json.dumps(event) + "\n").encode()
        if drop:
            raise httpx.ReadError("connection reset by peer")

    return lambda request: httpx.Response(200, content=body(), headers={"content-type": "application/x-ndjson"})


# ------------------------------------------------------------------------------------ retries
def test_get_is_retried_after_5xx_and_connection_errors_with_exponential_backoff():
    fake = FakeArena().on("GET", "/v1/experiments", httpx.Response(503, text="busy"),
                          httpx.ConnectError("refused"), httpx.Response(502), httpx.Response(200, json=[EXPERIMENT]))
    client, sleeps = fake.client(backoff=0.5)
    assert client.list_experiments() == [EXPERIMENT]
    assert len(fake.calls("GET", "/v1/experiments")) == 4
    assert sleeps == [0.5, 1.0, 2.0]


def test_backoff_is_capped():
    fake = FakeArena().on("GET", "/v1/resources", httpx.Response(500))
    client, sleeps = fake.client(retries=5, backoff=1.0, max_backoff=3.0)
    with pytest.raises(ArenaServerError):
        client.resources()
    assert sleeps == [1.0, 2.0, 3.0, 3.0, 3.0]
    assert len(fake.calls("GET", "/v1/resources")) == 6


def test_get_gives_up_after_the_retries_with_a_connection_error():
    fake = FakeArena().on("GET", "/v1/experiments/exp1", httpx.ConnectError("refused"))
    client, sleeps = fake.client(retries=2)
    with pytest.raises(ArenaConnectionError, match="cannot reach the Arena server"):
        client.status("exp1")
    assert len(fake.calls("GET", "/v1/experiments/exp1")) == 3 and len(sleeps) == 2


@pytest.mark.parametrize("failure", [httpx.Response(503), httpx.ConnectError("refused"), httpx.ReadTimeout("slow")])
def test_submit_is_never_sent_twice(failure):
    fake = FakeArena().on("POST", "/v1/experiments", failure, httpx.Response(201, json=EXPERIMENT))
    client, sleeps = fake.client()
    with pytest.raises(ArenaServerError if isinstance(failure, httpx.Response) else ArenaConnectionError):
        client.submit(PPO)
    assert len(fake.calls("POST", "/v1/experiments")) == 1 and sleeps == []


@pytest.mark.parametrize("action", ["stop", "resume"])
def test_stop_and_resume_are_not_retried(action):
    fake = FakeArena().on("POST", f"/v1/experiments/exp1/{action}", httpx.Response(500), httpx.Response(200, json=EXPERIMENT))
    client, _ = fake.client()
    with pytest.raises(ArenaServerError):
        getattr(client, action)("exp1")
    assert len(fake.calls("POST", f"/v1/experiments/exp1/{action}")) == 1


def test_4xx_is_not_retried():
    fake = FakeArena().on("GET", "/v1/experiments/nope", error(404, "not_found", "experiment nope not found"))
    client, sleeps = fake.client()
    with pytest.raises(ArenaNotFoundError, match="nope not found"):
        client.status("nope")
    assert len(fake.requests) == 1 and sleeps == []


# ------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize(("status", "kind", "expected"), [
    (401, "unauthorized", ArenaAuthError), (403, "forbidden", ArenaAuthError), (404, "not_found", ArenaNotFoundError),
    (409, "conflict", ArenaConflictError), (400, "bad_request", ArenaRequestError),
    (413, "too_large", ArenaRequestError), (422, "validation", ArenaValidationError), (500, "server", ArenaServerError),
])
def test_statuses_map_to_typed_errors(status, kind, expected):
    fake = FakeArena().on("GET", "/v1/experiments/exp1", error(status, kind, f"{kind} happened"))
    client, _ = fake.client(retries=0)
    with pytest.raises(expected) as caught:
        client.status("exp1")
    assert isinstance(caught.value, ArenaError)
    assert caught.value.status == status and caught.value.kind == kind
    assert f"{kind} happened" in str(caught.value)


def test_auth_errors_say_how_to_log_in():
    fake = FakeArena().on("GET", "/v1/experiments", error(401, "unauthorized", "invalid API key"))
    client, _ = fake.client()
    with pytest.raises(ArenaAuthError, match="agile arena login"):
        client.list_experiments()


def test_a_missing_key_fails_before_anything_is_sent():
    fake = FakeArena().on("GET", "/v1/experiments", httpx.Response(200, json=[]))
    client, _ = fake.client(api_key=None)
    assert not client.has_api_key
    with pytest.raises(ArenaAuthError, match="agile arena login"):
        client.list_experiments()
    assert fake.requests == []


def test_the_key_is_sent_as_a_bearer_token_except_to_health():
    fake = FakeArena().on("GET", "/v1/health", httpx.Response(200, json={"status": "ok", "version": "0.1.0"}))
    fake.on("GET", "/v1/resources", httpx.Response(200, json=[{"id": "local", "slots": 1, "running": 0, "queued": 0}]))
    client, _ = fake.client()
    assert client.health()["status"] == "ok"
    assert client.resources()[0]["id"] == "local"
    health, resources = fake.requests
    assert "authorization" not in health.headers
    assert resources.headers["authorization"] == f"Bearer {KEY}"


def test_validation_errors_carry_the_field_paths_and_lines_of_the_local_file(tmp_path):
    manifest = tmp_path / "ppo.yaml"
    manifest.write_text(PPO.read_text())
    lr_line = next(i for i, line in enumerate(PPO.read_text().splitlines(), 1) if line.strip().startswith("lr:"))
    fake = FakeArena().on("POST", "/v1/experiments", error(422, "validation", "invalid manifest", [
        {"path": "algorithm.lr", "message": "the server says no"},
        {"path": "network.encoder_config.hidden_size[0]", "message": "too small"}]))
    client, _ = fake.client()
    with pytest.raises(ArenaValidationError) as caught:
        client.submit(manifest)
    errors = caught.value.errors
    assert [e.path for e in errors] == ["algorithm.lr", "network.encoder_config.hidden_size[0]"]
    assert errors[0].line == lr_line and errors[1].line is not None
    assert caught.value.report().splitlines()[0] == f"{manifest}:{lr_line}: algorithm.lr: the server says no"


def test_the_key_never_appears_in_messages_reprs_or_logs(caplog):
    caplog.set_level(logging.DEBUG)
    echo = f"key {KEY} is not valid"
    fake = FakeArena()
    fake.on("GET", "/v1/experiments", error(401, "unauthorized", echo))
    fake.on("GET", "/v1/experiments/exp1", httpx.ConnectError(f"cannot connect with {KEY}"))
    fake.on("POST", "/v1/experiments", error(422, "validation", echo, [{"path": "algorithm.lr", "message": echo}]))
    fake.on("GET", "/v1/resources", error(503, "server", echo))
    client, _ = fake.client(retries=1)
    texts = [repr(client)]
    for call in (client.list_experiments, lambda: client.status("exp1"), lambda: client.submit(PPO), client.resources):
        with pytest.raises(ArenaError) as caught:
            call()
        texts += [str(caught.value), repr(caught.value), json.dumps(caught.value.to_dict())]
        if isinstance(caught.value, ArenaValidationError):
            texts.append(caught.value.report())
    texts += [record.getMessage() for record in caplog.records]
    assert any("***" in text for text in texts)
    for text in texts:
        assert KEY not in text


def test_malformed_keys_and_urls_are_refused_without_echoing_them():
    with pytest.raises(ArenaConfigError) as caught:
        ArenaClient(api_key="arena_abc def\n", url="http://127.0.0.1:1")
    assert "abc" not in str(caught.value)
    with pytest.raises(ArenaConfigError, match="invalid Arena server URL"):
        ArenaClient(api_key=KEY, url="ftp://example.com")
    with pytest.raises(ArenaConfigError, match="user name or password"):
        ArenaClient(api_key=KEY, url="http://me:secret@example.com")


def test_a_key_over_plain_http_to_another_host_warns():
    with pytest.warns(UserWarning, match="plain HTTP"):
        ArenaClient(api_key=KEY, url="http://arena.example.com:8470").close()


# ------------------------------------------------------------------------------------ credentials
def test_credentials_file_is_private_and_written_atomically(tmp_path, monkeypatch):
    monkeypatch.delenv("AGILE_ARENA_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    path = save_credentials("http://10.0.0.2:8470", KEY)
    assert path == tmp_path / "xdg" / "agile" / "arena.json" == credentials_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "xdg").stat().st_mode) == 0o700
    save_credentials("http://10.0.0.3:8470", KEY + "x")
    assert sorted(p.name for p in path.parent.iterdir()) == ["arena.json"]  # no temporary files left
    stored = load_credentials()
    assert stored.url == "http://10.0.0.3:8470" and stored.api_key == KEY + "x"
    assert KEY not in repr(stored)


def test_default_location_without_xdg(tmp_path, monkeypatch):
    monkeypatch.delenv("AGILE_ARENA_CONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert credentials_path() == tmp_path / ".config" / "agile" / "arena.json"


def test_key_precedence_argument_then_env_then_legacy_env_then_file(monkeypatch):
    save_credentials("http://file.test:1", "arena_file")

    def key_sent(**options: object) -> str:
        fake = FakeArena().on("GET", "/v1/experiments", httpx.Response(200, json=[]))
        client = ArenaClient(transport=httpx.MockTransport(fake.handler), url="http://127.0.0.1:1", **options)  # type: ignore[arg-type]
        client.list_experiments()
        return fake.requests[0].headers["authorization"].removeprefix("Bearer ")

    assert key_sent() == "arena_file"
    monkeypatch.setenv("ARENA_API_KEY", "arena_legacy")
    assert key_sent() == "arena_legacy"
    monkeypatch.setenv("AGILE_ARENA_API_KEY", "arena_env")
    assert key_sent() == "arena_env"
    assert key_sent(api_key="arena_arg") == "arena_arg"


def test_url_precedence_argument_then_env_then_file_then_default(monkeypatch):
    assert ArenaClient(api_key=KEY).url == "http://127.0.0.1:8470"
    save_credentials("http://127.0.0.2:9000/", KEY)
    assert ArenaClient().url == "http://127.0.0.2:9000"
    monkeypatch.setenv("AGILE_ARENA_URL", "http://127.0.0.3:9001")
    assert ArenaClient().url == "http://127.0.0.3:9001"
    assert ArenaClient(url="http://127.0.0.4:9002").url == "http://127.0.0.4:9002"


def test_a_corrupt_credentials_file_is_a_config_error(tmp_path):
    path = tmp_path / "config" / "arena.json"
    path.parent.mkdir()
    path.write_text("{not json")
    with pytest.raises(ArenaConfigError, match="agile arena login"):
        ArenaClient()


# ------------------------------------------------------------------------------------ downloads
def tar_bytes(*members: tuple[str, bytes | str | None, bytes]) -> bytes:
    """A tar of (name, kind, data): kind b'' file, 'dir', ('sym'|'hard', target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind in ("sym", "hard"):
                info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                info.linkname = data.decode()
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def tar_response(payload: bytes) -> httpx.Response:
    return httpx.Response(200, content=payload, headers={"content-type": "application/x-tar"})


def test_download_extracts_a_folder(tmp_path):
    payload = tar_bytes(("attributes.json", b"", b"{}"), ("weights", "dir", b""), ("weights/actor.safetensors", b"", b"w"))
    fake = FakeArena().on("GET", "/v1/experiments/exp1/download", tar_response(payload))
    client, _ = fake.client()
    path = client.download("exp1", "elite", tmp_path / "out")
    assert path == tmp_path / "out" / "elite"
    assert (path / "attributes.json").read_text() == "{}"
    assert (path / "weights" / "actor.safetensors").read_bytes() == b"w"
    assert fake.requests[0].url.params["path"] == "elite"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["elite"]


@pytest.mark.parametrize("member", [
    ("../evil.txt", b"", b"x"), ("/etc/evil.txt", b"", b"x"), ("a/../../evil.txt", b"", b"x"),
    ("link", "sym", b"/etc/passwd"), ("hard", "hard", b"../outside"),
])
def test_unsafe_archive_members_are_refused_and_nothing_is_left(tmp_path, member):
    payload = tar_bytes(("ok.txt", b"", b"fine"), member)
    fake = FakeArena().on("GET", "/v1/experiments/exp1/download", tar_response(payload))
    client, _ = fake.client()
    out = tmp_path / "out"
    with pytest.raises(UnsafeArchiveError, match="refusing archive member"):
        client.download("exp1", "elite", out)
    assert list(out.iterdir()) == []
    assert not (tmp_path / "evil.txt").exists()
    assert len(fake.requests) == 1  # a refused archive is not fetched again


def test_a_dropped_download_is_retried_and_never_left_half_written(tmp_path):
    def dropped(request: httpx.Request) -> httpx.Response:
        def body() -> Iterator[bytes]:
            yield b"partial"
            raise httpx.ReadError("connection reset")
        return httpx.Response(200, content=body(), headers={"content-type": "application/octet-stream"})

    fake = FakeArena().on("GET", "/v1/experiments/exp1/download", dropped)
    client, sleeps = fake.client(retries=2)
    out = tmp_path / "out"
    with pytest.raises(ArenaConnectionError):
        client.download("exp1", "metrics.csv", out)
    assert len(fake.requests) == 3 and len(sleeps) == 2
    assert list(out.iterdir()) == []
    fake.on("GET", "/v1/experiments/exp1/download", dropped,
            httpx.Response(200, content=b"step,fitness\n1,2\n", headers={"content-type": "application/octet-stream"}))
    assert client.download("exp1", "metrics.csv", out).read_text() == "step,fitness\n1,2\n"
    assert sorted(p.name for p in out.iterdir()) == ["metrics.csv"]


def test_downloads_do_not_replace_existing_files_unless_asked(tmp_path):
    (tmp_path / "elite").mkdir()
    (tmp_path / "elite" / "old.txt").write_text("old")
    fake = FakeArena().on("GET", "/v1/experiments/exp1/download", tar_response(tar_bytes(("new.txt", b"", b"new"))))
    client, _ = fake.client()
    with pytest.raises(FileExistsError):
        client.download("exp1", "elite", tmp_path)
    assert fake.requests == []
    client.download("exp1", "elite", tmp_path, overwrite=True)
    assert sorted(p.name for p in (tmp_path / "elite").iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elite"]


def test_metrics_are_written_atomically(tmp_path):
    fake = FakeArena().on("GET", "/v1/experiments/exp1/metrics",
                          httpx.Response(200, text="step,fitness\n10,1.5\n", headers={"content-type": "text/csv"}))
    client, _ = fake.client()
    assert client.metrics("exp1").startswith("step,fitness")
    path = client.download_metrics("exp1", tmp_path / "m.csv")
    assert path.read_text() == "step,fitness\n10,1.5\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.csv"]


# ------------------------------------------------------------------------------------ logs
def test_following_logs_reconnects_at_the_last_offset_after_a_drop():
    fake = FakeArena().on("GET", "/v1/experiments/exp1/logs",
                          ndjson({"type": "status", "status": "running"}, {"type": "log", "offset": 6, "line": "one"},
                                 {"type": "log", "offset": 12, "line": "two"}, drop=True),
                          httpx.ConnectError("server restarting"),
                          ndjson({"type": "status", "status": "running"}, {"type": "log", "offset": 20, "line": "three"},
                                 {"type": "status", "status": "completed"}))
    client, sleeps = fake.client(backoff=0.25)
    events = list(client.logs("exp1", follow=True))
    assert events == [StatusEvent("running"), LogEvent("one", 6), LogEvent("two", 12), LogEvent("three", 20),
                      StatusEvent("completed")]
    params = [dict(r.url.params) for r in fake.calls("GET", "/v1/experiments/exp1/logs")]
    assert params == [{"offset": "0", "follow": "true"}, {"offset": "12", "follow": "true"},
                      {"offset": "12", "follow": "true"}]
    assert sleeps == [0.25, 0.25]  # once for the drop, once for the refused reconnect


def test_following_outlasts_a_server_restart_longer_than_one_round_of_retries():
    refused = httpx.ConnectError("connection refused")
    fake = FakeArena().on("GET", "/v1/experiments/exp1/logs",
                          ndjson({"type": "status", "status": "running"}, {"type": "log", "offset": 3, "line": "ab"},
                                 {"type": "error", "message": "the server is shutting down"}),
                          refused, refused, refused,
                          ndjson({"type": "status", "status": "interrupted"}))
    client, _ = fake.client(retries=2)
    events = list(client.logs("exp1", follow=True))
    assert events[-1] == StatusEvent("interrupted") and LogEvent("ab", 3) in events
    assert len(fake.requests) == 5
    assert fake.requests[-1].url.params["offset"] == "3"


def test_a_first_connection_that_fails_is_not_retried_beyond_its_retries():
    fake = FakeArena().on("GET", "/v1/experiments/exp1/logs", httpx.ConnectError("connection refused"))
    client, _ = fake.client(retries=1)
    with pytest.raises(ArenaConnectionError, match="cannot reach"):
        list(client.logs("exp1", follow=True))
    assert len(fake.requests) == 2


def test_a_stream_that_ends_before_the_job_is_reopened():
    fake = FakeArena().on("GET", "/v1/experiments/exp1/logs",
                          ndjson({"type": "status", "status": "running"}, {"type": "log", "offset": 4, "line": "abc"}),
                          ndjson({"type": "status", "status": "failed"}))
    client, _ = fake.client()
    events = list(client.logs("exp1", follow=True))
    assert events[-1] == StatusEvent("failed") and events[-1].terminal
    assert fake.calls("GET", "/v1/experiments/exp1/logs")[1].url.params["offset"] == "4"


def test_without_follow_the_log_ends_at_its_current_end():
    fake = FakeArena().on("GET", "/v1/experiments/exp1/logs",
                          ndjson({"type": "status", "status": "running"}, {"type": "log", "offset": 4, "line": "abc"}))
    client, _ = fake.client()
    assert [e for e in client.logs("exp1", offset=0) if isinstance(e, LogEvent)] == [LogEvent("abc", 4)]
    assert len(fake.requests) == 1


def test_reading_without_follow_gives_up_after_repeated_drops_without_progress():
    fake = FakeArena().on("GET", "/v1/experiments/exp1/logs", ndjson({"type": "status", "status": "running"}, drop=True))
    client, _ = fake.client(retries=2)
    with pytest.raises(ArenaConnectionError, match="lost the log stream"):
        list(client.logs("exp1"))
    assert len(fake.requests) == 3


def test_a_malformed_event_is_a_server_error():
    fake = FakeArena().on("GET", "/v1/experiments/exp1/logs",
                          lambda request: httpx.Response(200, content=b'{"type": "mystery"}\n'))
    client, _ = fake.client()
    with pytest.raises(ArenaServerError, match="malformed log event"):
        list(client.logs("exp1"))


# ------------------------------------------------------------------------------------ submit
def test_submit_sends_the_file_as_written_with_its_options():
    fake = FakeArena().on("POST", "/v1/experiments", httpx.Response(201, json=EXPERIMENT))
    client, _ = fake.client()
    assert client.submit(PPO, resource_id="local", experiment_name="cartpole", project="demo") == EXPERIMENT
    body = json.loads(fake.requests[0].content)
    assert body == {"manifest": PPO.read_text(), "filename": "ppo_cartpole.yaml", "resource_id": "local",
                    "experiment_name": "cartpole", "project": "demo"}


def test_an_invalid_manifest_is_reported_with_lines_and_never_sent(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm:\n  name: PPO\n  lr: -1\nenvironment:\n  name: CartPole-v1\ntraining:\n  pop_size: 0\n")
    fake = FakeArena()
    client, _ = fake.client()
    with pytest.raises(ManifestError) as caught:
        client.submit(bad)
    report = caught.value.report()
    assert f"{bad}:3: algorithm.lr:" in report and f"{bad}:7: training.pop_size:" in report
    assert fake.requests == []


def test_mf_pbt_is_refused_before_submitting(tmp_path):
    manifest = tmp_path / "mf.yaml"
    manifest.write_text("algorithm: {name: PPO}\nenvironment: {name: CartPole-v1}\ntraining: {pop_size: 6}\n"
                        "selection_strategy:\n  strategy: multi_frequency\n")
    fake = FakeArena()
    client, _ = fake.client()
    with pytest.raises(ManifestError, match=r"mf.yaml:5: selection_strategy.strategy: Arena runs tournament selection only"):
        client.submit(manifest)
    assert fake.requests == []


def test_an_algorithm_not_installed_here_is_checked_partly_and_left_to_the_server(tmp_path):
    # an algorithm only the server provides (a plugin installed there): core checks the rest
    bad = tmp_path / "plugin.yaml"
    bad.write_text("algorithm:\n  name: ServerPlugin\n  whatever: 1\nenvironment:\n  name: gsm8k\ntraining:\n  pop_size: -2\n"
                   "extra: 1\n")
    fake = FakeArena().on("POST", "/v1/experiments", httpx.Response(201, json=EXPERIMENT))
    client, _ = fake.client()
    with pytest.raises(ManifestError) as caught:
        client.submit(bad)
    assert f"{bad}:7: training.pop_size:" in caught.value.report()
    assert f"{bad}:8: extra: unknown section" in caught.value.report()
    assert "whatever" not in caught.value.report()  # the algorithm's own fields are the server's to check
    good = tmp_path / "plugin_ok.yaml"
    good.write_text("algorithm:\n  name: ServerPlugin\n  whatever: 1\nenvironment:\n  name: gsm8k\ntraining:\n  pop_size: 2\n")
    client.submit(good)
    assert json.loads(fake.requests[0].content)["manifest"] == good.read_text()


def test_submit_text_and_dicts(tmp_path):
    fake = FakeArena().on("POST", "/v1/experiments", httpx.Response(201, json=EXPERIMENT))
    client, _ = fake.client()
    client.submit_text("algorithm: {name: PPO}\nenvironment: {name: CartPole-v1}\n", "inline.yaml")
    client.submit({"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1"}})
    first, second = (json.loads(r.content) for r in fake.requests)
    assert first["filename"] == "inline.yaml" and first["manifest"].startswith("algorithm: {name: PPO}")
    assert second["filename"] == "manifest.json" and json.loads(second["manifest"])["algorithm"]["name"] == "PPO"


def test_experiment_ids_are_quoted_into_one_path_segment():
    fake = FakeArena().on("GET", "/v1/experiments/a%2Fb", httpx.Response(200, json=EXPERIMENT))
    client, _ = fake.client()
    with pytest.raises(ArenaNotFoundError):  # the fake routes on the decoded path: it never sees /a/b as a route
        client.status("a/b")
    assert fake.requests[0].url.raw_path == b"/v1/experiments/a%2Fb"
    with pytest.raises(ArenaConfigError):
        client.status("..")


def test_downloads_of_files_keep_their_name(tmp_path):
    fake = FakeArena().on("GET", "/v1/experiments/exp1/download",
                          httpx.Response(200, content=b"abc", headers={"content-type": "application/octet-stream"}))
    client, _ = fake.client()
    path = client.download("exp1", "checkpoints/step_100/attributes.json", tmp_path)
    assert path == tmp_path / "attributes.json" and path.read_bytes() == b"abc"
    assert os.listdir(tmp_path) == ["attributes.json"]


def test_the_key_stays_out_of_httpx_debug_logs_on_a_real_connection(caplog):
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"[]"
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    caplog.set_level(logging.DEBUG)
    try:
        with ArenaClient(api_key=KEY, url=f"http://127.0.0.1:{server.server_port}") as client:
            assert client.list_experiments() == []
    finally:
        server.shutdown()
        server.server_close()
    assert any("httpcore" in record.name or "httpx" in record.name for record in caplog.records)
    assert not [record for record in caplog.records if KEY in record.getMessage() or KEY[6:16] in record.getMessage()]
