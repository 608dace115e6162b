"""Render and validate the service definitions: the launchd LaunchAgent plist (macOS) and the
systemd user unit (Linux), from the templates in deploy/. Pure functions: nothing is installed here."""

from __future__ import annotations

import os
import plistlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.config import GatewayConfig
from gateway.http.server import hard_timeout

REPO_ROOT = Path(__file__).resolve().parents[2]
PLIST_TEMPLATE = REPO_ROOT / "deploy" / "launchd" / "com.switchyard.gateway.plist"
UNIT_TEMPLATE = REPO_ROOT / "deploy" / "systemd" / "switchyard.service"
LABEL = "com.switchyard.gateway"
UNIT_NAME = "switchyard.service"
# `switchyard serve` options that take a path: made absolute (launchd starts jobs in /) and checked.
PATH_OPTIONS = ("--model", "--draft", "--policy", "--mtp-weights")
MIN_THROTTLE_SECONDS = 30


class ServiceError(ValueError):
    """A service definition cannot be rendered or is invalid; the message lists every problem."""


@dataclass(frozen=True)
class ServiceSpec:
    python: Path                     # the virtualenv's python, absolute
    serve_args: tuple[str, ...]      # options for `switchyard serve`, paths already absolute
    home: Path
    label: str = LABEL
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. PYTHONPATH for a source checkout

    @property
    def log_dir(self) -> Path:
        return self.home / "Library" / "Logs" / "switchyard"

    @property
    def state_dir(self) -> Path:
        return self.home / ".switchyard"


def normalize_serve_args(args: list[str], base: Path | None = None) -> tuple[str, ...]:
    """Check the options with the real `serve` parser and make path options absolute."""
    from gateway.cli import build_parser  # late: cli imports this module's command

    try:
        build_parser().parse_args(["serve", *args])
    except SystemExit:
        raise ServiceError(f"invalid `switchyard serve` options: {' '.join(args)!r} (see switchyard serve --help)")
    base = base or Path.cwd()
    out: list[str] = []
    problems: list[str] = []
    expect_path: str | None = None
    for arg in args:
        if expect_path is not None:
            arg = _absolute(expect_path, arg, base, problems)
            expect_path = None
        elif arg in PATH_OPTIONS:
            expect_path = arg
        elif "=" in arg and arg.split("=", 1)[0] in PATH_OPTIONS:
            option, value = arg.split("=", 1)
            arg = f"{option}={_absolute(option, value, base, problems)}"
        out.append(arg)
    if problems:
        raise ServiceError("; ".join(problems))
    return tuple(out)


def _absolute(option: str, value: str, base: Path, problems: list[str]) -> str:
    path = (base / Path(value).expanduser()).resolve()
    if not path.exists():
        problems.append(f"{option} {value}: no such file or directory ({path})")
    return str(path)


# --- launchd ----------------------------------------------------------------------------------
def _fill(value: Any, spec: ServiceSpec) -> Any:
    if isinstance(value, str):
        return (value.replace("@PYTHON@", str(spec.python)).replace("@HOME@", str(spec.home))
                .replace("@LABEL@", spec.label))
    if isinstance(value, list):
        out: list[Any] = []
        for item in value:
            out.extend(spec.serve_args if item == "@SERVE_ARGS@" else [_fill(item, spec)])
        return out
    if isinstance(value, dict):
        return {key: _fill(item, spec) for key, item in value.items()}
    return value


def render_plist(spec: ServiceSpec, template: Path = PLIST_TEMPLATE) -> bytes:
    data = _fill(plistlib.loads(template.read_bytes()), spec)
    data["EnvironmentVariables"].update(spec.extra_env)
    return plistlib.dumps(data, sort_keys=False)


def validate_plist(raw: bytes, home: Path) -> dict[str, Any]:
    """Parse and check a rendered plist: required keys, types, absolute paths. Raises ServiceError."""
    try:
        data = plistlib.loads(raw)
    except Exception as exc:  # plistlib raises several types for malformed input
        raise ServiceError(f"not a valid plist: {exc}") from None
    problems: list[str] = []

    def need(key: str, kind: type) -> Any:
        value = data.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            problems.append(f"{key}: expected {kind.__name__}, got {type(value).__name__}")
            return None
        return value

    label = need("Label", str)
    if label is not None and (not label or any(c.isspace() for c in label)):
        problems.append("Label: must be a non-empty reverse-DNS name without spaces")
    program = need("ProgramArguments", list)
    if program is not None:
        if not program or not all(isinstance(a, str) for a in program):
            problems.append("ProgramArguments: must be a non-empty list of strings")
        elif not os.path.isabs(program[0]):
            problems.append(f"ProgramArguments[0]: the python must be an absolute path, got {program[0]!r}")
        elif program[1:4] != ["-m", "gateway.cli", "serve"]:
            problems.append("ProgramArguments: expected <python> -m gateway.cli serve ...")
    if need("RunAtLoad", bool) is False:
        problems.append("RunAtLoad: must be true")
    keep_alive = data.get("KeepAlive")
    if not (isinstance(keep_alive, dict) and (keep_alive.get("SuccessfulExit") is False or keep_alive.get("Crashed") is True)):
        problems.append("KeepAlive: expected {SuccessfulExit: false} (restart on crash only)")
    throttle = need("ThrottleInterval", int)
    if throttle is not None and throttle < MIN_THROTTLE_SECONDS:
        problems.append(f"ThrottleInterval: at least {MIN_THROTTLE_SECONDS} s, got {throttle}")
    exit_timeout = need("ExitTimeOut", int)
    drain = hard_timeout(GatewayConfig().shutdown_timeout_seconds)
    if exit_timeout is not None and exit_timeout <= drain:
        problems.append(f"ExitTimeOut: must exceed the graceful shutdown ({drain:.0f} s), got {exit_timeout}")
    if need("ProcessType", str) not in (None, "Interactive"):
        problems.append("ProcessType: must be Interactive (Background throttles Metal)")
    logs = home / "Library" / "Logs" / "switchyard"
    for key in ("StandardOutPath", "StandardErrorPath"):
        path = need(key, str)
        if path is not None and (not os.path.isabs(path) or Path(path).parent != logs):
            problems.append(f"{key}: expected a file in {logs}, got {path!r}")
    directory = need("WorkingDirectory", str)
    if directory is not None and not os.path.isabs(directory):
        problems.append(f"WorkingDirectory: must be absolute, got {directory!r}")
    env = need("EnvironmentVariables", dict)
    if env is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            problems.append("EnvironmentVariables: keys and values must be strings")
        if env.get("HF_HUB_OFFLINE") != "1":
            problems.append("EnvironmentVariables: HF_HUB_OFFLINE must be \"1\"")
    leftovers = [s for s in _strings(data) if "@" in s and s.strip("@").isupper()]
    if leftovers:
        problems.append(f"unfilled placeholders: {leftovers}")
    if problems:
        raise ServiceError("; ".join(problems))
    return data


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    return []


# --- systemd ----------------------------------------------------------------------------------
def systemd_quote(arg: str) -> str:
    """One ExecStart word: `%` escaped as `%%` (specifiers), double-quoted when needed."""
    arg = arg.replace("%", "%%")
    if arg and not any(c in arg for c in ' \t"\'\\;$'):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$") + '"'


def render_unit(spec: ServiceSpec, template: Path = UNIT_TEMPLATE) -> str:
    text = template.read_text()
    extra = "\n".join(f"Environment={systemd_quote(f'{k}={v}')}" for k, v in spec.extra_env.items())
    return (text.replace("@PYTHON@", systemd_quote(str(spec.python)))
            .replace("@SERVE_ARGS@", " ".join(systemd_quote(a) for a in spec.serve_args))
            .replace("@EXTRA_ENV@\n", extra + "\n" if extra else "")
            .replace("@DOCS@", str(REPO_ROOT / "docs" / "operations.md")))


def describe_command(argv: list[str]) -> str:
    return shlex.join(argv)
