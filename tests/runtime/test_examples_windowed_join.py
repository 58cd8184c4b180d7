"""The windowed fraud example and the page-view join example, end to end in the test driver."""

from __future__ import annotations

from examples import pageview_join, windowed_fraud

from kappaflow import Window, Windowed, serdes
from kappaflow.api.windowed_serdes import TimeWindowedSerde
from kappaflow.testing import TopologyTestDriver


def test_windowed_fraud_emits_one_final_verdict_per_suspicious_window() -> None:
    with TopologyTestDriver(windowed_fraud.build_topology()) as driver:
        payments = driver.create_input_topic("payments", serdes.String(), serdes.Json())
        alerts = driver.create_output_topic(
            "fraud-alerts", TimeWindowedSerde(serdes.String(), 60_000), serdes.Json()
        )
        for second in range(6):  # card-1: six small payments in the first minute
            payments.pipe_input("card-1", {"amount": 5.0, "merchant": "m"}, second * 1000)
        payments.pipe_input("card-2", {"amount": 1500.0, "merchant": "m"}, 30_000)  # one big payment
        payments.pipe_input("card-3", {"amount": 10.0, "merchant": "m"}, 40_000)  # harmless
        payments.pipe_input("card-1", {"amount": 0, "merchant": "m"}, 45_000)  # filtered out
        assert alerts.is_empty()  # nothing is final before stream time 60s + 10s grace
        payments.pipe_input("card-3", {"amount": 1.0, "merchant": "m"}, 65_000)  # late-ish: in window 2
        payments.pipe_input("card-1", {"amount": 5.0, "merchant": "m"}, 59_000)  # within grace: counted
        assert alerts.is_empty()
        payments.pipe_input("card-3", {"amount": 1.0, "merchant": "m"}, 70_000)  # closes window 1
        payments.pipe_input("card-1", {"amount": 900.0, "merchant": "m"}, 1_000)  # late: dropped
        window = Window(0, 60_000)
        assert alerts.read_key_values_to_list() == [
            (Windowed("card-1", window), {"payments": 7, "total": 35.0, "score": 1.4}),
            (Windowed("card-2", window), {"payments": 1, "total": 1500.0, "score": 1.5}),
        ]
        summaries = driver.get_window_store("payment-windows")
        assert summaries.fetch("card-1", 0) == {"payments": 7, "total": 35.0}


def test_pageview_join_enriches_pairs_and_counts() -> None:
    with TopologyTestDriver(pageview_join.build_topology()) as driver:
        j, s = serdes.Json(), serdes.String()
        users = driver.create_input_topic("users", s, j)
        views = driver.create_input_topic("pageviews", s, j)
        clicks = driver.create_input_topic("clicks", s, j)
        enriched = driver.create_output_topic("pageviews-enriched", s, j)
        pairs = driver.create_output_topic("view-clicks", s, j)
        regions = driver.create_output_topic("views-per-region", s, serdes.Long())

        views.pipe_input("u1", {"page": "/home"}, 1_000)  # user not known yet
        users.pipe_input("u1", {"region": "eu"}, 2_000)
        views.pipe_input("u1", {"page": "/cart"}, 3_000)
        clicks.pipe_input("u1", {"target": "buy"}, 200_000)  # within 5 minutes of both views
        clicks.pipe_input("u1", {"target": "late"}, 400_000)  # more than 5 minutes after /home and /cart

        assert [(r.key, r.value, r.timestamp) for r in enriched.read_records_to_list()] == [
            ("u1", {"page": "/home", "region": "unknown"}, 1_000),
            ("u1", {"page": "/cart", "region": "eu"}, 3_000),
        ]
        assert [(r.key, r.value, r.timestamp) for r in pairs.read_records_to_list()] == [
            ("u1", {"page": "/home", "clicked": "buy"}, 200_000),
            ("u1", {"page": "/cart", "clicked": "buy"}, 200_000),
        ]
        assert regions.read_key_values_to_map() == {"unknown": 1, "eu": 1}
        topology = pageview_join.build_topology()
        assert {"pageviews", "users"} in topology.copartition_groups
        assert {"pageviews", "clicks"} in topology.copartition_groups
