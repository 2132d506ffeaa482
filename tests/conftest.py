"""Shared fixtures: one host cache per test session (leaderboards, tokenizer, warm start are built once)."""
import os
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory) -> Path:
    # WMRL_TEST_CACHE: reuse a host cache that already has the smoke preset's leaderboards and warm start
    if os.environ.get("WMRL_TEST_CACHE"):
        return Path(os.environ["WMRL_TEST_CACHE"])
    return tmp_path_factory.mktemp("wmrl-cache")
