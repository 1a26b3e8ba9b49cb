//! Fallible allocation of the buffers a request sizes (outputs, input arrays): where the
//! allocator refuses (an address-space limit such as `ulimit -v`, or no memory left),
//! [`Error::Alloc`] naming the buffer and its bytes instead of the abort an infallible
//! allocation would be.
//!
//! A program may also make every other refusal end it cleanly, with a global allocator that
//! exits when the system allocator returns null (the `posenc` binary's does, in one line);
//! such an allocator must let the refusals of this module's functions through, which
//! [`in_fallible_allocation`] tells it.

use std::cell::Cell;

use ndarray::{Array, Dimension, IntoDimension};

use crate::error::{Error, Result};

thread_local! {
    /// Set while one of this module's allocations runs: its refusal is an error to return.
    static FALLIBLE: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is inside one of this module's fallible allocations, whose
/// refusal must reach the caller as [`Error::Alloc`]: for a program's global allocator that
/// ends the process on any other refusal.
///
/// ```
/// assert!(!posenc::alloc::in_fallible_allocation());
/// ```
pub fn in_fallible_allocation() -> bool {
    FALLIBLE.try_with(Cell::get).unwrap_or(false)
}

/// Runs `allocate` marked as fallible ([`in_fallible_allocation`]).
fn fallibly<T>(allocate: impl FnOnce() -> T) -> T {
    let outer = FALLIBLE.replace(true);
    let result = allocate();
    FALLIBLE.set(outer);
    result
}

/// A vector of `len` zeroed values, or [`Error::Alloc`] naming `what` and the bytes if the
/// allocator refuses (an address-space limit such as `ulimit -v`, or no memory left), where
/// `vec![0; len]` would abort the process.
///
/// ```
/// let v: Vec<f32> = posenc::alloc::try_zeroed_vec("a buffer", 4)?;
/// assert_eq!(v, [0.0; 4]);
/// let huge = posenc::alloc::try_zeroed_vec::<f32>("an impossible buffer", usize::MAX / 4);
/// assert!(matches!(huge, Err(posenc::Error::Alloc { .. })));
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// [`Error::Alloc`] if the memory cannot be had.
pub fn try_zeroed_vec<T: bytemuck::Zeroable + Clone>(
    what: &'static str,
    len: usize,
) -> Result<Vec<T>> {
    let bytes = (len as u64).saturating_mul(size_of::<T>() as u64);
    // A zeroed allocation: the kernel maps its pages lazily, where a reserve and a fill
    // would write every page once before the caller does.
    fallibly(|| bytemuck::allocation::try_zeroed_vec(len))
        .map_err(|()| Error::Alloc { what, bytes })
}

/// An array of `shape` filled with zeros, allocated as [`try_zeroed_vec`] does.
///
/// # Errors
/// [`Error::Alloc`] if the memory cannot be had or the element count overflows `usize`.
pub fn try_zeros<T: bytemuck::Zeroable + Clone, D: Dimension>(
    what: &'static str,
    shape: impl IntoDimension<Dim = D>,
) -> Result<Array<T, D>> {
    let shape = shape.into_dimension();
    let len = shape.size_checked().ok_or(Error::Alloc { what, bytes: u64::MAX })?;
    let data = try_zeroed_vec(what, len)?;
    Array::from_shape_vec(shape, data).map_err(|e| Error::Shape {
        op: "allocate",
        what,
        expected: format!("{len} elements"),
        actual: e.to_string(),
    })
}

/// Checks that `bytes` could be allocated now, by reserving and releasing them, for a
/// result that a function allocates itself (the GPU paths' host copies). Under an
/// address-space limit the function's own allocation then succeeds as the check did, and a
/// request too large fails here with an error rather than aborting there.
///
/// # Errors
/// [`Error::Alloc`] naming `what` and `bytes` if the memory cannot be had.
pub fn check_allocation(what: &'static str, bytes: u64) -> Result<()> {
    let len = usize::try_from(bytes).map_err(|_| Error::Alloc { what, bytes })?;
    fallibly(|| Vec::<u8>::new().try_reserve_exact(len)).map_err(|_| Error::Alloc { what, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allocation_too_large_is_an_error_naming_the_bytes() {
        match try_zeroed_vec::<f32>("the test buffer", usize::MAX / 8) {
            Err(Error::Alloc { what, bytes }) => {
                assert_eq!(what, "the test buffer");
                assert_eq!(bytes, (usize::MAX / 8) as u64 * 4);
            }
            other => panic!("{:?}", other.map(|v| v.len())),
        }
        assert!(matches!(check_allocation("probe", u64::MAX), Err(Error::Alloc { .. })));
        assert!(check_allocation("probe", 1 << 20).is_ok());
        let a = try_zeros::<u16, _>("an array", (2, 3, 4)).unwrap();
        assert_eq!(a.shape(), [2, 3, 4]);
        assert!(a.iter().all(|&v| v == 0));
        match try_zeros::<f32, _>("overflowing", (usize::MAX, 2)) {
            Err(Error::Alloc { what: "overflowing", .. }) => {}
            other => panic!("{:?}", other.map(|a| a.len())),
        }
    }
}
