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
    for role in ("driver", "executor"):
        assert app["spec"][role]["configMaps"] == [
            {"name": configmap["metadata"]["name"], "path": "/etc/kappaflow"}
        ]
        assert app["spec"][role]["podSecurityContext"]["runAsNonRoot"] is True
        assert app["spec"][role]["securityContext"]["allowPrivilegeEscalation"] is False
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
    ]
    assert previous_id_topics("wc", "wc-r1234", topics) == ["wc-counts-changelog", "wc-counts-repartition"]
