//! The restore consumer's fetched changelog records taken straight from librdkafka, with the
//! `rd_kafka_t` of the changelog reader's confluent-kafka `Consumer`, instead of through its
//! `consume()` (a Python `Message`, a topic `str`, key and value `bytes` built per record, then read
//! back by `restore.rs`).
//!
//! How: the restore consumer is assign()-only (no group, no rebalance callback). Before a changelog
//! partition is assigned, `open` forwards its fetches to a queue of this reader's own
//! (`rdkafka_queue.rs`, which also says why that is sound), so the partition's fetched records, its
//! fetch errors and its end-of-partition events reach only this queue, and everything else (errors,
//! logs, statistics on the consumer and main queues) stays where it was, for confluent-kafka's
//! `consume()` to serve with its call state (kappaflow calls it every step with a zero timeout, and
//! applies any record it still returns first).
//!
//! Each record's key, value, offset and timestamp are copied into a `ChangelogRun` per partition and
//! the message is destroyed at once, so no librdkafka object outlives the call (a run may live on after
//! the consumer is closed). `write` then fills a rocksdict `WriteBatch` from a run as `restore.rs` does
//! from messages: a tombstone (NULL payload: None in confluent-kafka) as `delete`, a NULL key as b"", a
//! timestamped store's value prefixed with its timestamp. Errors go back to the reader as `(topic,
//! partition, code, reason)`, the reason being confluent-kafka's (`rd_kafka_message_errstr`), and ends
//! as offsets, for the same handling as the messages `consume()` returns.

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use crate::rdkafka_queue::{PartitionQueue, RdMessage, Wait};
use crate::restore::{prefixed_bytes, vectorcall};

/// `RD_KAFKA_RESP_ERR__PARTITION_EOF`.
const ERR_PARTITION_EOF: c_int = -191;

/// Fetches the restore consumer's changelog records natively (module docstring).
#[pyclass(module = "kappaflow_native", frozen)]
pub struct RestoreQueues {
    queue: PartitionQueue,
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
        Ok(RestoreQueues {
            queue: PartitionQueue::new(consumer, consumer_type, version, library, "restore")?,
        })
    }

    /// Route `topic`-`partition`'s fetched records to this reader's queue; call it before assigning
    /// the partition, each time. False (the records then reach `consume()`) when librdkafka has no
    /// such partition or the consumer or this reader is closed.
    fn open(&self, py: Python<'_>, topic: &str, partition: i32) -> PyResult<bool> {
        self.queue.open(py, topic, partition)
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
        let batch = self.queue.batch(py, max_records, timeout, Wait::ForBatch)?;
        // The runs by partition (one per partition seen; librdkafka hands runs over, so the last one
        // found is checked first, by its topic handle: every message stays alive until all are
        // copied, so a handle compared is never a freed one's address).
        let mut found: Vec<(*mut c_void, i32, String, ChangelogRun)> = Vec::new();
        let mut last = usize::MAX;
        for &msg in batch.messages() {
            // SAFETY: each message is a live rd_kafka_message_t until the batch is dropped.
            unsafe { self.take(msg, &mut found, &mut last, &ends, &errors)? };
        }
        drop(batch);
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
        self.queue.close(py)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.queue.traverse(&visit)
    }
}

impl RestoreQueues {
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
            let topic = self.queue.api().topic_of(m.rkt);
            if m.err == ERR_PARTITION_EOF {
                ends.set_item((topic, m.partition), m.offset)?;
                return Ok(());
            }
            let reason = self.queue.api().errstr(m);
            errors.append((topic, m.partition, m.err, reason))?;
            return Ok(());
        }
        let index = match found.get(*last) {
            Some((rkt, partition, _, _)) if *rkt == m.rkt && *partition == m.partition => *last,
            _ => {
                let topic = self.queue.api().topic_of(m.rkt);
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
        let timestamp = (self.queue.api().message_timestamp)(msg, &mut kind);
        let key =
            (!m.key.is_null()).then(|| std::slice::from_raw_parts(m.key.cast::<u8>(), m.key_len));
        let value = (!m.payload.is_null())
            .then(|| std::slice::from_raw_parts(m.payload.cast::<u8>(), m.len));
        found[index].3.push(key, value, m.offset, timestamp);
        Ok(())
    }
}
