"""The host secret that seeds synthetic data and split permutations.

Programs run in a sandbox that never mounts the cache dir, so they cannot recover which
rows are held out or regenerate synthetic labels. Per-task seeds are hashes of
(secret, task name, purpose): one task's seed says nothing about another's.
"""
from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path
from typing import Optional

import numpy as np


def host_secret(cache_dir: Path, secret_seed: Optional[str] = None) -> str:
    """`secret_seed` if given, else the per-machine secret, made once at `{cache_dir}/secret` (0600)."""
    if secret_seed:
        return str(secret_seed)
    path = Path(cache_dir) / "secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".secret.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)  # atomic and exclusive: a concurrent maker's secret wins, not a torn one
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    return path.read_text().strip()


def derive_seed(secret: str, *parts: str) -> int:
    """A 256-bit seed from the secret and a purpose, e.g. (task name, "split")."""
    digest = hashlib.sha256("\0".join((secret, *parts)).encode()).digest()
    return int.from_bytes(digest, "big")


def rng_for(secret: str, *parts: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(derive_seed(secret, *parts)))


def random_state_for(secret: str, *parts: str) -> np.random.RandomState:
    """A legacy RandomState (what scikit-learn generators take) carrying all 256 seed bits."""
    return np.random.RandomState(np.random.MT19937(np.random.SeedSequence(derive_seed(secret, *parts))))
