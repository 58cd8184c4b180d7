//! A stream aggregation over a cached store, compiled: `KStreamAggregateProcessor.process` with the typed
//! store's `get` and `put` (`MeteredKeyValueStore`) and the record cache's `get` and dirty `put`
//! (`ThreadCache`) inlined.
//!
//! The record cache stays the Python objects it is (`NamedCache.entries` and `.dirty`, ordered dicts of
//! `CacheEntry`): this stage reads and updates them with the same operations in the same order, so LRU
//! and dirty order, entry sizes, hit and miss counts, evictions and flushes are those of the Python path.
//! Initializer, aggregator, reducer, serdes, the store below the cache and eviction (which flushes
//! through the store's listeners) are called as Python.

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyType};
use pyo3::{PyTraverseError, PyVisit};

use crate::failure::FailureMark;
use crate::slots::{encode_utf8, Slot, SlotClass};
use crate::touches::{CACHE_ENTRY_FIELDS, VALUE_AND_TIMESTAMP_FIELDS};

/// A counter or size held in a slot: `owner.<slot> += delta`.
fn add_to<'py>(
    py: Python<'py>,
    slot: &Slot,
    owner: &Bound<'py, PyAny>,
    delta: isize,
) -> PyResult<()> {
    let total = slot.get(py, owner)?.add(delta)?;
    slot.put(py, owner, &total)
}

/// What a read found: the aggregate, and the key's `CacheEntry` when the cache held it (a hit).
struct Read<'py> {
    previous: Bound<'py, PyAny>,
    entry: Option<Bound<'py, PyAny>>,
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
    // the typed store (its gets and puts counters) and its serdes
    store: Py<PyAny>,
    store_gets: Slot,
    store_puts: Slot,
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
    thread: Py<PyAny>,
    thread_hits: Slot,
    thread_misses: Slot,
    thread_size_bytes: Slot,
    thread_max_bytes: Slot,
    named: Py<PyAny>,
    named_size: Slot,
    entries: Py<PyDict>,
    entries_move_to_end: Py<PyAny>,
    dirty: Py<PyDict>,
    dirty_move_to_end: Py<PyAny>,
    entry: SlotClass<5>,
    entry_overhead: isize,
    not_decoded: Py<PyAny>,
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
        let named = cache.getattr(intern!(py, "cache"))?;
        let thread = cache.getattr(intern!(py, "thread"))?;
        let thread_type: Bound<'_, PyType> = thread.get_type();
        let typed_store = store.getattr(intern!(py, "store"))?;
        let typed_store_type: Bound<'_, PyType> = typed_store.get_type();
        let entries = named
            .getattr(intern!(py, "entries"))?
            .cast_into::<PyDict>()?;
        let dirty = named.getattr(intern!(py, "dirty"))?.cast_into::<PyDict>()?;
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
                plan.getattr(intern!(py, "value_and_timestamp"))?,
                VALUE_AND_TIMESTAMP_FIELDS,
            )?,
            topic: store.getattr(intern!(py, "topic"))?.unbind(),
            utf8_keys: store.getattr(intern!(py, "utf8_keys"))?.is_truthy()?,
            serialize_key: store.getattr(intern!(py, "serialize_key"))?.unbind(),
            deserialize: store.getattr(intern!(py, "deserialize"))?.unbind(),
            inner_get: store.getattr(intern!(py, "inner_get"))?.unbind(),
            serialize: store.getattr(intern!(py, "serialize"))?.unbind(),
            decodes_to_itself: store.getattr(intern!(py, "decodes_to_itself"))?.unbind(),
            packs_longs: store.getattr(intern!(py, "packs_longs"))?.is_truthy()?,
            caching_put: store.getattr(intern!(py, "caching_put"))?.unbind(),
            store_gets: Slot::of(&typed_store_type, "gets")?,
            store_puts: Slot::of(&typed_store_type, "puts")?,
            store: typed_store.unbind(),
            thread_hits: Slot::of(&thread_type, "hits")?,
            thread_misses: Slot::of(&thread_type, "misses")?,
            thread_size_bytes: Slot::of(&thread_type, "size_bytes")?,
            thread_max_bytes: Slot::of(&thread_type, "max_bytes")?,
            thread: thread.unbind(),
            entries_move_to_end: entries.getattr(intern!(py, "move_to_end"))?.unbind(),
            dirty_move_to_end: dirty.getattr(intern!(py, "move_to_end"))?.unbind(),
            entries: entries.unbind(),
            dirty: dirty.unbind(),
            named_size: Slot::of(&named.get_type(), "size")?,
            named: named.unbind(),
            entry: SlotClass::of(
                py,
                cache.getattr(intern!(py, "entry_type"))?,
                CACHE_ENTRY_FIELDS,
            )?,
            entry_overhead: cache.getattr(intern!(py, "entry_overhead"))?.extract()?,
            not_decoded: cache.getattr(intern!(py, "not_decoded"))?.unbind(),
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
            &self.thread,
            &self.named,
            &self.entries_move_to_end,
            &self.dirty_move_to_end,
            &self.not_decoded,
        ] {
            visit.call(object)?;
        }
        visit.call(&self.store)?;
        visit.call(&self.entries)?;
        visit.call(&self.dirty)
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
        let (raw_key, read) = self.read(py, key)?;
        let Read { previous, entry } = read;
        let new = if previous.is_none() {
            if self.counting {
                1i64.into_pyobject(py)?.into_any()
            } else if !self.reducer.is_none(py) {
                value.clone()
            } else {
                let initial = self.initializer.bind(py).call0()?;
                self.aggregator.bind(py).call1((key, value, initial))?
            }
        } else {
            let (old, previous_timestamp) = self.value_and_time(py, &previous)?;
            if previous_timestamp > timestamp {
                timestamp = previous_timestamp;
            }
            if self.counting {
                old.add(1)?
            } else if !self.reducer.is_none(py) {
                self.reducer.bind(py).call1((old, value))?
            } else {
                self.aggregator.bind(py).call1((key, value, old))?
            }
        };
        // count(): nothing ran between the read and this write, so a hit's entry is still the key's
        // and the most recent: written without a second lookup or move
        let current = if self.counting { entry } else { None };
        self.write(py, &raw_key, new, timestamp, current)
    }

    /// `read(key)`: the key's bytes and its aggregate, from the cache (a hit) or the store below it.
    fn read<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyAny>, Read<'py>)> {
        add_to(py, &self.store_gets, self.store.bind(py), 1)?;
        let raw_key = match key.cast::<PyString>() {
            Ok(text) if self.utf8_keys && text.is_exact_instance_of::<PyString>() => {
                encode_utf8(py, text)?
            }
            _ => self.serialize_key.bind(py).call1((key,))?,
        };
        let topic = self.topic.bind(py);
        let thread = self.thread.bind(py);
        let Some(entry) = self.entries.bind(py).get_item(&raw_key)? else {
            add_to(py, &self.thread_misses, thread, 1)?;
            let stored = self.inner_get.bind(py).call1((&raw_key,))?;
            let previous = self.deserialize.bind(py).call1((topic, stored))?;
            return Ok((
                raw_key,
                Read {
                    previous,
                    entry: None,
                },
            ));
        };
        add_to(py, &self.thread_hits, thread, 1)?;
        self.entries_move_to_end.bind(py).call1((&raw_key,))?;
        let slots = &self.entry.slots;
        let decoded = slots[4].get(py, &entry)?;
        let previous = if decoded.is(self.not_decoded.bind(py)) {
            let stored = slots[0].get(py, &entry)?;
            self.deserialize.bind(py).call1((topic, stored))?
        } else {
            decoded
        };
        Ok((
            raw_key,
            Read {
                previous,
                entry: Some(entry),
            },
        ))
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
        raw_key: &Bound<'py, PyAny>,
        new: Bound<'py, PyAny>,
        timestamp: i64,
        current: Option<Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        add_to(py, &self.store_puts, self.store.bind(py), 1)?;
        let stamped = if new.is_none() {
            new
        } else {
            if self.packs_longs && new.is_exact_instance_of::<pyo3::types::PyInt>() {
                // out of a Long's range: the serde below raises its error
                if let Ok(count) = new.extract::<i64>() {
                    let mut packed = [0u8; 16];
                    packed[..8].copy_from_slice(&timestamp.to_be_bytes());
                    packed[8..].copy_from_slice(&count.to_be_bytes());
                    let stamped = self
                        .value_and_timestamp
                        .new_instance(py, [new, timestamp.into_pyobject(py)?.into_any()])?;
                    let packed = PyBytes::new(py, &packed).into_any();
                    return self.put_dirty(py, raw_key, &packed, &stamped, current);
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
            self.put_dirty(py, raw_key, &raw_value, &stamped, current)
        } else {
            self.caching_put.bind(py).call1((raw_key, raw_value))?;
            Ok(())
        }
    }

    /// `ThreadCache.put(..., dirty=True, ...)`: the entry written in place (or added), made the most recent
    /// and the last dirty, sizes kept, and the cache evicted when over its bound. `current` is the key's
    /// entry when the caller knows it is already the most recent.
    fn put_dirty<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        decoded: &Bound<'py, PyAny>,
        current: Option<Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        let record_context = self.context_current.get(py, self.failure.context(py))?;
        let topic = self.record_context_topic.get(py, &record_context)?;
        let mut size = key.len()? as isize + topic.len()? as isize + self.entry_overhead;
        if !value.is_none() {
            size += value.len()? as isize;
        }
        let entries = self.entries.bind(py);
        let dirty = self.dirty.bind(py);
        let named = self.named.bind(py);
        let thread = self.thread.bind(py);
        let slots = &self.entry.slots;
        let true_ = true.into_pyobject(py)?.to_owned().into_any();
        let moved = current.is_some();
        let found = match current {
            Some(entry) => Some(entry),
            None => entries.get_item(key)?,
        };
        let delta = match found {
            None => {
                let size_obj = size.into_pyobject(py)?.into_any();
                let entry = self.entry.cls.bind(py).call1((
                    value,
                    &true_,
                    &record_context,
                    &size_obj,
                    decoded,
                ))?;
                // through the mapping protocol: OrderedDict keeps its order there, not in PyDict_SetItem
                entries.as_any().set_item(key, entry)?;
                dirty.as_any().set_item(key, py.None())?;
                size
            }
            Some(old) => {
                slots[0].put(py, &old, value)?;
                slots[2].put(py, &old, &record_context)?;
                slots[4].put(py, &old, decoded)?;
                if !moved {
                    self.entries_move_to_end.bind(py).call1((key,))?;
                }
                if slots[1].get(py, &old)?.is_truthy()? {
                    self.dirty_move_to_end.bind(py).call1((key,))?;
                } else {
                    slots[1].put(py, &old, &true_)?;
                    dirty.as_any().set_item(key, py.None())?;
                }
                let old_size: isize = slots[3].get(py, &old)?.extract()?;
                let delta = size - old_size;
                if delta != 0 {
                    slots[3].put(py, &old, &size.into_pyobject(py)?.into_any())?;
                }
                delta
            }
        };
        if delta != 0 {
            add_to(py, &self.named_size, named, delta)?;
            add_to(py, &self.thread_size_bytes, thread, delta)?;
        }
        let total: isize = self.thread_size_bytes.get(py, thread)?.extract()?;
        let bound: isize = self.thread_max_bytes.get(py, thread)?.extract()?;
        if total > bound {
            thread.call_method1(intern!(py, "evict_over_bound"), (named,))?;
        }
        Ok(())
    }
}
