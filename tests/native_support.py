"""The native core for tests that compare it with the Python paths.

Without it (no cargo when `make setup` ran) such a test is skipped on a developer's machine and fails in
CI (`CI=true`), where `make setup` must have built it: a comparison tier skipped in CI would pass without
comparing anything."""

from __future__ import annotations

import os

import pytest

from kappaflow.tasks.native import NativeCore, installed_core


def require_native_core() -> NativeCore:
    """The installed native core; skips the test without one (fails it in CI)."""
    found = installed_core()
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the native core is not installed: `make setup` builds it (needs cargo)")
        pytest.skip("the native core is not installed (no cargo when `make setup` ran)")
    return found
