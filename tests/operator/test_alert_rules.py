"""The chart's alert rules (charts/kappaflow/dashboards/alerts.yaml): `promtool test rules` runs their unit
test (tests/operator/alerts_test.yaml: each alert fires when it should and stays silent when it should
not), and every metric they use is one the runtime or the operator really exports.

promtool comes with Debian's `prometheus` package (`make prometheus`). Missing, the promtool test skips
on a developer machine and fails in CI (CI=true), where `make test` installs it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "kappaflow" / "dashboards" / "alerts.yaml"
RULE_TESTS = Path(__file__).with_name("alerts_test.yaml")


def _promtool() -> str:
    found = shutil.which("promtool") or shutil.which("promtool", path="/usr/bin")
    if found is None:
        message = "promtool is not installed: `make prometheus` (Debian's prometheus package)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _alerts() -> list[dict[str, str]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_unit_tests_of_every_alert_pass():
    promtool = _promtool()
    result = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test():
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert tested == {r["alert"] for r in _alerts()}


def test_alerts_use_only_metrics_that_are_exported():
    from kappaflow.runner.http import HELP

    runtime = {"kappaflow_" + name.replace("-", "_") for name in HELP}
    operator = set(
        re.findall(
            r"\"(kappaflow_operator_[a-z_]+)\"",
            (ROOT / "operator" / "kappaflow_operator" / "metrics.py").read_text(),
        )
    )
    used = {m for r in _alerts() for m in re.findall(r"\bkappaflow_[a-z_]+", r["expr"])}
    assert used and used <= runtime | operator, used - runtime - operator
