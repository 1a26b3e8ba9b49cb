//! Token ids, positions and offsets from Python: arrays of any NumPy integer type, in
//! either byte order, taken without a copy and converted to u32 here, after the sizes they
//! imply are checked. The Python side once converted every type but int64 itself (a full
//! scan and an int64 copy before any check), so a broadcast view of a trillion uint8 ids ran
//! for minutes, then failed to allocate; until 2026-12-02 it still copied arrays in the
//! other byte order so.

use ndarray::{Array2, ArrayView, Dimension, Ix2};
use numpy::PyReadonlyArray;
use posenc::Error;
use posenc::encode::ids_to_u32;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

macro_rules! int_arrays {
    ($($variant:ident($t:ty)),*) => {
        /// An integer array handed over from Python, held (and kept readable) for the call:
        /// its values, or, for an array in the other byte order, a view of its bytes as the
        /// native type (`swapped`), each value's bytes reversed when it is read.
        pub(crate) struct IntArray<'py, D: Dimension> {
            values: Ints<'py, D>,
            swapped: bool,
        }

        enum Ints<'py, D: Dimension> {
            $($variant(PyReadonlyArray<'py, $t, D>),)*
        }

        /// Its view, which may leave the GIL.
        pub(crate) struct IntView<'a, D: Dimension> {
            values: IntValues<'a, D>,
            swapped: bool,
        }

        enum IntValues<'a, D: Dimension> {
            $($variant(ArrayView<'a, $t, D>),)*
        }

        impl<'py, D: Dimension> IntArray<'py, D> {
            /// The array of rank `D` and an integer type, in either byte order (the Python
            /// side has checked the type and rank, so the error is for callers of `_posenc`
            /// itself; it copies unaligned arrays).
            pub(crate) fn extract(value: &Bound<'py, PyAny>, what: &str) -> PyResult<Self> {
                if let Ok(untyped) = value.cast::<numpy::PyUntypedArray>() {
                    crate::arrays::check_aligned(untyped, what)?;
                }
                if let Some(values) = Self::native(value, what)? {
                    return Ok(Self { values, swapped: false });
                }
                // The other byte order: the same bytes viewed as the native type.
                let dtype = value.getattr("dtype").ok();
                let other_order = dtype.as_ref().is_some_and(|d| {
                    d.getattr("isnative").and_then(|n| n.extract::<bool>()).is_ok_and(|n| !n)
                });
                if let (Some(dtype), true) = (dtype, other_order) {
                    let native = dtype.call_method1("newbyteorder", ("=",))?;
                    let view = value.call_method1("view", (native,))?;
                    if let Some(values) = Self::native(&view, what)? {
                        return Ok(Self { values, swapped: true });
                    }
                }
                Err(PyValueError::new_err(format!(
                    "{what} must be an aligned array of integers of rank {}",
                    D::NDIM.map_or_else(|| "any".to_string(), |n| n.to_string())
                )))
            }

            /// The array as its own type, None if it is of none of them; an error if
            /// another call holds it to write.
            fn native(value: &Bound<'py, PyAny>, what: &str) -> PyResult<Option<Ints<'py, D>>> {
                use numpy::{PyArray, PyArrayMethods};
                $(
                    if let Ok(a) = value.cast::<PyArray<$t, D>>() {
                        let a = a.try_readonly().map_err(|e| crate::arrays::unreadable(what, e))?;
                        return Ok(Some(Ints::$variant(a)));
                    }
                )*
                Ok(None)
            }

            pub(crate) fn view(&self) -> IntView<'_, D> {
                let values = match &self.values {
                    $(Ints::$variant(a) => IntValues::$variant(a.as_array()),)*
                };
                IntView { values, swapped: self.swapped }
            }
        }

        impl<D: Dimension> IntView<'_, D> {
            pub(crate) fn len(&self) -> usize {
                match &self.values {
                    $(IntValues::$variant(a) => a.len(),)*
                }
            }

            pub(crate) fn shape(&self) -> &[usize] {
                match &self.values {
                    $(IntValues::$variant(a) => a.shape(),)*
                }
            }

            /// Every value as a u32, row-major, each checked (`field` and the value's index
            /// name the first that is not one: `at index k` in one dimension, `at [i, j]`
            /// in more, as the command line names it).
            pub(crate) fn to_u32s(&self, field: &'static str) -> Result<Vec<u32>, Error> {
                let swapped = self.swapped;
                let shape = self.shape();
                match &self.values {
                    $(IntValues::$variant(a) => u32_values(
                        a.iter().map(|&v| i128::from(if swapped { v.swap_bytes() } else { v })),
                        field,
                    ),)*
                }
                .map_err(|e| match e {
                    Error::InvalidParameter { field, value, allowed } if shape.len() > 1 => {
                        Error::InvalidParameter { field, value: at_index(&value, shape), allowed }
                    }
                    other => other,
                })
            }
        }

        impl IntView<'_, Ix2> {
            pub(crate) fn dim(&self) -> (usize, usize) {
                match &self.values {
                    $(IntValues::$variant(a) => a.dim(),)*
                }
            }

            /// Token ids as u32, each below `vocab` save `pad_id` ([`ids_to_u32`]). Ids in
            /// the other byte order are put in the native one first: the caller has checked
            /// the output they imply, which is larger than them.
            pub(crate) fn ids_to_u32(
                &self,
                vocab: usize,
                pad_id: Option<u32>,
            ) -> Result<Array2<u32>, Error> {
                match (&self.values, self.swapped) {
                    $(
                        (IntValues::$variant(a), false) => ids_to_u32(a.view(), vocab, pad_id),
                        (IntValues::$variant(a), true) => {
                            let bytes = (a.len() * size_of::<$t>()) as u64;
                            posenc::alloc::check_allocation("the ids in native byte order", bytes)?;
                            ids_to_u32(a.mapv(<$t>::swap_bytes).view(), vocab, pad_id)
                        }
                    )*
                }
            }
        }
    };
}

int_arrays!(I8(i8), I16(i16), I32(i32), I64(i64), U8(u8), U16(u16), U32(u32), U64(u64));

/// `value` of [`u32_values`] (`V at index K`) with K as the index into `shape`, row-major.
fn at_index(value: &str, shape: &[usize]) -> String {
    let Some((v, k)) = value.rsplit_once(" at index ") else { return value.to_string() };
    let Ok(mut k) = k.parse::<usize>() else { return value.to_string() };
    let mut at = vec![0; shape.len()];
    for (i, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            at[i] = k % n;
            k /= n;
        }
    }
    let at: Vec<String> = at.iter().map(usize::to_string).collect();
    format!("{v} at [{}]", at.join(", "))
}

/// Values of any integer type, each checked to be a u32.
pub(crate) fn u32_values(
    values: impl IntoIterator<Item = i128>,
    field: &'static str,
) -> Result<Vec<u32>, Error> {
    values
        .into_iter()
        .enumerate()
        .map(|(k, v)| {
            u32::try_from(v).map_err(|_| Error::InvalidParameter {
                field,
                value: format!("{v} at index {k}"),
                allowed: "0..=4294967295",
            })
        })
        .collect()
}
