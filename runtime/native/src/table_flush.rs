//! A cached, logged table's batched flush without a Python frame per entry. Past the record cache every
//! update is a flushed entry (a count of ever new keys flushes each key once), so what a flush costs per
//! entry is what an input record costs there.
//!
//! Three steps, each the twin of a Python reference:
//! - `split_flush`: the flushed `(key, CacheEntry)` pairs as the columns the store writes and forwards
//!   (`kappaflow.state.cache.ThreadCache.split_flush`);
//! - `log_writes`: each write's changelog record, after the store wrote the batch
//!   (`kappaflow.state.kv_wrapped.log_writes`);
//! - `take_flush`: a `FlushedBatch`'s entries typed, made `Change`s and handed to the table's one child
//!   stage, its nodes made current and a failure named as `forward()` does
//!   (`FlushedBatch.__iter__` with `TupleForwarder._changes` and `_flush_batch_to_stage`).

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::cache_entry::CacheEntry;
use crate::produce::ProduceSend;
use crate::slots::{decode_utf8, Slot, SlotClass};

/// The columns of a logged store's flush: writes `(key, value, record context)`, old values, decoded
/// copies of the new values.
pub type FlushColumns<'py> = (Bound<'py, PyList>, Bound<'py, PyList>, Bound<'py, PyList>);

/// `ThreadCache.split_flush`: `read_old` (given when a listener is told the flush) reads the old value
/// of a delete, and of every entry when `send_old`, of a key `live` does not call expired; a delete of a
/// key never held is left out.
pub fn split_flush<'py>(
    py: Python<'py>,
    entries: &Bound<'py, PyList>,
    read_old: Option<&Bound<'py, PyAny>>,
    send_old: bool,
    live: Option<&Bound<'py, PyAny>>,
) -> PyResult<FlushColumns<'py>> {
    let writes = PyList::empty(py);
    let olds = PyList::empty(py);
    let decodeds = PyList::empty(py);
    let none = py.None().into_bound(py);
    for pair in entries.iter() {
        let pair = pair.cast_into::<PyTuple>()?;
        let key = pair.get_item(0)?;
        let copy = pair.get_item(1)?;
        let entry = copy.cast::<CacheEntry>()?.get();
        let value = entry.value.bind(py);
        let mut old = none.clone();
        if let Some(read_old) = read_old {
            let wanted = value.is_none() || send_old;
            if wanted && live.map_or(Ok(true), |live| live.call1((&key,))?.is_truthy())? {
                old = read_old.call1((&key,))?;
            }
            if value.is_none() && old.is_none() {
                continue;
            }
        }
        let context = entry.context.bind(py);
        writes.append(PyTuple::new(py, [&key, value, context])?)?;
        olds.append(if send_old { &old } else { &none })?;
        decodeds.append(entry.decoded.bind(py))?;
    }
    Ok((writes, olds, decodeds))
}

/// `int.from_bytes(data, "big", signed=True)` of at most 8 bytes.
fn signed_big_endian(data: &[u8]) -> i64 {
    let sign: i64 = match data.first() {
        Some(first) if first & 0x80 != 0 => -1,
        _ => 0,
    };
    data.iter()
        .fold(sign, |value, &byte| (value << 8) | i64::from(byte))
}

/// `kappaflow.state.kv_wrapped.log_writes`: the changelog record of each `(key, value, record context)`
/// of a flush through `send(topic, key, value, timestamp, partition)`, a timestamped store's value
/// split into its timestamp (the first 8 bytes) and the rest, any other one stamped with its record
/// context's timestamp. A `send` that is a `ProduceSend`'s `changelog` (the stream thread's native
/// changelog producer) is called in Rust.
#[pyfunction]
pub fn log_writes(
    py: Python<'_>,
    send: &Bound<'_, PyAny>,
    topic: &Bound<'_, PyAny>,
    partition: &Bound<'_, PyAny>,
    writes: &Bound<'_, PyList>,
    timestamped: bool,
) -> PyResult<()> {
    let native = native_changelog(py, send);
    let timestamp_name = intern!(py, "timestamp");
    for write in writes.iter() {
        let write = write.cast_into::<PyTuple>()?;
        let (key, mut value) = (write.get_item(0)?, write.get_item(1)?);
        let timestamp = if timestamped && !value.is_none() {
            let stored = value.cast::<PyBytes>()?.as_bytes();
            let split = stored.len().min(8);
            let timestamp = signed_big_endian(&stored[..split]);
            value = PyBytes::new(py, &stored[split..]).into_any();
            timestamp
        } else {
            write
                .get_item(2)?
                .getattr(timestamp_name)?
                .extract::<i64>()?
        };
        match &native {
            Some(producer) => producer
                .get()
                .changelog(py, topic, &key, &value, timestamp, partition)?,
            None => {
                send.call1((topic, &key, &value, timestamp, partition))?;
            }
        }
    }
    Ok(())
}

/// The `ProduceSend` whose bound `changelog` method `send` is, if it is one.
fn native_changelog(py: Python<'_>, send: &Bound<'_, PyAny>) -> Option<Py<ProduceSend>> {
    let owner = send.getattr(intern!(py, "__self__")).ok()?;
    let producer = owner.cast_into::<ProduceSend>().ok()?;
    let name = send.getattr(intern!(py, "__name__")).ok()?;
    (name.extract::<&str>().ok()? == "changelog").then(|| producer.unbind())
}

/// `take_flush(batch, plan)` of a stage, whose `process` is `stage`: every entry of the `FlushedBatch`
/// typed (its record context made current first), forwarded as `Change(new.value, old.value if sent)`
/// at the new value's timestamp (the record context's for a delete, `plan.stamp(key)` for session
/// windows), the plan's child current while the stage runs and named as the failed node if it raises;
/// the previous current node restored at the end, whatever happened.
pub fn take_flush<'py>(
    py: Python<'py>,
    stage: impl Fn(&Bound<'py, PyAny>, &Bound<'py, PyAny>, i64, &Bound<'py, PyAny>) -> PyResult<()>,
    batch: &Bound<'py, PyAny>,
    plan: &Bound<'py, PyAny>,
) -> PyResult<()> {
    let writes = batch
        .getattr(intern!(py, "writes"))?
        .cast_into::<PyList>()?;
    let olds = batch.getattr(intern!(py, "olds"))?.cast_into::<PyList>()?;
    let decodeds = batch
        .getattr(intern!(py, "decodeds"))?
        .cast_into::<PyList>()?;
    if olds.len() != writes.len() || decodeds.len() != writes.len() {
        return Err(PyValueError::new_err(format!(
            "a flushed batch of {} writes, {} old values and {} decoded values",
            writes.len(),
            olds.len(),
            decodeds.len()
        )));
    }
    let context = plan.getattr(intern!(py, "context"))?;
    let current_node = Slot::of(&context.get_type(), "current_node")?;
    let previous = current_node.get(py, &context)?;
    let node = plan.getattr(intern!(py, "node"))?;
    current_node.put(py, &context, &node)?;
    let outcome = forward_entries(
        py,
        stage,
        batch,
        plan,
        &context,
        &current_node,
        &node,
        &writes,
        &olds,
        &decodeds,
    );
    current_node.put(py, &context, &previous)?;
    outcome
}

#[allow(clippy::too_many_arguments)]
fn forward_entries<'py>(
    py: Python<'py>,
    stage: impl Fn(&Bound<'py, PyAny>, &Bound<'py, PyAny>, i64, &Bound<'py, PyAny>) -> PyResult<()>,
    batch: &Bound<'py, PyAny>,
    plan: &Bound<'py, PyAny>,
    context: &Bound<'py, PyAny>,
    current_node: &Slot,
    node: &Bound<'py, PyAny>,
    writes: &Bound<'py, PyList>,
    olds: &Bound<'py, PyList>,
    decodeds: &Bound<'py, PyList>,
) -> PyResult<()> {
    let topic = batch.getattr(intern!(py, "topic"))?;
    let utf8_keys = batch.getattr(intern!(py, "utf8_keys"))?.is_truthy()?;
    let deserialize_key = batch.getattr(intern!(py, "deserialize_key"))?;
    let deserialize_value = batch.getattr(intern!(py, "deserialize_value"))?;
    let set_record_context = batch.getattr(intern!(py, "set_record_context"))?;
    let not_decoded = batch.getattr(intern!(py, "not_decoded"))?;
    let child = plan.getattr(intern!(py, "child"))?;
    let child_name = plan.getattr(intern!(py, "child_name"))?;
    let stamp = plan.getattr(intern!(py, "stamp"))?;
    let stamp = (!stamp.is_none()).then_some(stamp);
    let send_old = plan.getattr(intern!(py, "send_old"))?.is_truthy()?;
    let change: SlotClass<3> = SlotClass::of(
        py,
        plan.getattr(intern!(py, "change"))?,
        &["new_value", "old_value", "is_latest"],
    )?;
    let failed_node = Slot::of(&context.get_type(), "failed_node")?;
    let none = py.None().into_bound(py);
    let latest = true.into_pyobject(py)?.to_owned().into_any();
    let (value_name, timestamp_name, headers_name) = (
        intern!(py, "value"),
        intern!(py, "timestamp"),
        intern!(py, "headers"),
    );
    for ((write, old), decoded) in writes.iter().zip(olds.iter()).zip(decodeds.iter()) {
        let write = write.cast_into::<PyTuple>()?;
        let (key, value, record_context) =
            (write.get_item(0)?, write.get_item(1)?, write.get_item(2)?);
        set_record_context.call1((&record_context,))?;
        let new = if decoded.is(&not_decoded) {
            deserialize_value.call1((&topic, &value))?
        } else {
            decoded
        };
        let typed_key = if utf8_keys {
            decode_utf8(py, &key)?
        } else {
            deserialize_key.call1((&topic, &key))?
        };
        let old = if old.is_none() {
            old
        } else {
            deserialize_value.call1((&topic, &old))?
        };
        let new_value = if new.is_none() {
            none.clone()
        } else {
            new.getattr(value_name)?
        };
        let old_value = if old.is_none() || !send_old {
            none.clone()
        } else {
            old.getattr(value_name)?
        };
        let change = change.new_instance(py, [new_value, old_value, latest.clone()])?;
        let timestamp = match &stamp {
            Some(stamp) => stamp.call1((&typed_key,))?,
            None if !new.is_none() => new.getattr(timestamp_name)?,
            None => record_context.getattr(timestamp_name)?,
        };
        let headers = record_context.getattr(headers_name)?;
        current_node.put(py, context, &child)?;
        let sent = timestamp
            .extract::<i64>()
            .and_then(|timestamp| stage(&typed_key, &change, timestamp, &headers));
        if let Err(error) = sent {
            if failed_node.get(py, context)?.is_none() {
                failed_node.put(py, context, &child_name)?;
            }
            return Err(error);
        }
        current_node.put(py, context, node)?;
    }
    Ok(())
}
