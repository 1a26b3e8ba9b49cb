//! Position lists: the `--positions` spec syntax and builders of the common cases.

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
    fn contiguous_is_bounded_by_u32() {
        assert_eq!(contiguous(3).unwrap(), [0, 1, 2]);
        assert!(contiguous((1 << 32) + 1).is_err());
    }
}
