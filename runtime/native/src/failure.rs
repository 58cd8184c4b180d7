//! The failed node of a native stage, named on the task context as `forward()` (`kappaflow.tasks.context`)
//! does. A module of its own so that the stages (`stages.rs`, which call an aggregation as their next
//! stage) and the aggregation (`aggregate.rs`) both use it without importing each other.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

use crate::slots::Slot;

/// The task context's `failed_node`, set as `forward()` (`kappaflow.tasks.context`) does (every native
/// stage's, from its plan's `node` and `context`).
pub struct FailureMark {
    node: Py<PyAny>,
    context: Py<PyAny>,
    failed_node: Slot,
}

impl FailureMark {
    pub fn of(py: Python<'_>, plan: &Bound<'_, PyAny>) -> PyResult<Self> {
        let context = plan.getattr(intern!(py, "context"))?;
        Ok(FailureMark {
            node: plan.getattr(intern!(py, "node"))?.unbind(),
            failed_node: Slot::of(&context.get_type(), "failed_node")?,
            context: context.unbind(),
        })
    }

    /// The task context the stage runs in.
    pub fn context<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        self.context.bind(py)
    }

    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.node)?;
        visit.call(&self.context)
    }

    /// On an exception leaving the node: name it, unless a deeper node was named already.
    fn mark(&self, py: Python<'_>) -> PyResult<()> {
        let context = self.context.bind(py);
        if self.failed_node.get(py, context)?.is_none() {
            self.failed_node.put(py, context, self.node.bind(py))?;
        }
        Ok(())
    }

    /// `outcome`, with the node marked when it is an error.
    pub fn marked<T>(&self, py: Python<'_>, outcome: PyResult<T>) -> PyResult<T> {
        if outcome.is_err() {
            self.mark(py)?;
        }
        outcome
    }
}
