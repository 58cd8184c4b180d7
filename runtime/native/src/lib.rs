//! kappaflow's per-record machinery in Rust: a consumed batch read into per-partition runs of records
//! (`MessageRuns`), a task's loop over one input partition's queue (`drain`) and the stages of the
//! processors it feeds: the built-in stateless ones and fixed-topic sinks (`StatelessStage`,
//! `SinkStage`) and cached stream aggregations (`AggregateStage`). A cached table's batched flush
//! (`table_flush`) is split into its store's columns, logged to its changelog and handed to the table's
//! one compiled child without a Python frame per entry.
//!
//! Restoring has its own: `ChangelogMessages` splits a consumed changelog batch by partition and writes a
//! partition's records into a RocksDB write batch; `RestoreQueues` takes the restore consumer's fetched
//! records from librdkafka without a Python `Message` each, in `ChangelogRun`s it writes the same way;
//! `InputQueues` does the same for the stream thread's group consumer, into the tasks' record tuples.
//! A Spark reprocessing task's repartitioned records stay in byte buffers (`ShuffleSend`) until they
//! are read into the next stage's record tuples, a batch at a time (`ShuffledCursor`).
//!
//! Each mirrors its Python reference step for step (`kappaflow.runner.routing.raw_records_by_partition`,
//! `kappaflow.tasks.drain.drain_python`, the processors' generic `process`, the changelog reader's
//! `_by_partition` and the RocksDB store's `restore_messages`), which stays the fallback: user callbacks,
//! serdes and handlers are the Python objects, called from here in the same order. The record cache
//! (`ThreadCache`) is native itself, the Python class its fallback twin. What moves to Rust
//! is only the interpreter's own work per record. Every Python class and attribute it touches is declared
//! in `touches.rs`.

mod aggregate;
mod cache;
mod cache_entry;
mod delivery_failures;
mod drain;
mod failure;
mod input_queue;
mod messages;
mod produce;
mod rdkafka_queue;
mod restore;
mod restore_queue;
mod shuffle;
mod shuffled_cursor;
mod slots;
mod stages;
mod table_flush;
mod touches;

use pyo3::prelude::*;

#[pymodule]
fn kappaflow_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("PROTOCOL", 19)?;
    let touches: Vec<(&str, Vec<&str>)> = touches::TOUCHES
        .iter()
        .map(|(class, attributes)| (*class, attributes.to_vec()))
        .collect();
    m.add("TOUCHES", touches)?;
    m.add_function(wrap_pyfunction!(drain::drain, m)?)?;
    m.add("MESSAGE_LAYOUTS", messages::KNOWN_VERSIONS.to_vec())?;
    m.add_class::<messages::MessageRuns>()?;
    m.add_class::<restore::ChangelogMessages>()?;
    m.add_class::<restore_queue::RestoreQueues>()?;
    m.add_class::<restore_queue::ChangelogRun>()?;
    m.add_class::<input_queue::InputQueues>()?;
    m.add("PRODUCER_LAYOUTS", produce::KNOWN_VERSIONS.to_vec())?;
    m.add_class::<produce::ProduceSend>()?;
    m.add_class::<delivery_failures::DeliveryFailures>()?;
    m.add_class::<aggregate::AggregateStage>()?;
    m.add_class::<cache::ThreadCache>()?;
    m.add_class::<cache::NamedCache>()?;
    m.add_class::<cache_entry::CacheEntry>()?;
    m.add_class::<stages::StatelessStage>()?;
    m.add_class::<stages::SinkStage>()?;
    m.add_class::<shuffle::ShuffleSend>()?;
    m.add_function(wrap_pyfunction!(shuffled_cursor::shuffled_records, m)?)?;
    m.add_class::<shuffled_cursor::ShuffledCursor>()?;
    m.add_function(wrap_pyfunction!(table_flush::log_writes, m)?)?;
    Ok(())
}
