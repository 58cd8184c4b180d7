//! A reprocessing task's shuffled input read back a batch at a time (`ShuffledCursor`).
//!
//! The reading stage's input is the upstream runs' payloads (shuffle.rs), merged by timestamp as
//! `kappaflow.spark.batches.merge_by_timestamp` merges them: on a tie the earlier run first, a run never
//! reordered. A merge of run heads needs no more than the heads, so the cursor hands the merged records
//! over `limit` at a time and the task processes each batch before building the next: the record tuples
//! of a whole repartition partition (~150 bytes a word count's record, against ~16 in its payload) are
//! never all alive at once. `shuffled_records` is the cursor read to its end in one call.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use pyo3::{PyTraverseError, PyVisit};

use crate::messages::list_new;
use crate::shuffle::{read_record, Reader};

/// Where one upstream run stands: the payload being read, the byte its next record starts at, and the
/// timestamp of the record before it (each payload's timestamps are deltas from 0).
struct RunPosition {
    payloads: Vec<Py<PyBytes>>,
    index: usize,
    at: usize,
    timestamp: i64,
}

impl RunPosition {
    /// A reader at the run's next record, moving past payloads that are read to their end; None once
    /// the run is.
    fn reader<'a>(&'a mut self, py: Python<'a>) -> Option<Reader<'a>> {
        loop {
            let payload = self.payloads.get(self.index)?.as_bytes(py);
            let reader = Reader {
                data: payload,
                at: self.at,
                timestamp: self.timestamp,
            };
            if !reader.done() {
                return Some(reader);
            }
            self.index += 1;
            self.at = 0;
            self.timestamp = 0;
        }
    }

    /// The next record's timestamp, for the merge; None once the run is read.
    fn peek(&mut self, py: Python<'_>) -> PyResult<Option<i64>> {
        match self.reader(py) {
            Some(mut probe) => Ok(Some(probe.timestamp()?)),
            None => Ok(None),
        }
    }
}

/// The upstream runs' records merged by timestamp and numbered from 0, `take(limit)` at a time: the
/// record tuples `(offset, timestamp, key, value, headers)` that `kappaflow.spark.batches.shuffled_input`
/// builds, with `headers_type` making each record's headers (`Headers(headers or ())`).
#[pyclass(module = "kappaflow_native")]
pub struct ShuffledCursor {
    runs: Vec<RunPosition>,
    heap: BinaryHeap<Reverse<(i64, usize)>>,
    headers_type: Py<PyAny>,
    offset: i64,
}

#[pymethods]
impl ShuffledCursor {
    #[new]
    fn new(py: Python<'_>, runs: Vec<Vec<Py<PyBytes>>>, headers_type: Py<PyAny>) -> PyResult<Self> {
        let mut cursor = ShuffledCursor {
            runs: runs
                .into_iter()
                .map(|payloads| RunPosition {
                    payloads,
                    index: 0,
                    at: 0,
                    timestamp: 0,
                })
                .collect(),
            heap: BinaryHeap::new(),
            headers_type,
            offset: 0,
        };
        for run in 0..cursor.runs.len() {
            if let Some(timestamp) = cursor.runs[run].peek(py)? {
                cursor.heap.push(Reverse((timestamp, run)));
            }
        }
        Ok(cursor)
    }

    /// The next `limit` records at most, in merge order; an empty list once every run is read.
    fn take<'py>(&mut self, py: Python<'py>, limit: usize) -> PyResult<Bound<'py, PyList>> {
        let headers_type = self.headers_type.bind(py);
        let new_empty_list = list_new(headers_type);
        let records = PyList::empty(py);
        while records.len() < limit {
            let Some(Reverse((_, run))) = self.heap.pop() else {
                break;
            };
            let position = &mut self.runs[run];
            let offset = self.offset;
            let (record, at, timestamp) = {
                let Some(mut reader) = position.reader(py) else {
                    continue; // not reached: a run is in the heap only while it has a record
                };
                let record = read_record(py, &mut reader, offset, headers_type, new_empty_list)?;
                (record, reader.at, reader.timestamp)
            };
            position.at = at;
            position.timestamp = timestamp;
            records.append(record)?;
            self.offset += 1;
            if let Some(timestamp) = position.peek(py)? {
                self.heap.push(Reverse((timestamp, run)));
            }
        }
        Ok(records)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.headers_type)
    }
}

/// The reading stage's input from its shuffled batches, whole: `runs` are the upstream runs in order,
/// each a list of payloads (their records concatenated). A `ShuffledCursor` read to its end.
#[pyfunction]
pub fn shuffled_records<'py>(
    py: Python<'py>,
    runs: Vec<Vec<Py<PyBytes>>>,
    headers_type: Py<PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    ShuffledCursor::new(py, runs, headers_type)?.take(py, usize::MAX)
}
