"""Pure reprocess decisions: the run's config comes from the new spec, the timeout, what cleanup deletes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kappaflow_operator.desired import previous_id_topics, reprocess_resources, reprocess_timed_out
from tests.operator.specs import REF, spec

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_run_mounts_a_config_rendered_from_the_new_spec_under_the_new_id():
    new = spec(config={"commit.interval.ms": "1234"}, upgrade={"mode": "reprocess"})
    configmap, app = reprocess_resources(new, REF, spec_digest="cd" * 8, new_application_id="wordcount-rcdcd")
    properties = configmap["data"]["streams.properties"]
    assert "application.id=wordcount-rcdcd" in properties and "commit.interval.ms=1234" in properties
    assert configmap["metadata"]["name"] != "wordcount-config"  # not the running version's ConfigMap
    containers = {"driver": "spark-kubernetes-driver", "executor": "spark-kubernetes-executor"}
    for role, container_name in containers.items():
        # Spark builds the pods from these templates itself: no Spark operator webhook is needed for
        # the config volume or the PodSecurity `restricted` contexts.
        assert "configMaps" not in app["spec"][role] and "securityContext" not in app["spec"][role]
        pod = app["spec"][role]["template"]["spec"]
        config_volume = {"name": "kappaflow-config", "configMap": {"name": configmap["metadata"]["name"]}}
        assert pod["volumes"] == [config_volume]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = pod["containers"]
        assert container["name"] == container_name
        assert container["volumeMounts"] == [
            {"name": "kappaflow-config", "mountPath": "/etc/kappaflow", "readOnly": True}
        ]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert app["spec"]["mainApplicationFile"] == "local:///opt/kappaflow/reprocess.py"


def test_timeout_is_upgrade_spark_timeout_seconds():
    s = spec(upgrade={"mode": "reprocess", "spark": {"timeoutSeconds": 600}})
    assert not reprocess_timed_out(s, T0, T0 + timedelta(seconds=599))
    assert reprocess_timed_out(s, T0, T0 + timedelta(seconds=600))


def test_cleanup_deletes_only_the_replaced_ids_internal_topics():
    topics = [
        "wc-counts-changelog",
        "wc-counts-repartition",
        "wc-r1234-counts-changelog",  # the new id, which starts with the old one
        "wc-input",  # a user topic that happens to share the prefix
        "other-counts-changelog",
        "wc-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000004-topic",  # a foreign-key join's, as in Java
        "wc-orders-subscription-response-topic",
        "wc-some-topic",  # a user topic ending in -topic
    ]
    assert previous_id_topics("wc", "wc-r1234", topics) == [
        "wc-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000004-topic",
        "wc-counts-changelog",
        "wc-counts-repartition",
        "wc-orders-subscription-response-topic",
    ]


def test_small_cpu_requests_reach_the_driver_and_executor_pods():
    s = spec(
        upgrade={
            "mode": "reprocess",
            "spark": {
                "driver": {"memory": "512m", "coreRequest": "250m"},
                "executor": {"instances": 1, "memory": "512m", "coreRequest": "100m"},
            },
        }
    )
    _, app = reprocess_resources(s, REF, spec_digest="ab" * 8, new_application_id="wordcount-rabab")
    assert app["spec"]["driver"]["coreRequest"] == "250m" and app["spec"]["driver"]["cores"] == 1
    assert app["spec"]["executor"]["coreRequest"] == "100m" and app["spec"]["executor"]["instances"] == 1
    plain = reprocess_resources(
        spec(upgrade={"mode": "reprocess"}), REF, spec_digest="ab" * 8, new_application_id="wordcount-rabab"
    )[1]
    assert "coreRequest" not in plain["spec"]["driver"]


def test_a_cpu_request_that_is_no_quantity_is_refused_naming_the_field():
    import pydantic
    import pytest

    with pytest.raises(pydantic.ValidationError, match="coreRequest"):
        spec(upgrade={"mode": "reprocess", "spark": {"driver": {"coreRequest": "lots"}}})


def test_the_pods_env_reaches_the_spark_driver_and_executors():
    """A topology may read the env (the word count example reads its topic names from it): the Spark
    job must see what the pods see, or it would rebuild a different topology."""
    s = spec(
        upgrade={"mode": "reprocess"},
        pod_template={"env": [{"name": "WORDCOUNT_INPUT", "value": "lines"}]},
    )
    _, app = reprocess_resources(s, REF, spec_digest="ab" * 8, new_application_id="wordcount-rabab")
    for role in ("driver", "executor"):
        (container,) = app["spec"][role]["template"]["spec"]["containers"]
        assert {"name": "WORDCOUNT_INPUT", "value": "lines"} in container["env"]


def test_spark_pods_are_not_selected_as_the_apps_pods():
    """The Spark operator copies a SparkApplication's labels onto its driver and executor pods: the
    app's selector label there would put Spark's pods behind the app's Service and PDB (and among the
    pods the operator observes). The run is found by its own label instead."""
    from kappaflow_operator.desired.common import selector_labels
    from kappaflow_operator.desired.spark import REPROCESS_OF_LABEL

    _, app = reprocess_resources(
        spec(upgrade={"mode": "reprocess"}), REF, spec_digest="ab" * 8, new_application_id="wordcount-rabab"
    )
    labels = app["metadata"]["labels"]
    assert not set(selector_labels(REF.name)) & set(labels)
    assert labels[REPROCESS_OF_LABEL] == REF.name
    for role in ("driver", "executor"):
        assert not set(selector_labels(REF.name)) & set(app["spec"][role]["labels"])
        assert not set(selector_labels(REF.name)) & set(app["spec"][role]["template"]["metadata"]["labels"])
