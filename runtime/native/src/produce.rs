//! Sink, repartition and changelog records produced straight into librdkafka (`rd_kafka_producev`) with the
//! `rd_kafka_t` of the stream thread's confluent-kafka `Producer`, instead of through its Python
//! `produce(...)` (keyword parsing and a call through the interpreter per record).
//!
//! Why that is the same production: it is the call confluent-kafka's `Producer.produce` makes
//! (`Producer.c`: `RD_KAFKA_MSG_F_COPY`, the topic by name, the partition or `RD_KAFKA_PARTITION_UA`
//! for the configured `murmur2_random` partitioner, the key, value and timestamp, the per-message
//! state as the opaque) on the same `rd_kafka_t`, so a record joins the same queues, batches and the
//! open transaction, and is flushed, purged and aborted with the others. Its delivery report reaches
//! confluent-kafka's own `dr_msg_cb`, which reads the opaque as its `struct Producer_msgstate
//! { Handle *self; PyObject *dr_cb; }`, calls `dr_cb` (unless `delivery.report.only.error` and no
//! error), then `Py_DECREF`s it and `free`s the struct; a NULL opaque it returns on at once. So a
//! record whose callback is None (exactly_once_v2: no default `on_delivery` either) is produced with
//! a NULL opaque, which is what confluent-kafka's calloc'd state with no callback amounts to; one with
//! a callback (at_least_once: the collector's error report) gets the struct, calloc'd here with the
//! process's C allocator for confluent-kafka's `free`.
//!
//! Why that is sound: `ProduceSend::new` checks the confluent-kafka version is one whose `Handle` and
//! msgstate layouts are known (`KNOWN_VERSIONS`, from its sdist), the producer type's name and size,
//! and that librdkafka's symbols come from the one library already mapped in the process (`dlopen`
//! with `RTLD_NOLOAD` of the path kappaflow found there): the library confluent-kafka's `cimpl` uses.
//! A probe then produces through both paths and compares the delivery reports
//! (`kappaflow.runner.native_produce`). Per record, anything but the common shape goes to the Python
//! `send` it was given (the reference): another producer type, a producer closing or closed, headers,
//! a negative timestamp, a key or value that is not bytes or None, a topic that is not a plain str.
//! So does any error librdkafka answers: nothing was enqueued, and the Python `send` produces the
//! record again with its own handling (a full queue: serve delivery reports and retry; anything else:
//! the typed error), so the outcome is the Python path's.
//!
//! Changelog records (`changelog`) go the same way through the clients' `changelog_producer` with the
//! collector's offset report as the callback: confluent-kafka's `dr_msg_cb` hands it the delivered
//! `Message` (its offset the checkpoint needs) exactly as for a Python `produce(on_delivery=...)`.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr, CString};
use std::mem::size_of;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyType};
use pyo3::{PyTraverseError, PyVisit};

/// The confluent-kafka versions whose `Handle` and `Producer_msgstate` are the structs below.
pub const KNOWN_VERSIONS: &[&str] = &["2.16.1"];

/// The `tp_name` of confluent-kafka's producer type.
const PRODUCER_TYPE_NAME: &CStr = c"cimpl.Producer";

/// librdkafka's `rd_kafka_vtype_t` values and flags (rdkafka.h; part of its ABI).
const VTYPE_END: c_int = 0;
const VTYPE_TOPIC: c_int = 1;
const VTYPE_PARTITION: c_int = 3;
const VTYPE_VALUE: c_int = 4;
const VTYPE_KEY: c_int = 5;
const VTYPE_OPAQUE: c_int = 6;
const VTYPE_MSGFLAGS: c_int = 7;
const VTYPE_TIMESTAMP: c_int = 8;
const MSG_F_COPY: c_int = 0x2;
const PARTITION_UA: i32 = -1;
const RTLD_NOW: c_int = 2;
const RTLD_NOLOAD: c_int = 4;
/// Every this many records sent natively, the producers' reports are served (as the collector does).
const SERVE_EVERY: u64 = 0x400;

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn calloc(count: usize, size: usize) -> *mut c_void;
    fn free(ptr: *mut c_void);
}

type Producev = unsafe extern "C" fn(rk: *mut c_void, ...) -> c_int;
type RkName = unsafe extern "C" fn(rk: *mut c_void) -> *const c_char;

/// confluent-kafka's `Handle` (confluent_kafka.h) on Linux with `WITH_PY_TSS`, up to the producer's
/// half of its union; `_union_rest` pads the union to its consumer half's size.
#[repr(C)]
pub(crate) struct CflHandle {
    ob_base: ffi::PyObject,
    pub(crate) rk: *mut c_void,
    error_cb: *mut ffi::PyObject,
    throttle_cb: *mut ffi::PyObject,
    stats_cb: *mut ffi::PyObject,
    initiated: c_int,
    tls_initialized: c_int,
    tls_key: c_uint,
    rk_type: c_int,
    logger: *mut ffi::PyObject,
    oauth_cb: *mut ffi::PyObject,
    oauth_token_set: AtomicI32,
    pub(crate) active_calls: AtomicI32,
    closing: AtomicI32,
    closing_thread: c_ulong,
    default_dr_cb: *mut ffi::PyObject,
    dr_only_error: c_int,
    _union_rest: [u8; 60],
}

/// confluent-kafka's `struct Producer_msgstate` (Producer.c).
#[repr(C)]
struct MsgState {
    handle: *mut CflHandle,
    dr_cb: *mut ffi::PyObject,
}

/// Sends serialized records as `KafkaRecordCollector.send` does (same arguments), natively when it
/// can (module docstring); `fallback` is that Python `send`.
#[pyclass(module = "kappaflow_native", frozen)]
pub struct ProduceSend {
    clients: Py<PyAny>,
    fallback: Py<PyAny>,
    on_delivery: Py<PyAny>,
    producer_type: Py<PyType>,
    /// The `clients` attribute naming the producer (`producer`; `changelog_producer` for changelogs).
    attribute: Py<PyString>,
    producev: Producev,
    rk_name: RkName,
    sent: AtomicU64,
}

#[pymethods]
impl ProduceSend {
    /// `clients` has the current `producer` and `serve_reports()`; `fallback` is the collector's Python
    /// `send`, `on_delivery` the callback it passes to each produce (None: the producer's default);
    /// `library` the path of the librdkafka mapped in the process; `attribute` the `clients` attribute
    /// holding the producer it sends through (`changelog_producer` for `send_changelog`'s records,
    /// whose `fallback` is then the collector's Python `send_changelog`).
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (clients, fallback, on_delivery, producer_type, version, library, attribute = "producer"))]
    fn new(
        py: Python<'_>,
        clients: &Bound<'_, PyAny>,
        fallback: &Bound<'_, PyAny>,
        on_delivery: &Bound<'_, PyAny>,
        producer_type: &Bound<'_, PyType>,
        version: &str,
        library: &str,
        attribute: &str,
    ) -> PyResult<Self> {
        check_producer_type(producer_type, version)?;
        let path = CString::new(library)?;
        // SAFETY: dlopen/dlsym with NUL-terminated strings; RTLD_NOLOAD never loads a library.
        let (producev, rk_name) = unsafe {
            let lib = dlopen(path.as_ptr(), RTLD_NOW | RTLD_NOLOAD);
            if lib.is_null() {
                return Err(PyValueError::new_err(format!(
                    "{library} is not loaded in this process"
                )));
            }
            let producev = dlsym(lib, c"rd_kafka_producev".as_ptr());
            let rk_name = dlsym(lib, c"rd_kafka_name".as_ptr());
            if producev.is_null() || rk_name.is_null() {
                return Err(PyValueError::new_err(format!(
                    "{library} has no rd_kafka_producev or rd_kafka_name"
                )));
            }
            (
                std::mem::transmute::<*mut c_void, Producev>(producev),
                std::mem::transmute::<*mut c_void, RkName>(rk_name),
            )
        };
        Ok(ProduceSend {
            clients: clients.clone().unbind(),
            fallback: fallback.clone().unbind(),
            on_delivery: on_delivery.clone().unbind(),
            producer_type: producer_type.clone().unbind(),
            attribute: PyString::intern(py, attribute).unbind(),
            producev,
            rk_name,
            sent: AtomicU64::new(0),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn __call__(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        headers: &Bound<'_, PyAny>,
        timestamp: i64,
        partition: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.send(py, topic, key, value, headers, timestamp, partition)
    }

    /// `KafkaRecordCollector.send_changelog` (same arguments): a changelog record, natively when it can,
    /// else through the Python `send_changelog` this sender was given as `fallback`. Its delivery report
    /// reaches `on_delivery` (the collector's offset report) through confluent-kafka's own callback, as
    /// for a record produced through `Producer.produce`.
    pub(crate) fn changelog(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        timestamp: i64,
        partition: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let none = py.None().into_bound(py);
        if !self.try_native(py, topic, key, value, &none, timestamp, partition)? {
            return self
                .fallback
                .bind(py)
                .call1((topic, key, value, timestamp, partition))
                .map(drop);
        }
        self.count_and_serve(py)
    }

    /// Records sent natively (the collector adds its own count).
    #[getter]
    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// The probe's view of a producer's struct: `(rd_kafka_name(rk), default_dr_cb, dr_only_error)`
    /// (`kappaflow.runner.native_produce` compares them with what the producer was built with).
    fn inspect<'py>(
        &self,
        py: Python<'py>,
        producer: &Bound<'py, PyAny>,
    ) -> PyResult<(String, Bound<'py, PyAny>, bool)> {
        if !producer.get_type().is(self.producer_type.bind(py)) {
            return Err(PyValueError::new_err("not the checked Producer type"));
        }
        let raw = producer.as_ptr().cast::<CflHandle>();
        // SAFETY: exactly the checked type (name, size); the GIL is held and `producer` is alive.
        unsafe {
            if (*raw).rk.is_null() {
                return Err(PyValueError::new_err("the producer is closed"));
            }
            let name = CStr::from_ptr((self.rk_name)((*raw).rk))
                .to_string_lossy()
                .into_owned();
            let dr_cb = if (*raw).default_dr_cb.is_null() {
                py.None().into_bound(py)
            } else {
                Bound::from_borrowed_ptr(py, (*raw).default_dr_cb)
            };
            Ok((name, dr_cb, (*raw).dr_only_error != 0))
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.clients)?;
        visit.call(&self.fallback)?;
        visit.call(&self.on_delivery)?;
        visit.call(&self.producer_type)?;
        visit.call(&self.attribute)
    }
}

/// `data` as librdkafka takes it: exact bytes (pointer, length) or None (NULL, 0); else None.
fn payload(data: &Bound<'_, PyAny>) -> Option<(*const c_void, usize)> {
    if data.is_none() {
        return Some((std::ptr::null(), 0));
    }
    let bytes = data.cast_exact::<PyBytes>().ok()?;
    let slice = bytes.as_bytes();
    Some((slice.as_ptr().cast(), slice.len()))
}

impl ProduceSend {
    /// `KafkaRecordCollector.send`: natively when the record and producer allow (module docstring),
    /// else through the Python `send`.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        headers: &Bound<'_, PyAny>,
        timestamp: i64,
        partition: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        if !self.try_native(py, topic, key, value, headers, timestamp, partition)? {
            return self
                .fallback
                .bind(py)
                .call1((topic, key, value, headers, timestamp, partition))
                .map(drop);
        }
        self.count_and_serve(py)
    }

    /// Count a record sent natively; every `SERVE_EVERY`, serve the producers' reports.
    fn count_and_serve(&self, py: Python<'_>) -> PyResult<()> {
        let sent = self.sent.fetch_add(1, Ordering::Relaxed) + 1;
        if sent.is_multiple_of(SERVE_EVERY) {
            self.clients
                .bind(py)
                .call_method0(intern!(py, "serve_reports"))?;
        }
        Ok(())
    }

    /// Produce natively; false when this record or producer goes through the Python `send` (nothing
    /// was enqueued then).
    #[allow(clippy::too_many_arguments)]
    fn try_native(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        headers: &Bound<'_, PyAny>,
        timestamp: i64,
        partition: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        if timestamp < 0 {
            return Ok(false);
        }
        let no_headers = headers.is_none()
            || headers
                .cast::<PyList>()
                .map(|list| list.is_empty())
                .unwrap_or(false);
        let (Some((key_ptr, key_len)), Some((value_ptr, value_len))) =
            (payload(key), payload(value))
        else {
            return Ok(false);
        };
        let partition = if partition.is_none() {
            PARTITION_UA
        } else {
            match partition.extract::<i32>() {
                Ok(p) => p,
                Err(_) => return Ok(false),
            }
        };
        let Ok(topic) = topic.cast_exact::<PyString>() else {
            return Ok(false);
        };
        if !no_headers {
            return Ok(false);
        }
        // a NUL-terminated UTF-8 buffer the str keeps (what confluent-kafka's "s" format reads)
        let topic_utf8 = topic.to_str()?;
        if topic_utf8.as_bytes().contains(&0) {
            return Ok(false);
        }
        // SAFETY: PyUnicode_AsUTF8 returns the same cached, NUL-terminated buffer `to_str` read.
        let topic_c = unsafe { ffi::PyUnicode_AsUTF8(topic.as_ptr()) };
        if topic_c.is_null() {
            return Err(PyErr::fetch(py));
        }
        let producer = self.clients.bind(py).getattr(self.attribute.bind(py))?;
        if !producer.get_type().is(self.producer_type.bind(py)) {
            return Ok(false);
        }
        let handle = producer.as_ptr().cast::<CflHandle>();
        // SAFETY: `producer` is exactly the checked type and held (a strong reference) for the call;
        // the GIL is held. The use count is confluent-kafka's own gate (Handle_rk_use_begin): close()
        // waits for it to drop to zero before destroying rk.
        unsafe {
            if !enter(handle) {
                return Ok(false);
            }
            let dr_cb = if self.on_delivery.bind(py).is_none() {
                (*handle).default_dr_cb
            } else {
                self.on_delivery.as_ptr()
            };
            let state: *mut MsgState = if dr_cb.is_null() {
                null_mut()
            } else {
                let state = calloc(1, size_of::<MsgState>()).cast::<MsgState>();
                if state.is_null() {
                    (*handle).active_calls.fetch_sub(1, Ordering::SeqCst);
                    return Err(PyErr::new::<pyo3::exceptions::PyMemoryError, _>(
                        "allocating a delivery state",
                    ));
                }
                ffi::Py_INCREF(dr_cb);
                (*state).handle = handle;
                (*state).dr_cb = dr_cb;
                state
            };
            let err = crate::delivery_failures::producing(|| {
                (self.producev)(
                    (*handle).rk,
                    VTYPE_MSGFLAGS,
                    MSG_F_COPY,
                    VTYPE_TOPIC,
                    topic_c,
                    VTYPE_PARTITION,
                    partition as c_int,
                    VTYPE_KEY,
                    key_ptr,
                    key_len,
                    VTYPE_VALUE,
                    value_ptr,
                    value_len,
                    VTYPE_TIMESTAMP,
                    timestamp,
                    VTYPE_OPAQUE,
                    state.cast::<c_void>(),
                    VTYPE_END,
                )
            });
            (*handle).active_calls.fetch_sub(1, Ordering::SeqCst);
            if err != 0 {
                if !state.is_null() {
                    ffi::Py_DECREF((*state).dr_cb);
                    free(state.cast());
                }
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// confluent-kafka's `Handle_rk_use_begin` for a caller that is not the closing thread: false
/// (the Python path then raises what confluent-kafka raises) when closing or closed.
///
/// SAFETY: `handle` is a live producer or consumer of the checked type (both are a `Handle`).
pub(crate) unsafe fn enter(handle: *mut CflHandle) -> bool {
    let open = |h: *mut CflHandle| {
        (*h).closing.load(Ordering::SeqCst) == 0
            && !std::ptr::read_volatile(std::ptr::addr_of!((*h).rk)).is_null()
    };
    if !open(handle) {
        return false;
    }
    (*handle).active_calls.fetch_add(1, Ordering::SeqCst);
    if !open(handle) {
        (*handle).active_calls.fetch_sub(1, Ordering::SeqCst);
        return false;
    }
    true
}

/// `producer_type` is exactly confluent-kafka `version`'s `cimpl.Producer` of the `Handle` layout this
/// module knows: what the native send and the failure plugin check before touching a producer's struct.
pub(crate) fn check_producer_type(
    producer_type: &Bound<'_, PyType>,
    version: &str,
) -> PyResult<()> {
    check_handle_type(producer_type, version, PRODUCER_TYPE_NAME, "Producer")
}

/// `handle_type` is exactly confluent-kafka `version`'s type named `type_name` (its `kind`: Producer or
/// Consumer) of the `Handle` layout this module knows; ValueError naming what differs otherwise.
fn check_handle_type(
    handle_type: &Bound<'_, PyType>,
    version: &str,
    type_name: &CStr,
    kind: &str,
) -> PyResult<()> {
    if !KNOWN_VERSIONS.contains(&version) {
        return Err(PyValueError::new_err(format!(
            "confluent-kafka {version}: kappaflow_native knows the {kind} layout of {}",
            KNOWN_VERSIONS.join(", ")
        )));
    }
    let type_ptr = handle_type.as_type_ptr();
    // SAFETY: a live type object; tp_name is a NUL-terminated C string.
    let (name, basic_size) = unsafe {
        (
            CStr::from_ptr((*type_ptr).tp_name),
            (*type_ptr).tp_basicsize,
        )
    };
    if name != type_name || basic_size != size_of::<CflHandle>() as ffi::Py_ssize_t {
        return Err(PyValueError::new_err(format!(
            "{name:?} of {basic_size} bytes is not the confluent-kafka {version} {kind} \
         kappaflow_native knows ({} bytes)",
            size_of::<CflHandle>()
        )));
    }
    Ok(())
}

/// The `tp_name` of confluent-kafka's consumer type.
const CONSUMER_TYPE_NAME: &CStr = c"cimpl.Consumer";

/// `consumer` is exactly confluent-kafka `version`'s `cimpl.Consumer` (`consumer_type`) of the `Handle`
/// layout `produce.rs` knows: what every native reader of a consumer's `rd_kafka_t` checks first.
pub(crate) fn check_consumer(
    consumer: &Bound<'_, PyAny>,
    consumer_type: &Bound<'_, PyType>,
    version: &str,
) -> PyResult<()> {
    check_handle_type(consumer_type, version, CONSUMER_TYPE_NAME, "Consumer")?;
    if !consumer.get_type().is(consumer_type) {
        return Err(PyValueError::new_err(
            "not exactly the checked Consumer type",
        ));
    }
    Ok(())
}
