//! A stream aggregation over a cached store, compiled: `KStreamAggregateProcessor.process` with the typed
//! store's `get` and `put` (`MeteredKeyValueStore`) and the record cache's `get` and dirty `put`
//! (`ThreadCache`) inlined.
//!
//! The record cache is the native one (`cache.rs`): this stage reads and writes its entries with the
//! same operations as the Python path's `ThreadCache.get` and dirty `put`, so LRU and dirty order, entry
//! sizes, hit and miss counts, evictions and flushes are the same. The typed store's get and put counts
//! are the named cache's native `gets` and `puts` (the store publishes its own plus these). Over a Long
//! serde an aggregate in a Long's range is written unboxed (`cache::put_long`), and a count's update of
//! an unboxed entry is done in Rust.
//! Initializer, aggregator, reducer, serdes, the store below the cache and the flush listeners are
//! called as Python.

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use pyo3::{PyTraverseError, PyVisit};

use crate::cache::{self, Found, NamedCache, ThreadCache};
use crate::failure::FailureMark;
use crate::slots::{encode_utf8, Slot, SlotClass};
use crate::touches::VALUE_AND_TIMESTAMP_FIELDS;

/// A key's previous aggregate: none (absent or a tombstone), a Long kept unboxed in the cache, or a
/// `ValueAndTimestamp` (or what the serde decoded).
enum Previous<'py> {
    Absent,
    Long { value: i64, timestamp: i64 },
    Stamped(Bound<'py, PyAny>),
}

/// A compiled `KStreamAggregateProcessor` stage over a cached timestamped key-value store, built from
/// the `AggregatePlan` Python hands over (read once, here). Called as `stage(key, value, timestamp,
/// headers)` like a Python stage, or directly by the native drain loop.
#[pyclass(frozen, module = "kappaflow_native")]
pub struct AggregateStage {
    failure: FailureMark,
    context_current: Slot,
    skip_null: Py<PyAny>,
    counting: bool,
    initializer: Py<PyAny>,
    aggregator: Py<PyAny>,
    reducer: Py<PyAny>,
    value_and_timestamp: SlotClass<2>,
    // the typed store's serdes
    topic: Py<PyAny>,
    utf8_keys: bool,
    serialize_key: Py<PyAny>,
    deserialize: Py<PyAny>,
    inner_get: Py<PyAny>,
    serialize: Py<PyAny>,
    decodes_to_itself: Py<PyAny>,
    packs_longs: bool,
    caching_put: Py<PyAny>,
    // the thread's record cache and this store's named cache in it
    thread: Py<ThreadCache>,
    named: Py<NamedCache>,
    record_context_topic: Slot,
}

#[pymethods]
impl AggregateStage {
    #[new]
    fn new(py: Python<'_>, plan: &Bound<'_, PyAny>) -> PyResult<Self> {
        let store = plan.getattr(intern!(py, "store"))?;
        let cache = store.getattr(intern!(py, "cache"))?;
        let context = plan.getattr(intern!(py, "context"))?;
        if !store.getattr(intern!(py, "context"))?.is(&context) {
            return Err(PyTypeError::new_err(
                "kappaflow_native: the store's context is not the processor's",
            ));
        }
        let context_type = context.get_type();
        let thread = cache.cast_into::<ThreadCache>().map_err(|_| {
            PyTypeError::new_err("kappaflow_native: the store's record cache is not the native one")
        })?;
        let namespace: String = store.getattr(intern!(py, "namespace"))?.extract()?;
        let named = thread.borrow_mut().named(py, &namespace)?;
        let value_and_timestamp = plan.getattr(intern!(py, "value_and_timestamp"))?;
        let packs_longs = store.getattr(intern!(py, "packs_longs"))?.is_truthy()?;
        if packs_longs {
            // this stage writes its Long aggregates unboxed; the cache boxes them with this class
            named.bind(py).borrow_mut().long_class = Some(SlotClass::of(
                py,
                value_and_timestamp.clone(),
                VALUE_AND_TIMESTAMP_FIELDS,
            )?);
        }
        let record_context_type = plan.getattr(intern!(py, "record_context"))?.cast_into()?;
        Ok(AggregateStage {
            failure: FailureMark::of(py, plan)?,
            context_current: Slot::of(&context_type, "current")?,
            skip_null: plan.getattr(intern!(py, "skip_null"))?.unbind(),
            counting: plan.getattr(intern!(py, "counting"))?.is_truthy()?,
            initializer: plan.getattr(intern!(py, "initializer"))?.unbind(),
            aggregator: plan.getattr(intern!(py, "aggregator"))?.unbind(),
            reducer: plan.getattr(intern!(py, "reducer"))?.unbind(),
            value_and_timestamp: SlotClass::of(
                py,
                value_and_timestamp,
                VALUE_AND_TIMESTAMP_FIELDS,
            )?,
            topic: store.getattr(intern!(py, "topic"))?.unbind(),
            utf8_keys: store.getattr(intern!(py, "utf8_keys"))?.is_truthy()?,
            serialize_key: store.getattr(intern!(py, "serialize_key"))?.unbind(),
            deserialize: store.getattr(intern!(py, "deserialize"))?.unbind(),
            inner_get: store.getattr(intern!(py, "inner_get"))?.unbind(),
            serialize: store.getattr(intern!(py, "serialize"))?.unbind(),
            decodes_to_itself: store.getattr(intern!(py, "decodes_to_itself"))?.unbind(),
            packs_longs,
            caching_put: store.getattr(intern!(py, "caching_put"))?.unbind(),
            thread: thread.unbind(),
            named,
            record_context_topic: Slot::of(&record_context_type, "topic")?,
        })
    }

    fn __call__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        timestamp: i64,
        headers: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let _ = headers; // an aggregate's update carries no headers: the cache forwards on flush
        self.process(py, key, value, timestamp)
    }

    /// The stage holds its task's context, store and cache, and a node holds its stage: the collector
    /// must see these references to free a closed task's cycles (it breaks them at the Python objects).
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.failure.traverse(&visit)?;
        for object in [
            &self.skip_null,
            &self.initializer,
            &self.aggregator,
            &self.reducer,
            &self.serialize_key,
            &self.deserialize,
            &self.inner_get,
            &self.serialize,
            &self.decodes_to_itself,
            &self.caching_put,
        ] {
            visit.call(object)?;
        }
        visit.call(&self.thread)?;
        visit.call(&self.named)
    }
}

impl AggregateStage {
    /// The stage: on any exception the node is named as failed (unless a deeper one was), as
    /// `forward()` does.
    pub fn process<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        timestamp: i64,
    ) -> PyResult<()> {
        let outcome = self.update(py, key, value, timestamp);
        self.failure.marked(py, outcome)
    }

    fn update<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        mut timestamp: i64,
    ) -> PyResult<()> {
        if key.is_none() || value.is_none() {
            self.skip_null.bind(py).call0()?;
            return Ok(());
        }
        let (raw_key, previous) = self.read(py, key)?;
        let (old, previous_timestamp) = match previous {
            Previous::Absent => (None, timestamp),
            Previous::Long {
                value,
                timestamp: previous,
            } => {
                if self.counting {
                    if let Some(count) = value.checked_add(1) {
                        // a hot key's count: no Python object made or freed
                        self.named.bind(py).borrow_mut().puts += 1;
                        let timestamp = timestamp.max(previous);
                        return self.put_long(py, &raw_key, count, timestamp);
                    }
                }
                (Some(value.into_pyobject(py)?.into_any()), previous)
            }
            Previous::Stamped(previous) => {
                let (old, previous_timestamp) = self.value_and_time(py, &previous)?;
                (Some(old), previous_timestamp)
            }
        };
        if previous_timestamp > timestamp {
            timestamp = previous_timestamp;
        }
        let new = match old {
            None => {
                if self.counting {
                    1i64.into_pyobject(py)?.into_any()
                } else if !self.reducer.is_none(py) {
                    value.clone()
                } else {
                    let initial = self.initializer.bind(py).call0()?;
                    self.aggregator.bind(py).call1((key, value, initial))?
                }
            }
            Some(old) => {
                if self.counting {
                    old.add(1)?
                } else if !self.reducer.is_none(py) {
                    self.reducer.bind(py).call1((old, value))?
                } else {
                    self.aggregator.bind(py).call1((key, value, old))?
                }
            }
        };
        self.write(py, &raw_key, new, timestamp)
    }

    /// `read(key)`: the key's bytes and its aggregate, from the cache (a hit) or the store below it.
    fn read<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyBytes>, Previous<'py>)> {
        let named = self.named.bind(py);
        named.borrow_mut().gets += 1;
        let raw_key = match key.cast::<PyString>() {
            Ok(text) if self.utf8_keys && text.is_exact_instance_of::<PyString>() => {
                encode_utf8(py, text)?
            }
            _ => self.serialize_key.bind(py).call1((key,))?,
        };
        let raw_key = raw_key.cast_into::<PyBytes>()?;
        let topic = self.topic.bind(py);
        let previous = match cache::lookup(py, self.thread.bind(py), named, raw_key.as_bytes()) {
            None => {
                let stored = self.inner_get.bind(py).call1((&raw_key,))?;
                self.deserialize.bind(py).call1((topic, stored))?
            }
            Some(Found::Long { value, timestamp }) => {
                return Ok((raw_key, Previous::Long { value, timestamp }))
            }
            Some(Found::Boxed(_, Some(decoded))) => decoded.into_bound(py),
            Some(Found::Boxed(stored, None)) => self.deserialize.bind(py).call1((topic, stored))?,
        };
        if previous.is_none() {
            return Ok((raw_key, Previous::Absent));
        }
        Ok((raw_key, Previous::Stamped(previous)))
    }

    /// A stored aggregate's value and timestamp (a ValueAndTimestamp, through its slots when exact).
    fn value_and_time<'py>(
        &self,
        py: Python<'py>,
        previous: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyAny>, i64)> {
        if self.value_and_timestamp.is_instance(previous) {
            let slots = &self.value_and_timestamp.slots;
            return Ok((
                slots[0].get(py, previous)?,
                slots[1].get(py, previous)?.extract()?,
            ));
        }
        Ok((
            previous.getattr(intern!(py, "value"))?,
            previous.getattr(intern!(py, "timestamp"))?.extract()?,
        ))
    }

    /// `write(raw_key, ValueAndTimestamp(new, timestamp))`: counts packed inline, other values through
    /// the serde; a value that decodes to itself kept decoded in the entry.
    fn write<'py>(
        &self,
        py: Python<'py>,
        raw_key: &Bound<'py, PyBytes>,
        new: Bound<'py, PyAny>,
        timestamp: i64,
    ) -> PyResult<()> {
        self.named.bind(py).borrow_mut().puts += 1;
        let stamped = if new.is_none() {
            new
        } else {
            if self.packs_longs && new.is_exact_instance_of::<pyo3::types::PyInt>() {
                // out of a Long's range: the serde below raises its error
                if let Ok(value) = new.extract::<i64>() {
                    // kept unboxed in the cache entry: boxed when Python reads it
                    return self.put_long(py, raw_key, value, timestamp);
                }
            }
            self.value_and_timestamp
                .new_instance(py, [new, timestamp.into_pyobject(py)?.into_any()])?
        };
        let raw_value = self
            .serialize
            .bind(py)
            .call1((self.topic.bind(py), &stamped))?;
        if self
            .decodes_to_itself
            .bind(py)
            .call1((&stamped,))?
            .is_truthy()?
        {
            self.put_dirty(py, raw_key, &raw_value, &stamped)
        } else {
            self.caching_put.bind(py).call1((raw_key, raw_value))?;
            Ok(())
        }
    }

    /// The cache part of `write(raw_key, ValueAndTimestamp(value, timestamp))` of a Long (the caller
    /// counts the store's put): a dirty `cache::put_long` under the task's current record context.
    fn put_long<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyBytes>,
        value: i64,
        timestamp: i64,
    ) -> PyResult<()> {
        let record_context = self.context_current.get(py, self.failure.context(py))?;
        let topic = self.record_context_topic.get(py, &record_context)?;
        cache::put_long(
            self.thread.bind(py),
            self.named.bind(py),
            key,
            value,
            timestamp,
            &record_context,
            topic.len()? as isize,
        )
    }

    /// `ThreadCache.put(..., dirty=True, ...)` under the task's current record context.
    fn put_dirty<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyBytes>,
        value: &Bound<'py, PyAny>,
        decoded: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let record_context = self.context_current.get(py, self.failure.context(py))?;
        let topic = self.record_context_topic.get(py, &record_context)?;
        cache::put(
            self.thread.bind(py),
            self.named.bind(py),
            key,
            value,
            true,
            &record_context,
            topic.len()? as isize,
            Some(decoded),
        )
    }
}
