//! The failed deliveries of records the native send produced with no delivery state (a NULL opaque), taken
//! by a librdkafka `on_acknowledgement` interceptor, so that at at_least_once a sink or repartition record
//! costs no per-record Python state and no GIL round trip in confluent-kafka's `dr_msg_cb` when delivered.
//!
//! How it is installed: this extension module is also a librdkafka plugin. A producer created with
//! `plugin.library.paths` naming this module's file makes librdkafka `dlopen` it (the module Python
//! already loaded: same file, so the same mapping, its reference count raised) and call the exported
//! `conf_init`, which adds an `on_new` interceptor to that configuration; `on_new` runs inside
//! `rd_kafka_new` for the new `rd_kafka_t` and adds its `on_acknowledgement` and `on_destroy`, and opens
//! the producer's entry in `QUEUES` (keyed by the `rd_kafka_t` address). librdkafka's functions are the
//! ones of the librdkafka already mapped in the process (`arm`, `dlopen` with `RTLD_NOLOAD`), resolved
//! before any producer names the plugin: `conf_init` refuses (the producer is not created) otherwise.
//!
//! What it reports: librdkafka calls `on_acknowledgement` once per produced message with its final result,
//! on the thread that settles it (a broker thread, its main thread for timeouts, the caller of a purge),
//! before the message's delivery report is queued and before the message stops counting towards
//! `rd_kafka_outq_len`, so once `flush()` has returned every report of the flushed records is in the
//! queue. A success returns at once. A failure of a message with a NULL opaque (`_private`) is copied
//! (topic, partition, key, value, offset, error code) into the producer's entry under a mutex; the GIL is
//! never taken there. A message with an opaque is confluent-kafka's (`Producer.produce` always passes a
//! `Producer_msgstate`): its report reaches Python through `dr_msg_cb` as before, so nothing is reported
//! twice. librdkafka also calls `on_acknowledgement` inside `rd_kafka_producev` when it refuses a message
//! it has built (a partitioner failure) and `producev` then returns the error: the native send marks its
//! own `producev` calls (`PRODUCING`, per thread) and those are skipped, because the native send answers
//! such an error by handing the record to the Python send, which produces it again.
//!
//! `DeliveryFailures.take(producer)` hands the entry's failures to Python (the stream thread's producer
//! drains it where it serves delivery reports) and answers None for a producer with no entry: one created
//! without the plugin, or destroyed.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Mutex, MutexGuard, OnceLock};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyType};

use crate::produce::{check_producer_type, CflHandle};
use crate::rdkafka_queue::RdMessage;

/// librdkafka's `RD_KAFKA_RESP_ERR__INVALID_ARG` (rdkafka.h), what `conf_init` answers when not armed.
const ERR_INVALID_ARG: c_int = -186;
const RTLD_NOW: c_int = 2;
const RTLD_NOLOAD: c_int = 4;
/// The interceptors' name in librdkafka's lists (and its logs).
const NAME: &CStr = c"kappaflow-delivery-failures";

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
}

/// glibc's `Dl_info` (dlfcn.h).
#[repr(C)]
struct DlInfo {
    dli_fname: *const c_char,
    dli_fbase: *mut c_void,
    dli_sname: *const c_char,
    dli_saddr: *mut c_void,
}

/// The path of the shared library this module was loaded from (the one holding `conf_init`): what a
/// producer's `plugin.library.paths` names, so that librdkafka's `dlopen` finds the mapping Python made.
fn own_path() -> PyResult<String> {
    let mut info = DlInfo {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr fills `info` for an address inside a loaded object; `conf_init` is one of ours.
    let found = unsafe { dladdr(conf_init as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return Err(PyValueError::new_err(
            "dladdr does not know kappaflow_native's file",
        ));
    }
    // SAFETY: a NUL-terminated path owned by the dynamic loader for as long as the object is loaded.
    Ok(unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned())
}

type OnNew =
    unsafe extern "C" fn(*mut c_void, *const c_void, *mut c_void, *mut c_char, usize) -> c_int;
type OnAck = unsafe extern "C" fn(*mut c_void, *mut RdMessage, *mut c_void) -> c_int;
type OnDestroy = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type AddOnNew = unsafe extern "C" fn(*mut c_void, *const c_char, OnNew, *mut c_void) -> c_int;
type AddOnAck = unsafe extern "C" fn(*mut c_void, *const c_char, OnAck, *mut c_void) -> c_int;
type AddOnDestroy =
    unsafe extern "C" fn(*mut c_void, *const c_char, OnDestroy, *mut c_void) -> c_int;
type TopicName = unsafe extern "C" fn(*const c_void) -> *const c_char;
type MessageTimestamp = unsafe extern "C" fn(*const RdMessage, *mut c_int) -> i64;

/// The librdkafka functions the plugin calls, from the librdkafka mapped in the process.
struct Api {
    library: String,
    add_on_new: AddOnNew,
    add_on_ack: AddOnAck,
    add_on_destroy: AddOnDestroy,
    topic_name: TopicName,
    timestamp: MessageTimestamp,
}

static API: OnceLock<Api> = OnceLock::new();

/// One failed delivery: (topic, partition, key, value, offset, librdkafka error code, (timestamp type,
/// timestamp)).
type Failure = (
    String,
    i32,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    i64,
    i32,
    (c_int, i64),
);

/// The failures of each live producer created with the plugin, by `rd_kafka_t` address.
static QUEUES: OnceLock<Mutex<HashMap<usize, Vec<Failure>>>> = OnceLock::new();

thread_local! {
    /// True while this thread is inside the native send's `rd_kafka_producev` (module docstring).
    static PRODUCING: Cell<bool> = const { Cell::new(false) };
}

fn queues() -> MutexGuard<'static, HashMap<usize, Vec<Failure>>> {
    let lock = QUEUES.get_or_init(|| Mutex::new(HashMap::new()));
    // a panic cannot happen while it is held (pushes and takes only); never poisoned in practice
    lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Run `produce` (the native send's `rd_kafka_producev`) marked as this thread's own production, so an
/// acknowledgement librdkafka calls inside it for a message it refused is not reported twice.
pub(crate) fn producing<T>(produce: impl FnOnce() -> T) -> T {
    PRODUCING.with(|flag| flag.set(true));
    let out = produce();
    PRODUCING.with(|flag| flag.set(false));
    out
}

/// Write `text` into librdkafka's `errstr` buffer (NUL-terminated, truncated to fit).
unsafe fn write_errstr(errstr: *mut c_char, size: usize, text: &str) {
    if errstr.is_null() || size == 0 {
        return;
    }
    let n = text.len().min(size - 1);
    std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), errstr, n);
    *errstr.add(n) = 0;
}

/// librdkafka's plugin entry point (`rd_kafka_plugin_f_conf_init_t`): add the `on_new` interceptor to
/// `conf`. Refused when `arm` has not resolved librdkafka's functions.
///
/// # Safety
/// Called by librdkafka with a live configuration and an `errstr` buffer of `errstr_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn conf_init(
    conf: *mut c_void,
    _plug_opaquep: *mut *mut c_void,
    errstr: *mut c_char,
    errstr_size: usize,
) -> c_int {
    let Some(api) = API.get() else {
        write_errstr(
            errstr,
            errstr_size,
            "kappaflow_native: DeliveryFailures was not armed in this process",
        );
        return ERR_INVALID_ARG;
    };
    (api.add_on_new)(conf, NAME.as_ptr(), on_new, std::ptr::null_mut())
}

unsafe extern "C" fn on_new(
    rk: *mut c_void,
    _conf: *const c_void,
    _opaque: *mut c_void,
    _errstr: *mut c_char,
    _errstr_size: usize,
) -> c_int {
    let Some(api) = API.get() else {
        return ERR_INVALID_ARG; // unreachable: conf_init ran
    };
    let err = (api.add_on_ack)(rk, NAME.as_ptr(), on_acknowledgement, std::ptr::null_mut());
    if err != 0 {
        return err;
    }
    let err = (api.add_on_destroy)(rk, NAME.as_ptr(), on_destroy, std::ptr::null_mut());
    if err != 0 {
        return err;
    }
    queues().insert(rk as usize, Vec::new());
    0
}

/// The entry is closed when the producer is destroyed: a report librdkafka settles after that (what the
/// destroy purges) has nobody to reach, as through `dr_msg_cb`, which is no longer served then either.
unsafe extern "C" fn on_destroy(rk: *mut c_void, _opaque: *mut c_void) -> c_int {
    queues().remove(&(rk as usize));
    0
}

/// The bytes of a message's key or value, copied (None for a NULL pointer).
unsafe fn copied(data: *const c_void, len: usize) -> Option<Vec<u8>> {
    if data.is_null() {
        return None;
    }
    Some(std::slice::from_raw_parts(data.cast::<u8>(), len).to_vec())
}

unsafe extern "C" fn on_acknowledgement(
    rk: *mut c_void,
    message: *mut RdMessage,
    _opaque: *mut c_void,
) -> c_int {
    let m = &*message;
    if m.err == 0 || !m.private().is_null() || PRODUCING.with(Cell::get) {
        return 0;
    }
    let Some(api) = API.get() else {
        return 0;
    };
    let topic = if m.rkt.is_null() {
        String::new()
    } else {
        CStr::from_ptr((api.topic_name)(m.rkt))
            .to_string_lossy()
            .into_owned()
    };
    let mut timestamp_type: c_int = 0;
    let timestamp = (api.timestamp)(message, &mut timestamp_type);
    let failure = (
        topic,
        m.partition,
        copied(m.key, m.key_len),
        copied(m.payload, m.len),
        m.offset,
        m.err,
        (timestamp_type, timestamp),
    );
    if let Some(queue) = queues().get_mut(&(rk as usize)) {
        queue.push(failure);
    }
    0
}

/// Resolve librdkafka's interceptor functions from `library` (the librdkafka mapped in the process),
/// once per process: what `conf_init` needs before a producer names this module as its plugin.
fn arm(library: &str) -> PyResult<()> {
    if let Some(api) = API.get() {
        if api.library == library {
            return Ok(());
        }
        return Err(PyValueError::new_err(format!(
            "armed with {}, not {library}",
            api.library
        )));
    }
    let path = CString::new(library)?;
    // SAFETY: dlopen/dlsym with NUL-terminated strings; RTLD_NOLOAD never loads a library. The symbols
    // are librdkafka's public functions, whose signatures (rdkafka.h) the types above spell.
    let api = unsafe {
        let lib = dlopen(path.as_ptr(), RTLD_NOW | RTLD_NOLOAD);
        if lib.is_null() {
            return Err(PyValueError::new_err(format!(
                "{library} is not loaded in this process"
            )));
        }
        let symbols = [
            c"rd_kafka_conf_interceptor_add_on_new",
            c"rd_kafka_interceptor_add_on_acknowledgement",
            c"rd_kafka_interceptor_add_on_destroy",
            c"rd_kafka_topic_name",
            c"rd_kafka_message_timestamp",
        ]
        .map(|name| (name, dlsym(lib, name.as_ptr())));
        if let Some((name, _)) = symbols.iter().find(|(_, ptr)| ptr.is_null()) {
            return Err(PyValueError::new_err(format!("{library} has no {name:?}")));
        }
        Api {
            library: library.to_owned(),
            add_on_new: std::mem::transmute::<*mut c_void, AddOnNew>(symbols[0].1),
            add_on_ack: std::mem::transmute::<*mut c_void, AddOnAck>(symbols[1].1),
            add_on_destroy: std::mem::transmute::<*mut c_void, AddOnDestroy>(symbols[2].1),
            topic_name: std::mem::transmute::<*mut c_void, TopicName>(symbols[3].1),
            timestamp: std::mem::transmute::<*mut c_void, MessageTimestamp>(symbols[4].1),
        }
    };
    let _ = API.set(api);
    Ok(())
}

/// A failure as `take` hands it to Python.
type Taken<'py> = (
    String,
    i32,
    Option<Bound<'py, PyBytes>>,
    Option<Bound<'py, PyBytes>>,
    i64,
    i32,
    (c_int, i64),
);

/// The failed deliveries of the NULL-opaque records of producers created with this module as their
/// librdkafka plugin (module docstring).
#[pyclass(module = "kappaflow_native", frozen)]
pub struct DeliveryFailures {
    producer_type: Py<PyType>,
    path: String,
}

#[pymethods]
impl DeliveryFailures {
    /// Checks `producer_type` is confluent-kafka `version`'s Producer of the known layout and arms the
    /// plugin with `library` (the librdkafka mapped in the process); ValueError otherwise.
    #[new]
    fn new(producer_type: &Bound<'_, PyType>, version: &str, library: &str) -> PyResult<Self> {
        check_producer_type(producer_type, version)?;
        let path = own_path()?;
        arm(library)?;
        Ok(DeliveryFailures {
            producer_type: producer_type.clone().unbind(),
            path,
        })
    }

    /// The path of this module's shared library, for a producer's `plugin.library.paths`.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// The failures reported for `producer` since the last call, oldest first, as (topic, partition,
    /// key, value, offset, error code, (timestamp type, timestamp)); None when `producer` has no entry
    /// (created without the plugin, or closed).
    fn take<'py>(
        &self,
        py: Python<'py>,
        producer: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Vec<Taken<'py>>>> {
        if !producer.get_type().is(self.producer_type.bind(py)) {
            return Err(PyValueError::new_err("not the checked Producer type"));
        }
        // SAFETY: exactly the checked type (name, size); the GIL is held and `producer` is alive. The
        // address is only compared, never dereferenced here.
        let rk = unsafe { (*producer.as_ptr().cast::<CflHandle>()).rk } as usize;
        if rk == 0 {
            return Ok(None);
        }
        let taken = {
            let mut all = queues();
            match all.get_mut(&rk) {
                None => return Ok(None),
                Some(queue) if queue.is_empty() => return Ok(Some(Vec::new())),
                Some(queue) => std::mem::take(queue),
            }
        };
        let bytes = |data: Option<Vec<u8>>| data.map(|d| PyBytes::new(py, &d));
        Ok(Some(
            taken
                .into_iter()
                .map(|(topic, partition, key, value, offset, err, timestamp)| {
                    (
                        topic,
                        partition,
                        bytes(key),
                        bytes(value),
                        offset,
                        err,
                        timestamp,
                    )
                })
                .collect(),
        ))
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.producer_type)
    }
}
