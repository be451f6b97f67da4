"""No number in an integer `PUSH_*` setting of the dispatcher crashes it: for every integer variable
`dispatcher --check-config` lists, Int64.min, -1, 0 and Int64.max either pass or are refused naming
the variable (exit 2), never a trap; Int64.max is refused by every one of them (each has an upper
bound, so no accepted value can overflow where it is used). Runs the debug build's binary
(`swift build` first); needs no running stack."""
from __future__ import annotations

import re
import signal

import pytest

from test_check_config import check, credentials, dispatcher_env  # noqa: F401  (fixture)

EXTREMES = ["-9223372036854775808", "-1", "0", "9223372036854775807"]
NOT_INTEGER = re.compile(r"URL|FILE|_ID$|BOOTSTRAP|TOPIC|GROUP|PROTOCOL|MECHANISM|USERNAME|ENVIRONMENT|RATE_LIMITS|RETRY$|^PUSH_APNS_KEY$|RUNNER")


def integer_variables(credentials) -> list[str]:
    listed = check("dispatcher", dispatcher_env(credentials)).stdout
    names = []
    for line in listed.splitlines():
        match = re.match(r"\s+(PUSH_[A-Z0-9_]+)\s+(?:= (\S+)|\(unset\))", line)
        if not match or NOT_INTEGER.search(match.group(1)):
            continue
        value = match.group(2)
        if value is None or re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", value):
            names.append(match.group(1))
    return names


def test_every_integer_setting_survives_the_extremes(credentials):
    names = integer_variables(credentials)
    assert len(names) >= 40, names
    for name in names:
        for value in EXTREMES:
            result = check("dispatcher", {**dispatcher_env(credentials), name: value})
            assert result.returncode in (0, 2), f"{name}={value}: exit {result.returncode} ({signal.Signals(-result.returncode).name if result.returncode < 0 else ''})\n{result.stderr[-2000:]}"
            if result.returncode == 2:
                errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error:")]
                assert any(name in line for line in errors), f"{name}={value} refused without naming it: {errors}"


def test_rates_that_no_clock_can_wait_for_are_refused(credentials):
    for name, value in [("PUSH_CAMPAIGN_RATE_PER_APP", "1e-300"), ("PUSH_CAMPAIGN_RATE_PER_APP", "1e300"),
                        ("PUSH_CAMPAIGN_RATE_PER_APP", "nan"), ("PUSH_CAMPAIGN_RATE_PER_APP", "-inf"),
                        ("PUSH_CAMPAIGN_RATE_LIMITS", "com.example.app=1e-300")]:
        result = check("dispatcher", {**dispatcher_env(credentials), name: value})
        assert result.returncode == 2 and name in result.stdout, f"{name}={value}: exit {result.returncode}"
    assert check("dispatcher", {**dispatcher_env(credentials), "PUSH_CAMPAIGN_RATE_PER_APP": "0.5"}).returncode == 0


def test_int64_max_is_refused_by_every_integer_setting(credentials):
    accepted = [name for name in integer_variables(credentials)
                if check("dispatcher", {**dispatcher_env(credentials), name: EXTREMES[-1]}).returncode == 0]
    assert accepted == [], f"accepted {EXTREMES[-1]}: {accepted}"
