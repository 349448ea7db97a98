"""agile-arena installed alone (agile-core and httpx, no paradigm, no CLI, no server extra): ArenaClient
and ArenaTrainer import without torch, and a manifest whose paradigm is not installed here is checked
as far as core can and submitted."""

import os
import shutil
import subprocess

import pytest

from tests.core.isolated import install_alone

pytestmark = pytest.mark.slow

SCRIPT = """
import json, sys
import agile_arena
from agile_arena import ArenaClient, ArenaTrainer
from agile_core.trainer import Trainer
heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'starlette', 'uvicorn', 'agile_cli'))
assert not heavy, heavy
assert issubclass(ArenaTrainer, Trainer)

import httpx
from agile_core.errors import ManifestError
sent = []
def handler(request):
    sent.append(json.loads(request.content))
    return httpx.Response(201, json={"id": "e1", "status": "queued", "algorithm": "PPO"})
client = ArenaClient(api_key="arena_" + "x" * 43, url="http://127.0.0.1:8470", transport=httpx.MockTransport(handler))
manifest = "algorithm: {name: PPO, lr: 0.001}\\nenvironment: {name: CartPole-v1}\\ntraining: {pop_size: 2}\\n"
assert client.submit_text(manifest, "ppo.yaml")["id"] == "e1"  # PPO is not installed here: the server checks it
assert sent[0]["manifest"] == manifest
try:
    client.submit_text("algorithm: {name: PPO}\\nenvironment: {name: CartPole-v1}\\ntraining: {pop_size: 0}\\n", "bad.yaml")
except ManifestError as exc:
    assert "bad.yaml:3: training.pop_size" in str(exc), str(exc)
else:
    raise AssertionError("an invalid training section was sent")
assert len(sent) == 1
assert not [m for m in sys.modules if m.split('.')[0] == 'torch']
print('isolated-arena-ok')
"""


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv to build an isolated environment")
def test_agile_arena_alone_gives_the_client_and_trainer_without_torch(tmp_path):
    # Resolved like the other isolated installs (index allowed, versions pinned to the lock): an
    # offline resolve needs index metadata that only an earlier online resolve of httpx leaves in
    # the uv cache, so it passed or failed with the order the tests happened to run in.
    python, listed = install_alone(tmp_path, "agile-arena")
    names = {line.split()[0].lower() for line in listed.splitlines()[2:] if line.strip()}
    assert {"agile-arena", "agile-core", "httpx"} <= names
    for absent in ("agile-cli", "agile-onpolicy", "agile-offpolicy", "starlette", "uvicorn"):
        assert absent not in names, absent
    result = subprocess.run([str(python), "-c", SCRIPT], capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "isolated-arena-ok" in result.stdout
