//! What both native partition-queue readers share (`input_queue.rs`, the stream thread's group
//! consumer, and `restore_queue.rs`, the restore consumer): librdkafka's functions resolved from the
//! library confluent-kafka already mapped, the reader's own queue on the consumer's `rd_kafka_t`, the
//! forwarding of a partition's fetch queue to it, and the batch call that serves it.
//!
//! How a partition reaches the queue: before the partition is assigned, `open` takes its fetch queue
//! (`rd_kafka_queue_get_partition`) and forwards it (`rd_kafka_queue_forward`) to the reader's queue
//! (`rd_kafka_queue_new`), then drops the handle: the forwarding lives on in the partition. librdkafka
//! marks such a queue app-forwarded (`RD_KAFKA_Q_F_FWD_APP`), so the fetch start of the assignment that
//! follows leaves it alone (it would otherwise forward it to the consumer queue, rdkafka_partition.c
//! `rd_kafka_toppar_op_fetch_start`), and a fetch stop (the partition unassigned, revoked or lost, the
//! consumer closing) clears it (`rd_kafka_toppar_fetch_stop`): a partition assigned again is opened
//! again. Everything else (rebalance, error, log and statistics events on the consumer and main queues)
//! stays where it was, for confluent-kafka's `consume()` to serve with its call state.
//!
//! `batch` serves the queue with `rd_kafka_consume_batch_queue`, the call confluent-kafka's
//! `Consumer.consume` makes, so outdated records (a seek, a pause or an unassignment bumps the
//! partition's op version), transaction control records and, under read_committed, aborted
//! transactions' records are dropped by librdkafka exactly as for `consume()`, and the application
//! position advances the same. The messages it returns are destroyed when the `Batch` is dropped, so no
//! librdkafka object outlives the reader's call.
//!
//! Why that is sound: `PartitionQueue::new` checks, as `produce.rs` does for the producer, that the
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
use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::{PyTraverseError, PyVisit};

use crate::produce::{check_consumer, enter, CflHandle};

const RTLD_NOW: c_int = 2;
const RTLD_NOLOAD: c_int = 4;

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

impl RdMessage {
    /// The message's opaque (`_private`): a produced message's delivery state, NULL when it has none.
    pub(crate) fn private(&self) -> *mut c_void {
        self._private
    }
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
    queue_new: QueueNew,
    queue_get_partition: QueueGetPartition,
    queue_forward: QueueForward,
    queue_destroy: QueueDestroy,
    consume_batch_queue: ConsumeBatchQueue,
    message_destroy: MessageDestroy,
    pub(crate) message_timestamp: MessageTimestamp,
    topic_name: TopicName,
    err2str: Err2Str,
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

    /// A message's topic name (`rd_kafka_topic_name`; "" without a topic).
    ///
    /// SAFETY: `rkt` is null or a live topic handle of a live message.
    pub(crate) unsafe fn topic_of(&self, rkt: *mut c_void) -> String {
        if rkt.is_null() {
            return String::new();
        }
        CStr::from_ptr((self.topic_name)(rkt))
            .to_string_lossy()
            .into_owned()
    }

    /// SAFETY: `library` is the librdkafka confluent-kafka's `cimpl` uses; each symbol is transmuted
    /// to its rdkafka.h signature.
    unsafe fn load(library: &str) -> PyResult<Api> {
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

/// The reader's queue; null once closed.
struct Queue(*mut c_void);
// SAFETY: a librdkafka queue handle is thread-safe; it is only used with the GIL held or by the one
// call that holds the mutex.
unsafe impl Send for Queue {}

/// How `PartitionQueue::batch` waits for its records.
#[derive(Clone, Copy)]
pub(crate) enum Wait {
    /// Up to the timeout for the first record alone (detached), the rest taken at once; a zero
    /// timeout stays attached, as releasing the GIL costs more than the call takes.
    ForFirst,
    /// Up to the timeout for the whole batch, always detached.
    ForBatch,
}

/// A consumer's own queue that its opened partitions' fetches are forwarded to (module docstring).
pub(crate) struct PartitionQueue {
    consumer: Py<PyAny>,
    api: Api,
    queue: Mutex<Queue>,
    /// The reader's name in errors ("input", "restore").
    name: &'static str,
}

/// One `batch`'s messages, live until it is dropped (every message destroyed then, the queue locked
/// until then, so a reader's call finishes before `close` destroys the queue).
pub(crate) struct Batch<'a> {
    messages: Vec<*mut RdMessage>,
    api: &'a Api,
    _queue: MutexGuard<'a, Queue>,
}

impl Batch<'_> {
    /// The messages, in the order librdkafka returned them.
    pub(crate) fn messages(&self) -> &[*mut RdMessage] {
        &self.messages
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        for &msg in &self.messages {
            // SAFETY: each message returned by the batch call, destroyed once, none read after.
            unsafe { (self.api.message_destroy)(msg) };
        }
    }
}

impl PartitionQueue {
    /// A queue on `consumer` (a `confluent_kafka.Consumer`, `consumer_type` that class, `version`
    /// `confluent_kafka.version()`), with librdkafka's functions from `library`, the path of the
    /// librdkafka mapped in the process.
    pub(crate) fn new(
        consumer: &Bound<'_, PyAny>,
        consumer_type: &Bound<'_, PyType>,
        version: &str,
        library: &str,
        name: &'static str,
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
        Ok(PartitionQueue {
            consumer: consumer.clone().unbind(),
            api,
            queue: Mutex::new(Queue(queue)),
            name,
        })
    }

    /// librdkafka's functions, for reading a batch's messages.
    pub(crate) fn api(&self) -> &Api {
        &self.api
    }

    /// Route `topic`-`partition`'s fetches to this queue; call it before each assignment of the
    /// partition. False (its records then reach `consume()`) when librdkafka has no such partition or
    /// the consumer or this queue is closed.
    pub(crate) fn open(&self, py: Python<'_>, topic: &str, partition: i32) -> PyResult<bool> {
        let topic_c = CString::new(topic)?;
        let queue = self.lock(py)?;
        if queue.0.is_null() {
            return Ok(false);
        }
        let handle = self.consumer.as_ptr().cast::<CflHandle>();
        // SAFETY: the consumer is held and of the checked type; GIL held; the gate keeps rk alive;
        // the queue is live (locked, not closed).
        unsafe {
            if !enter(handle) {
                return Ok(false);
            }
            let fetchq = (self.api.queue_get_partition)((*handle).rk, topic_c.as_ptr(), partition);
            if !fetchq.is_null() {
                (self.api.queue_forward)(fetchq, queue.0);
                (self.api.queue_destroy)(fetchq);
            }
            (*handle).active_calls.fetch_sub(1, Ordering::SeqCst);
            Ok(!fetchq.is_null())
        }
    }

    /// Up to `max_records` fetched messages of the opened partitions (records and their events),
    /// waiting up to `timeout` seconds as `wait` says; none once the queue or the consumer is closed.
    pub(crate) fn batch(
        &self,
        py: Python<'_>,
        max_records: usize,
        timeout: f64,
        wait: Wait,
    ) -> PyResult<Batch<'_>> {
        let queue = self.lock(py)?;
        let mut messages: Vec<*mut RdMessage> = Vec::new();
        let handle = self.consumer.as_ptr().cast::<CflHandle>();
        // SAFETY: as in `open`; the batch call touches no Python object.
        if queue.0.is_null() || max_records == 0 || unsafe { !enter(handle) } {
            return Ok(Batch {
                messages,
                api: &self.api,
                _queue: queue,
            });
        }
        messages.resize(max_records, null_mut());
        let timeout_ms = (timeout * 1000.0).clamp(0.0, f64::from(c_int::MAX)) as c_int;
        let q = queue.0 as usize;
        let out = messages.as_mut_ptr() as usize;
        let consume = self.api.consume_batch_queue;
        // SAFETY: `out` has room for `from + max` messages; the queue is live while locked.
        let batch = move |timeout_ms: c_int, from: usize, max: usize| unsafe {
            let out = (out as *mut *mut RdMessage).add(from);
            consume(q as *mut c_void, timeout_ms, out, max)
        };
        let count = match wait {
            // librdkafka's batch call waits until it has `max` records or the time is up
            Wait::ForFirst if timeout_ms > 0 => {
                let first = py.detach(move || batch(timeout_ms, 0, 1));
                if first == 1 && max_records > 1 {
                    batch(0, 1, max_records - 1).max(0) + 1
                } else {
                    first
                }
            }
            Wait::ForFirst => batch(0, 0, max_records),
            Wait::ForBatch => py.detach(move || batch(timeout_ms, 0, max_records)),
        };
        // SAFETY: the gate entered above.
        unsafe { (*handle).active_calls.fetch_sub(1, Ordering::SeqCst) };
        let count = usize::try_from(count).map_err(|_| {
            PyRuntimeError::new_err(format!(
                "rd_kafka_consume_batch_queue failed on the {} queue",
                self.name
            ))
        })?;
        messages.truncate(count);
        Ok(Batch {
            messages,
            api: &self.api,
            _queue: queue,
        })
    }

    /// Stop: the queue is destroyed (before the consumer closes; `batch` then returns nothing and
    /// `open` False). A reader dropped without it leaks its queue rather than destroy it after the
    /// consumer's `rd_kafka_t` may be gone.
    pub(crate) fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut queue = self.lock(py)?;
        if !queue.0.is_null() {
            // SAFETY: the handle `new` made, destroyed once.
            unsafe { (self.api.queue_destroy)(queue.0) };
            queue.0 = null_mut();
        }
        Ok(())
    }

    /// The consumer held, for the reader's garbage-collector traversal.
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.consumer)
    }

    /// The queue, locked. `batch` holds the lock while it waits detached from the interpreter, so a
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
                    return Err(PyRuntimeError::new_err(format!(
                        "{} queue lock poisoned",
                        self.name
                    )))
                }
            }
        }
    }
}
