"""Every random stream is a function of (seed, step, purpose), so a resumed run replays it exactly."""
from __future__ import annotations

import hashlib


def stream_seed(seed: int, step: int, purpose: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{step}/{purpose}".encode()).digest()[:8], "little") >> 33
