//! What every array handed over from Python must be before a view of it is made: aligned
//! (a view or slice of misaligned elements is undefined behaviour in Rust), and, to be
//! written, with no two elements sharing memory (numpy makes such arrays: `as_strided`,
//! the writable results of `broadcast_arrays`), which the pool's tasks would otherwise write
//! at once. And the error of an array another call holds for writing (`out=`).

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Whether an array's elements are aligned for its type: numpy's `flags.aligned`, and for
/// an empty array, which numpy calls aligned wherever it points, its data pointer (a view
/// of no elements is still made from it).
fn aligned(a: &Bound<'_, PyUntypedArray>) -> PyResult<bool> {
    if !a.getattr("flags")?.getattr("aligned")?.extract::<bool>()? {
        return Ok(false);
    }
    if !a.is_empty() {
        return Ok(true);
    }
    let data: usize = a.getattr("__array_interface__")?.get_item("data")?.get_item(0)?.extract()?;
    Ok(data.is_multiple_of(a.dtype().alignment().max(1)))
}

/// An array's elements are aligned for its type ([`aligned`]).
pub(crate) fn check_aligned(a: &Bound<'_, PyUntypedArray>, name: &str) -> PyResult<()> {
    if aligned(a)? {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!(
            "{name} is not aligned in memory for its type: pass numpy.require({name}, \
             requirements=\"A\"), an aligned copy"
        )))
    }
}

/// An array to write: aligned, its elements apart ([`elements_apart`]).
pub(crate) fn check_writable(a: &Bound<'_, PyUntypedArray>, name: &str) -> PyResult<()> {
    if !aligned(a)? {
        return Err(PyValueError::new_err(format!(
            "{name} is not aligned in memory for its type: pass an aligned array"
        )));
    }
    let itemsize = a.dtype().itemsize();
    if elements_apart(a.shape(), a.strides(), itemsize) {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!(
            "{name} cannot be written: its elements overlap in memory (shape {:?}, strides \
             {:?} bytes; a broadcast or as_strided view): pass an array of its own",
            a.shape(),
            a.strides()
        )))
    }
}

/// Whether no two elements of an array of `shape`, `strides` (in bytes) and `itemsize`
/// share a byte, as far as a sufficient test shows: each axis longer than 1, in order of
/// its stride's magnitude, steps at least past the bytes that the smaller ones span. Arrays
/// numpy lays out (any slicing, transposing, reversing of a fresh array) pass; a few
/// interleavings that do not overlap are refused with those that do.
pub(crate) fn elements_apart(shape: &[usize], strides: &[isize], itemsize: usize) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut axes: Vec<(u128, u128)> = shape
        .iter()
        .zip(strides)
        .filter(|(n, _)| **n > 1)
        .map(|(n, s)| (s.unsigned_abs() as u128, *n as u128))
        .collect();
    axes.sort_unstable();
    let mut extent = itemsize as u128;
    for (stride, n) in axes {
        if stride < extent {
            return false;
        }
        extent += stride * (n - 1);
    }
    true
}

/// The error of an array that cannot be borrowed for reading: another call holds it to
/// write (its `out=`, on another thread).
pub(crate) fn unreadable(name: &str, e: numpy::BorrowError) -> PyErr {
    PyValueError::new_err(format!(
        "{name} cannot be read: {e} (another posenc call on another thread is writing it, as \
         its out=)"
    ))
}

/// The error of an array that cannot be borrowed for writing: another call holds it (its
/// `out=`, or an input it reads, on another thread).
pub(crate) fn unwritable(name: &str, e: numpy::BorrowError) -> PyErr {
    PyValueError::new_err(format!(
        "{name} cannot be written: {e} (another posenc call on another thread is using it, as \
         its out= or an input)"
    ))
}

/// `out` and each of `inputs` (those given) share no memory, as far as numpy's bounds test
/// (`may_share_memory`) shows: the borrow checks of rust-numpy miss arrays of different
/// element sizes, and arrays made apart over one buffer (`frombuffer`), which a call would
/// then read while its pool writes them. The Python side tests first, more finely.
pub(crate) fn check_apart(
    out: &Bound<'_, PyAny>,
    out_name: &str,
    inputs: &[(Option<&Bound<'_, PyAny>>, &str)],
) -> PyResult<()> {
    let numpy = out.py().import("numpy")?;
    for (input, name) in inputs {
        if let Some(input) = input
            && numpy.call_method1("may_share_memory", (out, input))?.extract::<bool>()?
        {
            return Err(PyValueError::new_err(format!(
                "{out_name} may share memory with {name} (their address ranges overlap): pass \
                 arrays apart"
            )));
        }
    }
    Ok(())
}

/// A caller's float32 `out` of rank `D`, checked ([`check_writable`]) and borrowed for
/// writing.
pub(crate) fn f32_out<'py, D: ndarray::Dimension>(
    out: &Bound<'py, PyAny>,
) -> PyResult<numpy::PyReadwriteArray<'py, f32, D>> {
    use numpy::{PyArray, PyArrayMethods};
    let untyped = out
        .cast::<PyUntypedArray>()
        .map_err(|_| PyValueError::new_err("out must be a numpy array of float32".to_string()))?;
    check_writable(untyped, "out")?;
    let typed = out.cast::<PyArray<f32, D>>().map_err(|_| {
        PyValueError::new_err(format!(
            "out must be a float32 array of rank {}",
            D::NDIM.map_or_else(|| "any".to_string(), |n| n.to_string())
        ))
    })?;
    typed.try_readwrite().map_err(|e| unwritable("out", e))
}

/// A caller's `out` of another shape than the result's, refused before anything is
/// written.
pub(crate) fn check_out_shape(
    op: &'static str,
    expected: &[usize],
    actual: &[usize],
) -> Result<(), posenc::Error> {
    if expected == actual {
        return Ok(());
    }
    Err(posenc::Error::Shape {
        op,
        what: "out (the output's shape)",
        expected: format!("{expected:?}"),
        actual: format!("{actual:?}"),
    })
}
