"""ArenaClient against a real server (fixture `arena_server`): stop a running experiment, resume it
from its checkpoint, follow it through stopped -> queued -> running -> completed, and download a
run checkpoint folder."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agile_arena import ArenaClient, ArenaConflictError, LogEvent, StatusEvent

pytestmark = pytest.mark.slow  # a server process plus two worker starts

# Long enough to be stopped while it trains (a few thousand steps), short enough to finish quickly after.
PPO = """\
algorithm: {name: PPO, lr: 1.0e-3, learn_step: 64, batch_size: 32, update_epochs: 1}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 3072, evo_steps: 256, pop_size: 2, eval_loop: 1, eval_steps: 50, checkpoint_steps: 256, seed: 0}
network: {latent_dim: 8, encoder_config: {hidden_size: [8]}, head_config: {hidden_size: [8]}}
"""


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path, monkeypatch):
    for name in ("AGILE_ARENA_API_KEY", "ARENA_API_KEY", "AGILE_ARENA_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGILE_ARENA_CONFIG", str(tmp_path / "config" / "arena.json"))


def test_stop_resume_follow_and_download_a_checkpoint(arena_server, tmp_path):
    manifest = tmp_path / "ppo.yaml"
    manifest.write_text(PPO)
    with ArenaClient(api_key=arena_server.key, url=arena_server.url) as client:
        experiment_id = client.submit(manifest)["id"]
        deadline = time.monotonic() + 240
        while not client.checkpoints(experiment_id):  # training has started and saved a generation
            assert time.monotonic() < deadline, "no checkpoint within 240 s"
            assert client.status(experiment_id)["status"] in ("queued", "running"), client.status(experiment_id)
            time.sleep(0.5)

        stopped = client.stop(experiment_id)
        assert stopped["status"] == "stopped", stopped
        resumed = client.resume(experiment_id)
        assert resumed["status"] == "queued", resumed
        with pytest.raises(ArenaConflictError):
            client.resume(experiment_id)  # already queued (or running): only stopped jobs resume
        events = list(client.logs(experiment_id, follow=True))
        statuses = [e.status for e in events if isinstance(e, StatusEvent)]
        assert statuses[-1] == "completed", statuses
        offsets = [e.offset for e in events if isinstance(e, LogEvent)]
        assert offsets == sorted(set(offsets))

        runs = [c for c in client.checkpoints(experiment_id) if c["kind"] == "run"]
        assert runs
        folder = client.download(experiment_id, runs[-1]["path"], tmp_path / "dl")
        assert folder.parent == tmp_path / "dl" and folder.is_dir()
        assert any(path.is_file() for path in Path(folder).rglob("*"))
