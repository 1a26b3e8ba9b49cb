//! Writing float32 arrays in NumPy's `.npy` format (version 1.0), so `numpy.load` reads
//! posenc's tables without any other dependency on either side.

use std::io::{self, Write};

use ndarray::{ArrayView, Dimension};

/// The magic string that opens every `.npy` file.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// NumPy aligns the data to 64 bytes: the preamble and the header dict together fill a
/// whole number of 64-byte blocks.
pub const HEADER_ALIGN: usize = 64;

/// Bytes before the header dict: the magic, the version (1.0) and the dict's length.
const PREAMBLE_LEN: usize = MAGIC.len() + 2 + 2;

/// The preamble and header dict of a C-order little-endian float32 array of `shape`, padded
/// with spaces and ended by a newline so that its length is a multiple of [`HEADER_ALIGN`].
///
/// ```
/// let h = posenc::npy::header_f32(&[3, 8]).unwrap();
/// assert_eq!(h.len() % 64, 0);
/// assert!(h.starts_with(b"\x93NUMPY\x01\x00"));
/// ```
///
/// # Errors
/// [`io::ErrorKind::InvalidInput`] if the dict would not fit version 1.0's 16-bit length
/// field, which only a shape of thousands of dimensions can cause.
pub fn header_f32(shape: &[usize]) -> io::Result<Vec<u8>> {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    // Python spells a one-element tuple with a trailing comma.
    let tuple = match dims.as_slice() {
        [one] => format!("({one},)"),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {tuple}, }}");
    let unpadded = PREAMBLE_LEN + dict.len() + 1;
    dict.extend(std::iter::repeat_n(' ', unpadded.next_multiple_of(HEADER_ALIGN) - unpadded));
    dict.push('\n');
    let dict_len = u16::try_from(dict.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("npy: a header of {} bytes does not fit version 1.0", dict.len()),
        )
    })?;
    let mut out = Vec::with_capacity(PREAMBLE_LEN + dict.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&dict_len.to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    Ok(out)
}

/// Writes `array` as a `.npy` file: `'<f4'`, C order, the array's shape.
///
/// ```
/// let a = ndarray::array![[1.0f32, 2.0], [3.0, 4.0]];
/// let mut bytes = Vec::new();
/// posenc::npy::write_f32(&mut bytes, a.view())?;
/// let data = posenc::npy::header_f32(&[2, 2])?.len();
/// assert_eq!(bytes.len(), data + 4 * 4);
/// assert_eq!(&bytes[data..data + 4], &1.0f32.to_le_bytes());
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// Whatever `w` reports, and [`header_f32`]'s error.
pub fn write_f32<W: Write + ?Sized, D: Dimension>(
    w: &mut W,
    array: ArrayView<'_, f32, D>,
) -> io::Result<()> {
    w.write_all(&header_f32(array.shape())?)?;
    let data = array.as_standard_layout();
    let flat = data.as_slice().expect("a standard-layout array is one contiguous slice");
    if cfg!(target_endian = "little") {
        w.write_all(bytemuck::cast_slice(flat))
    } else {
        flat.iter().try_for_each(|v| w.write_all(&v.to_le_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dict(header: &[u8]) -> &str {
        std::str::from_utf8(&header[PREAMBLE_LEN..]).unwrap()
    }

    #[test]
    fn header_is_aligned_and_spells_the_shape_as_python_does() {
        for (shape, tuple) in [
            (vec![3, 8], "(3, 8)"),
            (vec![0, 512], "(0, 512)"),
            (vec![5], "(5,)"),
            (vec![], "()"),
            (vec![1 << 31, 65536], "(2147483648, 65536)"),
        ] {
            let h = header_f32(&shape).unwrap();
            assert_eq!(h.len() % HEADER_ALIGN, 0, "{shape:?}");
            assert_eq!(&h[..8], b"\x93NUMPY\x01\x00");
            assert_eq!(usize::from(u16::from_le_bytes([h[8], h[9]])), h.len() - PREAMBLE_LEN);
            let d = dict(&h);
            let expected =
                format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {tuple}, }}");
            assert!(d.starts_with(&expected), "{d:?}");
            assert!(d.ends_with('\n'));
            assert!(d[expected.len()..d.len() - 1].bytes().all(|b| b == b' '));
        }
    }

    #[test]
    fn data_follows_the_header_in_c_order_little_endian() {
        let a = ndarray::array![[1.0f32, -2.5, 3.0], [0.1, 5.0, 6.0]];
        let mut bytes = Vec::new();
        write_f32(&mut bytes, a.t()).unwrap();
        let h = header_f32(&[3, 2]).unwrap();
        assert_eq!(&bytes[..h.len()], h.as_slice());
        let values: Vec<f32> = bytes[h.len()..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(values, [1.0, 0.1, -2.5, 5.0, 3.0, 6.0]);
    }
}
