"""The describe Job's half of the topology channel: publish `kappaflow describe --json` into a ConfigMap.

Runs inside the application's image (`python -m kappaflow_operator.topology_publish FILE`), where only
kappaflow's own dependencies are installed (no Kubernetes client), so it talks HTTP itself: the pod's
projected service-account token, the cluster CA and `KUBERNETES_SERVICE_HOST/PORT`, and one JSON merge
patch of the ConfigMap the operator created for it. Why a ConfigMap instead of the container's
termination message: that is capped at 4 KiB, and real topologies describe to tens of kilobytes; a
ConfigMap holds up to 1 MiB and the operator owns it, so it is garbage-collected with the StreamApp. The
Job's service account may `get` and `patch` that one ConfigMap and nothing else (`desired.describe`).
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path

from kappaflow_contract.config import DESCRIBE_KEY_ENV, TOPOLOGY_CONFIGMAP_ENV

from .desired.common import DESCRIBE_KEY_FIELD, TOPOLOGY_KEY

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: A ConfigMap holds at most 1 MiB in total; leave room for the key and metadata.
MAX_BYTES = 1_000_000


class PublishError(RuntimeError):
    """The description could not be published; the message says what to fix."""


def publish(text: str, configmap: str, describe_key: str, sa_dir: Path, server: str) -> int:
    """Validate `text` as JSON and merge it into `configmap`; returns the number of bytes written."""
    try:
        json.loads(text)
    except ValueError as err:
        raise PublishError(f"kappaflow describe printed no JSON document: {err}") from err
    size = len(text.encode())
    if size > MAX_BYTES:
        raise PublishError(f"the topology description is {size} bytes; a ConfigMap holds at most {MAX_BYTES}")
    try:
        token = (sa_dir / "token").read_text().strip()
        namespace = (sa_dir / "namespace").read_text().strip()
    except OSError as err:
        raise PublishError(f"no service account token mounted at {sa_dir}: {err}") from err
    body = json.dumps({"data": {TOPOLOGY_KEY: text, DESCRIBE_KEY_FIELD: describe_key}}).encode()
    request = urllib.request.Request(
        f"{server}/api/v1/namespaces/{namespace}/configmaps/{configmap}",
        data=body,
        method="PATCH",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/merge-patch+json",
            "Accept": "application/json",
        },
    )
    context = ssl.create_default_context(cafile=str(sa_dir / "ca.crt"))
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            response.read()
    except urllib.error.HTTPError as err:
        detail = err.read().decode(errors="replace")[:500]
        raise PublishError(
            f"patching ConfigMap {namespace}/{configmap} failed: HTTP {err.code}: {detail}"
        ) from err
    except OSError as err:
        raise PublishError(f"cannot reach the API server at {server}: {err}") from err
    return size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kappaflow_operator.topology_publish")
    parser.add_argument("file", type=Path, help="the output of `kappaflow describe <entry> --json`")
    parser.add_argument("--configmap", default=os.environ.get(TOPOLOGY_CONFIGMAP_ENV))
    parser.add_argument("--describe-key", default=os.environ.get(DESCRIBE_KEY_ENV))
    parser.add_argument("--service-account-dir", type=Path, default=Path(SERVICE_ACCOUNT_DIR))
    args = parser.parse_args(argv)
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    try:
        if not args.configmap or not args.describe_key:
            raise PublishError(f"{TOPOLOGY_CONFIGMAP_ENV} and {DESCRIBE_KEY_ENV} must be set")
        if not host:
            raise PublishError("KUBERNETES_SERVICE_HOST is not set: not running in a Kubernetes pod")
        server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        size = publish(
            args.file.read_text(), args.configmap, args.describe_key, args.service_account_dir, server
        )
    except (PublishError, OSError) as err:
        print(f"topology not published: {err}", file=sys.stderr)
        return 1
    print(f"published the topology ({size} bytes) to ConfigMap {args.configmap}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
