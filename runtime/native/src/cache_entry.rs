//! What the native record cache (`cache.rs`) keeps per entry: its key (a Python `bytes` hashed by its
//! contents), what it stores (Python objects, or a Long aggregate kept unboxed until Python reads it)
//! and the `CacheEntry` copy Python reads. Apart from the cache's operations so each stays readable.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::slots::SlotClass;

/// A cache key: a Python `bytes`, hashed and compared by its contents (immutable while referenced).
pub struct Key(pub(crate) Py<PyBytes>);

impl Key {
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the bytes object is alive while this key holds it, and bytes are immutable.
        unsafe {
            let data = ffi::PyBytes_AsString(self.0.as_ptr()) as *const u8;
            let size = ffi::PyBytes_Size(self.0.as_ptr()) as usize;
            std::slice::from_raw_parts(data, size)
        }
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.bytes()
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.bytes().hash(state)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for Key {}

/// What an entry stores: Python objects, or a `ValueAndTimestamp` of a Long kept unboxed.
pub enum Stored {
    /// The value's bytes (None: a tombstone) and, when kept, its decoded value (None is `NOT_DECODED`).
    Boxed {
        value: Py<PyAny>,
        decoded: Option<Py<PyAny>>,
    },
    /// A Long aggregate and its timestamp, as the native aggregation wrote them: a hot key's update
    /// allocates (and frees) no bytes and no `ValueAndTimestamp`. Its bytes (the timestamp then the
    /// Long, big-endian: `LONG_BYTES` of them) and `ValueAndTimestamp` are built, once, when Python
    /// reads the entry (a get, a range, a flush).
    Long { value: i64, timestamp: i64 },
}

/// The serialized length of a `Stored::Long`: a timestamped Long's 8 + 8 bytes.
pub const LONG_BYTES: isize = 16;

/// One entry: `CacheEntry`'s fields.
pub struct Entry {
    pub stored: Stored,
    pub dirty: bool,
    pub context: Py<PyAny>,
    pub size: isize,
}

/// `entry` made `Stored::Boxed` (its bytes and `ValueAndTimestamp` built from a Long with `class`),
/// and its value and decoded value.
pub(crate) fn boxed<'e>(
    py: Python<'_>,
    class: &Option<SlotClass<2>>,
    entry: &'e mut Entry,
) -> PyResult<(&'e Py<PyAny>, Option<&'e Py<PyAny>>)> {
    if let Stored::Long { value, timestamp } = entry.stored {
        let class = class
            .as_ref()
            .expect("an unboxed entry's cache knows its ValueAndTimestamp class");
        let decoded = class.new_instance(
            py,
            [
                value.into_pyobject(py)?.into_any(),
                timestamp.into_pyobject(py)?.into_any(),
            ],
        )?;
        entry.stored = Stored::Boxed {
            value: PyBytes::new(py, &pack_long(value, timestamp))
                .into_any()
                .unbind(),
            decoded: Some(decoded.unbind()),
        };
    }
    match &entry.stored {
        Stored::Boxed { value, decoded } => Ok((value, decoded.as_ref())),
        Stored::Long { .. } => unreachable!("boxed above"),
    }
}

/// A timestamped Long's bytes: the timestamp, then the Long, big-endian (`TIMESTAMPED_LONG`).
pub fn pack_long(value: i64, timestamp: i64) -> [u8; LONG_BYTES as usize] {
    let mut packed = [0u8; LONG_BYTES as usize];
    packed[..8].copy_from_slice(&timestamp.to_be_bytes());
    packed[8..].copy_from_slice(&value.to_be_bytes());
    packed
}

/// What Python reads of an entry (`ThreadCache.get`, `sorted_entries`, a flushed batch): a copy.
#[pyclass(frozen, get_all, module = "kappaflow_native")]
pub struct CacheEntry {
    pub(crate) value: Py<PyAny>,
    pub(crate) dirty: bool,
    pub(crate) context: Py<PyAny>,
    pub(crate) size: isize,
    pub(crate) decoded: Py<PyAny>,
}
