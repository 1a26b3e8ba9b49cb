//! Position lists: the `--positions` spec syntax and builders of the common cases.

use ndarray::{Array2, ArrayView2};

use crate::alloc;
use crate::error::{Error, Result};
use crate::source::check_shape;

/// Most positions one spec may expand to (2^24, 64 MiB of u32): a guard against specs such as
/// `0..4294967296` that would ask for tens of gigabytes before any work starts.
pub const MAX_SPEC_POSITIONS: u64 = 1 << 24;

/// Positions `0..len`.
///
/// # Errors
/// [`Error::InvalidParameter`] naming `len` if it exceeds 2^32 (positions are u32), and
/// [`Error::Alloc`] if the memory cannot be had (2^32 positions are 16 GiB).
pub fn contiguous(len: u64) -> Result<Vec<u32>> {
    check_row_len(len)?;
    // Past a 32-bit target's address space the size itself is what cannot be had.
    let n = usize::try_from(len).map_err(|_| Error::Alloc { what: "positions", bytes: len * 4 })?;
    let mut out: Vec<u32> = alloc::try_zeroed_vec("positions", n)?;
    for (p, v) in out.iter_mut().enumerate() {
        *v = p as u32;
    }
    Ok(out)
}

/// Parses a comma-separated list of u32 positions and half-open ranges `a..b`, e.g.
/// `0..4,1000000,4294967295`. Whitespace around items is ignored; a range's end may be
/// 4294967296 to include the last u32.
///
/// ```
/// let p = posenc::positions::parse_spec("0..3, 7, 4294967295")?;
/// assert_eq!(p, [0, 1, 2, 7, 4294967295]);
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// [`Error::PositionSpec`] naming the item and what is wrong with it: empty, not a whole
/// number, above 4294967295, a range that runs backwards, or more than
/// [`MAX_SPEC_POSITIONS`] positions in all.
pub fn parse_spec(spec: &str) -> Result<Vec<u32>> {
    let fail =
        |item: usize, reason: String| Error::PositionSpec { spec: spec.to_string(), item, reason };
    let mut ranges = Vec::new();
    let mut total = 0u64;
    for (k, raw) in spec.split(',').enumerate() {
        let item = k + 1;
        let text = raw.trim();
        if text.is_empty() {
            return Err(fail(item, "empty item".into()));
        }
        let number = |s: &str, limit: u64| -> Result<u64> {
            let s = s.trim();
            let v: u64 = if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
                s.parse().unwrap_or(u64::MAX)
            } else {
                return Err(fail(item, format!("{s:?} is not a whole number")));
            };
            if v > limit {
                return Err(fail(item, format!("{s} is above {limit}")));
            }
            Ok(v)
        };
        let (start, end) = match text.split_once("..") {
            Some((a, b)) => {
                let start = number(a, u64::from(u32::MAX))?;
                let end = number(b, 1 << 32)?;
                if end < start {
                    return Err(fail(item, format!("range {start}..{end} runs backwards")));
                }
                (start, end)
            }
            None => {
                let v = number(text, u64::from(u32::MAX))?;
                (v, v + 1)
            }
        };
        total += end - start;
        if total > MAX_SPEC_POSITIONS {
            return Err(fail(
                item,
                format!("the spec expands to more than {MAX_SPEC_POSITIONS} positions"),
            ));
        }
        ranges.push(start..end);
    }
    Ok(ranges.into_iter().flatten().map(|p| p as u32).collect())
}

/// Most values an array of positions built here may describe, its zero axes set aside:
/// ndarray's own bound on a shape. An empty array within it costs nothing; a non-empty one
/// past what memory can hold fails its allocation ([`Error::Alloc`]).
const MAX_BATCH_POSITIONS: u64 = isize::MAX as u64;

/// A zeroed `[rows, cols]` array of positions for `op`: its shape checked (its zero axes
/// set aside), then allocated fallibly.
fn zeros(op: &'static str, rows: usize, cols: usize) -> Result<Array2<u32>> {
    check_shape(op, "positions", &[rows, cols], MAX_BATCH_POSITIONS, "isize::MAX")?;
    alloc::try_zeros("positions", (rows, cols))
}

/// Refuses rows of more than 2^32 tokens numbered from 0, whose positions would pass u32.
fn check_row_len(len: u64) -> Result<()> {
    if len > 1 << 32 {
        return Err(Error::InvalidParameter {
            field: "len",
            value: len.to_string(),
            allowed: "at most 4294967296 (positions are u32)",
        });
    }
    Ok(())
}

/// Positions `0..len` for every row of a `[batch, len]` batch.
///
/// ```
/// let p = posenc::positions::contiguous_batch(2, 3)?;
/// assert_eq!(p, ndarray::array![[0u32, 1, 2], [0, 1, 2]]);
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidParameter`] naming `len` if it exceeds 2^32 (positions are u32);
/// [`Error::TooLarge`] for a shape no array can hold (its zero axes set aside), and
/// [`Error::Alloc`] if the memory cannot be had, before anything is written.
pub fn contiguous_batch(batch: usize, len: usize) -> Result<Array2<u32>> {
    check_row_len(len as u64)?;
    let mut out = zeros("contiguous_batch", batch, len)?;
    if !out.is_empty() {
        for mut row in out.rows_mut() {
            for (t, p) in row.iter_mut().enumerate() {
                *p = t as u32;
            }
        }
    }
    Ok(out)
}

/// Decoding with a KV cache: row `b` holds `len` new tokens at positions
/// `offsets[b], offsets[b] + 1, ...` (token n of a sequence is at position n).
///
/// # Errors
/// [`Error::InvalidParameter`] naming `offsets` if a position would pass 4294967295;
/// [`Error::TooLarge`] for a shape no array can hold (its zero axes set aside), and
/// [`Error::Alloc`] if the memory cannot be had.
pub fn from_offsets(offsets: &[u32], len: usize) -> Result<Array2<u32>> {
    for (b, &o) in offsets.iter().enumerate() {
        if len > 0 && u64::from(o) + len as u64 - 1 > u64::from(u32::MAX) {
            return Err(Error::InvalidParameter {
                field: "offsets",
                value: format!("{o} at row {b} with {len} tokens"),
                allowed: "offset + len - 1 <= 4294967295",
            });
        }
    }
    let mut out = zeros("from_offsets", offsets.len(), len)?;
    if !out.is_empty() {
        for (mut row, &o) in out.rows_mut().into_iter().zip(offsets) {
            for (t, p) in row.iter_mut().enumerate() {
                *p = o + t as u32;
            }
        }
    }
    Ok(out)
}

/// Left-padded batches: positions count only the non-pad tokens of each row, from 0; pad
/// tokens get position 0 (encode writes zeros for them whatever their position).
///
/// ```
/// let ids = ndarray::array![[0u32, 0, 5, 6], [7, 8, 9, 10]];
/// let p = posenc::positions::left_padded(ids.view(), 0)?;
/// assert_eq!(p, ndarray::array![[0u32, 0, 0, 1], [0, 1, 2, 3]]);
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidParameter`] naming `len` for rows of more than 2^32 tokens;
/// [`Error::Alloc`] if the memory cannot be had (a broadcast view of ids may describe far
/// more tokens than it holds).
pub fn left_padded(ids: ArrayView2<'_, u32>, pad_id: u32) -> Result<Array2<u32>> {
    check_row_len(ids.ncols() as u64)?;
    let mut out = zeros("left_padded", ids.nrows(), ids.ncols())?;
    if out.is_empty() {
        // An empty batch may still have 2^63 rows: no loop over them.
        return Ok(out);
    }
    for (ids_row, mut out_row) in ids.rows().into_iter().zip(out.rows_mut()) {
        let mut next = 0u32;
        for (&id, p) in ids_row.iter().zip(out_row.iter_mut()) {
            if id != pad_id {
                *p = next;
                next = next.wrapping_add(1);
            }
        }
    }
    Ok(out)
}

/// fairseq's `make_positions`: in each row the non-pad tokens are numbered
/// `padding_idx + 1, padding_idx + 2, ...` and pad tokens (id `padding_idx`) get
/// `padding_idx`, whose row of the fairseq table is all zeros.
///
/// ```
/// let ids = ndarray::array![[1u32, 1, 5, 6], [7, 8, 9, 1]];
/// let p = posenc::positions::fairseq(ids.view(), 1)?;
/// assert_eq!(p, ndarray::array![[1u32, 1, 2, 3], [2, 3, 4, 1]]);
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidParameter`] naming `padding_idx` when a position would pass 2^32 - 1;
/// [`Error::Alloc`] if the memory cannot be had.
pub fn fairseq(ids: ArrayView2<'_, u32>, padding_idx: u32) -> Result<Array2<u32>> {
    let len = ids.ncols() as u64;
    if u64::from(padding_idx) + len > u64::from(u32::MAX) {
        return Err(Error::InvalidParameter {
            field: "padding_idx",
            value: format!("{padding_idx} with {len} tokens per row"),
            allowed: "padding_idx + tokens per row <= 4294967295",
        });
    }
    let mut out = zeros("fairseq", ids.nrows(), ids.ncols())?;
    if out.is_empty() {
        // An empty batch may still have 2^63 rows: no loop over them.
        return Ok(out);
    }
    for (ids_row, mut out_row) in ids.rows().into_iter().zip(out.rows_mut()) {
        let mut next = padding_idx;
        for (&id, p) in ids_row.iter().zip(out_row.iter_mut()) {
            if id == padding_idx {
                *p = padding_idx;
            } else {
                next += 1;
                *p = next;
            }
        }
    }
    Ok(out)
}

/// Packed sequences: row `b` of a `[starts.len(), len]` batch restarts at position 0 at
/// token 0 and at every index in `starts[b]`.
///
/// ```
/// let p = posenc::positions::packed(5, &[vec![2], vec![]])?;
/// assert_eq!(p, ndarray::array![[0u32, 1, 0, 1, 2], [0, 1, 2, 3, 4]]);
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidParameter`] naming `starts` for an index `>= len`, or `len` above 2^32;
/// [`Error::TooLarge`] for a shape no array can hold (its zero axes set aside), and
/// [`Error::Alloc`] if the memory cannot be had; all before anything is written.
pub fn packed(len: usize, starts: &[Vec<usize>]) -> Result<Array2<u32>> {
    check_row_len(len as u64)?;
    for (b, row_starts) in starts.iter().enumerate() {
        if let Some(&bad) = row_starts.iter().find(|&&s| s >= len) {
            return Err(Error::InvalidParameter {
                field: "starts",
                value: format!("{bad} in row {b}"),
                allowed: "token indices below the sequence length",
            });
        }
    }
    let mut out = zeros("packed", starts.len(), len)?;
    if out.is_empty() {
        return Ok(out);
    }
    for (row_starts, mut row) in starts.iter().zip(out.rows_mut()) {
        // Each row's starts in order, walked beside its tokens (any order, repeats allowed).
        let mut row_starts = row_starts.clone();
        row_starts.sort_unstable();
        let mut at = row_starts.iter().peekable();
        let mut next = 0u32;
        for (t, p) in row.iter_mut().enumerate() {
            while at.next_if(|&&s| s <= t).is_some_and(|&s| s == t) {
                next = 0;
            }
            *p = next;
            next = next.wrapping_add(1);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_counts_from_zero() {
        assert_eq!(contiguous(4).unwrap(), [0, 1, 2, 3]);
        assert!(matches!(contiguous((1 << 32) + 1), Err(Error::InvalidParameter { .. })));
    }

    #[test]
    fn parses_values_and_ranges() {
        assert_eq!(parse_spec("0..4,1000000,4294967295").unwrap(), [0, 1, 2, 3, 1000000, u32::MAX]);
        assert_eq!(parse_spec(" 5 ").unwrap(), [5]);
        assert_eq!(parse_spec("3..3").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_spec("4294967294..4294967296").unwrap(), [u32::MAX - 1, u32::MAX]);
    }

    #[test]
    fn rejects_bad_items_naming_them() {
        for (spec, item, needle) in [
            ("", 1, "empty"),
            ("1,,2", 2, "empty"),
            ("4294967296", 1, "above 4294967295"),
            ("1,x", 2, "not a whole number"),
            ("-1", 1, "not a whole number"),
            ("5..2", 1, "backwards"),
            ("0..4294967297", 1, "above 4294967296"),
            ("1.5", 1, "not a whole number"),
            ("99999999999999999999999", 1, "above"),
            ("0..4294967296", 1, "more than"),
        ] {
            match parse_spec(spec) {
                Err(Error::PositionSpec { item: i, reason, .. }) => {
                    assert_eq!(i, item, "{spec}");
                    assert!(reason.contains(needle), "{spec}: {reason}");
                }
                other => panic!("{spec}: {other:?}"),
            }
        }
    }

    #[test]
    fn batch_builders() {
        assert_eq!(contiguous_batch(2, 3).unwrap(), ndarray::array![[0u32, 1, 2], [0, 1, 2]]);
        assert_eq!(from_offsets(&[5, 0], 2).unwrap(), ndarray::array![[5u32, 6], [0, 1]]);
        assert_eq!(from_offsets(&[u32::MAX], 1).unwrap(), ndarray::array![[u32::MAX]]);
        assert!(from_offsets(&[u32::MAX], 2).is_err());
        assert_eq!(from_offsets(&[u32::MAX], 0).unwrap().dim(), (1, 0));
        assert!(packed(3, &[vec![3]]).is_err());
        assert_eq!(packed(4, &[vec![0, 1, 3]]).unwrap(), ndarray::array![[0u32, 0, 1, 0]]);
        // Starts in any order, repeated.
        assert_eq!(packed(5, &[vec![3, 1, 3]]).unwrap(), ndarray::array![[0u32, 0, 1, 0, 1]]);
        let l = left_padded(ndarray::array![[0u32, 4], [5, 6]].view(), 0).unwrap();
        assert_eq!(l, ndarray::array![[0u32, 0], [0, 1]]);
    }

    /// Shapes no array can hold, rows whose positions would pass u32, and memory that
    /// cannot be had are errors, never a panic or an abort (round five of the hostile
    /// probes found `packed` and `from_offsets` panicking in ndarray).
    #[test]
    fn impossible_batches_are_errors() {
        let len = |r: Result<Array2<u32>>| match r {
            Err(Error::InvalidParameter { field: "len", .. }) => {}
            other => panic!("{:?}", other.map(|a| a.dim())),
        };
        len(packed(usize::MAX, &[vec![]]));
        len(packed(1 << 62, &[vec![], vec![]]));
        len(contiguous_batch(0, usize::MAX));
        len(contiguous_batch(1, (1 << 32) + 1));
        let too_large = |r: Result<Array2<u32>>| match r {
            Err(Error::TooLarge { what: "positions", .. }) => {}
            other => panic!("{:?}", other.map(|a| a.dim())),
        };
        too_large(from_offsets(&[], usize::MAX));
        too_large(contiguous_batch(1 << 40, 1 << 30));
        too_large(contiguous_batch(usize::MAX, 0));
        let alloc = |r: Result<Array2<u32>>| match r {
            Err(Error::Alloc { what: "positions", .. }) => {}
            other => panic!("{:?}", other.map(|a| a.dim())),
        };
        alloc(contiguous_batch(1 << 31, 1 << 31));
        // A broadcast view describes far more tokens than it holds. (Each of these asks
        // for 2^64 bytes, which no allocator grants, not a size an overcommitting kernel
        // might hand out lazily.)
        let one = [1u32];
        let one = ArrayView2::from_shape((1, 1), &one).unwrap();
        let wide = one.broadcast((1 << 31, 1 << 31)).unwrap();
        alloc(left_padded(wide, 0));
        len(left_padded(one.broadcast((1, (1 << 32) + 1)).unwrap(), 0));
        alloc(fairseq(wide, 1));
        // The empty ones within ndarray's bound are their own results.
        assert_eq!(contiguous_batch(1 << 62, 0).unwrap().dim(), (1 << 62, 0));
        assert_eq!(from_offsets(&[], 1 << 32).unwrap().dim(), (0, 1 << 32));
    }

    #[test]
    fn empty_batches_of_enormous_row_counts_take_no_time() {
        // 2^63 - 1 rows of no tokens: a loop over the rows would never end.
        let none: [u32; 0] = [];
        let ids = ArrayView2::from_shape((isize::MAX as usize, 0), &none).unwrap();
        assert_eq!(left_padded(ids, 0).unwrap().dim(), (isize::MAX as usize, 0));
        assert_eq!(fairseq(ids, 1).unwrap().dim(), (isize::MAX as usize, 0));
    }

    #[test]
    fn contiguous_is_bounded_by_u32() {
        assert_eq!(contiguous(3).unwrap(), [0, 1, 2]);
        assert!(contiguous((1 << 32) + 1).is_err());
    }
}
