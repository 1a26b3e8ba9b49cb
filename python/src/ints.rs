//! Token ids, positions and offsets from Python: arrays of any NumPy integer type, taken
//! without a copy and converted to u32 here, after the sizes they imply are checked. The
//! Python side once converted every type but int64 itself (a full scan and an int64 copy
//! before any check), so a broadcast view of a trillion uint8 ids ran for minutes, then
//! failed to allocate.

use ndarray::{Array2, ArrayView, Dimension, Ix2};
use numpy::PyReadonlyArray;
use posenc::Error;
use posenc::encode::ids_to_u32;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

macro_rules! int_arrays {
    ($($variant:ident($t:ty)),*) => {
        /// An integer array handed over from Python, held (and kept readable) for the call.
        pub(crate) enum IntArray<'py, D: Dimension> {
            $($variant(PyReadonlyArray<'py, $t, D>),)*
        }

        /// Its view, which may leave the GIL.
        pub(crate) enum IntView<'a, D: Dimension> {
            $($variant(ArrayView<'a, $t, D>),)*
        }

        impl<'py, D: Dimension> IntArray<'py, D> {
            /// The array of rank `D` and an integer type, in native byte order (the Python
            /// side has checked both, so the error is for callers of `_posenc` itself).
            pub(crate) fn extract(value: &Bound<'py, PyAny>, what: &str) -> PyResult<Self> {
                $(
                    if let Ok(a) = value.extract::<PyReadonlyArray<'py, $t, D>>() {
                        return Ok(Self::$variant(a));
                    }
                )*
                Err(PyValueError::new_err(format!(
                    "{what} must be an array of integers of rank {} in native byte order",
                    D::NDIM.map_or_else(|| "any".to_string(), |n| n.to_string())
                )))
            }

            pub(crate) fn view(&self) -> IntView<'_, D> {
                match self {
                    $(Self::$variant(a) => IntView::$variant(a.as_array()),)*
                }
            }
        }

        impl<D: Dimension> IntView<'_, D> {
            pub(crate) fn len(&self) -> usize {
                match self {
                    $(Self::$variant(a) => a.len(),)*
                }
            }

            pub(crate) fn shape(&self) -> &[usize] {
                match self {
                    $(Self::$variant(a) => a.shape(),)*
                }
            }

            /// Every value as a u32, row-major, each checked (`field` and the value's index
            /// name the first that is not one).
            pub(crate) fn to_u32s(&self, field: &'static str) -> Result<Vec<u32>, Error> {
                match self {
                    $(Self::$variant(a) => u32_values(a.iter().map(|&v| i128::from(v)), field),)*
                }
            }
        }

        impl IntView<'_, Ix2> {
            pub(crate) fn dim(&self) -> (usize, usize) {
                match self {
                    $(Self::$variant(a) => a.dim(),)*
                }
            }

            /// Token ids as u32, each below `vocab` save `pad_id` ([`ids_to_u32`]).
            pub(crate) fn ids_to_u32(
                &self,
                vocab: usize,
                pad_id: Option<u32>,
            ) -> Result<Array2<u32>, Error> {
                match self {
                    $(Self::$variant(a) => ids_to_u32(a.view(), vocab, pad_id),)*
                }
            }
        }
    };
}

int_arrays!(I8(i8), I16(i16), I32(i32), I64(i64), U8(u8), U16(u16), U32(u32), U64(u64));

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
