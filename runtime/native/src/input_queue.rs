//! The stream thread's group consumer: its fetched input records taken straight from librdkafka into
//! the tasks' record tuples, with the `rd_kafka_t` of confluent-kafka's `Consumer`, instead of through
//! `consume()` (a Python `Message` per record, then read back by `messages.rs`).
//!
//! How: each partition's fetches are forwarded to a queue of this reader's own (`rdkafka_queue.rs`,
//! which also says why that is sound). Here the opening happens inside the rebalance callback, which
//! confluent-kafka runs from `consume()`, before the `assign()`/`incremental_assign()` that starts the
//! fetch. The rebalance, error, log and statistics events stay on the consumer queue for
//! confluent-kafka's `consume()` to serve with its call state: the stream thread keeps calling it every
//! iteration, and this reader never invokes a callback.
//!
//! Each record becomes the tuple `messages.rs` builds from a `Message`: `(offset, timestamp, key, value,
//! headers)`, with the values confluent-kafka's accessors would return (offset None below 0,
//! `timestamp()[1]`, None for a NULL key or value, headers as `headers_type` of `[(name str, value bytes
//! or None)]`, empty without any). Errors (a fetch error, a partition's end) come back as `(code,
//! reason)` for the thread's own handling of an erroneous `Message`. Each message is destroyed once
//! read; nothing of librdkafka's outlives the call.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::null_mut;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use crate::messages::list_new;
use crate::rdkafka_queue::{PartitionQueue, RdMessage, Wait};

/// Fetches the group consumer's input records natively (module docstring).
#[pyclass(module = "kappaflow_native", frozen)]
pub struct InputQueues {
    queue: PartitionQueue,
    headers_type: Py<PyAny>,
    new_empty_list: Option<ffi::newfunc>,
}

/// What one `consume` found: `[((topic, partition), [record tuple])]`, one run per stretch of one
/// partition in the order fetched, and `[(code, reason)]`.
type Consumed<'py> = (Bound<'py, PyList>, Bound<'py, PyList>);

#[pymethods]
impl InputQueues {
    /// `consumer` is the group consumer (a `confluent_kafka.Consumer`), `consumer_type` that class,
    /// `version` `confluent_kafka.version()`, `library` the path of the librdkafka mapped in the process,
    /// `headers_type` what each record's headers are made into (`Headers(headers or ())`).
    #[new]
    fn new(
        consumer: &Bound<'_, PyAny>,
        consumer_type: &Bound<'_, PyType>,
        version: &str,
        library: &str,
        headers_type: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        Ok(InputQueues {
            queue: PartitionQueue::new(consumer, consumer_type, version, library, "input")?,
            headers_type: headers_type.clone().unbind(),
            new_empty_list: list_new(headers_type),
        })
    }

    /// Route `topic`-`partition`'s fetches to this reader's queue; call it before each assignment of
    /// the partition. False (its records then reach `consume()`) when librdkafka has no such partition
    /// or the consumer or this reader is closed.
    fn open(&self, py: Python<'_>, topic: &str, partition: i32) -> PyResult<bool> {
        self.queue.open(py, topic, partition)
    }

    /// Up to `max_records` fetched records and events of the opened partitions, waiting up to
    /// `timeout` seconds for the first (the GIL released meanwhile), not for the batch: see `Consumed`.
    fn consume<'py>(
        &self,
        py: Python<'py>,
        max_records: usize,
        timeout: f64,
    ) -> PyResult<Consumed<'py>> {
        let runs = PyList::empty(py);
        let errors = PyList::empty(py);
        let batch = self.queue.batch(py, max_records, timeout, Wait::ForFirst)?;
        let mut current: Option<(*mut c_void, i32, Bound<'py, PyList>)> = None;
        let mut topics: Vec<(*mut c_void, Bound<'py, PyString>)> = Vec::new();
        for &msg in batch.messages() {
            // SAFETY: each message is a live rd_kafka_message_t until the batch is dropped.
            unsafe { self.take(py, msg, &runs, &errors, &mut current, &mut topics)? };
        }
        Ok((runs, errors))
    }

    /// Stop: this reader's queue is destroyed (before the consumer closes; `consume` then returns
    /// nothing and `open` False).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.queue.close(py)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.queue.traverse(&visit)?;
        visit.call(&self.headers_type)
    }
}

impl InputQueues {
    /// One consumed message: an error into `errors`, a record onto the current run (a new run, pushed
    /// to `runs`, when its partition differs from the last record's).
    ///
    /// SAFETY: `msg` is a live rd_kafka_message_t from this consumer's queue; every message of the
    /// batch stays alive until all are read, so a topic handle compared is never a freed one's address.
    unsafe fn take<'py>(
        &self,
        py: Python<'py>,
        msg: *mut RdMessage,
        runs: &Bound<'py, PyList>,
        errors: &Bound<'py, PyList>,
        current: &mut Option<(*mut c_void, i32, Bound<'py, PyList>)>,
        topics: &mut Vec<(*mut c_void, Bound<'py, PyString>)>,
    ) -> PyResult<()> {
        let m = &*msg;
        if m.err != 0 {
            errors.append((m.err, self.queue.api().errstr(m)))?;
            return Ok(());
        }
        let records = match current {
            Some((rkt, partition, records)) if *rkt == m.rkt && *partition == m.partition => {
                records.clone()
            }
            _ => {
                let topic = match topics.iter().find(|(rkt, _)| *rkt == m.rkt) {
                    Some((_, name)) => name.clone(),
                    None => {
                        let name = PyString::new(py, &self.queue.api().topic_of(m.rkt));
                        topics.push((m.rkt, name.clone()));
                        name
                    }
                };
                let records = PyList::empty(py);
                let tp = PyTuple::new(
                    py,
                    [topic.into_any(), m.partition.into_pyobject(py)?.into_any()],
                )?;
                runs.append((tp, &records))?;
                *current = Some((m.rkt, m.partition, records.clone()));
                records
            }
        };
        let mut kind: c_int = 0;
        let timestamp = (self.queue.api().message_timestamp)(msg, &mut kind);
        let bytes_or_none = |ptr: *mut c_void, len: usize| {
            if ptr.is_null() {
                py.None().into_bound(py)
            } else {
                PyBytes::new(py, std::slice::from_raw_parts(ptr.cast::<u8>(), len)).into_any()
            }
        };
        let offset = if m.offset >= 0 {
            m.offset.into_pyobject(py)?.into_any()
        } else {
            py.None().into_bound(py)
        };
        let record = PyTuple::new(
            py,
            [
                offset,
                timestamp.into_pyobject(py)?.into_any(),
                bytes_or_none(m.key, m.key_len),
                bytes_or_none(m.payload, m.len),
                self.headers(py, msg)?,
            ],
        )?;
        records.append(record)
    }

    /// The record's headers as `Headers(msg.headers() or ())` makes them.
    ///
    /// SAFETY: `msg` is a live message.
    unsafe fn headers<'py>(
        &self,
        py: Python<'py>,
        msg: *mut RdMessage,
    ) -> PyResult<Bound<'py, PyAny>> {
        let headers_type = self.headers_type.bind(py);
        let mut hdrs: *mut c_void = null_mut();
        let mut found: Option<Bound<'py, PyList>> = None;
        if (self.queue.api().message_headers)(msg, &mut hdrs) == 0 && !hdrs.is_null() {
            let mut index = 0usize;
            loop {
                let mut name: *const c_char = std::ptr::null();
                let mut value: *const c_void = std::ptr::null();
                let mut size = 0usize;
                if (self.queue.api().header_get_all)(hdrs, index, &mut name, &mut value, &mut size)
                    != 0
                {
                    break;
                }
                index += 1;
                // confluent-kafka's c_headers_to_py: the name decoded as UTF-8, the value bytes or None
                let name = PyString::new(py, &CStr::from_ptr(name).to_string_lossy());
                let value = if value.is_null() {
                    py.None().into_bound(py)
                } else {
                    PyBytes::new(py, std::slice::from_raw_parts(value.cast::<u8>(), size))
                        .into_any()
                };
                found
                    .get_or_insert_with(|| PyList::empty(py))
                    .append((name, value))?;
            }
        }
        if let Some(found) = found {
            return headers_type.call1((found,));
        }
        match self.new_empty_list {
            // SAFETY: the type's own tp_new, called as type_call calls it (messages.rs).
            Some(new) => {
                let empty = PyTuple::empty(py);
                let made = new(headers_type.as_ptr().cast(), empty.as_ptr(), null_mut());
                Bound::from_owned_ptr_or_err(py, made)
            }
            None => headers_type.call1((PyTuple::empty(py),)),
        }
    }
}
