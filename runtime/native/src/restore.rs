//! The restore path's per-record work in Rust: a consumed batch of changelog records split by partition
//! (`kappaflow.runner.changelog_reader.ChangelogReader._by_partition`) and one partition's records
//! written into a rocksdict `WriteBatch` (`kappaflow.state.kv_bytes.RocksDBKeyValueBytesStore`'s
//! `restore_messages`). Both Python functions stay the reference and the fallback.
//!
//! Why: restoring is a loop over millions of records whose interpreter work bounded the restore rate:
//! six accessor calls a record (`timestamp()` building a tuple each time), the timestamp packed and
//! concatenated to the value, a bound-method call into the batch. Here the fields are read from
//! confluent-kafka's struct under the checks of `messages::check_layout` (messages.rs says why that is
//! sound; a message of any other type goes through its accessors), a timestamped store's value is
//! built in one allocation, and the batch's `put` / `delete` are called through vectorcall, with no
//! argument tuple. The batch, the database and its options stay rocksdict's, as the store made them.

use std::ptr::{copy_nonoverlapping, null, null_mut};

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use crate::messages::{check_layout, field, CflMessage, PARTITION_UA};

/// Splits and writes consumed changelog records; built only for a `Message` type whose layout the
/// core knows (the constructor raises ValueError otherwise, and kappaflow keeps the Python loops).
#[pyclass(module = "kappaflow_native", frozen)]
pub struct ChangelogMessages {
    message_type: Py<PyType>,
}

/// What `split` needs of a message: None for one carrying an error, else its (topic, partition).
type Placed<'py> = Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>;

/// A run being appended to: its topic, partition and list.
type Run<'py> = (Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyList>);

#[pymethods]
impl ChangelogMessages {
    /// `message_type` is `confluent_kafka.Message`, `version` `confluent_kafka.version()`.
    #[new]
    fn new(message_type: &Bound<'_, PyType>, version: &str) -> PyResult<Self> {
        check_layout(message_type, version)?;
        Ok(ChangelogMessages {
            message_type: message_type.clone().unbind(),
        })
    }

    /// `(batches, errors)`: the records of `messages` by `(topic, partition)`, each list in consumed
    /// order, and the messages that carry an error, in order, for the caller to handle as
    /// `_by_partition` does (they change no batch).
    fn split<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyList>,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyList>)> {
        let batches = PyDict::new(py);
        let errors = PyList::empty(py);
        let mut current: Option<Run<'py>> = None;
        for msg in messages.iter() {
            let Some((topic, partition)) = self.placed(&msg)? else {
                errors.append(&msg)?;
                current = None;
                continue;
            };
            if let Some((run_topic, run_partition, run)) = &current {
                if same(&partition, run_partition)? && same(&topic, run_topic)? {
                    run.append(&msg)?;
                    continue;
                }
            }
            let key = PyTuple::new(py, [&topic, &partition])?;
            let run = match batches.get_item(&key)? {
                Some(found) => found.cast_into::<PyList>()?,
                None => {
                    let run = PyList::empty(py);
                    batches.set_item(&key, &run)?;
                    run
                }
            };
            run.append(&msg)?;
            current = Some((topic, partition, run));
        }
        Ok((batches, errors))
    }

    /// Each of `messages` (one changelog partition's records, none an error) into `batch`: a tombstone
    /// as `batch.delete(key)`, any other record as `batch.put(key, value)`, the value prefixed with its
    /// timestamp (8 bytes, big-endian) when `timestamped`; a missing key as b"", as
    /// `restore_messages` does.
    fn write<'py>(
        &self,
        py: Python<'py>,
        batch: &Bound<'py, PyAny>,
        messages: &Bound<'py, PyList>,
        timestamped: bool,
    ) -> PyResult<()> {
        let put = batch.getattr(intern!(py, "put"))?;
        let delete = batch.getattr(intern!(py, "delete"))?;
        let empty = PyBytes::new(py, b"").into_any();
        let message_type = self.message_type.as_ptr();
        for msg in messages.iter() {
            let exact = msg.get_type().as_ptr() == message_type;
            let raw = msg.as_ptr().cast::<CflMessage>();
            // SAFETY (each struct read below): `msg` is exactly the type `check_layout` checked, and
            // the GIL is held (kappaflow builds this reader only with the GIL on).
            let value = if exact {
                unsafe { field(py, (*raw).value) }
            } else {
                msg.call_method0(intern!(py, "value"))?
            };
            let key = if exact {
                unsafe { field(py, (*raw).key) }
            } else {
                msg.call_method0(intern!(py, "key"))?
            };
            let key = if key.is_truthy()? { key } else { empty.clone() };
            if value.is_none() {
                vectorcall(py, &delete, [null_mut(), key.as_ptr()])?;
                continue;
            }
            if !timestamped {
                vectorcall(py, &put, [null_mut(), key.as_ptr(), value.as_ptr()])?;
                continue;
            }
            let timestamp = if exact {
                unsafe { (*raw).timestamp }
            } else {
                msg.call_method0(intern!(py, "timestamp"))?
                    .get_item(1)?
                    .extract::<i64>()?
            };
            let stored = timestamped_value(py, timestamp, &value)?;
            vectorcall(py, &put, [null_mut(), key.as_ptr(), stored.as_ptr()])?;
        }
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.message_type)
    }
}

impl ChangelogMessages {
    /// A message's (topic, partition), or None when it carries an error: from its struct when it is
    /// exactly the checked type, else through `error()`, `partition()` and `topic()`.
    fn placed<'py>(&self, msg: &Bound<'py, PyAny>) -> PyResult<Placed<'py>> {
        let py = msg.py();
        if msg.get_type().as_ptr() != self.message_type.as_ptr() {
            if !msg.call_method0(intern!(py, "error"))?.is_none() {
                return Ok(None);
            }
            let partition = msg.call_method0(intern!(py, "partition"))?;
            return Ok(Some((msg.call_method0(intern!(py, "topic"))?, partition)));
        }
        let raw = msg.as_ptr().cast::<CflMessage>();
        // SAFETY: exactly the checked type, read with the GIL held (see `write`).
        unsafe {
            let error = (*raw).error;
            if !error.is_null() && error != ffi::Py_None() {
                return Ok(None);
            }
            let partition = (*raw).partition;
            let partition = if partition == PARTITION_UA {
                py.None().into_bound(py)
            } else {
                partition.into_pyobject(py)?.into_any()
            };
            Ok(Some((field(py, (*raw).topic), partition)))
        }
    }
}

/// `a == b` as `!=` in `_by_partition` decides it: identity first, then `==`.
fn same<'py>(a: &Bound<'py, PyAny>, b: &Bound<'py, PyAny>) -> PyResult<bool> {
    if a.is(b) {
        return Ok(true);
    }
    a.eq(b)
}

/// `struct.pack(">q", timestamp) + value`: for bytes (the client's values) one allocation, filled;
/// anything else through `+`, as Python would add it.
fn timestamped_value<'py>(
    py: Python<'py>,
    timestamp: i64,
    value: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let prefix = timestamp.to_be_bytes();
    let Ok(bytes) = value.cast::<PyBytes>() else {
        return PyBytes::new(py, &prefix).into_any().add(value);
    };
    prefixed_bytes(py, bytes.as_bytes(), Some(&prefix))
}

/// `prefix + data` as a new bytes object, filled in one allocation.
pub(crate) fn prefixed_bytes<'py>(
    py: Python<'py>,
    data: &[u8],
    prefix: Option<&[u8]>,
) -> PyResult<Bound<'py, PyAny>> {
    let prefix = prefix.unwrap_or(&[]);
    let size = ffi::Py_ssize_t::try_from(prefix.len() + data.len())?;
    // SAFETY: a bytes object of `size` bytes is allocated uninitialised and filled before anything
    // else sees it; the sources are Rust slices (or a live bytes object's buffer) that cannot overlap it.
    unsafe {
        let made = Bound::from_owned_ptr_or_err(py, ffi::PyBytes_FromStringAndSize(null(), size))?;
        let buffer = ffi::PyBytes_AsString(made.as_ptr()).cast::<u8>();
        copy_nonoverlapping(prefix.as_ptr(), buffer, prefix.len());
        copy_nonoverlapping(data.as_ptr(), buffer.add(prefix.len()), data.len());
        Ok(made)
    }
}

/// `callable(*args[1..])` through vectorcall; `args[0]` is the spare slot
/// `PY_VECTORCALL_ARGUMENTS_OFFSET` lets the callee use. The result is dropped.
pub(crate) fn vectorcall<const N: usize>(
    py: Python<'_>,
    callable: &Bound<'_, PyAny>,
    mut args: [*mut ffi::PyObject; N],
) -> PyResult<()> {
    // SAFETY: every pointer after the spare slot is a live object the caller holds; the result is a
    // new reference or NULL with an error set.
    unsafe {
        let result = ffi::PyObject_Vectorcall(
            callable.as_ptr(),
            args.as_mut_ptr().add(1),
            (N - 1) | ffi::PY_VECTORCALL_ARGUMENTS_OFFSET,
            null_mut(),
        );
        Bound::from_owned_ptr_or_err(py, result).map(drop)
    }
}
