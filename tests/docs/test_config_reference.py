"""docs/configuration.md is generated from the config definitions and cannot drift from them (as the
CRDs cannot drift from the operator's models: tests/operator/test_crd.py); the types it prints are the
ones the runtime enforces."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kappaflow.api import config_reference
from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import ConfigError
from kappaflow_contract.config import env_key
from kappaflow_contract.keys import CLIENT_PASSTHROUGH, DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / config_reference.PAGE


def test_committed_reference_matches_the_config_definitions() -> None:
    assert PAGE.read_text() == config_reference.render(), (
        "run `make config-docs`: docs/configuration.md drifted from the config definitions"
    )


def test_check_flag_exits_nonzero_on_drift(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copy(PAGE, tmp_path / config_reference.PAGE)
    cmd = [sys.executable, "-m", "kappaflow.api.config_reference", "--root", str(tmp_path), "--check"]
    assert subprocess.run(cmd, capture_output=True, check=False).returncode == 0
    copy = tmp_path / config_reference.PAGE
    copy.write_text(copy.read_text().replace("`10485760`", "`1`", 1))
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert result.returncode == 1 and "out of date" in result.stderr


def test_every_key_has_a_row_with_its_environment_variable_and_no_row_is_stale() -> None:
    text = PAGE.read_text()
    keys = [k for k in DEFAULTS if k not in config_reference.INTERNAL] + list(CLIENT_PASSTHROUGH)
    for key in keys:
        assert f"| `{key}` |" in text and f"`{env_key(key)}`" in text, key
    assert set(config_reference.KEY_DOCS) == set(keys), "KEY_DOCS documents keys the runtime does not have"


def test_a_key_added_without_documentation_fails_the_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(DEFAULTS, "brand.new.key", 1)
    with pytest.raises(KeyError, match="brand.new.key"):
        config_reference.render()


@pytest.mark.parametrize("key", sorted(config_reference.KEY_DOCS))
def test_the_documented_type_is_the_one_the_runtime_enforces(key: str) -> None:
    kind = config_reference.key_type(key)
    base = {"application.id": "a", "bootstrap.servers": "b"}
    if kind == "int":
        with pytest.raises(ConfigError, match=f"'{key}': expected an integer"):
            StreamsConfig({**base, key: "not-a-number"}).get_int(key)
    elif kind == "boolean":
        with pytest.raises(ConfigError, match=f"'{key}': expected true or false"):
            StreamsConfig({**base, key: "maybe"}).get_bool(key)
    else:
        assert kind, key
