//! The built-in stateless processors and the fixed-topic sink, compiled: each mirrors its processor's
//! `process` (`kappaflow.dsl.stream_processors`, `kappaflow.tasks.nodes.SinkNode`) and calls the same
//! user callbacks and serializers with the same arguments, in the same order.
//!
//! A stage calls the next one directly in Rust when that one is native too (`Next`), so a chain such as
//! flat_map_values -> select_key -> the repartition filter -> its sink makes no Python call of its own
//! between the user's callbacks.

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use crate::aggregate::AggregateStage;
use crate::failure::FailureMark;
use crate::produce::ProduceSend;
use crate::shuffle::ShuffleSend;
use crate::slots::encode_utf8;
use crate::table_flush;

/// A stage's downstream: a native stage called in Rust, or any Python stage.
pub enum Next {
    Stateless(Py<StatelessStage>),
    Sink(Py<SinkStage>),
    Aggregate(Py<AggregateStage>),
    Python(Py<PyAny>),
}

impl Next {
    pub fn of(stage: &Bound<'_, PyAny>) -> Self {
        if let Ok(native) = stage.cast::<StatelessStage>() {
            Next::Stateless(native.clone().unbind())
        } else if let Ok(native) = stage.cast::<SinkStage>() {
            Next::Sink(native.clone().unbind())
        } else if let Ok(native) = stage.cast::<AggregateStage>() {
            Next::Aggregate(native.clone().unbind())
        } else {
            Next::Python(stage.clone().unbind())
        }
    }

    /// Python's cyclic garbage collector sees the stage's references (see `StatelessStage::__traverse__`).
    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self {
            Next::Stateless(stage) => visit.call(stage),
            Next::Sink(stage) => visit.call(stage),
            Next::Aggregate(stage) => visit.call(stage),
            Next::Python(stage) => visit.call(stage),
        }
    }

    /// `stage(key, value, timestamp, headers)`.
    pub fn call<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        timestamp: i64,
        headers: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        match self {
            Next::Stateless(stage) => stage.get().process(py, key, value, timestamp, headers),
            Next::Sink(stage) => stage.get().process(py, key, value, timestamp, headers),
            Next::Aggregate(stage) => stage.get().process(py, key, value, timestamp),
            Next::Python(stage) => {
                stage.bind(py).call1((key, value, timestamp, headers))?;
                Ok(())
            }
        }
    }
}

/// What a stateless stage does with a record (its processor's `process`).
enum Op {
    Filter { negate: bool },
    Map,
    MapValues { with_key: bool },
    FlatMap,
    FlatMapValues { with_key: bool },
    SelectKey,
    Peek { forwards: bool },
    NullKeyFilter,
}

/// A compiled built-in stateless processor (see `kappaflow.tasks.native.StatelessPlan`).
#[pyclass(frozen, module = "kappaflow_native")]
pub struct StatelessStage {
    op: Op,
    /// the user's predicate, mapper, selector or action; for the null-key filter, its drop counter
    callback: Py<PyAny>,
    /// `map`/`flat_map`'s check of a mapper's result that is not a pair: raises the StreamsError
    pair: Py<PyAny>,
    failure: FailureMark,
    next: Next,
}

#[pymethods]
impl StatelessStage {
    #[new]
    fn new(py: Python<'_>, plan: &Bound<'_, PyAny>) -> PyResult<Self> {
        let kind: String = plan.getattr(intern!(py, "kind"))?.extract()?;
        let flag = plan.getattr(intern!(py, "flag"))?.is_truthy()?;
        let op = match kind.as_str() {
            "filter" => Op::Filter { negate: flag },
            "map" => Op::Map,
            "map_values" => Op::MapValues { with_key: flag },
            "flat_map" => Op::FlatMap,
            "flat_map_values" => Op::FlatMapValues { with_key: flag },
            "select_key" => Op::SelectKey,
            "peek" => Op::Peek { forwards: flag },
            "null_key_filter" => Op::NullKeyFilter,
            other => {
                return Err(PyValueError::new_err(format!(
                    "kappaflow_native: no stateless stage '{other}'"
                )))
            }
        };
        Ok(StatelessStage {
            op,
            callback: plan.getattr(intern!(py, "callback"))?.unbind(),
            pair: plan.getattr(intern!(py, "pair"))?.unbind(),
            failure: FailureMark::of(py, plan)?,
            next: Next::of(&plan.getattr(intern!(py, "downstream"))?),
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
        self.process(py, key, value, timestamp, headers)
    }

    /// A cached table's batched flush, when this stage is the table node's one child (table_flush.rs).
    fn take_flush<'py>(
        &self,
        py: Python<'py>,
        batch: &Bound<'py, PyAny>,
        plan: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        table_flush::take_flush(py, |k, v, t, h| self.process(py, k, v, t, h), batch, plan)
    }

    /// A stage holds its task's context and the next stage, and a node holds its stage: the collector
    /// must see these references to free a closed task's cycles (it breaks them at the Python objects).
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.callback)?;
        visit.call(&self.pair)?;
        self.failure.traverse(&visit)?;
        self.next.traverse(&visit)
    }
}

impl StatelessStage {
    /// A mapper's result as a (key, value) pair, or `_pair`'s error for it.
    fn pair<'py>(
        &self,
        py: Python<'py>,
        result: &Bound<'py, PyAny>,
        op: &Bound<'py, PyString>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        if let Ok(tuple) = result.cast::<PyTuple>() {
            if tuple.len() == 2 {
                return Ok((tuple.get_item(0)?, tuple.get_item(1)?));
            }
        }
        let checked = self.pair.bind(py).call1((result, op))?;
        let tuple = checked.cast::<PyTuple>()?;
        Ok((tuple.get_item(0)?, tuple.get_item(1)?))
    }

    pub fn process<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        timestamp: i64,
        headers: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let callback = self.callback.bind(py);
        let failure = &self.failure;
        let next = &self.next;
        match self.op {
            Op::Filter { negate } => {
                let kept = callback
                    .call1((key, value))
                    .and_then(|kept| kept.is_truthy());
                let keep = failure.marked(py, kept)?;
                if keep != negate {
                    next.call(py, key, value, timestamp, headers)?;
                }
            }
            Op::Map => {
                let result = failure.marked(py, callback.call1((key, value)))?;
                let (key, value) =
                    failure.marked(py, self.pair(py, &result, intern!(py, "map")))?;
                next.call(py, &key, &value, timestamp, headers)?;
            }
            Op::MapValues { with_key } => {
                let mapped = if with_key {
                    callback.call1((key, value))
                } else {
                    callback.call1((value,))
                };
                let value = failure.marked(py, mapped)?;
                next.call(py, key, &value, timestamp, headers)?;
            }
            Op::FlatMap => {
                // the mapper, its iteration and the pairs fail in this node; a child names itself
                let outcome = (|| {
                    let results = callback.call1((key, value))?;
                    if !results.is_truthy()? {
                        return Ok(());
                    }
                    for result in results.try_iter()? {
                        let (key, value) = self.pair(py, &result?, intern!(py, "flat_map"))?;
                        next.call(py, &key, &value, timestamp, headers)?;
                    }
                    Ok(())
                })();
                failure.marked(py, outcome)?;
            }
            Op::FlatMapValues { with_key } => {
                let outcome = (|| {
                    let values = if with_key {
                        callback.call1((key, value))?
                    } else {
                        callback.call1((value,))?
                    };
                    if !values.is_truthy()? {
                        return Ok(());
                    }
                    for out in values.try_iter()? {
                        next.call(py, key, &out?, timestamp, headers)?;
                    }
                    Ok(())
                })();
                failure.marked(py, outcome)?;
            }
            Op::SelectKey => {
                let key = failure.marked(py, callback.call1((key, value)))?;
                next.call(py, &key, value, timestamp, headers)?;
            }
            Op::Peek { forwards } => {
                failure.marked(py, callback.call1((key, value)))?;
                if forwards {
                    next.call(py, key, value, timestamp, headers)?;
                }
            }
            Op::NullKeyFilter => {
                if key.is_none() {
                    failure.marked(py, callback.call0())?;
                } else {
                    next.call(py, key, value, timestamp, headers)?;
                }
            }
        }
        Ok(())
    }
}

/// A sink's `send` that is native: the stream thread's producer (produce.rs) or a Spark task's shuffle
/// buffers (shuffle.rs).
enum NativeSend {
    Produce(Py<ProduceSend>),
    Shuffle(Py<ShuffleSend>),
}

impl NativeSend {
    fn of(send: &Bound<'_, PyAny>) -> Option<Self> {
        if let Ok(produce) = send.cast::<ProduceSend>() {
            Some(NativeSend::Produce(produce.clone().unbind()))
        } else if let Ok(shuffle) = send.cast::<ShuffleSend>() {
            Some(NativeSend::Shuffle(shuffle.clone().unbind()))
        } else {
            None
        }
    }

    fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self {
            NativeSend::Produce(produce) => visit.call(produce),
            NativeSend::Shuffle(shuffle) => visit.call(shuffle),
        }
    }

    /// `send(topic, key, value, headers, timestamp, None)`.
    fn send<'py>(
        &self,
        py: Python<'py>,
        topic: &Bound<'py, PyAny>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        headers: &Bound<'py, PyAny>,
        timestamp: i64,
    ) -> PyResult<()> {
        let none = py.None().into_bound(py);
        match self {
            NativeSend::Produce(produce) => produce
                .get()
                .send(py, topic, key, value, headers, timestamp, &none),
            NativeSend::Shuffle(shuffle) => shuffle
                .get()
                .send(py, topic, key, value, headers, timestamp, &none),
        }
    }
}

/// A compiled sink to a fixed topic without a partitioner (see `kappaflow.tasks.native.SinkPlan`):
/// serialize the key and value, check the timestamp, send.
#[pyclass(frozen, module = "kappaflow_native")]
pub struct SinkStage {
    topic: Py<PyAny>,
    name: String,
    send: Py<PyAny>,
    /// `send` when it is native: called without the interpreter.
    native_send: Option<NativeSend>,
    key_utf8: bool,
    value_utf8: bool,
    key_serializer: Py<PyAny>,
    value_serializer: Py<PyAny>,
    serialization_error: Py<PyAny>,
    streams_error: Py<PyAny>,
    failure: FailureMark,
}

#[pymethods]
impl SinkStage {
    #[new]
    fn new<'py>(py: Python<'py>, plan: &Bound<'py, PyAny>) -> PyResult<Self> {
        let get = |name: &Bound<'py, PyString>| plan.getattr(name);
        let send = get(intern!(py, "send"))?;
        Ok(SinkStage {
            topic: get(intern!(py, "topic"))?.unbind(),
            name: get(intern!(py, "node"))?.extract()?,
            send: send.clone().unbind(),
            native_send: NativeSend::of(&send),
            key_utf8: get(intern!(py, "key_utf8"))?.is_truthy()?,
            value_utf8: get(intern!(py, "value_utf8"))?.is_truthy()?,
            key_serializer: get(intern!(py, "key_serializer"))?.unbind(),
            value_serializer: get(intern!(py, "value_serializer"))?.unbind(),
            serialization_error: get(intern!(py, "serialization_error"))?.unbind(),
            streams_error: get(intern!(py, "streams_error"))?.unbind(),
            failure: FailureMark::of(py, plan)?,
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
        self.process(py, key, value, timestamp, headers)
    }

    /// See `StatelessStage::take_flush`.
    fn take_flush<'py>(
        &self,
        py: Python<'py>,
        batch: &Bound<'py, PyAny>,
        plan: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        table_flush::take_flush(py, |k, v, t, h| self.process(py, k, v, t, h), batch, plan)
    }

    /// See `StatelessStage::__traverse__`.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.send)?;
        if let Some(native) = &self.native_send {
            native.traverse(&visit)?;
        }
        visit.call(&self.key_serializer)?;
        visit.call(&self.value_serializer)?;
        self.failure.traverse(&visit)
    }
}

impl SinkStage {
    /// `str.encode()` for an exact str when the serde is String's, else the serializer.
    fn encode<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        utf8: bool,
        serializer: &Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match data.cast::<PyString>() {
            Ok(text) if utf8 && text.is_exact_instance_of::<PyString>() => encode_utf8(py, text),
            _ => serializer.bind(py).call1((self.topic.bind(py), data)),
        }
    }

    /// The serialized key and value; a SerializationError says which sink raised it.
    fn serialize<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let encoded = self
            .encode(py, key, self.key_utf8, &self.key_serializer)
            .and_then(|k| {
                Ok((
                    k,
                    self.encode(py, value, self.value_utf8, &self.value_serializer)?,
                ))
            });
        encoded.map_err(|error| {
            let serialization_error = self.serialization_error.bind(py);
            if !error.is_instance(py, serialization_error) {
                return error;
            }
            let message = format!("sink '{}': {}", self.name, error.value(py));
            match serialization_error.call1((message,)) {
                Ok(wrapped) => {
                    let wrapped = PyErr::from_value(wrapped);
                    wrapped.set_cause(py, Some(error));
                    wrapped
                }
                Err(failed) => failed,
            }
        })
    }

    pub fn process<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        timestamp: i64,
        headers: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let outcome = (|| {
            let (raw_key, raw_value) = self.serialize(py, key, value)?;
            if timestamp < 0 {
                let message = format!(
                    "sink '{}': record has negative timestamp {timestamp}",
                    self.name
                );
                return Err(PyErr::from_value(
                    self.streams_error.bind(py).call1((message,))?,
                ));
            }
            if let Some(native) = &self.native_send {
                let topic = self.topic.bind(py);
                return native.send(py, topic, &raw_key, &raw_value, headers, timestamp);
            }
            self.send.bind(py).call1((
                self.topic.bind(py),
                raw_key,
                raw_value,
                headers,
                timestamp,
                py.None(),
            ))?;
            Ok(())
        })();
        self.failure.marked(py, outcome)
    }
}
