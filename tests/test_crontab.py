"""crontab(5) parsing for import-crontab (README, Migrating from crontab): real files, then one test per edge case."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from jobctl.crontab import CrontabReport, ImportedJob, parse_crontab, split_percent
from jobctl.errors import UsageError

DATA = Path(__file__).parent / "data" / "crontabs"

_FIELD_RE = re.compile(r"^[0-9*/,a-zA-Z-]+$")
_BOUNDS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
_MACROS = {
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
    "@reboot",
}


def validate(expr: str) -> str | None:
    """A stand-in for triggers' validator: 5 plausible fields in range, or a known macro."""
    if expr.startswith("@"):
        return None if expr in _MACROS else f"unknown macro {expr}"
    fields = expr.split(" ")
    if len(fields) != 5:
        return f"expected 5 fields, got {len(fields)}"
    for text, (low, high) in zip(fields, _BOUNDS, strict=True):
        if not _FIELD_RE.match(text):
            return f"bad field {text!r}"
        for number in re.findall(r"\d+", text.split("/")[0]):
            if not low <= int(number) <= high:
                return f"{number} is out of range {low}-{high}"
    return None


def parse(text: str, **kwargs: object) -> CrontabReport:
    return parse_crontab(text, validate_cron=validate, **kwargs)  # type: ignore[arg-type]


def parse_file(name: str, **kwargs: object) -> CrontabReport:
    return parse((DATA / name).read_text(), **kwargs)


def only_job(text: str, **kwargs: object) -> ImportedJob:
    report = parse(text, **kwargs)
    assert report.errors == []
    assert len(report.jobs) == 1
    return report.jobs[0]


# --- real files -------------------------------------------------------------------------


def test_debian_etc_crontab_system_format() -> None:
    report = parse_file("debian-etc-crontab", system=True, current_user="root")
    assert report.errors == []
    assert report.notices == []
    assert [j.name for j in report.jobs] == ["cron-1", "cron-2", "cron-3", "cron-4"]
    assert [j.cron for j in report.jobs] == ["17 * * * *", "25 6 * * *", "47 6 * * 7", "52 6 1 * *"]
    hourly, daily = report.jobs[0], report.jobs[1]
    assert hourly.command == "cd / && run-parts --report /etc/cron.hourly"
    assert hourly.user == "root"
    assert hourly.description == "imported from crontab line 16 (user: root)"
    assert hourly.line == 16
    assert hourly.shell == "/bin/sh"
    assert hourly.env == {"PATH": "/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin"}
    assert daily.command == (
        "test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }"
    )
    assert report.env["SHELL"] == "/bin/sh"


def test_debian_etc_crontab_as_user_gives_a_notice_per_job() -> None:
    report = parse_file("debian-etc-crontab", system=True, current_user="alice")
    assert report.errors == []
    assert report.notices == [
        (line, "runs as root in the system crontab; jobctl runs it as alice")
        for line in (16, 17, 18, 19)
    ]


def test_system_crontab_without_system_flag_is_flagged() -> None:
    report = parse_file("debian-etc-crontab")
    assert report.errors == []
    assert report.jobs[0].command.startswith("root")
    assert (
        16,
        "the command starts with 'root': if this is a system crontab, use --system",
    ) in report.notices


def test_cronie_example_user_crontab() -> None:
    report = parse_file("cronie-example", sendmail="/usr/sbin/sendmail")
    assert report.errors == []
    assert report.notices == [(4, "MAILTO=paul: failures are mailed with sendmail")]
    jobs = report.jobs
    assert [j.name for j in jobs] == [f"cron-{n}" for n in range(1, 7)]
    assert all(j.tz == "Japan" for j in jobs)
    assert all(j.jitter_seconds == 600.0 for j in jobs)
    assert all(j.shell == "/bin/sh" for j in jobs)
    assert all(j.on_failure is not None and "paul" in j.on_failure for j in jobs)
    assert all(j.env == {} for j in jobs)
    assert jobs[0].command == "$HOME/bin/daily.job >> $HOME/tmp/out 2>&1"
    assert jobs[2].command == 'mail -s "It\'s 10pm" joe'
    assert jobs[2].stdin == "Joe,\n\nWhere are your kids?\n"
    assert jobs[4].cron == "5 4 * * sun"
    assert jobs[5].cron == "@reboot"
    assert jobs[5].command == "$HOME/bin/start-agent"
    assert report.env == {
        "SHELL": "/bin/sh",
        "MAILTO": "paul",
        "CRON_TZ": "Japan",
        "RANDOM_DELAY": "10",
    }


def test_debian_user_example() -> None:
    report = parse_file("debian-user-example")
    assert report.errors == []
    assert report.notices == [(4, "MAILTO=paul: sendmail not found, failures will not be mailed")]
    assert len(report.jobs) == 8
    assert all(
        j.shell == "/bin/bash" and j.on_failure is None and j.tz is None for j in report.jobs
    )
    saturday = report.jobs[-1]
    assert saturday.cron == "0 4 8-14 * *"
    assert saturday.command == 'test $(date +%u) -eq 6 && echo "2nd Saturday"'
    assert saturday.stdin is None
    assert report.jobs[5].cron == "0 */4 1 * mon"


def test_cron_d_certbot() -> None:
    job = only_job((DATA / "cron.d-certbot").read_text(), system=True, current_user="root")
    assert job.cron == "0 */12 * * *"
    assert job.user == "root"
    assert job.command == (
        "test -x /usr/bin/certbot -a \\! -d /run/systemd/system && "
        "perl -e 'sleep int(rand(43200))' && certbot -q renew --no-random-sleep-on-renew"
    )
    assert job.shell == "/bin/sh"
    assert job.env["PATH"].startswith("/usr/local/sbin:")


def test_cron_d_sysstat() -> None:
    report = parse_file("cron.d-sysstat", system=True, current_user="root")
    assert report.errors == []
    assert [(j.line, j.cron, j.command) for j in report.jobs] == [
        (6, "5-55/10 * * * *", "command -v debian-sa1 > /dev/null && debian-sa1 1 1"),
        (9, "59 23 * * *", "command -v debian-sa1 > /dev/null && debian-sa1 60 2"),
    ]


def test_cron_d_php_session_clean() -> None:
    job = only_job((DATA / "cron.d-php").read_text(), system=True, current_user="root")
    assert job.cron == "09,39 * * * *"
    assert job.command == (
        "[ -x /usr/lib/php/sessionclean ] && if [ ! -d /run/systemd/system ]; "
        "then /usr/lib/php/sessionclean; fi"
    )
    assert job.description == "imported from crontab line 9 (user: root)"


def test_errors_carry_line_numbers_and_good_lines_still_parse() -> None:
    report = parse_file("broken")
    assert [(j.line, j.name, j.command) for j in report.jobs] == [
        (3, "cron-1", "/usr/bin/backup --full"),
        (11, "cron-8", "/usr/bin/still-fine"),
    ]
    lines = [line for line, _ in report.errors]
    assert lines == [4, 5, 6, 7, 8, 9, 10]
    messages = dict(report.errors)
    assert messages[4] == "expected 5 schedule fields and a command, found 4 field(s)"
    assert messages[5].startswith("unknown macro @every")
    assert messages[6] == "missing command"
    assert messages[7] == "not a job line or a NAME=value line"
    assert "RANDOM_DELAY=soon" in messages[8]
    assert "61 is out of range" in messages[9]
    assert "seconds or year" in messages[10]


# --- edge cases -------------------------------------------------------------------------


def test_comments_and_blank_lines_are_ignored() -> None:
    text = "# a comment\n\n   \t\n   # indented comment\n#0 * * * * disabled\n0 * * * * true\n"
    job = only_job(text)
    assert job.line == 6
    assert job.name == "cron-1"


def test_env_applies_only_to_lines_below() -> None:
    text = "0 * * * * one\nFOO=a\n1 * * * * two\nFOO=b\nBAR=c\n2 * * * * three\n"
    report = parse(text)
    assert [j.env for j in report.jobs] == [{}, {"FOO": "a"}, {"FOO": "b", "BAR": "c"}]
    assert report.env == {"FOO": "b", "BAR": "c"}


def test_env_value_quotes_are_stripped() -> None:
    text = 'A="  two words  "\nB=\'single\'\nC="mismatched\'\nD=""\n0 * * * * true\n'
    assert only_job(text).env == {
        "A": "  two words  ",
        "B": "single",
        "C": "\"mismatched'",
        "D": "",
    }


def test_env_blanks_around_equals() -> None:
    text = "A = 1\nB\t=\t2\n  C=  3  \nD =\n0 * * * * true\n"
    assert only_job(text).env == {"A": "1", "B": "2", "C": "3", "D": ""}


def test_env_values_are_not_expanded() -> None:
    job = only_job("PATH=$HOME/bin:$PATH\nGREETING=~ ${USER}\n0 * * * * true\n")
    assert job.env == {"PATH": "$HOME/bin:$PATH", "GREETING": "~ ${USER}"}


def test_env_with_invalid_name_is_an_error() -> None:
    report = parse("FOO-BAR=1\n0 * * * * true\n")
    assert report.errors == [(1, "'FOO-BAR' is not a valid environment variable name")]
    assert len(report.jobs) == 1


def test_shell_sets_job_shell_not_env() -> None:
    report = parse("0 * * * * a\nSHELL=/bin/bash\n0 * * * * b\n")
    assert [j.shell for j in report.jobs] == [None, "/bin/bash"]
    assert report.jobs[1].env == {}


def test_cron_tz_sets_zone_and_tz_stays_env() -> None:
    report = parse("CRON_TZ=Europe/Paris\nTZ=UTC\n0 9 * * * a\nCRON_TZ=\n0 9 * * * b\n")
    assert report.errors == []
    assert [j.tz for j in report.jobs] == ["Europe/Paris", None]
    assert report.jobs[0].env == {"TZ": "UTC"}


def test_cron_tz_unknown_zone_is_an_error() -> None:
    report = parse("CRON_TZ=Mars/Olympus\n0 9 * * * a\n")
    assert report.errors == [(1, "CRON_TZ=Mars/Olympus: unknown time zone")]


def test_random_delay_is_minutes_of_jitter() -> None:
    report = parse("0 * * * * a\nRANDOM_DELAY=15\n0 * * * * b\nRANDOM_DELAY=0\n0 * * * * c\n")
    assert [j.jitter_seconds for j in report.jobs] == [0.0, 900.0, 0.0]
    assert all(j.env == {} for j in report.jobs)


def test_random_delay_invalid_is_an_error() -> None:
    report = parse("RANDOM_DELAY=-5\nRANDOM_DELAY=1.5\n0 * * * * a\n")
    assert [line for line, _ in report.errors] == [1, 2]
    assert report.jobs[0].jitter_seconds == 0.0


def test_mailto_without_sendmail_is_reported() -> None:
    report = parse("MAILTO=ops@example.com\n0 * * * * a\n")
    assert report.jobs[0].on_failure is None
    assert report.jobs[0].env == {}
    assert report.notices == [
        (1, "MAILTO=ops@example.com: sendmail not found, failures will not be mailed")
    ]


def test_mailto_with_sendmail_mails_the_output_tail(tmp_path: Path) -> None:
    outbox = tmp_path / "outbox"
    fake = tmp_path / "my sendmail"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{outbox}.args"\ncat > "{outbox}"\n')
    fake.chmod(0o755)
    address = "o'brien@example.com"
    report = parse(f"MAILTO={address}\n0 * * * * a\n", sendmail=str(fake))
    assert report.notices == [(1, f"MAILTO={address}: failures are mailed with sendmail")]
    on_failure = report.jobs[0].on_failure
    assert on_failure is not None
    env = {"PATH": os.environ["PATH"], "JOBCTL_JOB": "cron-1; rm -rf /", "JOBCTL_STATE": "dead"}
    subprocess.run(
        ["/bin/sh", "-c", on_failure],
        input=b"line 1\n.\nlast line\n",
        env=env,
        check=True,
        timeout=10,
    )
    message = outbox.read_text()
    assert message.startswith(f"To: {address}\nSubject: jobctl: cron-1; rm -rf / dead\n")
    assert message.endswith("\n\nline 1\n.\nlast line\n")
    assert (tmp_path / "outbox.args").read_text() == "-t\n-i\n"


def test_mailto_empty_turns_mail_off() -> None:
    report = parse('MAILTO=a@b\n0 * * * * one\nMAILTO=""\n0 * * * * two\n', sendmail="/x/sendmail")
    assert report.jobs[0].on_failure is not None
    assert report.jobs[1].on_failure is None
    assert report.notices[1] == (3, "MAILTO is empty: mail is off, nothing is mailed")


@pytest.mark.parametrize(
    "macro",
    ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly", "@reboot"],
)
def test_each_macro(macro: str) -> None:
    job = only_job(f"{macro}\t/usr/bin/task --flag\n")
    assert job.cron == macro
    assert job.command == "/usr/bin/task --flag"


def test_macro_with_system_user() -> None:
    job = only_job("@reboot root /usr/bin/start\n", system=True, current_user="root")
    assert (job.cron, job.user, job.command) == ("@reboot", "root", "/usr/bin/start")


def test_macros_are_case_sensitive() -> None:
    report = parse("@Daily true\n")
    assert report.errors[0][1].startswith("unknown macro @Daily")


def test_percent_starts_stdin_and_later_ones_are_newlines() -> None:
    job = only_job("0 * * * * mail -s hi root%line one%line two%\n")
    assert job.command == "mail -s hi root"
    assert job.stdin == "line one\nline two\n"


def test_no_percent_means_no_stdin() -> None:
    assert only_job("0 * * * * true\n").stdin is None
    assert only_job("0 * * * * cat%\n").stdin == ""


def test_escaped_percent_is_literal() -> None:
    job = only_job(r"0 * * * * date +\%Y-\%m-\%d > /tmp/d%50\% done\%%x" + "\n")
    assert job.command == "date +%Y-%m-%d > /tmp/d"
    assert job.stdin == "50% done%\nx\n"


def test_split_percent_keeps_other_backslashes() -> None:
    assert split_percent(r"echo \n \\%in") == (r"echo \n \\", "in\n")
    assert split_percent(r"a\\\%b") == (r"a\\%b", None)


def test_hash_after_command_is_kept() -> None:
    job = only_job("0 * * * * echo hi # not a comment to cron\n")
    assert job.command == "echo hi # not a comment to cron"


def test_tabs_and_runs_of_blanks_between_fields() -> None:
    job = only_job("  0\t\t*   *\t * \t*\t  echo  a\tb  \n")
    assert job.cron == "0 * * * *"
    assert job.command == "echo  a\tb  "


def test_last_line_without_newline() -> None:
    report = parse("A=1\n0 * * * * one\n5 * * * * two")
    assert [j.command for j in report.jobs] == ["one", "two"]


def test_crlf_line_endings() -> None:
    report = parse('SHELL=/bin/bash\r\nA = "x"\r\n0 * * * * echo hi%in\r\n@daily two\r\n')
    assert report.errors == []
    assert [(j.command, j.stdin) for j in report.jobs] == [("echo hi", "in\n"), ("two", None)]
    assert report.jobs[0].shell == "/bin/bash"
    assert report.jobs[0].env == {"A": "x"}


def test_system_user_field_and_notice() -> None:
    report = parse("0 * * * * www-data php /srv/cron.php\n", system=True, current_user="alice")
    job = report.jobs[0]
    assert (job.user, job.command) == ("www-data", "php /srv/cron.php")
    assert job.description == "imported from crontab line 1 (user: www-data)"
    assert report.notices == [
        (1, "runs as www-data in the system crontab; jobctl runs it as alice")
    ]


def test_system_missing_user_or_command() -> None:
    report = parse(
        "0 * * * *\n0 * * * * root\n0 * * * * /usr/bin/x y\n", system=True, current_user="root"
    )
    assert report.errors[0] == (1, "missing user and command")
    assert report.errors[1] == (2, "missing command")
    assert report.errors[2][0] == 3 and "not a user name" in report.errors[2][1]
    assert report.jobs == []


def test_user_crontab_has_no_user() -> None:
    job = only_job("0 * * * * echo\n")
    assert job.user is None
    assert job.description == "imported from crontab line 1"


def test_four_fields_then_a_command_is_a_field_count_error() -> None:
    report = parse("0 3 * * /usr/bin/x --flag\n* * *\n")
    assert report.errors == [
        (1, "expected 5 schedule fields and a command, found 4 field(s)"),
        (2, "expected 5 schedule fields and a command, found 3 field(s)"),
    ]


def test_six_fields_are_rejected() -> None:
    report = parse("*/10 * * * * * /usr/bin/x\n")
    assert report.errors == [
        (1, "6 schedule fields (*/10 * * * * *): seconds or year fields are not supported")
    ]


def test_validator_receives_fields_joined_by_single_spaces() -> None:
    seen: list[str] = []

    def spy(expr: str) -> str | None:
        seen.append(expr)
        return "nope" if expr.startswith("1") else None

    report = parse_crontab("0\t*  * * * a\n@daily b\n1 * * * * c\n", validate_cron=spy)
    assert seen == ["0 * * * *", "@daily", "1 * * * *"]
    assert report.errors == [(3, "bad schedule '1 * * * *': nope")]


def test_only_stdin_is_missing_command() -> None:
    report = parse("0 * * * * %just stdin\n")
    assert report.errors == [(1, "missing command (only stdin after %)")]


def test_home_becomes_cwd_and_env() -> None:
    job = only_job("HOME=/srv/app\n0 * * * * ./run\n")
    assert job.cwd == "/srv/app"
    assert job.env == {"HOME": "/srv/app"}


def test_names_are_stable_and_use_prefix() -> None:
    text = (DATA / "debian-user-example").read_text()
    first = parse(text, prefix="old")
    second = parse(text, prefix="old")
    assert [j.name for j in first.jobs] == [f"old-{n}" for n in range(1, 9)]
    assert first == second


def test_names_count_job_lines_only() -> None:
    report = parse("# c\nA=1\n0 * * * * a\n\nB=2\n@daily b\n")
    assert [(j.line, j.name) for j in report.jobs] == [(3, "cron-1"), (6, "cron-2")]


def test_invalid_prefix_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        parse("0 * * * * a\n", prefix="-bad")
    with pytest.raises(UsageError):
        parse("0 * * * * a\n", prefix="a b")


def test_empty_text() -> None:
    assert parse("") == CrontabReport(jobs=[], env={}, notices=[], errors=[])
