//! A Spark reprocessing task's repartitioned records, kept in Rust until the task hands them to Spark
//! (`kappaflow.spark.batches`), and read back into the next stage's record tuples.
//!
//! In the runtime a repartitioned record goes from the native sink stage to librdkafka; in a Spark task
//! it goes to the shuffle instead. The Python collector built a tuple per record, kept it in a list per
//! target slot and marshalled the lists when the task ended; the reading task unmarshalled them and
//! built the record tuples from those: per record five or more Python objects made and freed twice,
//! about a third of the workers' samples on bench/reprocess.py (py-spy), and memory-bound, so two tasks
//! at once ran it at half speed each. Here the sink stage's serialized key and value are appended to one byte buffer per
//! target slot, and the reading side builds each record's tuple once, straight from the bytes.
//!
//! A record in a buffer, every integer a LEB128 varint: the timestamp's difference from the previous
//! record's in the buffer (the first's from 0), zigzag-encoded; key and value each as length + 1 (0 for
//! None) and the bytes; the header count and per header the UTF-8 name's length and the name, and the
//! value as the key's. A word count's record is ~16 bytes (fixed-width fields took 32: the bytes Spark's
//! JVM copies through its shuffle, twice). `kappaflow.spark.batches` holds the Python reference of both
//! directions, which the tests compare with this byte for byte and record for record.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyString, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

/// Kafka's `Utils.murmur2` (the Java client's and librdkafka's `murmur2` partitioner hash).
pub(crate) fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        if rest.len() == 3 {
            h ^= (rest[2] as u32) << 16;
        }
        if rest.len() >= 2 {
            h ^= (rest[1] as u32) << 8;
        }
        h ^= rest[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// A repartition topic the task buffers: its partition count and the key slots per partition of the
/// stage reading it (`kappaflow.spark.splits.key_slot`).
struct Target {
    topic: Py<PyString>,
    partitions: i64,
    splits: i64,
}

/// One target slot's buffer.
struct Batch {
    target: usize,
    slot: i64,
    records: u64,
    last_timestamp: i64,
    data: Vec<u8>,
}

#[derive(Default)]
struct Buffers {
    batches: Vec<Batch>,
    index: HashMap<(usize, i64), usize>,
}

/// The collector's `send` of a Spark task (`kappaflow.spark.executor.SparkCollector`): records for a
/// repartition topic are appended to their target slot's buffer; any other record goes to `fallback`,
/// the collector's Python send (outputs, changelogs, dead letters).
#[pyclass(module = "kappaflow_native", frozen)]
pub struct ShuffleSend {
    targets: Vec<Target>,
    task_partition: i64,
    fallback: Py<PyAny>,
    buffers: Mutex<Buffers>,
}

#[pymethods]
impl ShuffleSend {
    /// `targets`: (topic, partition count, key slots per partition) of each repartition topic;
    /// `task_partition` the task's, for a record with neither key nor partition.
    #[new]
    fn new(
        targets: Vec<(Bound<'_, PyString>, i64, i64)>,
        task_partition: i64,
        fallback: Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let targets = targets
            .into_iter()
            .map(|(topic, partitions, splits)| {
                if partitions < 1 || splits < 1 {
                    return Err(PyValueError::new_err(format!(
                        "repartition topic '{topic}': {partitions} partitions, {splits} slots each"
                    )));
                }
                Ok(Target {
                    topic: topic.unbind(),
                    partitions,
                    splits,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(ShuffleSend {
            targets,
            task_partition,
            fallback: fallback.unbind(),
            buffers: Mutex::new(Buffers::default()),
        })
    }

    /// The collector's `send(topic, key, value, headers, timestamp, partition)`.
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

    /// `[(topic, slot, records, payload), ...]` in the order the slots were first sent to, and the
    /// buffers emptied.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let taken = std::mem::take(&mut *self.lock()?);
        let rows = PyList::empty(py);
        for batch in taken.batches {
            let payload = PyBytes::new(py, &batch.data);
            let topic = self.targets[batch.target].topic.bind(py);
            rows.append((topic, batch.slot, batch.records, payload))?;
        }
        Ok(rows)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for target in &self.targets {
            visit.call(&target.topic)?;
        }
        visit.call(&self.fallback)
    }
}

impl ShuffleSend {
    fn lock(&self) -> PyResult<MutexGuard<'_, Buffers>> {
        self.buffers
            .lock()
            .map_err(|_| PyValueError::new_err("kappaflow_native: a shuffle buffer was poisoned"))
    }

    /// The index of `topic` among the targets: the same str object (a sink's topic) or an equal one.
    fn target(&self, py: Python<'_>, topic: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
        for (i, target) in self.targets.iter().enumerate() {
            if target.topic.as_ptr() == topic.as_ptr() {
                return Ok(Some(i));
            }
        }
        for (i, target) in self.targets.iter().enumerate() {
            if PyAnyMethods::eq(target.topic.bind(py).as_any(), topic)? {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// The slot `SparkCollector._slot` computes: the key's murmur2 partition (or the given one, or the
    /// task's for a record without key), and within it the key's sub-slot.
    fn slot(&self, target: &Target, key: Option<&[u8]>, partition: Option<i64>) -> i64 {
        let (count, splits) = (target.partitions, target.splits);
        match key {
            None => partition.unwrap_or(self.task_partition % count) * splits,
            Some(key) => {
                let hashed = (murmur2(key) & 0x7fff_ffff) as i64;
                let partition = partition.unwrap_or(hashed % count);
                partition * splits + (hashed / count) % splits
            }
        }
    }

    /// Append the record to its slot's buffer, or hand it to the Python send if not repartitioned.
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
        let Some(index) = self.target(py, topic)? else {
            self.fallback
                .bind(py)
                .call1((topic, key, value, headers, timestamp, partition))?;
            return Ok(());
        };
        let target = &self.targets[index];
        let partition: Option<i64> = partition.extract()?;
        let key_bytes = raw(topic, "key", key)?;
        let value_bytes = raw(topic, "value", value)?;
        let slot = self.slot(target, key_bytes.as_deref(), partition);
        let mut buffers = self.lock()?;
        let buffers = &mut *buffers;
        let at = *buffers.index.entry((index, slot)).or_insert_with(|| {
            buffers.batches.push(Batch {
                target: index,
                slot,
                records: 0,
                last_timestamp: 0,
                data: Vec::new(),
            });
            buffers.batches.len() - 1
        });
        let batch = &mut buffers.batches[at];
        let start = batch.data.len();
        let encoded = encode(
            &mut batch.data,
            timestamp.wrapping_sub(batch.last_timestamp),
            key_bytes.as_deref(),
            value_bytes.as_deref(),
            headers,
        );
        if let Err(error) = encoded {
            batch.data.truncate(start); // nothing of a record that failed stays
            return Err(error);
        }
        batch.last_timestamp = timestamp;
        batch.records += 1;
        Ok(())
    }
}

/// A key or value as bytes: bytes or a bytearray, or None; anything else is the sink's error.
fn raw<'a>(
    topic: &Bound<'_, PyAny>,
    what: &str,
    data: &'a Bound<'_, PyAny>,
) -> PyResult<Option<Cow<'a, [u8]>>> {
    if data.is_none() {
        Ok(None)
    } else if let Ok(bytes) = data.cast::<PyBytes>() {
        Ok(Some(Cow::Borrowed(bytes.as_bytes())))
    } else if let Ok(array) = data.cast::<PyByteArray>() {
        Ok(Some(Cow::Owned(array.to_vec())))
    } else {
        Err(PyTypeError::new_err(format!(
            "repartition topic '{topic}': a serialized {what} must be bytes or None, not {}",
            data.get_type().name()?
        )))
    }
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_bytes(out: &mut Vec<u8>, data: Option<&[u8]>) {
    match data {
        None => out.push(0),
        Some(data) => {
            put_varint(out, data.len() as u64 + 1);
            out.extend_from_slice(data);
        }
    }
}

/// One record; `delta` is its timestamp less the previous record's in the buffer.
fn encode(
    out: &mut Vec<u8>,
    delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &Bound<'_, PyAny>,
) -> PyResult<()> {
    put_varint(out, (delta.wrapping_shl(1) ^ (delta >> 63)) as u64); // zigzag
    put_bytes(out, key);
    put_bytes(out, value);
    if headers.is_none() {
        out.push(0);
        return Ok(());
    }
    let headers = headers.cast::<PyList>()?; // kappaflow's Headers: a list of (name, value)
    put_varint(out, headers.len() as u64);
    for (i, header) in headers.iter().enumerate() {
        let pair = header.cast::<PyTuple>().ok().filter(|p| p.len() == 2);
        let Some(pair) = pair else {
            return Err(PyTypeError::new_err(format!(
                "header {i}: a (name, value) pair, not {}",
                header.get_type().name()?
            )));
        };
        let name = pair.get_item(0)?;
        let name = name
            .cast::<PyString>()
            .map_err(|_| PyTypeError::new_err(format!("header {i}: the name must be a str")))?;
        let name = name.to_str()?.as_bytes();
        put_varint(out, name.len() as u64);
        out.extend_from_slice(name);
        let value = pair.get_item(1)?;
        if value.is_none() {
            put_bytes(out, None);
        } else {
            let value = value.cast::<PyBytes>().map_err(|_| {
                PyTypeError::new_err(format!("header {i}: the value must be bytes or None"))
            })?;
            put_bytes(out, Some(value.as_bytes()));
        }
    }
    Ok(())
}

/// A cursor over one payload, and the timestamp of the record before it.
pub(crate) struct Reader<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) at: usize,
    pub(crate) timestamp: i64,
}

impl<'a> Reader<'a> {
    fn truncated(&self) -> PyErr {
        PyValueError::new_err(format!(
            "a shuffled batch ends inside a record (byte {} of {})",
            self.at,
            self.data.len()
        ))
    }

    fn take(&mut self, n: usize) -> PyResult<&'a [u8]> {
        if self.data.len() - self.at < n {
            return Err(self.truncated());
        }
        let taken = &self.data[self.at..self.at + n];
        self.at += n;
        Ok(taken)
    }

    fn varint(&mut self) -> PyResult<u64> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.data.get(self.at) else {
                return Err(self.truncated());
            };
            self.at += 1;
            value |= ((byte & 0x7f) as u64) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(PyValueError::new_err(
            "a shuffled batch holds a varint over 64 bits",
        ))
    }

    /// The next record's timestamp (its zigzag delta added to the previous one's).
    pub(crate) fn timestamp(&mut self) -> PyResult<i64> {
        let zigzag = self.varint()?;
        let delta = ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64);
        self.timestamp = self.timestamp.wrapping_add(delta);
        Ok(self.timestamp)
    }

    fn bytes<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.varint()? {
            0 => Ok(py.None().into_bound(py)),
            length => Ok(PyBytes::new(py, self.take(length as usize - 1)?).into_any()),
        }
    }

    pub(crate) fn done(&self) -> bool {
        self.at >= self.data.len()
    }
}

pub(crate) fn read_record<'py>(
    py: Python<'py>,
    reader: &mut Reader<'_>,
    offset: i64,
    headers_type: &Bound<'py, PyAny>,
    new_empty_list: Option<ffi::newfunc>,
) -> PyResult<Bound<'py, PyTuple>> {
    let timestamp = reader.timestamp()?;
    let key = reader.bytes(py)?;
    let value = reader.bytes(py)?;
    let count = reader.varint()?;
    let headers = if count == 0 {
        match new_empty_list {
            // SAFETY: `new` is the type's own tp_new (list's, see messages.rs `list_new`), called as
            // type_call calls it; the result is a new reference or NULL with an error set.
            Some(new) => unsafe {
                let empty = PyTuple::empty(py);
                let made = new(headers_type.as_ptr().cast(), empty.as_ptr(), null_mut());
                Bound::from_owned_ptr_or_err(py, made)?
            },
            None => headers_type.call1((PyTuple::empty(py),))?,
        }
    } else {
        let pairs = PyList::empty(py);
        for _ in 0..count {
            let length = reader.varint()? as usize;
            let name = std::str::from_utf8(reader.take(length)?)
                .map_err(|e| PyValueError::new_err(format!("a shuffled header's name: {e}")))?;
            let value = reader.bytes(py)?;
            pairs.append((PyString::new(py, name), value))?;
        }
        headers_type.call1((pairs,))?
    };
    PyTuple::new(
        py,
        [
            offset.into_pyobject(py)?.into_any(),
            timestamp.into_pyobject(py)?.into_any(),
            key,
            value,
            headers,
        ],
    )
}
