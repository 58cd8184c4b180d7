//! The restore consumer's fetched changelog records taken straight from librdkafka, with the
//! `rd_kafka_t` of the changelog reader's confluent-kafka `Consumer`, instead of through its
//! `consume()` (a Python `Message`, a topic `str`, key and value `bytes` built per record, then read
//! back by `restore.rs`).
//!
//! How: the restore consumer is assign()-only (no group, no rebalance callback). Before a changelog
//! partition is assigned, `open` takes its fetch queue (`rd_kafka_queue_get_partition`) and forwards it
//! (`rd_kafka_queue_forward`) to one queue of this reader's own (`rd_kafka_queue_new`), then drops the
//! handle: the forwarding lives on in the partition. librdkafka marks such a queue app-forwarded
//! (`RD_KAFKA_Q_F_FWD_APP`), so the fetch start of the assignment that follows leaves it alone (it
//! would otherwise forward it to the consumer queue, rdkafka_partition.c `rd_kafka_toppar_op_fetch_start`),
//! and a fetch stop (the partition unassigned or the consumer closing) clears it
//! (`rd_kafka_toppar_fetch_stop`): a partition assigned again is opened again. So the partition's fetched
//! records, its fetch errors and its end-of-partition events reach only this queue, and everything else
//! (errors, logs, statistics on the consumer and main queues) stays where it was, for confluent-kafka's
//! `consume()` to serve with its call state (kappaflow calls it every step with a zero timeout, and
//! applies any record it still returns first).
//!
//! `consume` serves that queue with `rd_kafka_consume_batch_queue`, the call confluent-kafka's
//! `Consumer.consume` makes on its consumer queue, so outdated records (a seek or an unassignment bumps
//! the partition's op version), transaction control records and, under read_committed, aborted
//! transactions' records are dropped by librdkafka exactly as for `consume()`, and the application
//! position advances the same. Each record's key, value, offset and timestamp are copied into a
//! `ChangelogRun` per partition and the message is destroyed at once, so no librdkafka object outlives
//! the call (a run may live on after the consumer is closed). `write` then fills a rocksdict
//! `WriteBatch` from a run as `restore.rs` does from messages: a tombstone (NULL payload: None in
//! confluent-kafka) as `delete`, a NULL key as b"", a timestamped store's value prefixed with its
//! timestamp. Errors go back to the reader as `(topic, partition, code, reason)`, the reason being
//! confluent-kafka's (`rd_kafka_message_errstr`), and ends as offsets, for the same handling as the
//! messages `consume()` returns.
//!
//! Why that is sound: `RestoreQueues::new` checks, as `produce.rs` does for the producer, that the
//! installed confluent-kafka is one whose `Handle` layout is known, that the consumer is exactly
//! `cimpl.Consumer` of that size, and that librdkafka's symbols come from the one library already
//! mapped in the process (`dlopen` with `RTLD_NOLOAD`). Each call enters confluent-kafka's use gate
//! (`active_calls`) and does nothing once the consumer is closing or closed. `rd_kafka_message_t` is
//! librdkafka's public struct (rdkafka.h, ABI-stable).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::null_mut;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, TryLockError};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use crate::produce::{check_consumer, enter, CflHandle};
use crate::restore::{prefixed_bytes, vectorcall};

const RTLD_NOW: c_int = 2;
const RTLD_NOLOAD: c_int = 4;
/// `RD_KAFKA_RESP_ERR__PARTITION_EOF`.
const ERR_PARTITION_EOF: c_int = -191;

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// librdkafka's `rd_kafka_message_t` (rdkafka.h).
#[repr(C)]
pub(crate) struct RdMessage {
    pub(crate) err: c_int,
    pub(crate) rkt: *mut c_void,
    pub(crate) partition: i32,
    pub(crate) payload: *mut c_void,
    pub(crate) len: usize,
    pub(crate) key: *mut c_void,
    pub(crate) key_len: usize,
    pub(crate) offset: i64,
    _private: *mut c_void,
}

type QueueNew = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type QueueGetPartition = unsafe extern "C" fn(*mut c_void, *const c_char, i32) -> *mut c_void;
type QueueForward = unsafe extern "C" fn(*mut c_void, *mut c_void);
type QueueDestroy = unsafe extern "C" fn(*mut c_void);
type ConsumeBatchQueue =
    unsafe extern "C" fn(*mut c_void, c_int, *mut *mut RdMessage, usize) -> isize;
type MessageDestroy = unsafe extern "C" fn(*mut RdMessage);
type MessageTimestamp = unsafe extern "C" fn(*const RdMessage, *mut c_int) -> i64;
type TopicName = unsafe extern "C" fn(*const c_void) -> *const c_char;
type Err2Str = unsafe extern "C" fn(c_int) -> *const c_char;
type MessageHeaders = unsafe extern "C" fn(*const RdMessage, *mut *mut c_void) -> c_int;
type HeaderGetAll = unsafe extern "C" fn(
    *const c_void,
    usize,
    *mut *const c_char,
    *mut *const c_void,
    *mut usize,
) -> c_int;

/// The librdkafka functions used, resolved once from the mapped library.
pub(crate) struct Api {
    pub(crate) queue_new: QueueNew,
    pub(crate) queue_get_partition: QueueGetPartition,
    pub(crate) queue_forward: QueueForward,
    pub(crate) queue_destroy: QueueDestroy,
    pub(crate) consume_batch_queue: ConsumeBatchQueue,
    pub(crate) message_destroy: MessageDestroy,
    pub(crate) message_timestamp: MessageTimestamp,
    pub(crate) topic_name: TopicName,
    pub(crate) err2str: Err2Str,
    pub(crate) message_headers: MessageHeaders,
    pub(crate) header_get_all: HeaderGetAll,
}

impl Api {
    /// A message's error text as confluent-kafka's `Message_new0` reads it (`rd_kafka_message_errstr`).
    ///
    /// SAFETY: `m` is a live message with an error.
    pub(crate) unsafe fn errstr(&self, m: &RdMessage) -> String {
        if m.payload.is_null() {
            CStr::from_ptr((self.err2str)(m.err))
                .to_string_lossy()
                .into_owned()
        } else {
            let raw = std::slice::from_raw_parts(m.payload.cast::<u8>(), m.len);
            let raw = raw.split(|b| *b == 0).next().unwrap_or(raw);
            String::from_utf8_lossy(raw).into_owned()
        }
    }

    /// SAFETY: `library` is the librdkafka confluent-kafka's `cimpl` uses; each symbol is transmuted
    /// to its rdkafka.h signature.
    pub(crate) unsafe fn load(library: &str) -> PyResult<Api> {
        let path = CString::new(library)?;
        let lib = dlopen(path.as_ptr(), RTLD_NOW | RTLD_NOLOAD);
        if lib.is_null() {
            return Err(PyValueError::new_err(format!(
                "{library} is not loaded in this process"
            )));
        }
        let symbol = |name: &CStr| {
            let found = dlsym(lib, name.as_ptr());
            if found.is_null() {
                Err(PyValueError::new_err(format!("{library} has no {name:?}")))
            } else {
                Ok(found)
            }
        };
        macro_rules! sym {
            ($name:literal, $ty:ty) => {
                std::mem::transmute::<*mut c_void, $ty>(symbol($name)?)
            };
        }
        Ok(Api {
            queue_new: sym!(c"rd_kafka_queue_new", QueueNew),
            queue_get_partition: sym!(c"rd_kafka_queue_get_partition", QueueGetPartition),
            queue_forward: sym!(c"rd_kafka_queue_forward", QueueForward),
            queue_destroy: sym!(c"rd_kafka_queue_destroy", QueueDestroy),
            consume_batch_queue: sym!(c"rd_kafka_consume_batch_queue", ConsumeBatchQueue),
            message_destroy: sym!(c"rd_kafka_message_destroy", MessageDestroy),
            message_timestamp: sym!(c"rd_kafka_message_timestamp", MessageTimestamp),
            topic_name: sym!(c"rd_kafka_topic_name", TopicName),
            err2str: sym!(c"rd_kafka_err2str", Err2Str),
            message_headers: sym!(c"rd_kafka_message_headers", MessageHeaders),
            header_get_all: sym!(c"rd_kafka_header_get_all", HeaderGetAll),
        })
    }
}

/// This reader's queue (`rd_kafka_queue_new` on the consumer's `rd_kafka_t`); null once closed.
struct Queue(*mut c_void);
// SAFETY: a librdkafka queue handle is thread-safe; it is only used with the GIL held or by the one
// call that holds the mutex.
unsafe impl Send for Queue {}

/// Fetches the restore consumer's changelog records natively (module docstring).
#[pyclass(module = "kappaflow_native", frozen)]
pub struct RestoreQueues {
    consumer: Py<PyAny>,
    api: Api,
    queue: Mutex<Queue>,
}

/// One record of a run: where its key and value lie in the run's bytes (None: NULL), its offset and
/// timestamp.
struct Record {
    key: Option<(usize, usize)>,
    value: Option<(usize, usize)>,
    offset: i64,
    timestamp: i64,
}

/// One changelog partition's records from one `consume`, in offset order, copied out of librdkafka.
#[pyclass(module = "kappaflow_native", frozen)]
pub struct ChangelogRun {
    data: Vec<u8>,
    records: Vec<Record>,
}

impl ChangelogRun {
    fn slice(&self, span: (usize, usize)) -> &[u8] {
        &self.data[span.0..span.0 + span.1]
    }

    fn push(&mut self, key: Option<&[u8]>, value: Option<&[u8]>, offset: i64, timestamp: i64) {
        let mut place = |bytes: Option<&[u8]>| {
            bytes.map(|b| {
                let at = self.data.len();
                self.data.extend_from_slice(b);
                (at, b.len())
            })
        };
        let key = place(key);
        let value = place(value);
        self.records.push(Record {
            key,
            value,
            offset,
            timestamp,
        });
    }
}

#[pymethods]
impl ChangelogRun {
    fn __len__(&self) -> usize {
        self.records.len()
    }

    /// The changelog offset after the run's last record (None when it has none).
    #[getter]
    fn next_offset(&self) -> Option<i64> {
        self.records.last().map(|r| r.offset + 1)
    }

    /// The run without its records at or past `limit` nor those without a key: what restoring a
    /// source topic that is a store's changelog applies (the changelog reader's filter).
    fn limited(&self, limit: i64) -> ChangelogRun {
        let mut run = ChangelogRun {
            data: Vec::new(),
            records: Vec::new(),
        };
        for r in &self.records {
            if r.offset < limit && r.key.is_some() {
                let key = r.key.map(|s| self.slice(s));
                let value = r.value.map(|s| self.slice(s));
                run.push(key, value, r.offset, r.timestamp);
            }
        }
        run
    }

    /// `[(key or b"", value, timestamp)]`: the records as a store's `restore` callback takes them.
    fn records<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for r in &self.records {
            let key = PyBytes::new(py, r.key.map(|s| self.slice(s)).unwrap_or(b""));
            let value = match r.value {
                Some(s) => PyBytes::new(py, self.slice(s)).into_any(),
                None => py.None().into_bound(py),
            };
            out.append(PyTuple::new(
                py,
                [
                    key.into_any(),
                    value,
                    r.timestamp.into_pyobject(py)?.into_any(),
                ],
            )?)?;
        }
        Ok(out)
    }
}

/// What one `consume` found: `[((topic, partition), run)]` in first-seen order, `{(topic,
/// partition): end offset}` and `[(topic, partition, code, reason)]` in order.
type Consumed<'py> = (Bound<'py, PyList>, Bound<'py, PyDict>, Bound<'py, PyList>);

#[pymethods]
impl RestoreQueues {
    /// `consumer` is the restore consumer (a `confluent_kafka.Consumer`), `consumer_type` that class,
    /// `version` `confluent_kafka.version()`, `library` the path of the librdkafka mapped in the process.
    #[new]
    fn new(
        consumer: &Bound<'_, PyAny>,
        consumer_type: &Bound<'_, PyType>,
        version: &str,
        library: &str,
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
        Ok(RestoreQueues {
            consumer: consumer.clone().unbind(),
            api,
            queue: Mutex::new(Queue(queue)),
        })
    }

    /// Route `topic`-`partition`'s fetched records to this reader's queue; call it before assigning
    /// the partition, each time. False (the records then reach `consume()`) when librdkafka has no
    /// such partition or the consumer or this reader is closed.
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
    /// `timeout` seconds for the first (the GIL released meanwhile): see `Consumed`.
    fn consume<'py>(
        &self,
        py: Python<'py>,
        max_records: usize,
        timeout: f64,
    ) -> PyResult<Consumed<'py>> {
        let runs = PyList::empty(py);
        let ends = PyDict::new(py);
        let errors = PyList::empty(py);
        let queue = self.lock(py)?;
        if queue.0.is_null() || max_records == 0 {
            return Ok((runs, ends, errors));
        }
        let handle = self.consumer.as_ptr().cast::<CflHandle>();
        let mut messages: Vec<*mut RdMessage> = vec![null_mut(); max_records];
        let timeout_ms = (timeout * 1000.0).clamp(0.0, f64::from(c_int::MAX)) as c_int;
        // SAFETY: as in `open`; the batch call touches no Python object, so it runs detached.
        let count = unsafe {
            if !enter(handle) {
                return Ok((runs, ends, errors));
            }
            let q = queue.0 as usize;
            let out = messages.as_mut_ptr() as usize;
            let consume = self.api.consume_batch_queue;
            let count = py.detach(move || {
                consume(
                    q as *mut c_void,
                    timeout_ms,
                    out as *mut *mut RdMessage,
                    max_records,
                )
            });
            (*handle).active_calls.fetch_sub(1, Ordering::SeqCst);
            count
        };
        let count = usize::try_from(count).map_err(|_| {
            PyRuntimeError::new_err("rd_kafka_consume_batch_queue failed on the restore queue")
        })?;
        // The runs by partition (one per partition seen; librdkafka hands runs over, so the last one
        // found is checked first, by its topic handle: every message stays alive until all are
        // copied, so a handle compared is never a freed one's address), then every message destroyed.
        let mut found: Vec<(*mut c_void, i32, String, ChangelogRun)> = Vec::new();
        let mut last = usize::MAX;
        let mut taken = Ok(());
        for &msg in &messages[..count] {
            // SAFETY: each of the `count` messages is a live rd_kafka_message_t until destroyed below.
            taken = unsafe { self.take(msg, &mut found, &mut last, &ends, &errors) };
            if taken.is_err() {
                break;
            }
        }
        for &msg in &messages[..count] {
            // SAFETY: each message destroyed once, none read after.
            unsafe { (self.api.message_destroy)(msg) };
        }
        taken?;
        for (_rkt, partition, topic, run) in found {
            let tp = PyTuple::new(
                py,
                [
                    topic.into_pyobject(py)?.into_any(),
                    partition.into_pyobject(py)?.into_any(),
                ],
            )?;
            runs.append((tp, Bound::new(py, run)?))?;
        }
        Ok((runs, ends, errors))
    }

    /// Each record of `run` into `batch` (a rocksdict `WriteBatch`) as `ChangelogMessages.write` puts
    /// consumed messages: a tombstone as `delete(key)`, any other as `put(key, value)`, the value
    /// prefixed with the timestamp (8 bytes, big-endian) when `timestamped`, a NULL key as b"".
    fn write<'py>(
        &self,
        py: Python<'py>,
        batch: &Bound<'py, PyAny>,
        run: &Bound<'py, ChangelogRun>,
        timestamped: bool,
    ) -> PyResult<()> {
        let put = batch.getattr(intern!(py, "put"))?;
        let delete = batch.getattr(intern!(py, "delete"))?;
        let run = run.get();
        for r in &run.records {
            let key = prefixed_bytes(py, r.key.map(|s| run.slice(s)).unwrap_or(b""), None)?;
            let Some(span) = r.value else {
                vectorcall(py, &delete, [null_mut(), key.as_ptr()])?;
                continue;
            };
            let prefix = timestamped.then(|| r.timestamp.to_be_bytes());
            let value = prefixed_bytes(py, run.slice(span), prefix.as_ref().map(|p| &p[..]))?;
            vectorcall(py, &put, [null_mut(), key.as_ptr(), value.as_ptr()])?;
        }
        Ok(())
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
        visit.call(&self.consumer)
    }
}

impl RestoreQueues {
    /// The queue, locked. `consume` holds the lock while it waits detached from the interpreter, so a
    /// caller on another thread never blocks on it with the GIL held (that would deadlock with the
    /// waiter taking the GIL back): it retries, detached between tries.
    fn lock(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Queue>> {
        loop {
            match self.queue.try_lock() {
                Ok(guard) => return Ok(guard),
                Err(TryLockError::WouldBlock) => {
                    py.detach(|| std::thread::sleep(std::time::Duration::from_micros(200)))
                }
                Err(TryLockError::Poisoned(_)) => {
                    return Err(PyRuntimeError::new_err("restore queue lock poisoned"))
                }
            }
        }
    }

    /// One consumed message: an error into `ends` / `errors`, a record into its partition's run.
    ///
    /// SAFETY: `msg` is a live rd_kafka_message_t from this consumer's queue.
    unsafe fn take<'py>(
        &self,
        msg: *mut RdMessage,
        found: &mut Vec<(*mut c_void, i32, String, ChangelogRun)>,
        last: &mut usize,
        ends: &Bound<'py, PyDict>,
        errors: &Bound<'py, PyList>,
    ) -> PyResult<()> {
        let m = &*msg;
        if m.err != 0 {
            let topic = self.topic_of(m.rkt);
            if m.err == ERR_PARTITION_EOF {
                ends.set_item((topic, m.partition), m.offset)?;
                return Ok(());
            }
            let reason = self.api.errstr(m);
            errors.append((topic, m.partition, m.err, reason))?;
            return Ok(());
        }
        let index = match found.get(*last) {
            Some((rkt, partition, _, _)) if *rkt == m.rkt && *partition == m.partition => *last,
            _ => {
                let topic = self.topic_of(m.rkt);
                match found
                    .iter()
                    .position(|(_, p, t, _)| *p == m.partition && *t == topic)
                {
                    Some(i) => i,
                    None => {
                        let run = ChangelogRun {
                            data: Vec::new(),
                            records: Vec::new(),
                        };
                        found.push((m.rkt, m.partition, topic, run));
                        found.len() - 1
                    }
                }
            }
        };
        *last = index;
        let mut kind: c_int = 0;
        let timestamp = (self.api.message_timestamp)(msg, &mut kind);
        let key =
            (!m.key.is_null()).then(|| std::slice::from_raw_parts(m.key.cast::<u8>(), m.key_len));
        let value = (!m.payload.is_null())
            .then(|| std::slice::from_raw_parts(m.payload.cast::<u8>(), m.len));
        found[index].3.push(key, value, m.offset, timestamp);
        Ok(())
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

/// Forward `topic`-`partition`'s librdkafka fetch queue to `queue` (a reader's own, open), as both native
/// readers (this one and `input_queue.rs`) do before each assignment: false when librdkafka has no such
/// partition or the consumer is closed.
pub(crate) fn forward_partition(
    api: &Api,
    consumer: &Py<PyAny>,
    queue: *mut c_void,
    topic: &CStr,
    partition: i32,
) -> bool {
    let handle = consumer.as_ptr().cast::<CflHandle>();
    // SAFETY: the consumer is held and of the checked type; GIL held (the caller's lock); the gate keeps
    // rk alive; `queue` is the caller's live queue.
    unsafe {
        if !enter(handle) {
            return false;
        }
        let fetchq = (api.queue_get_partition)((*handle).rk, topic.as_ptr(), partition);
        if !fetchq.is_null() {
            (api.queue_forward)(fetchq, queue);
            (api.queue_destroy)(fetchq);
        }
        (*handle).active_calls.fetch_sub(1, Ordering::SeqCst);
        !fetchq.is_null()
    }
}
