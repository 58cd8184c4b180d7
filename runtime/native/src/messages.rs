//! A `consume()` batch of confluent-kafka messages turned into runs of one partition's queued record
//! tuples, as `kappaflow.runner.routing.raw_records_by_partition` does, reading each message's fields
//! straight from confluent-kafka's C `Message` object.
//!
//! Why the struct and not the accessors: each accessor (`value()`, `key()`, `timestamp()`, ...) is a
//! Python method call, and `timestamp()` builds a tuple with `Py_BuildValue`; together ~4,000
//! instructions per message, from Rust as from Python (a native loop that called them was measured and
//! dropped). The fields themselves are a few pointer and integer loads.
//!
//! Why that is sound: the layout is confluent-kafka's (`src/confluent_kafka/src/confluent_kafka.h`),
//! read from the sdists of the versions in `KNOWN_VERSIONS`, and `MessageRuns` is only built after it
//! checks, once: the version is one of those, the type is `confluent_kafka.cimpl.Message` with that
//! struct's size, and a probe message built through the type's own constructor reads back through the
//! struct exactly as through its accessors. Per message, only an instance of exactly that type is read
//! from its struct (a subclass may override an accessor): anything else, and headers still held in
//! librdkafka's form (converted lazily by `headers()`), go through the accessors. The accessors read
//! the fields under a per-object critical section that only exists without the GIL; kappaflow asks for
//! this reader only when the GIL is on (`kappaflow.runner.routing.message_reader`).
//!
//! This is the path when `kappaflow.native.consume.enabled` is false (or the core cannot use the
//! consumer's handle), and for any record `consume()` still returns: otherwise the stream thread's
//! partitions are read natively by `input_queue.rs`, from queues of their own, while `consume()` keeps
//! serving the rebalance callbacks, errors and confluent-kafka's own state (its CallState).

use std::ffi::{c_int, c_void, CStr};
use std::mem::size_of;
use std::ptr::null_mut;

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

/// The confluent-kafka versions whose `Message` struct is `CflMessage`, each checked against its sdist.
pub const KNOWN_VERSIONS: &[&str] = &["2.16.1"];

/// The `tp_name` of confluent-kafka's message type.
const MESSAGE_TYPE_NAME: &CStr = c"confluent_kafka.cimpl.Message";

/// `RD_KAFKA_PARTITION_UA`: a message without a partition, whose `partition()` is None.
pub(crate) const PARTITION_UA: i32 = -1;

/// confluent-kafka's `Message` (confluent_kafka.h), field for field, with librdkafka's headers
/// (`RD_KAFKA_V_HEADERS`, which every librdkafka it builds with defines).
#[repr(C)]
pub(crate) struct CflMessage {
    ob_base: ffi::PyObject,
    pub(crate) topic: *mut ffi::PyObject,
    pub(crate) value: *mut ffi::PyObject,
    pub(crate) key: *mut ffi::PyObject,
    headers: *mut ffi::PyObject,
    c_headers: *mut c_void,
    pub(crate) error: *mut ffi::PyObject,
    pub(crate) partition: i32,
    offset: i64,
    leader_epoch: i32,
    pub(crate) timestamp: i64,
    tstype: c_int,
    latency: i64,
    delivery_count: i16,
}

/// A message's fields as its accessors return them (`timestamp` is `timestamp()[1]`; `headers` is
/// `headers()`, None when it has none).
struct Fields<'py> {
    topic: Bound<'py, PyAny>,
    partition: Bound<'py, PyAny>,
    offset: Bound<'py, PyAny>,
    timestamp: Bound<'py, PyAny>,
    key: Bound<'py, PyAny>,
    value: Bound<'py, PyAny>,
    headers: Bound<'py, PyAny>,
}

/// What one message is: an error (for `on_error`) or a record's fields.
enum Read<'py> {
    Error(Bound<'py, PyAny>),
    Record(Fields<'py>),
}

/// A field that confluent-kafka leaves NULL when unset, as its accessor returns it (None for NULL).
///
/// SAFETY: `ptr` is NULL or a live object owned by a message the caller holds.
pub(crate) unsafe fn field<'py>(py: Python<'py>, ptr: *mut ffi::PyObject) -> Bound<'py, PyAny> {
    if ptr.is_null() {
        py.None().into_bound(py)
    } else {
        Bound::from_borrowed_ptr(py, ptr)
    }
}

/// One message through its Python accessors, as `raw_records_by_partition` reads it.
fn read_by_accessors<'py>(msg: &Bound<'py, PyAny>) -> PyResult<Read<'py>> {
    let py = msg.py();
    let error = msg.call_method0(intern!(py, "error"))?;
    if !error.is_none() {
        return Ok(Read::Error(error));
    }
    Ok(Read::Record(Fields {
        topic: msg.call_method0(intern!(py, "topic"))?,
        partition: msg.call_method0(intern!(py, "partition"))?,
        headers: msg.call_method0(intern!(py, "headers"))?,
        offset: msg.call_method0(intern!(py, "offset"))?,
        timestamp: msg.call_method0(intern!(py, "timestamp"))?.get_item(1)?,
        key: msg.call_method0(intern!(py, "key"))?,
        value: msg.call_method0(intern!(py, "value"))?,
    }))
}

/// One message of exactly confluent-kafka's type, from its struct: the values its accessors return.
///
/// SAFETY: `msg`'s type is exactly the checked `confluent_kafka.cimpl.Message` (see `MessageRuns::new`),
/// and the GIL is held with the GIL on, so no setter runs while the fields are read.
unsafe fn read_struct<'py>(msg: &Bound<'py, PyAny>) -> PyResult<Read<'py>> {
    let py = msg.py();
    let raw = msg.as_ptr().cast::<CflMessage>();
    let error = (*raw).error;
    if !error.is_null() && error != ffi::Py_None() {
        return Ok(Read::Error(Bound::from_borrowed_ptr(py, error)));
    }
    let partition = (*raw).partition;
    let offset = (*raw).offset;
    let headers = if (*raw).headers.is_null() && !(*raw).c_headers.is_null() {
        // still librdkafka's headers: `headers()` converts and keeps them, as it does for Python
        msg.call_method0(intern!(py, "headers"))?
    } else {
        field(py, (*raw).headers)
    };
    Ok(Read::Record(Fields {
        topic: field(py, (*raw).topic),
        partition: if partition == PARTITION_UA {
            py.None().into_bound(py)
        } else {
            partition.into_pyobject(py)?.into_any()
        },
        offset: if offset >= 0 {
            offset.into_pyobject(py)?.into_any()
        } else {
            py.None().into_bound(py)
        },
        timestamp: (*raw).timestamp.into_pyobject(py)?.into_any(),
        key: field(py, (*raw).key),
        value: field(py, (*raw).value),
        headers,
    }))
}

/// `a == b` as a tuple compares its items: identity first, then `==`.
fn same<'py>(a: &Bound<'py, PyAny>, b: &Bound<'py, PyAny>) -> PyResult<bool> {
    if a.is(b) {
        return Ok(true);
    }
    a.eq(b)
}

/// Turns a `consume()` batch into `((topic, partition), records)` runs, as
/// `kappaflow.runner.routing.raw_records_by_partition` does; built only for a message type whose layout
/// it knows (the constructor raises ValueError otherwise, and kappaflow keeps the Python function).
#[pyclass(module = "kappaflow_native", frozen)]
pub struct MessageRuns {
    message_type: Py<PyType>,
    headers_type: Py<PyAny>,
    /// `headers_type`'s `tp_new` when it is a list subclass with list's own `__new__` and `__init__`
    /// (kappaflow's `Headers`): `headers_type(())` is then that `tp_new` alone (the empty list it
    /// allocates is what `list.__init__(())` leaves it), without the call machinery around it: ~450
    /// of the ~2,700 instructions a message cost (callgrind), most records having no headers.
    new_empty_list: Option<ffi::newfunc>,
    on_error: Py<PyAny>,
}

#[pymethods]
impl MessageRuns {
    /// `message_type` is `confluent_kafka.Message`, `version` `confluent_kafka.version()`,
    /// `headers_type` what each record's headers are made into (`Headers(headers or ())`) and
    /// `on_error` what a message carrying an error is handed to (it raises to stop the batch).
    #[new]
    fn new(
        message_type: &Bound<'_, PyType>,
        version: &str,
        headers_type: &Bound<'_, PyAny>,
        on_error: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        check_layout(message_type, version)?;
        Ok(MessageRuns {
            message_type: message_type.clone().unbind(),
            headers_type: headers_type.clone().unbind(),
            new_empty_list: list_new(headers_type),
            on_error: on_error.clone().unbind(),
        })
    }

    /// `(runs, error)`: the runs `raw_records_by_partition` yields, in order, and the error it would
    /// then raise (from `on_error`, or reading a message), or None. A run still open when the error
    /// came is not in `runs`, as the generator never yields it.
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyList>, Option<Py<PyAny>>)> {
        let runs = PyList::empty(py);
        match self.fill(py, messages, &runs) {
            Ok(()) => Ok((runs, None)),
            Err(e) => Ok((runs, Some(e.into_value(py).into_any()))),
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.message_type)?;
        visit.call(&self.headers_type)?;
        visit.call(&self.on_error)
    }
}

impl MessageRuns {
    /// One message's fields: from its struct when it is exactly the checked type.
    fn read<'py>(&self, msg: &Bound<'py, PyAny>) -> PyResult<Read<'py>> {
        if msg.get_type().as_ptr() == self.message_type.as_ptr() {
            // SAFETY: exactly the type `new` checked; the GIL is held.
            unsafe { read_struct(msg) }
        } else {
            read_by_accessors(msg)
        }
    }

    /// Append the completed runs of `messages` to `runs`; the first error ends it.
    fn fill<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        runs: &Bound<'py, PyList>,
    ) -> PyResult<()> {
        let headers_type = self.headers_type.bind(py);
        let on_error = self.on_error.bind(py);
        let no_headers = PyTuple::empty(py).into_any();
        // the generator's `current = ("", -1)`
        let mut topic = PyString::new(py, "").into_any();
        let mut partition = (-1i64).into_pyobject(py)?.into_any();
        let mut batch: Option<Bound<'py, PyList>> = None;
        for msg in messages.try_iter()? {
            let fields = match self.read(&msg?)? {
                Read::Error(error) => {
                    on_error.call1((error,))?;
                    continue;
                }
                Read::Record(fields) => fields,
            };
            if !(same(&fields.topic, &topic)? && same(&fields.partition, &partition)?) {
                if let Some(done) = batch.take() {
                    runs.append((PyTuple::new(py, [&topic, &partition])?, done))?;
                }
                topic = fields.topic;
                partition = fields.partition;
            }
            let headers = if fields.headers.is_truthy()? {
                headers_type.call1((fields.headers,))?
            } else if let Some(new) = self.new_empty_list {
                // SAFETY: `new` is the type's own tp_new, called as type_call calls it; the result is
                // a new reference or NULL with an error set.
                unsafe {
                    let made = new(
                        headers_type.as_ptr().cast(),
                        no_headers.as_ptr(),
                        null_mut(),
                    );
                    Bound::from_owned_ptr_or_err(py, made)?
                }
            } else {
                headers_type.call1((&no_headers,))?
            };
            let record = PyTuple::new(
                py,
                [
                    fields.offset,
                    fields.timestamp,
                    fields.key,
                    fields.value,
                    headers,
                ],
            )?;
            batch
                .get_or_insert_with(|| PyList::empty(py))
                .append(record)?;
        }
        if let Some(done) = batch {
            runs.append((PyTuple::new(py, [&topic, &partition])?, done))?;
        }
        Ok(())
    }
}

/// Whether `message_type` (`confluent_kafka.Message`, of confluent-kafka `version`) is the struct
/// `CflMessage` describes: a known version, the type's name and size, and a probe message reading back
/// through the struct as through its accessors. Every reader of the struct is built only after this.
pub(crate) fn check_layout(message_type: &Bound<'_, PyType>, version: &str) -> PyResult<()> {
    if !KNOWN_VERSIONS.contains(&version) {
        return Err(PyValueError::new_err(format!(
            "confluent-kafka {version}: kappaflow_native knows the Message layout of {}",
            KNOWN_VERSIONS.join(", ")
        )));
    }
    let type_ptr = message_type.as_type_ptr();
    // SAFETY: a live type object; tp_name is a NUL-terminated C string.
    let (name, basic_size, item_size) = unsafe {
        (
            CStr::from_ptr((*type_ptr).tp_name),
            (*type_ptr).tp_basicsize,
            (*type_ptr).tp_itemsize,
        )
    };
    if name != MESSAGE_TYPE_NAME
        || basic_size != size_of::<CflMessage>() as ffi::Py_ssize_t
        || item_size != 0
    {
        return Err(PyValueError::new_err(format!(
            "{name:?} of {basic_size} bytes is not the confluent-kafka {version} Message \
             kappaflow_native knows ({} bytes)",
            size_of::<CflMessage>()
        )));
    }
    probe(message_type)?;
    Ok(())
}

/// `cls`'s `tp_new` when `cls(())` is that alone: a subclass of list whose `__new__` and `__init__` are
/// list's own (neither it nor a base between overrides them), else None (it is called as a type).
pub(crate) fn list_new(cls: &Bound<'_, PyAny>) -> Option<ffi::newfunc> {
    let Ok(cls) = cls.cast::<PyType>() else {
        return None;
    };
    let list = std::ptr::addr_of_mut!(ffi::PyList_Type);
    let ptr = cls.as_type_ptr();
    // SAFETY: live type objects; their slots are read, not called.
    unsafe {
        // the slots hold CPython's own C functions: the same function is the same address
        let same = (*ptr).tp_new.map(|f| f as usize) == (*list).tp_new.map(|f| f as usize)
            && (*ptr).tp_init.map(|f| f as usize) == (*list).tp_init.map(|f| f as usize);
        if ffi::PyType_IsSubtype(ptr, list) != 0 && same {
            (*ptr).tp_new
        } else {
            None
        }
    }
}

/// A message built through `message_type`'s constructor reads back through the struct as through its
/// accessors, field for field (identity for objects, value for numbers): the layout check at run time.
fn probe(message_type: &Bound<'_, PyType>) -> PyResult<()> {
    let py = message_type.py();
    let marker = |name: &str| PyString::new(py, name).into_any();
    let error = marker("error");
    let headers = PyList::new(py, [(marker("h"), marker("v"))])?.into_any();
    let kwargs = PyDict::new(py);
    kwargs.set_item("topic", marker("topic"))?;
    kwargs.set_item("partition", 0x0102_0304)?;
    kwargs.set_item("offset", 0x0506_0708_090a_0b0ci64)?;
    kwargs.set_item("key", marker("key"))?;
    kwargs.set_item("value", marker("value"))?;
    kwargs.set_item("headers", &headers)?;
    kwargs.set_item("timestamp", (2, 0x0d0e_0f10_1112_1314i64))?;
    kwargs.set_item("leader_epoch", 0x1516)?;
    let record = message_type.call((), Some(&kwargs))?;
    kwargs.set_item("error", &error)?;
    let failed = message_type.call((), Some(&kwargs))?;
    let layout_error = || {
        PyValueError::new_err(
            "confluent_kafka.Message does not read back through the layout kappaflow_native knows",
        )
    };
    // SAFETY: `check_layout` checked the type's name and size before calling this; both are its instances.
    let (by_struct, failed_by_struct) = unsafe { (read_struct(&record)?, read_struct(&failed)?) };
    match (by_struct, read_by_accessors(&record)?, failed_by_struct) {
        (Read::Record(s), Read::Record(a), Read::Error(e))
            if e.is(&error)
                && s.topic.is(&a.topic)
                && s.key.is(&a.key)
                && s.value.is(&a.value)
                && s.headers.is(&a.headers)
                && s.headers.is(&headers)
                && s.partition.eq(&a.partition)?
                && s.offset.eq(&a.offset)?
                && s.timestamp.eq(&a.timestamp)?
                && s.timestamp.extract::<i64>()? == 0x0d0e_0f10_1112_1314 =>
        {
            Ok(())
        }
        _ => Err(layout_error()),
    }
}
