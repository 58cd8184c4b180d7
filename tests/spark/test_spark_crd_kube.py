"""The SparkApplication the operator builds, and the stand-in's statuses, against the SparkApplication
schema Kubeflow publishes (tests/spark/spark_operator.py explains where it comes from), on the real
API server: accepted as they are, nothing pruned."""

from __future__ import annotations

from typing import Any

import pytest

from kappaflow_operator.desired import reprocess_resources
from tests.operator.specs import REF, SECURE_KAFKA, spec
from tests.spark.spark_operator import GROUP, PLURAL, VERSION, install_spark_crd

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def test_operator_spark_application_and_stand_in_status_pass_the_kubeflow_schema(kube_cluster: Any) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    install_spark_crd(kube_cluster)
    namespace = kube_cluster.create_namespace("sparkcrd")
    s = spec(kafka=SECURE_KAFKA, upgrade={"mode": "reprocess", "spark": {"serviceAccountName": "spark"}})
    _configmap, app = reprocess_resources(s, REF, spec_digest="ab" * 8, new_application_id="wordcount-rab")
    app["metadata"].pop("ownerReferences")  # no StreamApp owner in this test
    app["metadata"]["namespace"] = namespace
    with kube_cluster.api_client() as api:
        custom = client.CustomObjectsApi(api)
        created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, app)
        # Pruning would drop any field the real CRD does not know: what we sent is what is stored.
        assert _strip(created) == _strip(app)
        name = app["metadata"]["name"]
        # What the stand-in writes is accepted; what it used to write (no driverInfo) is refused.
        status = {
            "applicationState": {"state": "COMPLETED", "errorMessage": ""},
            "driverInfo": {"podName": "d"},
        }
        patched = custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": status}
        )
        assert patched["status"]["applicationState"]["state"] == "COMPLETED"
        fresh = {**app, "metadata": {**app["metadata"], "name": f"{name}-x"}}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, fresh)
        with pytest.raises(ApiException, match="driverInfo"):
            custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                f"{name}-x",
                {"status": {"applicationState": {"state": "RUNNING"}}},
            )
