"""The only module that talks to the Kubernetes API (besides kopf's own watching).

Why raw REST calls through the official client's `ApiClient.call_api` rather than the typed APIs: the
desired-state builders produce plain dicts, and server-side apply (`application/apply-patch+yaml`, JSON
is valid YAML) takes them as they are, for any kind, with one code path and one field manager. Applying
the full desired object on every pass is idempotent (the API server does the diff), and a field manager
means a user's `kubectl edit` of a field we do not own survives.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import uuid
from collections.abc import Mapping
from typing import Any

from kubernetes import client, config

from .models import API_VERSION, PLURAL
from .snapshot import TerminatedContainer, newest_termination

log = logging.getLogger(__name__)

FIELD_MANAGER = "kappaflow-operator"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"

#: kind -> plural, for every kind the operator manages (the builders' output plus its own CRD).
PLURALS: dict[str, str] = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "Secret": "secrets",
    "Pod": "pods",
    "Event": "events",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "StatefulSet": "statefulsets",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "Job": "jobs",
    "SparkApplication": "sparkapplications",
    # the describe Job's identity and its right to publish the topology (desired.describe)
    "ServiceAccount": "serviceaccounts",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "StreamApp": PLURAL,
    # cluster-scoped: whether a state volume's class allows expansion (read only)
    "StorageClass": "storageclasses",
}


class KubeError(RuntimeError):
    """An API call failed with a status other than the ones the caller expects (e.g. 404 on get)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Kubernetes API error {status}: {message}")
        self.status = status


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    """REST path of a namespaced object (or its collection when `name` is None)."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{PLURALS[kind]}"
    return path if name is None else f"{path}/{name}"


class Kube:
    """A thin, synchronous wrapper; kopf runs sync handlers in its thread pool, so blocking is fine."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    @classmethod
    def from_environment(cls) -> Kube:
        """In-cluster credentials when running in a pod, otherwise $KUBECONFIG / ~/.kube/config."""
        configuration = client.Configuration()
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            # Explicit path: the client reads $KUBECONFIG once at import, which may predate the caller's env.
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
            )
        return cls(client.ApiClient(configuration))

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    # ---- raw ---------------------------------------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        method_, url, headers, body_, _post = self.api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        resp = self.api.call_api(method_, url, header_params=headers, body=body_)
        data = resp.read()  # type: ignore[no-untyped-call]
        if not 200 <= int(resp.status) < 300:
            raise KubeError(int(resp.status), data.decode(errors="replace") if data else "")
        parsed: dict[str, Any] = json.loads(data) if data else {}
        return parsed

    # ---- objects -----------------------------------------------------------------------------------------
    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply `obj` with the operator's field manager (conflicts forced: we own these)."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        return self._call(
            "PATCH",
            path,
            dict(obj),
            content_type=APPLY,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
        )

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", object_path(api_version, kind, namespace, name))
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def get_cluster_scoped(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        """A cluster-scoped object (e.g. a StorageClass), None when it does not exist."""
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        try:
            return self._call("GET", f"{base}/{PLURALS[kind]}/{name}")
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def list(
        self, api_version: str, kind: str, namespace: str, selector: str = "", *, fields: str = ""
    ) -> list[dict[str, Any]]:
        """Objects by label selector and/or field selector (e.g. events of one involved object)."""
        path = object_path(api_version, kind, namespace)
        query = {k: v for k, v in (("labelSelector", selector), ("fieldSelector", fields)) if v}
        items: list[dict[str, Any]] = self._call("GET", path, query=query).get("items", [])
        return items

    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, *, propagation: str = "Background"
    ) -> bool:
        """Delete if present; True when a delete was issued. `Orphan` keeps the dependents (pods, PVCs)."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            self._call("DELETE", object_path(api_version, kind, namespace, name), body)
        except KubeError as err:
            if err.status == 404:
                return False
            raise
        return True

    def patch(self, api_version: str, kind: str, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """A JSON merge patch, for a one-off change outside the applied desired state (e.g. replicas 0)."""
        self._call("PATCH", object_path(api_version, kind, namespace, name), dict(body), content_type=MERGE)

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the StreamApp's /status subresource (never its spec or metadata)."""
        path = object_path(API_VERSION, "StreamApp", namespace, name) + "/status"
        self._call("PATCH", path, {"status": dict(status)}, content_type=MERGE)

    # ---- the describe Job --------------------------------------------------------------------------------
    def job_outcome(self, namespace: str, job_name: str) -> TerminatedContainer | None:
        """The terminated container of the Job's newest finished pod, or None while none has finished
        (`snapshot.newest_termination`: how a Job ended is read from its pods, no log access needed)."""
        return newest_termination(self.list("v1", "Pod", namespace, f"job-name={job_name}"))

    # ---- events ------------------------------------------------------------------------------------------
    def event(self, involved: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on the StreamApp, so `kubectl describe streamapp` shows each step.

        Best effort, as Kubernetes' own event recorders are: an event records a step, it is never a reason
        for the step to fail. The API server refuses every new object in a terminating namespace (403
        NamespaceTerminating), so a cleanup that raised here could never remove its finalizer and the
        namespace would stay Terminating for good (`kubectl delete -k examples/k8s` on a real cluster).
        """
        meta = involved["metadata"]
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", API_VERSION),
                "kind": involved.get("kind", "StreamApp"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": FIELD_MANAGER},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": FIELD_MANAGER,
            "reportingInstance": os.environ.get("HOSTNAME", FIELD_MANAGER),
        }
        try:
            self._call("POST", object_path("v1", "Event", meta["namespace"]), body)
        except KubeError as exc:
            log.warning("event %s on %s/%s not recorded: %s", reason, meta["namespace"], meta["name"], exc)
