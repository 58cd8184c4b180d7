"""Downloads of pinned artifacts: fetched once, refused unless their sha256 is the pinned one."""

from __future__ import annotations

import hashlib
import sys
import urllib.request


def fetch_verified(url: str, sha256: str, what: str) -> bytes:
    """The bytes at `url`, announced on stderr as `what`; RuntimeError when the digest differs."""
    print(f"==> {what}: downloading {url}", file=sys.stderr)
    with urllib.request.urlopen(url, timeout=120) as response:
        data: bytes = response.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise RuntimeError(f"{url}: sha256 {digest}, expected {sha256}")
    return data
