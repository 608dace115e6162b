"""`switchyard service install|uninstall|status|logs|reload`: run the gateway as a launchd
LaunchAgent (macOS) or a systemd user service (Linux).

  switchyard service install -- --model ~/models/Qwen3.6-27B-4bit --draft ~/models/dflash --policy ~/policy.yaml

Everything after `--` goes to `switchyard serve` (checked by its parser; paths made absolute).
--dry-run prints the rendered file and the commands instead of running them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .service_files import (
    LABEL,
    REPO_ROOT,
    UNIT_NAME,
    ServiceError,
    ServiceSpec,
    describe_command,
    normalize_serve_args,
    render_plist,
    render_unit,
    validate_plist,
)

EXIT_INVALID = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("service", help="run the gateway as a launchd (macOS) / systemd user (Linux) service")
    sub = p.add_subparsers(dest="service_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--platform", choices=["launchd", "systemd"], default=default_platform(),
                        help="service manager (default: %(default)s, from this OS)")
    common.add_argument("--label", default=LABEL, help="launchd job label (default: %(default)s)")
    common.add_argument("--dry-run", action="store_true", help="print what would be written and run, change nothing")
    install = sub.add_parser("install", parents=[common], help="render, validate, install and start the service")
    install.add_argument("--python", default=None,
                         help="virtualenv python to run (default: this one, %s)" % sys.executable)
    install.add_argument("serve_args", nargs=argparse.REMAINDER, help="-- then options for `switchyard serve`")
    sub.add_parser("uninstall", parents=[common], help="stop the service and remove its definition")
    status = sub.add_parser("status", parents=[common], help="service manager status and GET /health")
    status.add_argument("--url", default="http://127.0.0.1:8000/health", help="health URL (default: %(default)s)")
    logs = sub.add_parser("logs", parents=[common], help="show the service's logs")
    logs.add_argument("-n", "--lines", type=int, default=100)
    logs.add_argument("-f", "--follow", action="store_true")
    sub.add_parser("reload", parents=[common], help="reload the router policy (SIGHUP)")
    p.set_defaults(func=run)


def default_platform() -> str:
    return "launchd" if sys.platform == "darwin" else "systemd"


@dataclass
class Plan:
    """What a subcommand does, so --dry-run can print exactly that."""

    mkdirs: list[Path] = field(default_factory=list)
    writes: list[tuple[Path, bytes]] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    removes: list[Path] = field(default_factory=list)
    optional: set[int] = field(default_factory=set)  # indexes of commands whose failure is fine

    def execute(self, dry_run: bool) -> int:
        for path in self.mkdirs:
            print(f"mkdir -p {path}")
            if not dry_run:
                path.mkdir(parents=True, exist_ok=True)
        for path, content in self.writes:
            print(f"write {path} ({len(content)} bytes)")
            if dry_run:
                print(content.decode())
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
        for index, argv in enumerate(self.commands):
            print(f"$ {describe_command(argv)}", flush=True)
            if dry_run:
                continue
            rc = subprocess.run(argv).returncode
            if rc != 0 and index not in self.optional:
                print(f"switchyard service: command failed with exit code {rc}", file=sys.stderr)
                return rc
        for path in self.removes:
            print(f"rm {path}")
            if not dry_run:
                path.unlink(missing_ok=True)
        return 0


def _home() -> Path:
    return Path.home()


def _launchd_domain() -> str:
    return f"gui/{os.getuid()}"


def plist_path(label: str) -> Path:
    return _home() / "Library" / "LaunchAgents" / f"{label}.plist"


def unit_path() -> Path:
    return _home() / ".config" / "systemd" / "user" / UNIT_NAME


def build_spec(python: str | None, serve_args: list[str], label: str) -> ServiceSpec:
    python_path = Path(os.path.abspath(python or sys.executable))  # keep the venv symlink: do not resolve()
    if not python_path.is_file() or not os.access(python_path, os.X_OK):
        raise ServiceError(f"--python {python_path}: not an executable file")
    args = list(serve_args[1:] if serve_args[:1] == ["--"] else serve_args)
    return ServiceSpec(python_path, normalize_serve_args(args), _home(), label, _extra_env(python_path))


def _extra_env(python: Path) -> dict[str, str]:
    """PYTHONPATH=<checkout> when the venv cannot import the gateway on its own (not pip-installed)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    check = subprocess.run([str(python), "-c", "import gateway.cli"], cwd="/", env=env, capture_output=True)
    return {} if check.returncode == 0 else {"PYTHONPATH": str(REPO_ROOT)}


def verify_unit(text: str) -> None:
    """`systemd-analyze verify` on the rendered unit when the tool exists; warnings count as errors."""
    tool = _which("systemd-analyze")
    if tool is None:
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / UNIT_NAME
        path.write_text(text)
        result = subprocess.run([tool, "verify", str(path)], capture_output=True, text=True, timeout=60)
    messages = (result.stdout + result.stderr).strip()
    if result.returncode != 0 or messages:
        raise ServiceError(f"systemd-analyze verify: {messages or f'exit code {result.returncode}'}")


def _which(name: str) -> str | None:
    import shutil

    return shutil.which(name) or shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")


def install_plan(args: argparse.Namespace) -> Plan:
    spec = build_spec(args.python, args.serve_args, args.label)
    plan = Plan(mkdirs=[spec.state_dir])
    if args.platform == "launchd":
        raw = render_plist(spec)
        validate_plist(raw, spec.home)
        target = plist_path(args.label)
        service = f"{_launchd_domain()}/{args.label}"
        plan.mkdirs.append(spec.log_dir)
        plan.writes.append((target, raw))
        plan.commands += [["launchctl", "bootout", service], ["launchctl", "bootstrap", _launchd_domain(), str(target)],
                          ["launchctl", "enable", service]]
        plan.optional.add(0)  # bootout fails when it was not loaded: fine
    else:
        text = render_unit(spec)
        verify_unit(text)
        plan.writes.append((unit_path(), text.encode()))
        plan.commands += [["systemctl", "--user", "daemon-reload"],
                          ["systemctl", "--user", "enable", "--now", UNIT_NAME]]
    return plan


def plan_for(args: argparse.Namespace) -> Plan:
    launchd = args.platform == "launchd"
    service = f"{_launchd_domain()}/{args.label}"
    command = args.service_command
    if command == "install":
        return install_plan(args)
    if command == "uninstall":
        if launchd:
            return Plan(commands=[["launchctl", "bootout", service]], removes=[plist_path(args.label)], optional={0})
        return Plan(commands=[["systemctl", "--user", "disable", "--now", UNIT_NAME],
                              ["systemctl", "--user", "daemon-reload"]], removes=[unit_path()], optional={0})
    if command == "status":
        return Plan(commands=[["launchctl", "print", service] if launchd
                              else ["systemctl", "--user", "status", UNIT_NAME, "--no-pager"]], optional={0})
    if command == "logs":
        if launchd:
            logs = _home() / "Library" / "Logs" / "switchyard"
            return Plan(commands=[["tail", "-n", str(args.lines), *(["-F"] if args.follow else []),
                                   str(logs / "switchyard.err.log"), str(logs / "switchyard.out.log")]])
        return Plan(commands=[["journalctl", "--user", "-u", UNIT_NAME, "-n", str(args.lines), "--no-pager",
                               *(["-f"] if args.follow else [])]])
    if command == "reload":
        return Plan(commands=[["launchctl", "kill", "SIGHUP", service] if launchd
                              else ["systemctl", "--user", "reload", UNIT_NAME]])
    raise ServiceError(f"unknown service command {command!r}")


def _health(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return f"health: {response.status} {response.read(300).decode(errors='replace')}"
    except Exception as exc:  # noqa: BLE001 - status must report, not crash
        return f"health: unreachable ({exc})"


def run(args: argparse.Namespace) -> int:
    try:
        plan = plan_for(args)
    except ServiceError as exc:
        print(f"switchyard service: {exc}", file=sys.stderr)
        return EXIT_INVALID
    rc = plan.execute(args.dry_run)
    if args.service_command == "status" and not args.dry_run:
        print(_health(args.url))
    if args.service_command == "install" and args.platform == "systemd" and not args.dry_run and rc == 0:
        print("tip: `loginctl enable-linger $USER` keeps the service running while you are logged out")
    return rc
