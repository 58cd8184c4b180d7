//! The stream thread's group consumer: its fetched input records taken straight from librdkafka into
//! the tasks' record tuples, with the `rd_kafka_t` of confluent-kafka's `Consumer`, instead of through
//! `consume()` (a Python `Message` per record, then read back by `messages.rs`).
//!
//! How: as `restore_queue.rs` does for the restore consumer, each partition is opened before it is
//! assigned: its fetch queue (`rd_kafka_queue_get_partition`) is forwarded to one queue of this reader's
//! own, which librdkafka then marks app-forwarded, so the fetch start leaves it alone; a fetch stop (the
//! partition revoked or lost, the consumer closing) clears the forwarding, and a partition assigned again
//! is opened again. Here the opening happens inside the rebalance callback, which confluent-kafka runs
//! from `consume()`, before the `assign()`/`incremental_assign()` that starts the fetch. Everything else
//! (the rebalance, error, log and statistics events of the consumer and main queues) stays on the
//! consumer queue for confluent-kafka's `consume()` to serve with its call state: the stream thread keeps
//! calling it every iteration, and this reader never invokes a callback.
//!
//! `consume` serves the queue with `rd_kafka_consume_batch_queue`, the call confluent-kafka's
//! `Consumer.consume` makes, so what librdkafka does there is unchanged: records of an outdated op
//! version (after a pause, a seek or an unassignment) are dropped, control records and, under
//! read_committed, aborted transactions' records never reach the application, and the application
//! position (what `position()` reports and commits start from) advances the same. Each record becomes
//! the tuple `messages.rs` builds from a `Message`: `(offset, timestamp, key, value, headers)`, with the
//! values confluent-kafka's accessors would return (offset None below 0, `timestamp()[1]`, None for a NULL
//! key or value, headers as `headers_type` of `[(name str, value bytes or None)]`, empty without any).
//! Errors (a fetch error, a partition's end) come back as `(code, reason)` for the thread's own handling
//! of an erroneous `Message`. Each message is destroyed once read; nothing of librdkafka's outlives the
//! call.
//!
//! Why that is sound: as `restore_queue.rs` (the consumer's exact type and `Handle` layout checked once,
//! librdkafka's symbols from the one library mapped, every call inside confluent-kafka's use gate).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::null_mut;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, TryLockError};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use crate::messages::list_new;
use crate::produce::{check_consumer, enter, CflHandle};
use crate::restore_queue::{forward_partition, Api, RdMessage};

/// This reader's queue; null once closed.
struct Queue(*mut c_void);
// SAFETY: a librdkafka queue handle is thread-safe; used with the GIL held or under the mutex.
unsafe impl Send for Queue {}

/// Fetches the group consumer's input records natively (module docstring).
#[pyclass(module = "kappaflow_native", frozen)]
pub struct InputQueues {
    consumer: Py<PyAny>,
    headers_type: Py<PyAny>,
    new_empty_list: Option<ffi::newfunc>,
    api: Api,
    queue: Mutex<Queue>,
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
        check_consumer(consumer, consumer_type, version)?;
        // SAFETY: the library confluent-kafka uses (the caller found it mapped).
        let api = unsafe { Api::load(library)? };
        let handle = consumer.as_ptr().cast::<CflHandle>();
        // SAFETY: exactly the checked type, alive (held by `consumer`), GIL held.
        let queue = unsafe {
            if !enter(handle) {
                return Err(PyValueError::new_err("the consumer is closed"));
            }
            let queue = (api.queue_new)((*handle).rk);
            (*handle).active_calls.fetch_sub(1, Ordering::SeqCst);
            queue
        };
        if queue.is_null() {
            return Err(PyValueError::new_err("rd_kafka_queue_new failed"));
        }
        Ok(InputQueues {
            consumer: consumer.clone().unbind(),
            headers_type: headers_type.clone().unbind(),
            new_empty_list: list_new(headers_type),
            api,
            queue: Mutex::new(Queue(queue)),
        })
    }

    /// Route `topic`-`partition`'s fetches to this reader's queue; call it before each assignment of
    /// the partition. False (its records then reach `consume()`) when librdkafka has no such partition
    /// or the consumer or this reader is closed.
    fn open(&self, py: Python<'_>, topic: &str, partition: i32) -> PyResult<bool> {
        let topic_c = CString::new(topic)?;
        let queue = self.lock(py)?;
        if queue.0.is_null() {
            return Ok(false);
        }
        Ok(forward_partition(
            &self.api,
            &self.consumer,
            queue.0,
            &topic_c,
            partition,
        ))
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
        let queue = self.lock(py)?;
        if queue.0.is_null() || max_records == 0 {
            return Ok((runs, errors));
        }
        let handle = self.consumer.as_ptr().cast::<CflHandle>();
        let mut messages: Vec<*mut RdMessage> = vec![null_mut(); max_records];
        let timeout_ms = (timeout * 1000.0).clamp(0.0, f64::from(c_int::MAX)) as c_int;
        // SAFETY: as in `open`; the batch call touches no Python object. It runs detached only when it
        // may wait: a zero-timeout call returns at once, and releasing the GIL costs more than it takes.
        let count = unsafe {
            if !enter(handle) {
                return Ok((runs, errors));
            }
            let q = queue.0 as usize;
            let out = messages.as_mut_ptr() as usize;
            let consume = self.api.consume_batch_queue;
            let batch = move |timeout_ms: c_int, from: usize, max: usize| {
                let out = (out as *mut *mut RdMessage).add(from);
                consume(q as *mut c_void, timeout_ms, out, max)
            };
            // librdkafka's batch call waits until it has `max` records or the time is up: the wait is
            // for the first record alone (as the thread's `consume(1, wait)`), the rest taken at once
            let count = if timeout_ms > 0 {
                let first = py.detach(move || batch(timeout_ms, 0, 1));
                if first == 1 && max_records > 1 {
                    batch(0, 1, max_records - 1).max(0) + 1
                } else {
                    first
                }
            } else {
                batch(0, 0, max_records)
            };
            (*handle).active_calls.fetch_sub(1, Ordering::SeqCst);
            count
        };
        let count = usize::try_from(count).map_err(|_| {
            PyRuntimeError::new_err("rd_kafka_consume_batch_queue failed on the input queue")
        })?;
        let mut taken = Ok(());
        let mut current: Option<(*mut c_void, i32, Bound<'py, PyList>)> = None;
        let mut topics: Vec<(*mut c_void, Bound<'py, PyString>)> = Vec::new();
        for &msg in &messages[..count] {
            // SAFETY: each of the `count` messages is a live rd_kafka_message_t until destroyed below.
            taken = unsafe { self.take(py, msg, &runs, &errors, &mut current, &mut topics) };
            if taken.is_err() {
                break;
            }
        }
        for &msg in &messages[..count] {
            // SAFETY: each message destroyed once, none read after.
            unsafe { (self.api.message_destroy)(msg) };
        }
        taken?;
        Ok((runs, errors))
    }

    /// Stop: this reader's queue is destroyed (before the consumer closes; `consume` then returns
    /// nothing and `open` False). A reader dropped without it leaks its queue rather than destroy it
    /// after the consumer's `rd_kafka_t` may be gone.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut queue = self.lock(py)?;
        if !queue.0.is_null() {
            // SAFETY: the handle `new` made, destroyed once.
            unsafe { (self.api.queue_destroy)(queue.0) };
            queue.0 = null_mut();
        }
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.consumer)?;
        visit.call(&self.headers_type)
    }
}

impl InputQueues {
    /// The queue, locked; retried detached while a waiting `consume` holds it (restore_queue.rs).
    fn lock(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Queue>> {
        loop {
            match self.queue.try_lock() {
                Ok(guard) => return Ok(guard),
                Err(TryLockError::WouldBlock) => {
                    py.detach(|| std::thread::sleep(std::time::Duration::from_micros(200)))
                }
                Err(TryLockError::Poisoned(_)) => {
                    return Err(PyRuntimeError::new_err("input queue lock poisoned"))
                }
            }
        }
    }

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
            errors.append((m.err, self.api.errstr(m)))?;
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
                        let name = PyString::new(py, &self.topic_of(m.rkt));
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
        let timestamp = (self.api.message_timestamp)(msg, &mut kind);
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
        if (self.api.message_headers)(msg, &mut hdrs) == 0 && !hdrs.is_null() {
            let mut index = 0usize;
            loop {
                let mut name: *const c_char = std::ptr::null();
                let mut value: *const c_void = std::ptr::null();
                let mut size = 0usize;
                if (self.api.header_get_all)(hdrs, index, &mut name, &mut value, &mut size) != 0 {
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

    /// A message's topic name (`rd_kafka_topic_name`; "" without a topic).
    ///
    /// SAFETY: `rkt` is null or a live topic handle of a live message.
    unsafe fn topic_of(&self, rkt: *mut c_void) -> String {
        if rkt.is_null() {
            return String::new();
        }
        CStr::from_ptr((self.api.topic_name)(rkt))
            .to_string_lossy()
            .into_owned()
    }
}
