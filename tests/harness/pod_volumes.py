"""Volumes of a Pod as local directories, for launchers of the fake kubelet (tests/harness/fake_kubelet.py).

A launcher that runs a pod's container as a local process needs its volumes where the process can read
them; these helpers write them out the way a kubelet mounts them and rewrite mount paths in the command.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

from kubernetes import client


def materialize_volumes(
    core: client.CoreV1Api, pod: Any, root: Path, container: str | None = None
) -> dict[str, Path]:
    """Write the container's volumes to local directories, as a kubelet mounts them: mount path -> dir.

    ConfigMap and Secret volumes become their keys as files, emptyDir an empty directory, and projected
    volumes their sources, including the service-account token (requested through the TokenRequest API
    for this pod's service account, bound to the pod, exactly what a kubelet does), the cluster CA
    (`kube-root-ca.crt`) and the downward API's namespace. A launcher then rewrites the mount paths in
    the container's command to these directories.
    """
    spec = next(c for c in pod.spec.containers if container is None or c.name == container)
    ns = pod.metadata.namespace
    volumes = {v.name: v for v in pod.spec.volumes or []}

    def keys(data: dict[str, str] | None, items: Any, decode: bool) -> dict[str, str]:
        values = {k: base64.b64decode(v).decode() if decode else v for k, v in (data or {}).items()}
        if items:
            return {i.path: values[i.key] for i in items}
        return values

    def token() -> str:
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[],
                expiration_seconds=3600,
                bound_object_ref=client.V1BoundObjectReference(
                    kind="Pod", api_version="v1", name=pod.metadata.name, uid=pod.metadata.uid
                ),
            )
        )
        account = pod.spec.service_account_name or "default"
        return str(core.create_namespaced_service_account_token(account, ns, request).status.token)

    mounts: dict[str, Path] = {}
    for mount in spec.volume_mounts or []:
        volume = volumes[mount.name]
        target = root / mount.name
        target.mkdir(parents=True, exist_ok=True)
        files: dict[str, str] = {}
        if volume.config_map is not None:
            cm = core.read_namespaced_config_map(volume.config_map.name, ns)
            files = keys(cm.data, volume.config_map.items, decode=False)
        elif volume.secret is not None:
            secret = core.read_namespaced_secret(volume.secret.secret_name, ns)
            files = keys(secret.data, volume.secret.items, decode=True)
        elif volume.projected is not None:
            for source in volume.projected.sources or []:
                if source.service_account_token is not None:
                    files[source.service_account_token.path] = token()
                elif source.config_map is not None:
                    cm = core.read_namespaced_config_map(source.config_map.name, ns)
                    files.update(keys(cm.data, source.config_map.items, decode=False))
                elif source.secret is not None:
                    secret = core.read_namespaced_secret(source.secret.name, ns)
                    files.update(keys(secret.data, source.secret.items, decode=True))
                elif source.downward_api is not None:
                    for item in source.downward_api.items or []:
                        if item.field_ref is not None and item.field_ref.field_path == "metadata.namespace":
                            files[item.path] = ns
        for rel, text in files.items():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).write_text(text)
        mounts[mount.mount_path] = target
    return mounts


def rewrite_mount_paths(text: str, mounts: dict[str, Path]) -> str:
    """`text` (a command line argument or script) with each mount path replaced by its local directory."""
    if not mounts:
        return text
    # One pass, longest path first: a replacement must not be rewritten again (local dirs may be in /tmp).
    pattern = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
    return re.sub(pattern, lambda match: str(mounts[match.group(0)]), text)
