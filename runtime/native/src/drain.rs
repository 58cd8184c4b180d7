//! A task's loop over one input partition's queue, mirroring `kappaflow.tasks.drain.drain_python` step
//! for step: user callbacks, serdes, handlers and every failure path are Python objects called from here,
//! in the same order, with the same arguments. What moves to Rust is only the interpreter's own work per
//! record.

use pyo3::exceptions::PyException;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::slots::{decode_utf8, Slot, SlotClass};
use crate::stages::Next;
use crate::touches::RECORD_CONTEXT_FIELDS;

/// What `drain` needs from its Python plan, read once per call.
struct Plan<'py> {
    topic: Bound<'py, PyAny>,
    partition: Bound<'py, PyAny>,
    key_utf8: bool,
    value_utf8: bool,
    key_deserializer: Bound<'py, PyAny>,
    value_deserializer: Bound<'py, PyAny>,
    custom_extractor: bool,
    extract_timestamp: Bound<'py, PyAny>,
    deserialization_failed: Bound<'py, PyAny>,
    registry_unavailable: Bound<'py, PyAny>,
    processing_failed: Bound<'py, PyAny>,
    passed_through: Bound<'py, PyAny>,
    context: Bound<'py, PyAny>,
    record_context: SlotClass<5>,
    context_current: Slot,
    context_current_node: Slot,
    context_failed_node: Slot,
    context_stream_time: Slot,
    node: Bound<'py, PyAny>,
    call: Bound<'py, PyAny>,
    /// `call` as a stage: a native one is called in Rust, no Python call per record
    stage: Next,
    record_type: Bound<'py, PyAny>,
    schedules: Bound<'py, PyAny>,
    punctuate: Bound<'py, PyAny>,
}

impl<'py> Plan<'py> {
    fn read(py: Python<'py>, plan: &Bound<'py, PyAny>) -> PyResult<Self> {
        let get = |name: &Bound<'py, PyString>| plan.getattr(name);
        let context = get(intern!(py, "context"))?;
        let context_type = context.get_type();
        let context_slot = |name: &str| Slot::of(&context_type, name);
        let record_context = SlotClass::of(
            py,
            get(intern!(py, "record_context"))?,
            RECORD_CONTEXT_FIELDS,
        )?;
        let call = get(intern!(py, "call"))?;
        let stage = Next::of(&call);
        Ok(Plan {
            topic: get(intern!(py, "topic"))?,
            partition: get(intern!(py, "partition"))?,
            key_utf8: get(intern!(py, "key_utf8"))?.is_truthy()?,
            value_utf8: get(intern!(py, "value_utf8"))?.is_truthy()?,
            key_deserializer: get(intern!(py, "key_deserializer"))?,
            value_deserializer: get(intern!(py, "value_deserializer"))?,
            custom_extractor: get(intern!(py, "custom_extractor"))?.is_truthy()?,
            extract_timestamp: get(intern!(py, "extract_timestamp"))?,
            deserialization_failed: get(intern!(py, "deserialization_failed"))?,
            registry_unavailable: get(intern!(py, "registry_unavailable"))?,
            processing_failed: get(intern!(py, "processing_failed"))?,
            passed_through: get(intern!(py, "passed_through"))?,
            context_current: context_slot("current")?,
            context_current_node: context_slot("current_node")?,
            context_failed_node: context_slot("failed_node")?,
            context_stream_time: context_slot("stream_time")?,
            context,
            record_context,
            node: get(intern!(py, "node"))?,
            call,
            stage,
            record_type: get(intern!(py, "record_type"))?,
            schedules: get(intern!(py, "schedules"))?,
            punctuate: get(intern!(py, "punctuate"))?,
        })
    }

    /// The record's key and value as the source's serdes make them; on failure, whether the key failed.
    fn deserialize(
        &self,
        py: Python<'py>,
        raw_key: &Bound<'py, PyAny>,
        raw_value: &Bound<'py, PyAny>,
    ) -> Result<(Bound<'py, PyAny>, Bound<'py, PyAny>), (PyErr, bool)> {
        let key = if self.key_utf8 && !raw_key.is_none() {
            decode_utf8(py, raw_key)
        } else {
            self.key_deserializer.call1((&self.topic, raw_key))
        }
        .map_err(|e| (e, true))?;
        let value = if self.value_utf8 && !raw_value.is_none() {
            decode_utf8(py, raw_value)
        } else {
            self.value_deserializer.call1((&self.topic, raw_value))
        }
        .map_err(|e| (e, false))?;
        Ok((key, value))
    }

    /// Hand the record to the source's child (or the source), as current node.
    fn deliver(
        &self,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        timestamp: i64,
        headers: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        if self.record_type.is_none() {
            self.stage.call(key.py(), key, value, timestamp, headers)?;
        } else {
            let record = self.record_type.call1((key, value, timestamp, headers))?;
            self.call.call1((record,))?;
        }
        Ok(())
    }
}

/// The result handed back to Python: `(count, last_offset, partition_time, processed, error)`.
type Drained = (i64, i64, i64, i64, Option<Py<PyAny>>);

/// The loop's running state: what the task writes back however the loop ends.
struct Progress {
    partition_time: i64,
    stream_time: i64,
    processed: i64,
}

impl<'py> Plan<'py> {
    /// One record from the head of `queue`: its offset once it is consumed (and popped), None when the
    /// queue is empty. An error leaves the record at the head, as the Python loop does.
    fn one(
        &self,
        py: Python<'py>,
        queue: &Bound<'py, PyAny>,
        popleft: &Bound<'py, PyAny>,
        progress: &mut Progress,
    ) -> PyResult<Option<i64>> {
        if queue.len()? == 0 {
            return Ok(None);
        }
        let raw_any = queue.get_item(0)?;
        let raw = raw_any.cast::<PyTuple>()?;
        let offset_obj = raw.get_item(0)?;
        let offset: i64 = offset_obj.extract()?;
        let mut timestamp: i64 = raw.get_item(1)?.extract()?;
        let (raw_key, raw_value, headers) = (raw.get_item(2)?, raw.get_item(3)?, raw.get_item(4)?);
        let mut skip = false;
        let none = py.None().into_bound(py);
        let (key, value) = match self.deserialize(py, &raw_key, &raw_value) {
            Ok(kv) => kv,
            Err((e, key_failed)) => {
                if e.is_instance(py, &self.registry_unavailable)
                    || !e.is_instance_of::<PyException>(py)
                {
                    return Err(e);
                }
                self.deserialization_failed
                    .call1((e.into_value(py), key_failed, &raw_any))?;
                skip = true;
                (none.clone(), none.clone())
            }
        };
        if !skip && (timestamp < 0 || self.custom_extractor) {
            timestamp = self
                .extract_timestamp
                .call1((&raw_any, &key, &value, progress.partition_time))?
                .extract()?;
            skip = timestamp < 0;
        }
        if !skip {
            if timestamp > progress.partition_time {
                progress.partition_time = timestamp;
            }
            let context = &self.context;
            // one int object for the stream time and the record context (two were allocated per record)
            let timestamp_obj = timestamp.into_pyobject(py)?.into_any();
            if timestamp > progress.stream_time {
                progress.stream_time = timestamp;
                self.context_stream_time.put(py, context, &timestamp_obj)?;
            }
            let record_context = self.record_context.new_instance(
                py,
                [
                    timestamp_obj,
                    self.topic.clone(),
                    self.partition.clone(),
                    offset_obj,
                    headers.clone(),
                ],
            )?;
            self.context_current.put(py, context, &record_context)?;
            self.context_current_node.put(py, context, &self.node)?;
            let outcome = match self.deliver(&key, &value, timestamp, &headers) {
                Ok(()) => Ok(()),
                Err(e)
                    if e.is_instance(py, &self.passed_through)
                        || !e.is_instance_of::<PyException>(py) =>
                {
                    Err(e)
                }
                Err(e) => self
                    .processing_failed
                    .call1((e.into_value(py), &raw_any))
                    .map(|_| ()),
            };
            self.context_current_node.put(py, context, &none)?;
            self.context_failed_node.put(py, context, &none)?;
            outcome?;
            progress.processed += 1;
            if self.schedules.len()? > 0 {
                self.punctuate.call1((progress.stream_time,))?;
            }
        }
        popleft.call0()?;
        Ok(Some(offset))
    }
}

/// Process up to `limit` records from the head of `queue` (a deque of record tuples), as
/// `kappaflow.tasks.drain.drain_python` does. Never raises for what happens inside the loop: the error
/// that ends it comes back as the last element, after the progress the task must keep.
#[pyfunction]
pub fn drain<'py>(
    py: Python<'py>,
    queue: &Bound<'py, PyAny>,
    limit: i64,
    plan: &Bound<'py, PyAny>,
    partition_time: i64,
    stream_time: i64,
) -> PyResult<Drained> {
    let plan = Plan::read(py, plan)?;
    let popleft = queue.getattr(intern!(py, "popleft"))?;
    let mut progress = Progress {
        partition_time,
        stream_time,
        processed: 0,
    };
    let (mut count, mut last) = (0i64, -1i64);
    let mut error: Option<PyErr> = None;
    while count < limit {
        match plan.one(py, queue, &popleft, &mut progress) {
            Ok(Some(offset)) => {
                last = offset;
                count += 1;
            }
            Ok(None) => break,
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let error = error.map(|e| e.into_value(py).into_any());
    Ok((
        count,
        last,
        progress.partition_time,
        progress.processed,
        error,
    ))
}
