"""``jobctl service`` and the unit it writes (README, Running as a systemd user service), with a fake ``systemctl`` on PATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobctl import service

JOBCTL = str(Path(sys.executable).parent / "jobctl")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


def fake_systemctl(bin_dir: Path, log: Path, exit_code: int = 0) -> None:
    """A systemctl that appends its argv (one call per line) to ``log``."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "systemctl"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        '[ "$2" = is-active ] && echo inactive && exit 3\n'
        f'[ {exit_code} -ne 0 ] && echo "Failed to connect to bus: No medium found" >&2\n'
        f"exit {exit_code}\n"
    )
    script.chmod(0o755)


def run(
    home: Path,
    *args: str,
    path: str,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBCTL_", "XDG_"))}
    env.update(HOME=str(home), PATH=path, **(extra_env or {}))
    return subprocess.run(
        [JOBCTL, *args], capture_output=True, text=True, env=env, timeout=30, check=False
    )


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_install_writes_the_unit_and_enables_it(home: Path, tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    fake_systemctl(tmp_path / "bin", log)
    proc = run(home, "service", "install", path=f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr
    unit = (home / ".config/systemd/user/jobctl.service").read_text()
    assert f"ExecStart={JOBCTL} daemon\n" in unit
    assert "Description=jobctl scheduler\n" in unit
    assert "Restart=on-failure\n" in unit
    assert "WantedBy=default.target\n" in unit
    assert calls(log) == ["--user daemon-reload", "--user enable --now jobctl.service"]


def test_install_respects_xdg_config_home_and_db(home: Path, tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    fake_systemctl(tmp_path / "bin", log)
    xdg = tmp_path / "xdg"
    proc = run(
        home,
        "--db",
        "rel dir/my.db",
        "service",
        "install",
        path=f"{tmp_path / 'bin'}:/usr/bin:/bin",
        extra_env={"XDG_CONFIG_HOME": str(xdg)},
    )
    assert proc.returncode == 0, proc.stderr
    unit = (xdg / "systemd/user/jobctl.service").read_text()
    db = os.path.abspath("rel dir/my.db")
    assert f'ExecStart={JOBCTL} --db "{db}" daemon\n' in unit
    assert not (home / ".config").exists()


def test_jobctl_db_goes_into_the_unit(home: Path, tmp_path: Path) -> None:
    proc = run(
        home,
        "service",
        "install",
        "--print",
        path="/usr/bin:/bin",
        extra_env={"JOBCTL_DB": str(tmp_path / "x.db")},
    )
    assert f"ExecStart={JOBCTL} --db {tmp_path / 'x.db'} daemon\n" in proc.stdout


def test_print_writes_nothing_and_calls_nothing(home: Path, tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    fake_systemctl(tmp_path / "bin", log)
    proc = run(home, "service", "install", "--print", path=f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert proc.returncode == 0
    assert proc.stdout.startswith("[Unit]\nDescription=jobctl scheduler\n")
    assert not (home / ".config").exists()
    assert calls(log) == []


def test_no_user_manager_says_what_to_do(home: Path, tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    fake_systemctl(tmp_path / "bin", log, exit_code=1)
    proc = run(home, "service", "install", path=f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: systemctl --user daemon-reload: Failed to connect")
    assert "jobctl daemon" in proc.stderr and "loginctl enable-linger" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    assert (home / ".config/systemd/user/jobctl.service").exists()
    assert calls(log) == ["--user daemon-reload"]


def test_no_systemctl_at_all(home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run(home, "service", "install", path=str(empty))
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: ") and "not found" in proc.stderr
    assert "jobctl daemon" in proc.stderr


def test_uninstall_disables_removes_and_reloads(home: Path, tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    fake_systemctl(tmp_path / "bin", log)
    path = f"{tmp_path / 'bin'}:/usr/bin:/bin"
    assert run(home, "service", "install", path=path).returncode == 0
    log.unlink()
    proc = run(home, "service", "uninstall", path=path)
    assert proc.returncode == 0, proc.stderr
    assert not (home / ".config/systemd/user/jobctl.service").exists()
    assert calls(log) == ["--user disable --now jobctl.service", "--user daemon-reload"]
    again = run(home, "service", "uninstall", path=path)
    assert again.returncode == 0 and "not installed" in again.stdout


def test_status_reports_unit_systemd_and_daemons(home: Path, tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    fake_systemctl(tmp_path / "bin", log)
    path = f"{tmp_path / 'bin'}:/usr/bin:/bin"
    db = str(tmp_path / "j.db")
    proc = run(home, "--db", db, "service", "status", "--json", path=path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data == {
        "unit_file": str(home / ".config/systemd/user/jobctl.service"),
        "installed": False,
        "active": "inactive",
        "daemons": [],
    }
    assert calls(log) == ["--user is-active jobctl.service"]
    assert not Path(db).exists()
    text = run(home, "--db", db, "service", "status", path=path).stdout
    assert "not installed" in text and "systemd: inactive" in text and "live daemons: 0" in text


@pytest.mark.parametrize(
    ("arg", "quoted"),
    [
        ("/usr/bin/jobctl", "/usr/bin/jobctl"),
        ("/a b/c", '"/a b/c"'),
        ("/x/100%", "/x/100%%"),
        ("/x/$HOME", "/x/$$HOME"),
        ('/q"\\', '"/q\\"\\\\"'),
    ],
)
def test_quote_arg(arg: str, quoted: str) -> None:
    assert service.quote_arg(arg) == quoted


def test_unit_path_ignores_relative_xdg(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": "relative"}
    assert service.unit_path(env) == tmp_path / ".config/systemd/user/jobctl.service"


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path, home: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / "jobctl.service"
    unit.write_text(service.unit_text(JOBCTL, str(tmp_path / "a b%$.db")))
    proc = subprocess.run(
        [tool, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    if "Failed to initialize manager" in proc.stderr or "Failed to connect" in proc.stderr:
        pytest.skip(f"systemd-analyze verify cannot run here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
