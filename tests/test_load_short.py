"""The load script's short run in CI: `switchyard serve` over the tiny checkpoint (all three engines),
32 streaming clients for 20 s with random disconnects (bench/load.py; its long run is in docs/load.md)."""

from __future__ import annotations

import json

from bench.load import main


def test_short_load_run_holds_every_check(tiny_target, tiny_drafter, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"state: {{path: {tmp_path / 'state.json'}, persist_interval_seconds: 2}}\n")
    out = tmp_path / "load.json"
    code = main(["--serve", "--model", str(tiny_target), "--draft", str(tiny_drafter), "--policy", str(policy),
                 "--clients", "32", "--duration", "20", "--max-queue", "16", "--json", str(out)])
    summary = json.loads(out.read_text())
    assert code == 0 and summary["ok"], (summary["violations"], "\n".join(summary.get("server_log_errors", [])))
    client, server = summary["client"], summary["server"]
    assert client["completed"] > 20 and client["disconnected"] > 0
    assert client["rejected_429"] > 0                          # 32 clients > 1 running + 16 queued
    assert set(client["statuses"]) <= {"200", "429"}
    assert server["statuses"].get("499", 0) > 0                 # the server saw the disconnects
    assert server["finish_reasons"].get("cancelled", 0) > 0 and not server["finish_reasons"].get("error")
    assert summary["server_exit_code"] == 0
    assert summary["memory"]["rss"] is not None and summary["memory"]["mlx_active"] is not None
    probe = summary["disconnect_probe"]
    assert probe["cut_mid_stream"] and probe["steps_beyond_frames_read"] <= 4
    assert (tmp_path / "state.json").exists()                  # the monitor state was saved on SIGTERM
