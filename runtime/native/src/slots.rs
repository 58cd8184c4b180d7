//! Slotted Python classes driven from Rust: their fields read and set through the member descriptors
//! (what attribute access ends in, without the name lookup on the instance's type it starts with), and
//! instances allocated without running a Python `__init__`.

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyType};

/// One slot of a slotted class, through its member descriptor.
pub struct Slot {
    descriptor: Py<PyAny>,
    get: ffi::descrgetfunc,
    set: ffi::descrsetfunc,
}

impl Slot {
    /// The slot `name` of `cls`; an error if `cls` has no such slot (a class that lost its `__slots__`).
    pub fn of(cls: &Bound<'_, PyType>, name: &str) -> PyResult<Self> {
        let descriptor = cls.getattr(name)?;
        // CPython's static type object of slot descriptors (its address only; read below)
        let member_type = std::ptr::addr_of_mut!(ffi::PyMemberDescr_Type);
        let (get, set) = if descriptor.get_type().as_type_ptr() == member_type {
            // SAFETY: a member descriptor's type is PyMemberDescr_Type, whose get and set are set.
            unsafe { ((*member_type).tp_descr_get, (*member_type).tp_descr_set) }
        } else {
            (None, None)
        };
        match (get, set) {
            (Some(get), Some(set)) => Ok(Slot {
                descriptor: descriptor.unbind(),
                get,
                set,
            }),
            _ => Err(PyTypeError::new_err(format!(
                "kappaflow_native: {}.{name} is not a slot",
                cls.name()?
            ))),
        }
    }

    /// `instance.<slot>`, with the descriptor's own type check of `instance` (AttributeError if unset).
    pub fn get<'py>(
        &self,
        py: Python<'py>,
        instance: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let get = self.get;
        // SAFETY: the descriptor and instance are live; the result is a new reference or NULL with an
        // error set, which `from_owned_ptr_or_err` turns into a PyErr.
        unsafe {
            let value = get(
                self.descriptor.as_ptr(),
                instance.as_ptr(),
                instance.get_type().as_type_ptr().cast(),
            );
            Bound::from_owned_ptr_or_err(py, value)
        }
    }

    /// `instance.<slot> = value`, with the descriptor's own type check of `instance`.
    pub fn put<'py>(
        &self,
        py: Python<'py>,
        instance: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let set = self.set;
        // SAFETY: all three are live objects; the descriptor checks the instance's type and returns -1
        // with an error set on failure, which PyErr::fetch takes.
        let status = unsafe { set(self.descriptor.as_ptr(), instance.as_ptr(), value.as_ptr()) };
        if status < 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(())
    }
}

/// A slots class whose instances Rust builds: checked to have exactly the fields given, in order, so a
/// field added on the Python side fails when the class is taken, not by instances left without it.
pub struct SlotClass<const N: usize> {
    pub cls: Py<PyType>,
    pub slots: [Slot; N],
}

impl<const N: usize> SlotClass<N> {
    pub fn of(py: Python<'_>, cls: Bound<'_, PyAny>, fields: &[&str]) -> PyResult<Self> {
        let cls = cls.cast_into::<PyType>()?;
        let declared: Vec<String> = cls.getattr(intern!(py, "__slots__"))?.extract()?;
        if fields.len() != N || declared != fields {
            return Err(PyTypeError::new_err(format!(
                "kappaflow_native sets {} fields {fields:?}, the class has {declared:?}",
                cls.name()?
            )));
        }
        let mut slots = Vec::with_capacity(N);
        for &name in fields {
            slots.push(Slot::of(&cls, name)?);
        }
        let slots: [Slot; N] = slots
            .try_into()
            .map_err(|_| PyTypeError::new_err("a slot per field"))?;
        Ok(SlotClass {
            cls: cls.unbind(),
            slots,
        })
    }

    /// Whether `instance` is exactly of this class (not a subclass: its slots are the ones checked).
    pub fn is_instance(&self, instance: &Bound<'_, PyAny>) -> bool {
        instance.get_type().as_type_ptr() == self.cls.as_ptr().cast()
    }

    /// An instance with its fields set, without running the class's Python `__init__` (a frame per
    /// record): allocated as `object.__new__` would, then each slot assigned in order.
    pub fn new_instance<'py>(
        &self,
        py: Python<'py>,
        fields: [Bound<'py, PyAny>; N],
    ) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: `cls` is a live type object; `tp_alloc` returns a new reference to a zeroed instance
        // or NULL with an error set, which `from_owned_ptr_or_err` handles.
        let instance = unsafe {
            let type_ptr = self.cls.bind(py).as_type_ptr();
            let alloc = (*type_ptr).tp_alloc.unwrap_or(ffi::PyType_GenericAlloc);
            Bound::from_owned_ptr_or_err(py, alloc(type_ptr, 0))?
        };
        for (slot, value) in self.slots.iter().zip(fields) {
            slot.put(py, &instance, &value)?;
        }
        Ok(instance)
    }
}

/// `str.encode()` of an exact str (UTF-8, strict: a lone surrogate raises UnicodeEncodeError as there).
pub fn encode_utf8<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `text` is a live str; the result is a new bytes reference or NULL with an error set.
    unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyUnicode_AsUTF8String(text.as_ptr())) }
}

/// `bytes.decode()` (strict UTF-8): the same str, or the same UnicodeDecodeError.
pub fn decode_utf8<'py>(py: Python<'py>, raw: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    match raw.cast::<PyBytes>() {
        Ok(bytes) => {
            let data = bytes.as_bytes();
            // SAFETY: `data` is borrowed from a live bytes object for the duration of the call; the
            // result is a new reference or NULL with the Python error set, which `from_owned_ptr_or_err`
            // turns into a PyErr.
            unsafe {
                let decoded = ffi::PyUnicode_DecodeUTF8(
                    data.as_ptr().cast(),
                    data.len() as ffi::Py_ssize_t,
                    c"strict".as_ptr(),
                );
                Bound::from_owned_ptr_or_err(py, decoded)
            }
        }
        Err(_) => raw.call_method0(intern!(py, "decode")),
    }
}
