"""Policy schema, `switchyard policy check`, and live reload (function, SIGHUP, file rename)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from gateway.routing.policy import Policy, PolicyError, load_policy, parse_policy
from gateway.routing.policy_watch import PolicyStore

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "deploy" / "policy.example.yaml"


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _replace_by_rename(path: Path, data: dict) -> None:
    """What editors do on save: write a new file beside it, then rename over the old one."""
    tmp = path.with_name(path.name + ".swp")
    _write(tmp, data)
    os.replace(tmp, path)


def _wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def _field_names(model: type[BaseModel]) -> set[str]:
    names = set()
    for name, info in model.model_fields.items():
        names.add(name)
        annotation = info.annotation
        for candidate in (annotation, *getattr(annotation, "__args__", ())):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                names |= _field_names(candidate)
    return names


def test_example_policy_is_valid_and_mentions_every_field():
    policy = load_policy(EXAMPLE)
    assert policy.engines.enabled() == ("raw", "mtp", "ddtree")
    text = EXAMPLE.read_text()
    from gateway.routing.policy import Prior, Rule, RuleMatch

    fields = _field_names(Policy) | _field_names(Prior) | _field_names(Rule) | _field_names(RuleMatch)
    missing = sorted(name for name in fields if f"{name}:" not in text)
    assert not missing, f"policy.example.yaml does not document: {missing}"
    # every documented line carries a comment or sits under one
    assert text.count("#") > 40


def test_defaults_without_a_file():
    policy = parse_policy("")
    assert policy == Policy()
    assert policy.prior("code", "raw") == (0.0, 1.0)
    accepted, cost = policy.prior("code", "ddtree")
    assert accepted > 0 and cost == policy.engines.ddtree.prior_cost


def test_priors_override_per_arm_and_keep_seeds_elsewhere():
    policy = parse_policy("priors:\n  prose:\n    ddtree: {accepted: 3.0, cost: 1.5}\n")
    assert policy.prior("prose", "ddtree") == (3.0, 1.5)
    assert policy.prior("prose", "mtp") == Policy().prior("prose", "mtp")


@pytest.mark.parametrize(
    "text, where",
    [
        ("colour: blue\n", "colour"),
        ("engines:\n  mtp: {enabled: true, turbo: 1}\n", "engines.mtp.turbo"),
        ("priors:\n  code:\n    mtp: {acepted: 0.5}\n", "priors.code.mtp.acepted"),
        ("rules:\n  - engine: raw\n    when: {class: code}\n", "rules.0.when.class"),
        ("monitor:\n  warm_up: 5\n", "monitor.warm_up"),
        ("state:\n  file: x.json\n", "state.file"),
    ],
)
def test_unknown_keys_are_rejected(text, where):
    with pytest.raises(PolicyError) as info:
        parse_policy(text)
    assert any(line.startswith(f"{where}:") and "Extra inputs" in line for line in info.value.errors), info.value.errors


def test_invalid_values_are_all_reported():
    text = (
        "engines:\n  raw: {enabled: false}\n  ddtree: {budget: 0}\n"
        "exploration: {kind: greedy, epsilon: 2}\npriors:\n  poetry: {mtp: {accepted: 1}}\n"
    )
    with pytest.raises(PolicyError) as info:
        parse_policy(text)
    joined = "\n".join(info.value.errors)
    for where in ("engines.raw.enabled", "engines.ddtree.budget", "exploration.kind", "exploration.epsilon", "priors.poetry"):
        assert where in joined


def test_rule_targeting_a_disabled_engine_is_rejected():
    with pytest.raises(PolicyError, match="disabled"):
        parse_policy("engines:\n  ddtree: {enabled: false}\nrules:\n  - engine: ddtree\n")


def test_yaml_syntax_error_and_non_mapping_are_policy_errors(tmp_path):
    with pytest.raises(PolicyError, match="YAML"):
        parse_policy("a: [")
    with pytest.raises(PolicyError, match="mapping"):
        parse_policy("- 1\n- 2\n")
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")


def test_store_refuses_to_start_on_an_invalid_file(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("bogus: 1\n")
    with pytest.raises(PolicyError):
        PolicyStore(path)


def test_reload_function_applies_valid_and_keeps_old_on_invalid(tmp_path):
    path = _write(tmp_path / "policy.yaml", {"quarantine_seconds": 10})
    store = PolicyStore(path)
    seen = []
    store.subscribe(seen.append)
    first = store.current()
    assert first.version == 1 and first.policy.quarantine_seconds == 10

    _write(path, {"quarantine_seconds": 20})
    result = store.reload("admin")
    assert result.ok and result.version == 2 and result.errors == []
    assert store.policy.quarantine_seconds == 20
    assert first.policy.quarantine_seconds == 10  # an admitted snapshot never changes
    assert [s.version for s in seen] == [2]

    path.write_text("quarantine_seconds: -1\nnope: 2\n")
    result = store.reload("admin")
    assert not result.ok and result.version == 2
    assert any("quarantine_seconds" in e for e in result.errors) and any("nope" in e for e in result.errors)
    assert store.policy.quarantine_seconds == 20
    counters = store.counters()
    assert counters["reload_successes"] == 1 and counters["reload_failures"] == 1
    assert counters["last_errors"] == result.errors and counters["last_failure_time"] is not None
    assert len(seen) == 1


def test_reload_without_a_file_is_a_reported_failure():
    store = PolicyStore()
    result = store.reload()
    assert not result.ok and "no policy file" in result.errors[0]


@pytest.mark.parametrize("with_watcher", [False, True])
def test_sighup_reloads(tmp_path, with_watcher):
    path = _write(tmp_path / "policy.yaml", {"queue": {"raw_above_depth": 1}})
    store = PolicyStore(path)
    previous = signal.getsignal(signal.SIGHUP)
    try:
        store.install_sighup_handler()
        if with_watcher:
            store.start_watching(interval=30.0)  # long poll: only the signal can wake it in time
        # rewrite in place keeping the size and mtime, so only the signal can explain a reload
        stat = path.stat()
        path.write_text(yaml.safe_dump({"queue": {"raw_above_depth": 7}}))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        os.kill(os.getpid(), signal.SIGHUP)
        assert _wait_for(lambda: store.policy.queue.raw_above_depth == 7)
        assert store.current().version == 2
    finally:
        store.stop_watching()
        signal.signal(signal.SIGHUP, previous)


def test_file_replaced_by_rename_is_picked_up(tmp_path):
    path = _write(tmp_path / "policy.yaml", {"exploration": {"kind": "none"}})
    store = PolicyStore(path)
    store.start_watching(interval=0.05)
    try:
        _replace_by_rename(path, {"exploration": {"kind": "epsilon", "epsilon": 0.2}})
        assert _wait_for(lambda: store.policy.exploration.kind == "epsilon")
        assert store.current().version == 2

        # an invalid save is rejected once, counted, and the policy stays
        path_text_before = store.policy
        _replace_by_rename(path, {"exploration": {"kind": "sometimes"}})
        assert _wait_for(lambda: store.reload_failures == 1)
        time.sleep(0.2)
        assert store.reload_failures == 1  # not retried while the file is unchanged
        assert store.policy is path_text_before

        # fixing the file recovers
        _replace_by_rename(path, {"exploration": {"kind": "thompson"}})
        assert _wait_for(lambda: store.policy.exploration.kind == "thompson")
        assert store.current().version == 3
    finally:
        store.stop_watching()


def test_deleted_file_keeps_policy_and_recreated_file_reloads(tmp_path):
    path = _write(tmp_path / "policy.yaml", {"quarantine_seconds": 5})
    store = PolicyStore(path)
    store.start_watching(interval=0.05)
    try:
        path.unlink()
        time.sleep(0.2)
        assert store.policy.quarantine_seconds == 5 and store.reload_failures == 0
        _write(path, {"quarantine_seconds": 6})
        assert _wait_for(lambda: store.policy.quarantine_seconds == 6)
    finally:
        store.stop_watching()


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "policy", "check", *args], capture_output=True, text=True, env=env, cwd=REPO
    )


def test_policy_check_cli(tmp_path):
    ok = _cli(str(EXAMPLE))
    assert ok.returncode == 0, ok.stderr
    assert "OK" in ok.stdout

    bad = tmp_path / "bad.yaml"
    bad.write_text("engines:\n  ddtree: {budget: many}\nextra_key: 1\n")
    result = _cli(str(bad))
    assert result.returncode == 1
    assert "engines.ddtree.budget" in result.stderr and "extra_key" in result.stderr
    assert "Traceback" not in result.stderr
