"""Arena server queueing with --slots 1, and the NDJSON log stream (status events, byte offsets)."""

from __future__ import annotations

import json

import httpx

from tests.arena.conftest import tiny_ppo_manifest, wait_for

MAX_STEPS = 1024


def events(response: httpx.Response) -> list[dict]:
    return [json.loads(line) for line in response.text.splitlines()]


def test_one_slot_runs_jobs_one_at_a_time_and_logs_stream_with_offsets(arena_server):
    http = httpx.Client(base_url=arena_server.url, headers={"Authorization": f"Bearer {arena_server.key}"},
                        timeout=300)
    manifest = tiny_ppo_manifest(max_steps=MAX_STEPS)
    first = http.post("/v1/experiments", json={"manifest": manifest, "experiment_name": "first"}).json()["id"]
    second = http.post("/v1/experiments", json={"manifest": manifest, "experiment_name": "second"}).json()["id"]
    third = http.post("/v1/experiments", json={"manifest": manifest, "experiment_name": "third"}).json()["id"]
    assert [job["id"] for job in http.get("/v1/experiments").json()] == [third, second, first]  # newest first
    wait_for(lambda: http.get(f"/v1/experiments/{first}").json()["status"] == "running", 60, "the first to start")
    assert http.get("/v1/resources").json() == [{"id": "local", "slots": 1, "running": 1, "queued": 2}]

    stopped = http.post(f"/v1/experiments/{third}/stop").json()  # stopping a queued job: it never runs
    assert stopped["status"] == "stopped" and stopped["started_at"] is None
    resumed = http.post(f"/v1/experiments/{third}/resume").json()  # it never started: queued again, from scratch
    assert resumed["status"] == "queued" and resumed["started_at"] is None, resumed
    assert http.post(f"/v1/experiments/{third}/stop").json()["status"] == "stopped"  # still behind the others
    refused = http.delete(f"/v1/experiments/{first}")  # running: stop it first
    assert refused.status_code == 409 and f"agile arena stop {first}" in refused.json()["message"]

    # follow the first job's log to its end, checking on the way that the second waits for it
    statuses, lines, offsets = [], [], []
    with http.stream("GET", f"/v1/experiments/{first}/logs", params={"follow": "true"}) as stream:
        assert stream.headers["content-type"].startswith("application/x-ndjson")
        for raw in stream.iter_lines():
            event = json.loads(raw)
            if event["type"] == "status":
                statuses.append(event["status"])
            elif event["type"] == "log":
                lines.append(event["line"])
                offsets.append(event["offset"])
                # the second waits for the first (the stream may lag behind the job under load)
                if event["line"].startswith("generation") and \
                        http.get(f"/v1/experiments/{second}").json()["status"] != "queued":
                    assert http.get(f"/v1/experiments/{first}").json()["status"] == "completed"
    assert statuses[0] == "running" and statuses[-1] == "completed", statuses
    assert any(line.startswith("agile arena worker: done") for line in lines), lines
    log_path = arena_server.data_dir / "jobs" / first / "log.txt"
    assert offsets == sorted(offsets) and offsets[-1] == log_path.stat().st_size

    # reconnecting at an offset gives exactly the rest of the log
    middle = len(offsets) // 2
    rest = events(http.get(f"/v1/experiments/{first}/logs", params={"offset": offsets[middle]}))
    assert rest[0] == {"type": "status", "status": "completed"}
    assert [e["line"] for e in rest[1:]] == lines[middle + 1:]
    assert http.get(f"/v1/experiments/{first}/logs", params={"offset": 10**9}).status_code == 400

    done = [wait_for(lambda j=job: (x := http.get(f"/v1/experiments/{j}").json())["status"] not in
                     ("queued", "running") and x, 300, f"job {job} to finish") for job in (first, second)]
    assert [job["status"] for job in done] == ["completed", "completed"], done
    assert done[1]["started_at"] >= done[0]["finished_at"]  # the second waited for the slot
    for job in done:  # an uninterrupted run ends at max_steps per agent (test_server_fault relies on it)
        summary = json.loads((arena_server.data_dir / "jobs" / job["id"] / "run" / "summary.json").read_text())
        assert summary["total_steps"] == MAX_STEPS * 2
    assert http.get(f"/v1/experiments/{third}").json()["status"] == "stopped"
    assert not (arena_server.data_dir / "jobs" / third / "run").exists()
    assert http.delete(f"/v1/experiments/{third}").json() == {"id": third, "deleted": True}
    assert not (arena_server.data_dir / "jobs" / third).exists()
    assert http.get(f"/v1/experiments/{third}").status_code == 404
    assert [job["id"] for job in http.get("/v1/experiments").json()] == [second, first]
    http.close()
