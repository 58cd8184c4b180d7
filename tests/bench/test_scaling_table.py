"""bench/scaling_cost.py's pure part: the per-cell verdicts and the Java columns of its table. A verdict
that judged against the wrong best cell, or a Java column that named another cell's rate, would print a
comparison the run did not measure."""

from __future__ import annotations

import pytest
from bench.scaling_cost import MIB, Cell, Limits, print_table, slowest_over_fastest, verdicts

LIMITS = Limits(
    record_cache=10 * MIB, rocksdb=32 * MIB, write_buffers=16 * MIB, prefetch=69 * MIB, slack=32 * MIB
)


def cell(keys: int, rate: float, peak_mib: int, java: float = 0.0) -> Cell:
    return Cell(
        4, keys, 1_000_000, records_per_s=rate, peak=peak_mib * MIB, java_per_s=java, java_peak=800 * MIB
    )


def test_throughput_is_judged_against_the_best_cell_and_memory_against_the_bound() -> None:
    cells = [cell(1_000, 600_000, 137), cell(1_000_000, 480_000, 250), cell(10_000_000, 479_000, 176)]
    # bound: 73 idle + 10 + 32 + 69 + 32 = 216 MiB
    assert verdicts(cells, {4: 73 * MIB}, LIMITS) == [(True, True), (True, False), (False, True)]


def test_slowest_over_fastest_is_the_tables_spread() -> None:
    assert slowest_over_fastest([678_000.0, 113_000.0]) == pytest.approx(113 / 678)
    assert slowest_over_fastest([]) == 0.0
    assert slowest_over_fastest([0.0, 0.0]) == 0.0


def test_the_java_columns_sit_on_their_cells_row(capsys: pytest.CaptureFixture[str]) -> None:
    cells = [cell(1_000, 678_000, 137, java=213_000), cell(1_000_000, 113_000, 176, java=72_000)]
    assert print_table(cells, {4: 73 * MIB}, LIMITS) is False
    rows = capsys.readouterr().out.splitlines()
    small = next(row for row in rows if row.split()[1:2] == ["1,000"])
    large = next(row for row in rows if row.split()[1:2] == ["1,000,000"])
    assert small.split()[-4:] == ["213,000", "1.00", "3.18", "800"]
    assert large.split()[-4:] == ["72,000", "0.34", "1.57", "800"]
    assert "kappaflow 0.17, Java Kafka Streams 0.34" in rows[-1]


def test_without_java_the_table_has_no_java_columns(capsys: pytest.CaptureFixture[str]) -> None:
    print_table([cell(1_000, 678_000, 137)], {4: 73 * MIB}, LIMITS)
    out = capsys.readouterr().out
    assert "Java" not in out


def test_a_cell_whose_java_failed_shows_n_a_and_stays_out_of_javas_spread(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cells = [cell(1_000, 678_000, 137, java=213_000), cell(10_000_000, 76_000, 200, java=0.0)]
    print_table(cells, {4: 73 * MIB}, LIMITS)
    rows = capsys.readouterr().out.splitlines()
    failed = next(row for row in rows if row.split()[1:2] == ["10,000,000"])
    assert failed.split()[-1] == "n/a"
    assert "Java Kafka Streams 1.00" in rows[-1]  # the one cell Java finished


def test_each_cells_cpu_per_record_sits_on_its_row(capsys: pytest.CaptureFixture[str]) -> None:
    hot, cold = cell(1_000, 600_000, 137), cell(1_000_000, 110_000, 176)
    hot.cpu_us, cold.cpu_us = 1.77, 9.42
    hot.broker_cpu_us, cold.broker_cpu_us = 0.61, 3.08
    print_table([hot, cold], {4: 73 * MIB}, LIMITS)
    rows = capsys.readouterr().out.splitlines()
    header = next(row for row in rows if row.lstrip().startswith("partitions"))
    assert "CPU us" in header and "broker" in header
    hot_row = next(row for row in rows if row.split()[1:2] == ["1,000"])
    cold_row = next(row for row in rows if row.split()[1:2] == ["1,000,000"])
    assert "1.77" in hot_row.split() and "9.42" not in hot_row.split()
    assert "9.42" in cold_row.split() and "1.77" not in cold_row.split()
    hot_cells, cold_cells = hot_row.split(), cold_row.split()  # the broker's CPU right after the app's
    assert hot_cells[hot_cells.index("1.77") + 1] == "0.61"
    assert cold_cells[cold_cells.index("9.42") + 1] == "3.08"
