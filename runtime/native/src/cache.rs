//! The record cache in Rust: `kappaflow.state.cache.ThreadCache`'s twin, step for step.
//!
//! Kafka Streams' ThreadCache: named caches (one per task and store) of entries in LRU order, each with
//! its dirty keys in the order last written; the thread's total bounded by `max_bytes`. A put over the
//! bound evicts the least recently used entries of the cache written, and evicting a dirty entry first
//! flushes every dirty entry of that cache, in last-written order, to its listener. Entries and counters
//! are Rust values (a linked hash map per named cache, integers), so a hot key's update costs no Python
//! object but the ones it stores; Python reads them through the same methods and attributes as the
//! Python class (an entry it reads is a `CacheEntry` copy). The native aggregation (`aggregate.rs`)
//! calls `put`, `put_long` and `lookup` below directly; a Long aggregate it writes stays unboxed
//! (`Stored::Long`) until Python reads the entry, which is when its bytes and `ValueAndTimestamp` are
//! built: the sizes are the boxed entry's, so bound, evictions and flush order do not change.
//!
//! Listeners are Python and may write through the cache: no borrow of a cache is held while one runs.

use std::collections::HashMap;

use hashlink::LinkedHashMap;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use crate::cache_entry::{boxed, CacheEntry, Entry, Key, Stored, LONG_BYTES};
use crate::slots::SlotClass;
use crate::table_flush;

/// One namespace (a task's store) of the record cache: entries in LRU order (eldest first), dirty keys
/// in the order last written, their size, the flush listener; and the typed store's get and put counts
/// made by the native aggregation (`gets`, `puts`), which the store adds to its own when it publishes.
#[pyclass(module = "kappaflow_native")]
pub struct NamedCache {
    #[pyo3(get)]
    name: String,
    entries: LinkedHashMap<Key, Entry>,
    dirty: LinkedHashMap<Key, ()>,
    #[pyo3(get)]
    size: isize,
    listener: Option<Py<PyAny>>,
    #[pyo3(get)]
    pub gets: u64,
    #[pyo3(get)]
    pub puts: u64,
    /// The `ValueAndTimestamp` class of the native aggregation writing `Stored::Long` entries here.
    pub long_class: Option<SlotClass<2>>,
}

#[pymethods]
impl NamedCache {
    /// A named cache holds its listener (a store's bound method, and so the store and its task) and
    /// its entries: the collector must see them to free a closed task's cycles.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(listener) = &self.listener {
            visit.call(listener)?;
        }
        if let Some(class) = &self.long_class {
            visit.call(&class.cls)?;
        }
        for (key, entry) in self.entries.iter() {
            visit.call(&key.0)?;
            visit.call(&entry.context)?;
            if let Stored::Boxed { value, decoded } = &entry.stored {
                visit.call(value)?;
                if let Some(decoded) = decoded {
                    visit.call(decoded)?;
                }
            }
        }
        for key in self.dirty.keys() {
            visit.call(&key.0)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.listener = None;
        self.long_class = None;
        self.dirty.clear();
        self.entries.clear();
    }

    fn __len__(&self) -> usize {
        self.entries.len()
    }

    /// The dirty keys, in the order they flush (for tests and diagnostics).
    fn dirty_keys(&self, py: Python<'_>) -> Vec<Py<PyBytes>> {
        self.dirty.keys().map(|k| k.0.clone_ref(py)).collect()
    }

    /// The keys, eldest first (for tests and diagnostics).
    fn keys(&self, py: Python<'_>) -> Vec<Py<PyBytes>> {
        self.entries.keys().map(|k| k.0.clone_ref(py)).collect()
    }
}

/// Kafka Streams' ThreadCache (see the module docstring). `not_decoded` is the sentinel Python reads as
/// an entry's `decoded` when it has none; `entry_overhead` what each entry costs beyond its bytes.
#[pyclass(module = "kappaflow_native")]
pub struct ThreadCache {
    #[pyo3(get, set)]
    max_bytes: isize,
    caches: HashMap<String, Py<NamedCache>>,
    #[pyo3(get)]
    size_bytes: isize,
    #[pyo3(get)]
    evictions: u64,
    #[pyo3(get)]
    hits: u64,
    #[pyo3(get)]
    misses: u64,
    not_decoded: Py<PyAny>,
    entry_overhead: isize,
}

impl ThreadCache {
    /// A `CacheEntry` copy of `entry`, boxed first if it was a `Stored::Long`.
    fn snapshot(
        &self,
        py: Python<'_>,
        class: &Option<SlotClass<2>>,
        entry: &mut Entry,
    ) -> PyResult<CacheEntry> {
        let (dirty, size, context) = (entry.dirty, entry.size, entry.context.clone_ref(py));
        let (value, decoded) = boxed(py, class, entry)?;
        Ok(CacheEntry {
            value: value.clone_ref(py),
            dirty,
            context,
            size,
            decoded: match decoded {
                Some(decoded) => decoded.clone_ref(py),
                None => self.not_decoded.clone_ref(py),
            },
        })
    }

    fn cache_of(&self, py: Python<'_>, namespace: &str) -> Option<Py<NamedCache>> {
        self.caches.get(namespace).map(|c| c.clone_ref(py))
    }
}

/// `(key, CacheEntry)` of an entry, for Python.
fn pair<'py>(
    py: Python<'py>,
    thread: &ThreadCache,
    class: &Option<SlotClass<2>>,
    key: &Key,
    entry: &mut Entry,
) -> PyResult<Bound<'py, PyTuple>> {
    let copy = Bound::new(py, thread.snapshot(py, class, entry)?)?;
    PyTuple::new(py, [key.0.bind(py).clone().into_any(), copy.into_any()])
}

#[pymethods]
impl ThreadCache {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.not_decoded)?;
        for cache in self.caches.values() {
            visit.call(cache)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.caches.clear();
    }

    #[new]
    #[pyo3(signature = (max_bytes, not_decoded, entry_overhead))]
    fn new(max_bytes: isize, not_decoded: Py<PyAny>, entry_overhead: isize) -> Self {
        ThreadCache {
            max_bytes,
            caches: HashMap::new(),
            size_bytes: 0,
            evictions: 0,
            hits: 0,
            misses: 0,
            not_decoded,
            entry_overhead,
        }
    }

    pub fn named(&mut self, py: Python<'_>, namespace: &str) -> PyResult<Py<NamedCache>> {
        if let Some(cache) = self.caches.get(namespace) {
            return Ok(cache.clone_ref(py));
        }
        let cache = Py::new(
            py,
            NamedCache {
                name: namespace.to_owned(),
                entries: LinkedHashMap::new(),
                dirty: LinkedHashMap::new(),
                size: 0,
                listener: None,
                gets: 0,
                puts: 0,
                long_class: None,
            },
        )?;
        self.caches
            .insert(namespace.to_owned(), cache.clone_ref(py));
        Ok(cache)
    }

    fn add_dirty_entry_flush_listener(
        &mut self,
        py: Python<'_>,
        namespace: &str,
        listener: Py<PyAny>,
    ) -> PyResult<()> {
        let cache = self.named(py, namespace)?;
        cache.bind(py).borrow_mut().listener = Some(listener);
        Ok(())
    }

    fn get(&mut self, py: Python<'_>, namespace: &str, key: &[u8]) -> PyResult<Option<CacheEntry>> {
        let found = match self.caches.get(namespace) {
            Some(cache) => {
                let mut cache = cache.bind(py).borrow_mut();
                let cache = &mut *cache;
                match cache.entries.to_back(key) {
                    Some(e) => Some(self.snapshot(py, &cache.long_class, e)?),
                    None => None,
                }
            }
            None => None,
        };
        match found {
            Some(_) => self.hits += 1,
            None => self.misses += 1,
        }
        Ok(found)
    }

    /// Whether the cache has a live (non-deleted) entry for the key; a peek: no hit, no LRU refresh.
    fn holds(&self, py: Python<'_>, namespace: &str, key: &[u8]) -> bool {
        self.caches.get(namespace).is_some_and(|cache| {
            let cache = cache.bind(py).borrow();
            cache.entries.get(key).is_some_and(|e| match &e.stored {
                Stored::Boxed { value, .. } => !value.is_none(py),
                Stored::Long { .. } => true,
            })
        })
    }

    #[pyo3(signature = (namespace, key, value, dirty, context, decoded=None))]
    #[allow(clippy::too_many_arguments)]
    fn put(
        slf: &Bound<'_, Self>,
        namespace: &str,
        key: &Bound<'_, PyBytes>,
        value: &Bound<'_, PyAny>,
        dirty: bool,
        context: &Bound<'_, PyAny>,
        decoded: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let cache = slf.borrow_mut().named(py, namespace)?;
        let topic = context.getattr(pyo3::intern!(py, "topic"))?;
        let decoded = decoded.filter(|d| !d.is(slf.borrow().not_decoded.bind(py)));
        put(
            slf,
            cache.bind(py),
            key,
            value,
            dirty,
            context,
            topic.len()? as isize,
            decoded,
        )
    }

    fn evict_over_bound(slf: &Bound<'_, Self>, cache: &Bound<'_, NamedCache>) -> PyResult<()> {
        evict_over_bound(slf, cache)
    }

    fn sorted_entries<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        from_key: Option<&[u8]>,
        to_key: Option<&[u8]>,
    ) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        let Some(cache) = self.caches.get(namespace) else {
            return Ok(list);
        };
        let mut cache = cache.bind(py).borrow_mut();
        let cache = &mut *cache;
        let mut chosen: Vec<(&Key, &mut Entry)> = cache
            .entries
            .iter_mut()
            .filter(|(k, _)| {
                from_key.is_none_or(|from| k.bytes() >= from)
                    && to_key.is_none_or(|to| k.bytes() <= to)
            })
            .collect();
        chosen.sort_by(|a, b| a.0.bytes().cmp(b.0.bytes()));
        for (key, entry) in chosen {
            list.append(pair(py, self, &cache.long_class, key, entry)?)?;
        }
        Ok(list)
    }

    fn flush(slf: &Bound<'_, Self>, namespace: &str) -> PyResult<()> {
        let py = slf.py();
        let cache = slf.borrow().cache_of(py, namespace);
        match cache {
            Some(cache) => flush(slf, cache.bind(py)),
            None => Ok(()),
        }
    }

    /// Forget one entry without flushing it (an expired entry deleted below the cache).
    fn drop(&mut self, py: Python<'_>, namespace: &str, key: &[u8]) {
        let Some(cache) = self.caches.get(namespace) else {
            return;
        };
        let mut cache = cache.bind(py).borrow_mut();
        let removed = cache.entries.remove(key);
        cache.dirty.remove(key);
        if let Some(entry) = removed {
            cache.size -= entry.size;
            self.size_bytes -= entry.size;
        }
    }

    fn close(&mut self, py: Python<'_>, namespace: &str) {
        if let Some(cache) = self.caches.remove(namespace) {
            self.size_bytes -= cache.bind(py).borrow().size;
        }
    }

    /// `ThreadCache.split_flush` (table_flush.rs).
    #[staticmethod]
    #[pyo3(signature = (entries, read_old, send_old, live))]
    fn split_flush<'py>(
        py: Python<'py>,
        entries: &Bound<'py, PyList>,
        read_old: Option<Bound<'py, PyAny>>,
        send_old: bool,
        live: Option<Bound<'py, PyAny>>,
    ) -> PyResult<table_flush::FlushColumns<'py>> {
        table_flush::split_flush(py, entries, read_old.as_ref(), send_old, live.as_ref())
    }

    /// This cache's entry overhead (what `put` adds to an entry's bytes).
    #[getter]
    fn entry_overhead(&self) -> isize {
        self.entry_overhead
    }
}

/// `ThreadCache.put`: the entry written in place (or added) as the most recent, a dirty one made the
/// last dirty, sizes kept, and the cache evicted when over its bound. `topic_len` is the length of the
/// record context's topic, which the entry's size counts.
#[allow(clippy::too_many_arguments)]
pub fn put(
    thread: &Bound<'_, ThreadCache>,
    cache: &Bound<'_, NamedCache>,
    key: &Bound<'_, PyBytes>,
    value: &Bound<'_, PyAny>,
    dirty: bool,
    context: &Bound<'_, PyAny>,
    topic_len: isize,
    decoded: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let value_len = if value.is_none() {
        0
    } else {
        value.len()? as isize
    };
    let stored = Stored::Boxed {
        value: value.clone().unbind(),
        decoded: decoded.map(|d| d.clone().unbind()),
    };
    put_stored(
        thread, cache, key, stored, value_len, dirty, context, topic_len,
    )
}

/// `put(key, <bytes of ValueAndTimestamp(value, timestamp)>, dirty=True, ...)` of a Long, kept unboxed
/// (`Stored::Long`): the size is what the boxed entry's would be (its bytes are `LONG_BYTES` long).
/// `cache` must know its `ValueAndTimestamp` class (`NamedCache::long_class`).
pub fn put_long(
    thread: &Bound<'_, ThreadCache>,
    cache: &Bound<'_, NamedCache>,
    key: &Bound<'_, PyBytes>,
    value: i64,
    timestamp: i64,
    context: &Bound<'_, PyAny>,
    topic_len: isize,
) -> PyResult<()> {
    let stored = Stored::Long { value, timestamp };
    put_stored(
        thread, cache, key, stored, LONG_BYTES, true, context, topic_len,
    )
}

/// `put` of an entry's stored value, `value_len` its bytes' length.
#[allow(clippy::too_many_arguments)]
fn put_stored(
    thread: &Bound<'_, ThreadCache>,
    cache: &Bound<'_, NamedCache>,
    key: &Bound<'_, PyBytes>,
    stored: Stored,
    value_len: isize,
    mut dirty: bool,
    context: &Bound<'_, PyAny>,
    topic_len: isize,
) -> PyResult<()> {
    let overhead = thread.borrow().entry_overhead;
    let size = key.as_bytes().len() as isize + topic_len + overhead + value_len;
    let delta = {
        let mut named = cache.borrow_mut();
        let named = &mut *named;
        let delta = match named.entries.to_back(key.as_bytes()) {
            None => {
                named.entries.insert(
                    Key(key.clone().unbind()),
                    Entry {
                        stored,
                        dirty,
                        context: context.clone().unbind(),
                        size,
                    },
                );
                size
            }
            Some(old) => {
                // updated in place: a hot key costs no allocation
                let delta = size - old.size;
                old.stored = stored;
                if !old.context.is(context) {
                    old.context = context.clone().unbind();
                }
                old.size = size;
                if dirty {
                    old.dirty = true;
                } else {
                    dirty = old.dirty;
                }
                delta
            }
        };
        // flushed in the order last written, as Kafka Streams' NamedCache does
        if dirty && named.dirty.to_back(key.as_bytes()).is_none() {
            named.dirty.insert(Key(key.clone().unbind()), ());
        }
        named.size += delta;
        delta
    };
    let over = {
        let mut thread = thread.borrow_mut();
        thread.size_bytes += delta;
        thread.size_bytes > thread.max_bytes
    };
    if over {
        evict_over_bound(thread, cache)?;
    }
    Ok(())
}

/// What a read through the cache found: a boxed entry's bytes and decoded value, or an unboxed Long.
pub enum Found {
    Boxed(Py<PyAny>, Option<Py<PyAny>>),
    Long { value: i64, timestamp: i64 },
}

/// A read of `key` through the cache (`ThreadCache.get` without the copy): on a hit the entry is made
/// the most recent and what it stores returned; hits and misses counted.
pub fn lookup(
    py: Python<'_>,
    thread: &Bound<'_, ThreadCache>,
    cache: &Bound<'_, NamedCache>,
    key: &[u8],
) -> Option<Found> {
    let found = {
        let mut named = cache.borrow_mut();
        named.entries.to_back(key).map(|e| match &e.stored {
            Stored::Boxed { value, decoded } => Found::Boxed(
                value.clone_ref(py),
                decoded.as_ref().map(|d| d.clone_ref(py)),
            ),
            Stored::Long { value, timestamp } => Found::Long {
                value: *value,
                timestamp: *timestamp,
            },
        })
    };
    let mut thread = thread.borrow_mut();
    match found {
        Some(_) => thread.hits += 1,
        None => thread.misses += 1,
    }
    found
}

/// Every dirty entry of `cache` marked clean and handed to its listener in one batch, in the order
/// last written (nothing borrowed while the listener runs: it may write through the cache).
fn flush(thread: &Bound<'_, ThreadCache>, cache: &Bound<'_, NamedCache>) -> PyResult<()> {
    let py = thread.py();
    let (batch, listener) = {
        let mut named = cache.borrow_mut();
        if named.dirty.is_empty() {
            return Ok(());
        }
        let named = &mut *named;
        let owner = thread.borrow();
        let batch = PyList::empty(py);
        for key in named.dirty.keys() {
            let entry = named
                .entries
                .get_mut(key.bytes())
                .expect("a dirty key has an entry");
            entry.dirty = false;
            batch.append(pair(py, &owner, &named.long_class, key, entry)?)?;
        }
        named.dirty.clear();
        (batch, named.listener.as_ref().map(|l| l.clone_ref(py)))
    };
    if let Some(listener) = listener {
        listener.bind(py).call1((batch,))?;
    }
    Ok(())
}

/// `ThreadCache.evict_over_bound`: `cache`'s least recently used entries evicted while the thread's
/// total is over the bound; a dirty one first flushes the cache (then the eldest of before the flush
/// leaves, if the listener did not remove it).
pub fn evict_over_bound(
    thread: &Bound<'_, ThreadCache>,
    cache: &Bound<'_, NamedCache>,
) -> PyResult<()> {
    let py = thread.py();
    loop {
        {
            let owner = thread.borrow();
            if owner.size_bytes <= owner.max_bytes {
                return Ok(());
            }
        }
        let eldest_dirty = {
            let mut named = cache.borrow_mut();
            let named = &mut *named;
            let Some((key, entry)) = named.entries.front() else {
                return Ok(());
            };
            if entry.dirty {
                Some(Key(key.0.clone_ref(py)))
            } else {
                let (key, entry) = named.entries.pop_front().expect("an eldest entry");
                named.dirty.remove(key.bytes());
                named.size -= entry.size;
                thread.borrow_mut().size_bytes -= entry.size;
                None
            }
        };
        if let Some(key) = eldest_dirty {
            flush(thread, cache)?;
            let mut named = cache.borrow_mut();
            if let Some(removed) = named.entries.remove(key.bytes()) {
                named.dirty.remove(key.bytes());
                named.size -= removed.size;
                thread.borrow_mut().size_bytes -= removed.size;
            }
        }
        thread.borrow_mut().evictions += 1;
    }
}
