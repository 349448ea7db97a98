"""ArenaClient against `httpx.MockTransport`: following a log through a long server outage (a time
budget, not a count of retries), `login()` checking and storing a key, `delete()`, and ArenaTrainer
taking the server URL from the environment or the credentials file when only a key is given."""

from __future__ import annotations

import json
import stat
import warnings
from pathlib import Path

import httpx
import pytest

from agile_arena import (
    ArenaAuthError,
    ArenaClient,
    ArenaConnectionError,
    ArenaServerError,
    ArenaTrainer,
    LogEvent,
)
from agile_arena.config import save_credentials
from agile_core.errors import RunWarning
from tests.arena.test_client import EXPERIMENT, KEY, PPO, FakeArena, ndjson

pytestmark = pytest.mark.usefixtures("isolated_settings")


class Clock:
    """A clock that moves only when the client sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def following_client(fake: FakeArena, **options: object) -> tuple[ArenaClient, Clock]:
    clock = Clock()
    client = ArenaClient(api_key=KEY, url="http://127.0.0.1:8470", transport=httpx.MockTransport(fake.handler),
                         sleep=clock.sleep, clock=clock, **options)  # type: ignore[arg-type]
    return client, clock


RUNNING = {"type": "status", "status": "running"}


# ------------------------------------------------------------------------------ following
def test_following_outlasts_a_server_that_is_gone_for_minutes():
    refused = httpx.ConnectError("connection refused")
    bad_gateway = httpx.Response(502, text="bad gateway")  # a reverse proxy while the server restarts
    outage = [refused] * 40 + [bad_gateway] * 10
    fake = FakeArena().on("GET", "/v1/experiments/exp1/logs",
                          ndjson(RUNNING, {"type": "log", "offset": 3, "line": "ab"}, drop=True),
                          *outage,
                          ndjson(RUNNING, {"type": "log", "offset": 7, "line": "cd"},
                                 {"type": "status", "status": "completed"}))
    client, clock = following_client(fake)
    events = list(client.logs("exp1", follow=True))
    assert [e for e in events if isinstance(e, LogEvent)] == [LogEvent("ab", 3), LogEvent("cd", 7)]
    assert 60 < clock.now < client.reconnect_window  # far longer than one round of retries
    assert fake.calls("GET", "/v1/experiments/exp1/logs")[-1].url.params["offset"] == "3"
    assert max(clock.pauses) == client.max_backoff  # capped backoff, never a longer pause


def test_following_gives_up_once_the_server_was_unreachable_for_the_whole_window():
    fake = FakeArena().on("GET", "/v1/experiments/exp1/logs",
                          ndjson(RUNNING, {"type": "log", "offset": 3, "line": "ab"}, drop=True),
                          httpx.ConnectError("connection refused"))
    client, clock = following_client(fake, reconnect_window=120.0, max_backoff=8.0)
    with pytest.raises(ArenaConnectionError) as caught:
        list(client.logs("exp1", follow=True))
    assert 120 <= clock.now <= 120 + 4 * 8 + 30  # the window, plus at most one more round of attempts
    assert "--offset 3" in caught.value.message and "agile arena logs exp1 --follow" in caught.value.message
    assert KEY not in caught.value.message


def test_a_server_that_answers_restarts_the_window():
    """A stream that keeps ending (an idle proxy cutting it) is reopened for as long as the server answers."""
    quiet = [ndjson(RUNNING)] * 60
    fake = FakeArena().on("GET", "/v1/experiments/exp1/logs", *quiet,
                          ndjson({"type": "status", "status": "completed"}))
    client, clock = following_client(fake, reconnect_window=30.0)
    events = list(client.logs("exp1", follow=True))
    assert events[-1].status == "completed"  # type: ignore[union-attr]
    assert clock.now > 30.0


def test_without_follow_a_server_error_is_not_waited_for():
    fake = FakeArena().on("GET", "/v1/experiments/exp1/logs", httpx.Response(503, text="busy"))
    client, _ = following_client(fake, retries=1)
    with pytest.raises(ArenaServerError):
        list(client.logs("exp1"))
    assert len(fake.requests) == 2


def test_the_window_is_configurable_and_checked():
    client = ArenaClient(api_key=KEY, reconnect_window=900.0)
    assert client.reconnect_window == 900.0
    with pytest.raises(ValueError, match="reconnect_window"):
        ArenaClient(api_key=KEY, reconnect_window=-1.0)


# ------------------------------------------------------------------------------ login
def test_login_checks_the_key_then_stores_it_with_the_url(tmp_path):
    fake = FakeArena().on("GET", "/v1/experiments", httpx.Response(200, json=[]))
    client = ArenaClient(url="http://127.0.0.1:8470", transport=httpx.MockTransport(fake.handler))
    assert not client.has_api_key
    path = client.login(KEY)
    assert path == tmp_path / "config" / "arena.json"
    assert json.loads(path.read_text()) == {"url": "http://127.0.0.1:8470", "api_key": KEY}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert client.has_api_key and fake.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert ArenaClient().has_api_key  # a new client finds the stored key
    assert KEY not in repr(client)


def test_login_without_a_key_asks_for_it_hidden(monkeypatch, tmp_path):
    import getpass

    prompts: list[str] = []
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": (prompts.append(prompt), f" {KEY}\n")[1])
    fake = FakeArena().on("GET", "/v1/experiments", httpx.Response(200, json=[]))
    client = ArenaClient(url="http://127.0.0.1:8470", transport=httpx.MockTransport(fake.handler))
    assert client.login(store=False) is None
    assert prompts == ["Arena API key: "] and client.has_api_key
    assert not (tmp_path / "config" / "arena.json").exists()


def test_a_refused_key_is_neither_stored_nor_kept(tmp_path):
    fake = FakeArena().on("GET", "/v1/experiments", httpx.Response(401, json={"error": "unauthorized",
                                                                              "message": "invalid API key"}))
    client = ArenaClient(url="http://127.0.0.1:8470", transport=httpx.MockTransport(fake.handler))
    wrong = "arena_" + "w" * 43
    with pytest.raises(ArenaAuthError, match="refused this API key; nothing was stored") as caught:
        client.login(wrong)
    assert wrong not in caught.value.message
    assert not client.has_api_key and not (tmp_path / "config" / "arena.json").exists()
    with pytest.raises(ArenaAuthError, match="no API key"):
        client.login("   ")


# ------------------------------------------------------------------------------ delete
def test_delete_is_sent_once():
    fake = FakeArena().on("DELETE", "/v1/experiments/exp1", httpx.Response(500), httpx.Response(200, json={}))
    client = ArenaClient(api_key=KEY, url="http://127.0.0.1:8470", transport=httpx.MockTransport(fake.handler),
                         sleep=lambda s: None)
    with pytest.raises(ArenaServerError):
        client.delete("exp1")
    assert len(fake.requests) == 1
    fake.on("DELETE", "/v1/experiments/exp1", httpx.Response(200, json={"id": "exp1", "deleted": True}))
    assert client.delete("exp1") == {"id": "exp1", "deleted": True}


# ------------------------------------------------------------------------------ ArenaTrainer
def test_a_trainer_given_only_a_key_takes_the_url_from_the_credentials_file():
    save_credentials("https://arena.example.com", "arena_" + "s" * 43)
    trainer = ArenaTrainer.from_manifest(PPO, api_key=KEY)
    assert trainer.client.url == "https://arena.example.com"
    assert trainer.client._api_key == KEY  # the key given, not the stored one


def test_a_trainer_given_only_a_key_takes_the_url_from_the_environment(monkeypatch):
    save_credentials("https://arena.example.com", None)
    monkeypatch.setenv("AGILE_ARENA_URL", "https://other.example.com")
    assert ArenaTrainer.from_manifest(PPO, api_key=KEY).client.url == "https://other.example.com"
    assert ArenaTrainer.from_manifest(PPO, api_key=KEY, url="http://127.0.0.1:9").client.url == "http://127.0.0.1:9"


def test_more_than_one_node_is_a_warning_and_the_job_is_sent():
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(201, json=EXPERIMENT)

    client = ArenaClient(api_key=KEY, url="http://127.0.0.1:8470", transport=httpx.MockTransport(handler))
    trainer = ArenaTrainer("PPO", "CartPole-v1", client=client)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert trainer.train(num_nodes=2) == EXPERIMENT
    assert len(requests) == 1
    assert [str(w.message) for w in caught if issubclass(w.category, RunWarning)] == [
        "num_nodes=2: this Arena server trains each experiment on one node; the job runs on one node"]
    assert caught[-1].filename == __file__  # points at the caller


def test_the_trainer_needs_no_local_file_for_its_url(tmp_path):
    assert not Path(tmp_path / "config" / "arena.json").exists()
    assert ArenaTrainer.from_manifest(PPO, api_key=KEY).client.url == "http://127.0.0.1:8470"
