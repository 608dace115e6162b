"""`switchyard service`: the launchd plist renders and validates on Linux (keys, types, absolute
paths), the systemd unit passes `systemd-analyze verify`, and install/uninstall/status/logs/reload
run the right launchctl/systemctl commands (recorded by stand-in tools on PATH)."""

from __future__ import annotations

import os
import plistlib
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli.service_files import (
    ServiceError,
    ServiceSpec,
    normalize_serve_args,
    render_plist,
    render_unit,
    systemd_quote,
    validate_plist,
)
from tests.ops_helpers import REPO, tool

PYTHON = Path(os.path.abspath(sys.executable))


@pytest.fixture()
def model_dir(tmp_path) -> Path:
    (tmp_path / "model").mkdir()
    return tmp_path / "model"


def _spec(home: Path, model_dir: Path, **kw) -> ServiceSpec:
    args = normalize_serve_args(["--model", str(model_dir), "--port", "8011", "--tree-budget", "4"])
    return ServiceSpec(PYTHON, args, home, **kw)


def test_plist_renders_with_absolute_paths_and_validates(tmp_path, model_dir):
    raw = render_plist(_spec(tmp_path, model_dir, extra_env={"PYTHONPATH": str(REPO)}))
    data = validate_plist(raw, tmp_path)
    assert data["Label"] == "com.switchyard.gateway"
    assert data["ProgramArguments"] == [str(PYTHON), "-m", "gateway.cli", "serve", "--model", str(model_dir),
                                        "--port", "8011", "--tree-budget", "4"]
    assert os.path.isabs(data["ProgramArguments"][0])
    assert data["RunAtLoad"] is True and data["KeepAlive"] == {"SuccessfulExit": False}
    assert isinstance(data["ThrottleInterval"], int) and data["ThrottleInterval"] >= 30
    assert isinstance(data["ExitTimeOut"], int) and data["ExitTimeOut"] > 15
    assert data["ProcessType"] == "Interactive"
    logs = tmp_path / "Library" / "Logs" / "switchyard"
    assert Path(data["StandardOutPath"]).parent == logs and Path(data["StandardErrorPath"]).parent == logs
    assert data["EnvironmentVariables"]["HF_HUB_OFFLINE"] == "1"
    assert data["EnvironmentVariables"]["PYTHONPATH"] == str(REPO)
    assert b"@" not in raw.replace(b"@PYTHON@", b"!")  # no placeholder left


@pytest.mark.parametrize("key, bad, message", [
    ("ProcessType", "Background", "ProcessType"),
    ("ThrottleInterval", 5, "ThrottleInterval"),
    ("ThrottleInterval", "30", "ThrottleInterval: expected int"),
    ("KeepAlive", True, "KeepAlive"),
    ("RunAtLoad", "yes", "RunAtLoad"),
    ("ExitTimeOut", 10, "ExitTimeOut"),
    ("StandardErrorPath", "/tmp/switchyard.log", "StandardErrorPath"),
    ("EnvironmentVariables", {"HF_HUB_OFFLINE": "0"}, "HF_HUB_OFFLINE"),
    ("ProgramArguments", ["python", "-m", "gateway.cli", "serve"], "absolute"),
    ("Label", None, "Label"),
])
def test_plist_validation_rejects_each_bad_field(tmp_path, model_dir, key, bad, message):
    data = plistlib.loads(render_plist(_spec(tmp_path, model_dir)))
    if bad is None:
        del data[key]
    else:
        data[key] = bad
    with pytest.raises(ServiceError, match=message):
        validate_plist(plistlib.dumps(data), tmp_path)


def test_serve_args_are_checked_and_made_absolute(tmp_path, model_dir):
    assert normalize_serve_args(["--model", "model", "--port", "9"], base=tmp_path) == (
        "--model", str(model_dir), "--port", "9")
    assert normalize_serve_args([f"--model={model_dir}"]) == (f"--model={model_dir}",)
    with pytest.raises(ServiceError, match="no such file"):
        normalize_serve_args(["--model", str(tmp_path / "absent")])
    with pytest.raises(ServiceError, match="invalid"):
        normalize_serve_args(["--no-such-option"])


def test_systemd_quoting():
    assert systemd_quote("/opt/venv/bin/python") == "/opt/venv/bin/python"
    assert systemd_quote("/Users/me/My Models/q") == '"/Users/me/My Models/q"'
    assert systemd_quote("50%") == "50%%"
    assert systemd_quote('a"b$c') == '"a\\"b$$c"'


def test_systemd_unit_passes_systemd_analyze_verify(tmp_path, model_dir):
    analyze = tool("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed (Debian: apt-get install systemd)")
    spaced = tmp_path / "my models"
    spaced.mkdir()
    spec = ServiceSpec(PYTHON, normalize_serve_args(["--model", str(spaced), "--port", "8011"]), tmp_path,
                       extra_env={"PYTHONPATH": str(REPO)})
    unit = render_unit(spec)
    assert f'ExecStart={PYTHON} -m gateway.cli serve --model "{spaced}" --port 8011' in unit
    assert "@" not in unit
    path = tmp_path / "switchyard.service"
    path.write_text(unit)
    result = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr
    # the check can fail: a misspelt setting is reported
    path.write_text(unit.replace("Restart=on-failure", "Restart=sometimes"))
    bad = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert "restart specifier" in bad.stdout + bad.stderr


def _stand_in_tools(bin_dir: Path, log: Path) -> None:
    """launchctl/systemctl/journalctl/tail that append their argv to `log` and succeed."""
    bin_dir.mkdir()
    for name in ("launchctl", "systemctl", "journalctl", "tail"):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)


def _cli(home: Path, bin_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "gateway.cli", "service", *args], cwd=home, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("platform", ["launchd", "systemd"])
def test_service_commands_end_to_end(tmp_path, model_dir, platform):
    home, bin_dir, log = tmp_path / "home", tmp_path / "bin", tmp_path / "calls.log"
    home.mkdir()
    _stand_in_tools(bin_dir, log)
    uid = os.getuid()
    run = lambda *a: _cli(home, bin_dir, *a, "--platform", platform)  # noqa: E731

    dry = _cli(home, bin_dir, "install", "--platform", platform, "--dry-run", "--", "--model", str(model_dir))
    assert dry.returncode == 0, dry.stderr
    assert not log.exists() and not (home / ".switchyard").exists()  # a dry run changes nothing

    installed = _cli(home, bin_dir, "install", "--platform", platform, "--", "--model", str(model_dir), "--port", "8012")
    assert installed.returncode == 0, installed.stderr
    for command in ("status", "reload", "logs", "uninstall"):
        assert run(command).returncode == 0
    calls = log.read_text().splitlines()
    if platform == "launchd":
        plist = home / "Library" / "LaunchAgents" / "com.switchyard.gateway.plist"
        assert not plist.exists()  # removed by uninstall
        service = f"gui/{uid}/com.switchyard.gateway"
        assert calls == [
            f"launchctl bootout {service}", f"launchctl bootstrap gui/{uid} {plist}", f"launchctl enable {service}",
            f"launchctl print {service}", f"launchctl kill SIGHUP {service}",
            f"tail -n 100 {home}/Library/Logs/switchyard/switchyard.err.log "
            f"{home}/Library/Logs/switchyard/switchyard.out.log",
            f"launchctl bootout {service}",
        ]
        assert (home / "Library" / "Logs" / "switchyard").is_dir()
    else:
        assert not (home / ".config" / "systemd" / "user" / "switchyard.service").exists()
        assert calls == [
            "systemctl --user daemon-reload", "systemctl --user enable --now switchyard.service",
            "systemctl --user status switchyard.service --no-pager", "systemctl --user reload switchyard.service",
            "journalctl --user -u switchyard.service -n 100 --no-pager",
            "systemctl --user disable --now switchyard.service", "systemctl --user daemon-reload",
        ]
    assert (home / ".switchyard").is_dir()


def test_install_writes_the_validated_file(tmp_path, model_dir):
    home, bin_dir, log = tmp_path / "home", tmp_path / "bin", tmp_path / "calls.log"
    home.mkdir()
    _stand_in_tools(bin_dir, log)
    assert _cli(home, bin_dir, "install", "--platform", "launchd", "--", "--model", str(model_dir)).returncode == 0
    data = validate_plist((home / "Library" / "LaunchAgents" / "com.switchyard.gateway.plist").read_bytes(), home)
    assert data["ProgramArguments"][4:] == ["--model", str(model_dir)]
    bad = _cli(home, bin_dir, "install", "--platform", "launchd", "--", "--model", str(tmp_path / "absent"))
    assert bad.returncode == 2 and "no such file" in bad.stderr
