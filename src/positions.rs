//! Position lists: the `--positions` spec syntax and builders of the common cases.

use ndarray::{Array2, ArrayView2};

use crate::error::{Error, Result};

/// Most positions one spec may expand to (2^24, 64 MiB of u32): a guard against specs such as
/// `0..4294967296` that would ask for tens of gigabytes before any work starts.
pub const MAX_SPEC_POSITIONS: u64 = 1 << 24;

/// Positions `0..len`.
///
/// # Errors
/// [`Error::InvalidParameter`] naming `len` if it exceeds 2^32 (positions are u32).
pub fn contiguous(len: u64) -> Result<Vec<u32>> {
    if len > 1 << 32 {
        return Err(Error::InvalidParameter {
            field: "len",
            value: len.to_string(),
            allowed: "at most 4294967296 (positions are u32)",
        });
    }
    Ok((0..len).map(|p| p as u32).collect())
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

/// Positions `0..len` for every row of a `[batch, len]` batch.
pub fn contiguous_batch(batch: usize, len: usize) -> Array2<u32> {
    Array2::from_shape_fn((batch, len), |(_, t)| t as u32)
}

/// Decoding with a KV cache: row `b` holds `len` new tokens at positions
/// `offsets[b], offsets[b] + 1, ...` (token n of a sequence is at position n).
///
/// # Errors
/// [`Error::InvalidParameter`] naming `offsets` if a position would pass 4294967295.
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
    Ok(Array2::from_shape_fn((offsets.len(), len), |(b, t)| offsets[b] + t as u32))
}

/// Left-padded batches: positions count only the non-pad tokens of each row, from 0; pad
/// tokens get position 0 (encode writes zeros for them whatever their position).
///
/// ```
/// let ids = ndarray::array![[0u32, 0, 5, 6], [7, 8, 9, 10]];
/// let p = posenc::positions::left_padded(ids.view(), 0);
/// assert_eq!(p, ndarray::array![[0u32, 0, 0, 1], [0, 1, 2, 3]]);
/// ```
pub fn left_padded(ids: ArrayView2<'_, u32>, pad_id: u32) -> Array2<u32> {
    let mut out = Array2::<u32>::zeros(ids.dim());
    if out.is_empty() {
        // An empty batch may still have 2^63 rows: no loop over them.
        return out;
    }
    for (ids_row, mut out_row) in ids.rows().into_iter().zip(out.rows_mut()) {
        let mut next = 0u32;
        for (&id, p) in ids_row.iter().zip(out_row.iter_mut()) {
            if id != pad_id {
                *p = next;
                next += 1;
            }
        }
    }
    out
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
/// [`Error::InvalidParameter`] naming `padding_idx` when a position would pass 2^32 - 1.
pub fn fairseq(ids: ArrayView2<'_, u32>, padding_idx: u32) -> Result<Array2<u32>> {
    let len = ids.ncols() as u64;
    if u64::from(padding_idx) + len > u64::from(u32::MAX) {
        return Err(Error::InvalidParameter {
            field: "padding_idx",
            value: format!("{padding_idx} with {len} tokens per row"),
            allowed: "padding_idx + tokens per row <= 4294967295",
        });
    }
    let mut out = Array2::<u32>::zeros(ids.dim());
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
/// [`Error::InvalidParameter`] naming `starts` for an index `>= len`.
pub fn packed(len: usize, starts: &[Vec<usize>]) -> Result<Array2<u32>> {
    let mut out = Array2::<u32>::zeros((starts.len(), len));
    for (b, (row_starts, mut row)) in starts.iter().zip(out.rows_mut()).enumerate() {
        if let Some(&bad) = row_starts.iter().find(|&&s| s >= len) {
            return Err(Error::InvalidParameter {
                field: "starts",
                value: format!("{bad} in row {b}"),
                allowed: "token indices below the sequence length",
            });
        }
        let mut next = 0u32;
        for (t, p) in row.iter_mut().enumerate() {
            if row_starts.contains(&t) {
                next = 0;
            }
            *p = next;
            next += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(contiguous_batch(2, 3), ndarray::array![[0u32, 1, 2], [0, 1, 2]]);
        assert_eq!(from_offsets(&[5, 0], 2).unwrap(), ndarray::array![[5u32, 6], [0, 1]]);
        assert_eq!(from_offsets(&[u32::MAX], 1).unwrap(), ndarray::array![[u32::MAX]]);
        assert!(from_offsets(&[u32::MAX], 2).is_err());
        assert_eq!(from_offsets(&[u32::MAX], 0).unwrap().dim(), (1, 0));
        assert!(packed(3, &[vec![3]]).is_err());
        assert_eq!(packed(4, &[vec![0, 1, 3]]).unwrap(), ndarray::array![[0u32, 0, 1, 0]]);
    }

    #[test]
    fn empty_batches_of_enormous_row_counts_take_no_time() {
        // 2^63 - 1 rows of no tokens: a loop over the rows would never end.
        let none: [u32; 0] = [];
        let ids = ArrayView2::from_shape((isize::MAX as usize, 0), &none).unwrap();
        assert_eq!(left_padded(ids, 0).dim(), (isize::MAX as usize, 0));
        assert_eq!(fairseq(ids, 1).unwrap().dim(), (isize::MAX as usize, 0));
    }

    #[test]
    fn contiguous_is_bounded_by_u32() {
        assert_eq!(contiguous(3).unwrap(), [0, 1, 2]);
        assert!(contiguous((1 << 32) + 1).is_err());
    }
}
