//! NumPy's `.npy` format: writing arrays (version 1.0, C order, little-endian) so
//! `numpy.load` reads posenc's outputs, and reading the arrays posenc takes as input.
//!
//! The reader trusts nothing in a file: the header is parsed without evaluating it, its
//! length is capped, and the data's size implied by the header (computed with checked
//! arithmetic) must equal what the file actually holds before anything of that size is
//! allocated.

use std::io::{self, BufReader, Read, Write};
use std::path::Path;

use half::{bf16, f16};
use ndarray::{ArrayD, ArrayView, Dimension, IxDyn, ShapeBuilder};

use crate::error::{Error, Result, shape_tuple};

/// The magic string that opens every `.npy` file.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Whether `reader` starts with [`MAGIC`] (a file shorter than it does not), then rewinds
/// it: formats are recognised by content, not by name.
pub(crate) fn starts_with_magic<R: Read + io::Seek>(reader: &mut R) -> io::Result<bool> {
    let mut magic = [0u8; MAGIC.len()];
    let is_npy = match reader.read_exact(&mut magic) {
        Ok(()) => &magic == MAGIC,
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => false,
        Err(e) => return Err(e),
    };
    reader.rewind()?;
    Ok(is_npy)
}

/// NumPy aligns the data to 64 bytes: the preamble and the header dict together fill a
/// whole number of 64-byte blocks.
pub const HEADER_ALIGN: usize = 64;

/// The longest header dict the reader accepts. NumPy's own headers are a few hundred bytes;
/// the cap keeps a corrupt length field from sizing an allocation.
pub const MAX_HEADER_LEN: usize = 1 << 20;

/// Bytes before the header dict in version 1.0: the magic, the version and a u16 length.
const PREAMBLE_LEN: usize = MAGIC.len() + 2 + 2;

/// How error messages name the format.
const FORMAT: &str = ".npy";

/// An element type that posenc writes to `.npy` files.
///
/// bfloat16 has no NumPy dtype; it is written as `'<u2'` holding the raw bits (NumPy reads
/// them back as float32 with `(a.astype(np.uint32) << 16).view(np.float32)`).
pub trait Element: bytemuck::Pod {
    /// The dtype as the header spells it, e.g. `'<f4'` (without the quotes).
    const DESCR: &'static str;
}

impl Element for f32 {
    const DESCR: &'static str = "<f4";
}
impl Element for f64 {
    const DESCR: &'static str = "<f8";
}
impl Element for f16 {
    const DESCR: &'static str = "<f2";
}
impl Element for bf16 {
    const DESCR: &'static str = "<u2";
}
impl Element for i32 {
    const DESCR: &'static str = "<i4";
}
impl Element for i64 {
    const DESCR: &'static str = "<i8";
}
impl Element for u32 {
    const DESCR: &'static str = "<u4";
}

/// The preamble and header dict of a C-order array of `T` and `shape`, padded with spaces
/// and ended by a newline so that its length is a multiple of [`HEADER_ALIGN`].
///
/// ```
/// let h = posenc::npy::header::<f32>(&[3, 8]).unwrap();
/// assert_eq!(h.len() % 64, 0);
/// assert!(h.starts_with(b"\x93NUMPY\x01\x00"));
/// ```
///
/// # Errors
/// [`io::ErrorKind::InvalidInput`] if the dict would not fit version 1.0's 16-bit length
/// field, which only a shape of thousands of dimensions can cause.
pub fn header<T: Element>(shape: &[usize]) -> io::Result<Vec<u8>> {
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
        T::DESCR,
        shape_tuple(shape)
    );
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

/// Writes `array` as a `.npy` file: `T`'s dtype, C order, the array's shape.
///
/// ```
/// let a = ndarray::array![[1.0f32, 2.0], [3.0, 4.0]];
/// let mut bytes = Vec::new();
/// posenc::npy::write(&mut bytes, a.view())?;
/// let data = posenc::npy::header::<f32>(&[2, 2])?.len();
/// assert_eq!(bytes.len(), data + 4 * 4);
/// assert_eq!(&bytes[data..data + 4], &1.0f32.to_le_bytes());
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// Whatever `w` reports, and [`header`]'s error.
pub fn write<W: Write + ?Sized, T: Element, D: Dimension>(
    w: &mut W,
    array: ArrayView<'_, T, D>,
) -> io::Result<()> {
    w.write_all(&header::<T>(array.shape())?)?;
    if let Some(data) = array.as_slice() {
        return write_data(w, data);
    }
    // Another layout (a transposed or broadcast view, whose logical size may be far more than
    // the memory behind it) is written in C order a piece at a time, never copied whole.
    const PIECE: usize = 1 << 14;
    let mut piece = Vec::with_capacity(PIECE.min(array.len()));
    for v in array.iter() {
        piece.push(*v);
        if piece.len() == PIECE {
            write_data(w, &piece)?;
            piece.clear();
        }
    }
    write_data(w, &piece)
}

/// Writes `values` as `.npy` data (little-endian), with no header: after a [`header`]
/// whose shape counts them all, an array can be written piece by piece, in C order.
///
/// ```
/// let mut bytes = posenc::npy::header::<f32>(&[2, 2])?;
/// posenc::npy::write_data(&mut bytes, &[1.0f32, 2.0])?;
/// posenc::npy::write_data(&mut bytes, &[3.0f32, 4.0])?;
/// let mut whole = Vec::new();
/// posenc::npy::write(&mut whole, ndarray::array![[1.0f32, 2.0], [3.0, 4.0]].view())?;
/// assert_eq!(bytes, whole);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// Whatever `w` reports.
pub fn write_data<W: Write + ?Sized, T: Element>(w: &mut W, values: &[T]) -> io::Result<()> {
    if cfg!(target_endian = "little") {
        w.write_all(bytemuck::cast_slice(values))
    } else {
        values.iter().try_for_each(|v| {
            let mut bytes = bytemuck::bytes_of(v).to_vec();
            bytes.reverse();
            w.write_all(&bytes)
        })
    }
}

/// An element type the reader accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NpyDtype {
    /// `'<f4'`, float32.
    F32,
    /// `'<f8'`, float64.
    F64,
    /// `'<f2'`, float16.
    F16,
    /// `'<i4'`, int32.
    I32,
    /// `'<i8'`, int64.
    I64,
    /// `'<u4'`, uint32.
    U32,
    /// `'<u2'`, uint16: how posenc stores bfloat16 bits, which NumPy has no dtype for.
    U16,
}

impl NpyDtype {
    const ALL: [NpyDtype; 7] = [
        NpyDtype::F32,
        NpyDtype::F64,
        NpyDtype::F16,
        NpyDtype::I32,
        NpyDtype::I64,
        NpyDtype::U32,
        NpyDtype::U16,
    ];

    /// The little-endian descr NumPy writes, e.g. `<f4`.
    pub fn descr(self) -> &'static str {
        match self {
            NpyDtype::F32 => "<f4",
            NpyDtype::F64 => "<f8",
            NpyDtype::F16 => "<f2",
            NpyDtype::I32 => "<i4",
            NpyDtype::I64 => "<i8",
            NpyDtype::U32 => "<u4",
            NpyDtype::U16 => "<u2",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            NpyDtype::F16 | NpyDtype::U16 => 2,
            NpyDtype::F32 | NpyDtype::I32 | NpyDtype::U32 => 4,
            NpyDtype::F64 | NpyDtype::I64 => 8,
        }
    }

    /// Reads a descr: `<` (little-endian) or `|` (not applicable) byte order and a known
    /// type code. `None` for anything else.
    fn parse(descr: &str) -> Option<Self> {
        let code = descr.strip_prefix('<').or_else(|| descr.strip_prefix('|'))?;
        Self::ALL.into_iter().find(|d| &d.descr()[1..] == code)
    }
}

/// What a caller accepts from a `.npy` file. It is checked against the header before any
/// data is read.
#[derive(Clone, Copy, Debug)]
pub struct Expected<'a> {
    /// The array's role, for error messages (`ids`, `positions`, ...).
    pub what: &'static str,
    /// The element types accepted.
    pub dtypes: &'a [NpyDtype],
    /// The ranks accepted.
    pub ranks: &'a [usize],
}

/// An array read from a `.npy` file, in C order whatever the file's order.
#[derive(Clone, Debug, PartialEq)]
pub enum NpyArray {
    /// `'<f4'` data.
    F32(ArrayD<f32>),
    /// `'<f8'` data.
    F64(ArrayD<f64>),
    /// `'<f2'` data.
    F16(ArrayD<f16>),
    /// `'<i4'` data.
    I32(ArrayD<i32>),
    /// `'<i8'` data.
    I64(ArrayD<i64>),
    /// `'<u4'` data.
    U32(ArrayD<u32>),
    /// `'<u2'` data.
    U16(ArrayD<u16>),
}

impl NpyArray {
    /// The array's shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            NpyArray::F32(a) => a.shape(),
            NpyArray::F64(a) => a.shape(),
            NpyArray::F16(a) => a.shape(),
            NpyArray::I32(a) => a.shape(),
            NpyArray::I64(a) => a.shape(),
            NpyArray::U32(a) => a.shape(),
            NpyArray::U16(a) => a.shape(),
        }
    }

    /// The element type.
    pub fn dtype(&self) -> NpyDtype {
        match self {
            NpyArray::F32(_) => NpyDtype::F32,
            NpyArray::F64(_) => NpyDtype::F64,
            NpyArray::F16(_) => NpyDtype::F16,
            NpyArray::I32(_) => NpyDtype::I32,
            NpyArray::I64(_) => NpyDtype::I64,
            NpyArray::U32(_) => NpyDtype::U32,
            NpyArray::U16(_) => NpyDtype::U16,
        }
    }
}

/// Reads a `.npy` file (format version 1.0, 2.0 or 3.0) whose dtype and rank are among
/// those `expected` lists. Fortran-order files are accepted and returned in C order.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("ids.npy");
/// let ids = ndarray::array![[1i64, 2, 3], [4, 5, 6]];
/// posenc::npy::write(&mut std::fs::File::create(&path)?, ids.view())?;
///
/// use posenc::npy::{Expected, NpyArray, NpyDtype};
/// let expected = Expected { what: "ids", dtypes: &[NpyDtype::I32, NpyDtype::I64], ranks: &[2] };
/// match posenc::npy::read(&path, &expected)? {
///     NpyArray::I64(a) => assert_eq!(a, ids.into_dyn()),
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// All naming the file: [`Error::Io`] if it cannot be read or is not a regular file (a
/// directory, a pipe: its size must be known before it is read); [`Error::Format`] if it is not
/// a well-formed `.npy` file (bad magic or version, a header that is not the expected
/// Python dict, a data length that does not match the shape); [`Error::Dtype`] for a dtype
/// outside `expected.dtypes` (big-endian data included); [`Error::Rank`] for a rank outside
/// `expected.ranks`.
pub fn read(path: impl AsRef<Path>, expected: &Expected<'_>) -> Result<NpyArray> {
    let path = path.as_ref();
    let (file, len) = crate::source::open_file(path)?;
    read_from(BufReader::new(file), len, path, expected)
}

/// [`read`] from any reader that holds exactly `len` bytes; `path` names it in errors.
///
/// # Errors
/// As [`read`].
pub fn read_from<R: Read>(
    reader: R,
    len: u64,
    path: &Path,
    expected: &Expected<'_>,
) -> Result<NpyArray> {
    read_checked(reader, len, path, expected, |_| Ok(()))
}

/// [`read_from`] with one more check of the header's shape, `check`, run once the dtype,
/// rank and data length are known good and before the data is allocated or read: a caller
/// that knows how many values it wants refuses any other count at no cost.
pub(crate) fn read_checked<R: Read>(
    mut reader: R,
    len: u64,
    path: &Path,
    expected: &Expected<'_>,
    check: impl FnOnce(&[usize]) -> Result<()>,
) -> Result<NpyArray> {
    let format_error =
        |reason: String| Error::Format { path: path.to_path_buf(), format: FORMAT, reason };
    let io_error = |source: io::Error| crate::error::read_error(path, FORMAT, len, source);

    let header = read_header(&mut reader, len).map_err(format_error)?;
    let descr = &header.descr;
    let dtype = NpyDtype::parse(descr).filter(|d| expected.dtypes.contains(d));
    let Some(dtype) = dtype else {
        let big_endian = if descr.starts_with('>') { " (big-endian)" } else { "" };
        return Err(Error::Dtype {
            path: path.to_path_buf(),
            what: expected.what,
            dtype: format!("'{descr}'{big_endian}"),
            allowed: descr_list(expected.dtypes),
        });
    };
    if !expected.ranks.contains(&header.shape.len()) {
        return Err(Error::Rank {
            path: path.to_path_buf(),
            what: expected.what,
            expected: expected.ranks.to_vec(),
            actual: header.shape,
        });
    }

    // A zero axis makes the array empty however large the others are, whose product alone
    // may overflow.
    let count = if header.shape.contains(&0) {
        Some(0)
    } else {
        header.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64))
    };
    let data_bytes = count.and_then(|n| n.checked_mul(dtype.size() as u64));
    let remaining = len - header.data_offset;
    if data_bytes != Some(remaining) {
        let needs = match data_bytes {
            Some(b) => format!("{b} bytes"),
            None => "more bytes than any file holds".into(),
        };
        return Err(format_error(format!(
            "shape {} of '{descr}' needs {needs}, but {remaining} bytes of data follow the \
             header",
            shape_tuple(&header.shape)
        )));
    }
    // ndarray also bounds the product of the non-zero axes, which a zero axis hides above.
    let nonzero =
        header.shape.iter().filter(|&&d| d > 0).try_fold(1usize, |n, &d| n.checked_mul(d));
    if nonzero.is_none_or(|n| n > isize::MAX as usize) {
        return Err(format_error(format!(
            "shape {} is too large for an array",
            shape_tuple(&header.shape)
        )));
    }
    check(&header.shape)?;
    let shape = &header.shape;
    let fortran = header.fortran_order;
    Ok(match dtype {
        NpyDtype::F32 => NpyArray::F32(read_data(&mut reader, shape, fortran, io_error)?),
        NpyDtype::F64 => NpyArray::F64(read_data(&mut reader, shape, fortran, io_error)?),
        NpyDtype::F16 => NpyArray::F16(read_data(&mut reader, shape, fortran, io_error)?),
        NpyDtype::I32 => NpyArray::I32(read_data(&mut reader, shape, fortran, io_error)?),
        NpyDtype::I64 => NpyArray::I64(read_data(&mut reader, shape, fortran, io_error)?),
        NpyDtype::U32 => NpyArray::U32(read_data(&mut reader, shape, fortran, io_error)?),
        NpyDtype::U16 => NpyArray::U16(read_data(&mut reader, shape, fortran, io_error)?),
    })
}

/// `'<i4', '<i8' or '<u4'`.
fn descr_list(dtypes: &[NpyDtype]) -> String {
    let quoted: Vec<String> = dtypes.iter().map(|d| format!("'{}'", d.descr())).collect();
    match quoted.as_slice() {
        [] => "none".into(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// A parsed header: the dict's three fields and where the data starts.
#[derive(Debug, PartialEq)]
struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
    data_offset: u64,
}

/// Reads the preamble and header dict of a file of `len` bytes. The error is the reason,
/// for [`Error::Format`].
fn read_header<R: Read>(reader: &mut R, len: u64) -> std::result::Result<Header, String> {
    let ended = |what: &str| format!("the file ended inside the {what} (it is {len} bytes)");
    let mut preamble = [0u8; MAGIC.len() + 2];
    reader.read_exact(&mut preamble).map_err(|_| ended("preamble"))?;
    if &preamble[..MAGIC.len()] != MAGIC {
        return Err("it does not start with the magic string \\x93NUMPY".into());
    }
    let version = (preamble[6], preamble[7]);
    let header_len = match version {
        (1, 0) => {
            let mut b = [0u8; 2];
            reader.read_exact(&mut b).map_err(|_| ended("preamble"))?;
            usize::from(u16::from_le_bytes(b))
        }
        (2, 0) | (3, 0) => {
            let mut b = [0u8; 4];
            reader.read_exact(&mut b).map_err(|_| ended("preamble"))?;
            usize::try_from(u32::from_le_bytes(b)).unwrap_or(usize::MAX)
        }
        (major, minor) => {
            return Err(format!("format version {major}.{minor} (posenc reads 1.0, 2.0, 3.0)"));
        }
    };
    let length_field = if version.0 == 1 { 2 } else { 4 };
    let data_offset = (preamble.len() + length_field) as u64 + header_len as u64;
    if header_len > MAX_HEADER_LEN {
        return Err(format!(
            "the header claims {header_len} bytes, over the limit of {MAX_HEADER_LEN}"
        ));
    }
    if data_offset > len {
        return Err(ended("header"));
    }
    let mut dict = vec![0u8; header_len];
    reader.read_exact(&mut dict).map_err(|_| ended("header"))?;
    // Versions 1.0 and 2.0 are latin-1 and 3.0 is UTF-8; a valid dict is ASCII in all.
    let fields = DictParser::new(&dict).parse()?;
    Ok(Header {
        descr: fields.descr,
        fortran_order: fields.fortran_order,
        shape: fields.shape,
        data_offset,
    })
}

/// Reads `shape`'s elements, whose byte count the caller has checked against the file, into
/// a buffer allocated fallibly; `io_error` names the file for a failed read.
fn read_data<T: bytemuck::Pod, R: Read>(
    reader: &mut R,
    shape: &[usize],
    fortran_order: bool,
    io_error: impl FnOnce(io::Error) -> Error,
) -> Result<ArrayD<T>> {
    let count: usize = shape.iter().product();
    let mut data = crate::alloc::try_zeroed_vec::<T>("an input array", count)?;
    reader.read_exact(bytemuck::cast_slice_mut(&mut data)).map_err(io_error)?;
    if cfg!(target_endian = "big") {
        for element in bytemuck::cast_slice_mut::<T, u8>(&mut data).chunks_exact_mut(size_of::<T>())
        {
            element.reverse();
        }
    }
    const CHECKED: &str = "the caller checked the shape against the data and isize";
    Ok(if fortran_order {
        let array = ArrayD::from_shape_vec(IxDyn(shape).f(), data).expect(CHECKED);
        array.as_standard_layout().into_owned()
    } else {
        ArrayD::from_shape_vec(IxDyn(shape), data).expect(CHECKED)
    })
}

/// The header dict's fields.
struct Fields {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// A parser for the one Python literal a `.npy` header holds: a dict with exactly the keys
/// `descr` (a string), `fortran_order` (a bool) and `shape` (a tuple of ints), in any
/// order, with Python's optional whitespace and trailing commas.
struct DictParser<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> DictParser<'a> {
    fn new(text: &'a [u8]) -> Self {
        Self { text, at: 0 }
    }

    fn fail<T>(&self, what: &str) -> std::result::Result<T, String> {
        let found = match self.text.get(self.at) {
            Some(b) if b.is_ascii_graphic() => format!("{:?}", char::from(*b)),
            Some(b) => format!("byte 0x{b:02x}"),
            None => "the end".into(),
        };
        Err(format!("header dict: expected {what} at byte {}, found {found}", self.at))
    }

    fn skip_space(&mut self) {
        while self.text.get(self.at).is_some_and(|b| b.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    /// Skips whitespace, then consumes `byte` if it comes next.
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_space();
        if self.text.get(self.at) == Some(&byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, byte: u8) -> std::result::Result<(), String> {
        if self.eat(byte) { Ok(()) } else { self.fail(&format!("{:?}", char::from(byte))) }
    }

    fn parse(mut self) -> std::result::Result<Fields, String> {
        self.expect(b'{')?;
        let (mut descr, mut fortran_order, mut shape) = (None, None, None);
        while !self.eat(b'}') {
            let key = self.string()?;
            if !["descr", "fortran_order", "shape"].contains(&key.as_str()) {
                return Err(format!("header dict: unexpected key {key:?}"));
            }
            self.expect(b':')?;
            let duplicate = match key.as_str() {
                "descr" => descr.replace(self.descr()?).is_some(),
                "fortran_order" => fortran_order.replace(self.bool(&key)?).is_some(),
                _ => shape.replace(self.shape()?).is_some(),
            };
            if duplicate {
                return Err(format!("header dict: key {key:?} appears twice"));
            }
            if !self.eat(b',') {
                self.expect(b'}')?;
                break;
            }
        }
        self.skip_space();
        if self.at != self.text.len() {
            return self.fail("only whitespace after the dict");
        }
        let missing = |key: &str| format!("header dict: key {key:?} is missing");
        Ok(Fields {
            descr: descr.ok_or_else(|| missing("descr"))?,
            fortran_order: fortran_order.ok_or_else(|| missing("fortran_order"))?,
            shape: shape.ok_or_else(|| missing("shape"))?,
        })
    }

    /// A quoted string without escapes (no valid header needs them).
    fn string(&mut self) -> std::result::Result<String, String> {
        self.skip_space();
        let quote = match self.text.get(self.at) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return self.fail("a quoted string"),
        };
        let start = self.at + 1;
        let Some(end) = self.text[start..].iter().position(|&b| b == quote) else {
            return Err("header dict: a string is not closed".into());
        };
        let body = &self.text[start..start + end];
        if body.iter().any(|&b| b == b'\\' || !b.is_ascii() || b.is_ascii_control()) {
            return Err("header dict: a string holds escapes or non-ASCII bytes".into());
        }
        self.at = start + end + 1;
        Ok(String::from_utf8_lossy(body).into_owned())
    }

    /// `descr`'s value: a dtype string. A list is a structured dtype, named as such.
    fn descr(&mut self) -> std::result::Result<String, String> {
        self.skip_space();
        match self.text.get(self.at) {
            Some(b'\'' | b'"') => self.string(),
            Some(b'[') => Err(format!(
                "header dict: \"descr\" is {}, a structured dtype: structured dtypes are not \
                 supported",
                self.shown_value()
            )),
            _ => self.wrong_value("descr", "a string such as '<f4'"),
        }
    }

    /// `fortran_order`'s value: `True` or `False`.
    fn bool(&mut self, key: &str) -> std::result::Result<bool, String> {
        self.skip_space();
        for (word, value) in [(&b"True"[..], true), (b"False", false)] {
            let end = self.at + word.len();
            let rest = self.text.get(end).copied().unwrap_or(b' ');
            if self.text[self.at..].starts_with(word) && !rest.is_ascii_alphanumeric() {
                self.at = end;
                return Ok(value);
            }
        }
        self.wrong_value(key, "True or False")
    }

    /// `shape`'s value: a tuple of dimensions (a list, as some writers put, is named).
    fn shape(&mut self) -> std::result::Result<Vec<usize>, String> {
        self.skip_space();
        if self.text.get(self.at) == Some(&b'(') {
            return self.tuple();
        }
        self.wrong_value("shape", "a tuple of dimensions such as (2, 5)")
    }

    /// The error for `key`'s value, which is not `what`, showing that value.
    fn wrong_value<T>(&self, key: &str, what: &str) -> std::result::Result<T, String> {
        Err(format!("header dict: {key:?} must be {what}, found {}", self.shown_value()))
    }

    /// The value that starts here, as it is written, up to the `,` or `}` that ends it
    /// outside brackets and quotes; at most 40 bytes shown, others than printable ASCII
    /// escaped.
    fn shown_value(&self) -> String {
        const SHOWN: usize = 40;
        let (mut depth, mut quote, mut end) = (0usize, None, self.at);
        while let Some(&b) = self.text.get(end) {
            match (quote, b) {
                (Some(q), _) if b == q => quote = None,
                (Some(_), _) => {}
                (None, b'\'' | b'"') => quote = Some(b),
                (None, b'(' | b'[' | b'{') => depth += 1,
                (None, b')' | b']' | b'}') if depth == 0 => break,
                (None, b')' | b']' | b'}') => depth -= 1,
                (None, b',') if depth == 0 => break,
                _ => {}
            }
            end += 1;
        }
        let raw = self.text[self.at..end].trim_ascii_end();
        if raw.is_empty() {
            return "nothing".into();
        }
        let mut shown: String = raw[..raw.len().min(SHOWN)]
            .iter()
            .map(|&b| match b {
                b' ' | b'!'..=b'~' => char::from(b).to_string(),
                _ => format!("\\x{b:02x}"),
            })
            .collect();
        if raw.len() > SHOWN {
            shown.push_str("...");
        }
        shown
    }

    fn tuple(&mut self) -> std::result::Result<Vec<usize>, String> {
        self.expect(b'(')?;
        let mut items = Vec::new();
        while !self.eat(b')') {
            items.push(self.int()?);
            if !self.eat(b',') {
                self.expect(b')')?;
                break;
            }
        }
        Ok(items)
    }

    /// A non-negative int, with the `L` suffix Python 2 wrote for longs.
    fn int(&mut self) -> std::result::Result<usize, String> {
        self.skip_space();
        let start = self.at;
        while self.text.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        if self.at == start {
            return self.fail("a dimension (a non-negative integer)");
        }
        let digits = std::str::from_utf8(&self.text[start..self.at]).expect("ASCII digits");
        let value = digits
            .parse::<usize>()
            .map_err(|_| format!("header dict: dimension {digits} is too large"))?;
        if self.text.get(self.at) == Some(&b'L') {
            self.at += 1;
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array2, array};

    const ANY: Expected<'static> =
        Expected { what: "test", dtypes: &NpyDtype::ALL, ranks: &[0, 1, 2, 3, 4] };

    /// Other layouts are written in C order, in pieces: a broadcast view of 2^40 values (4
    /// TiB, one value behind it) reaches its writer's error after a piece, where a copy to
    /// standard layout would have asked for all of it first.
    #[test]
    fn views_of_other_layouts_are_written_in_c_order_without_a_copy() {
        let a = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
        let (mut t, mut c) = (Vec::new(), Vec::new());
        write(&mut t, a.t()).unwrap();
        write(&mut c, a.t().as_standard_layout().view()).unwrap();
        assert_eq!(t, c);
        struct Full(usize);
        impl Write for Full {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                if self.0 + b.len() > 1 << 20 {
                    return Err(io::Error::other("full"));
                }
                self.0 += b.len();
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let one = [7.0f32];
        let one = ndarray::ArrayView1::from(&one[..]);
        let huge = one.broadcast((1 << 20, 1 << 20)).unwrap();
        let mut full = Full(0);
        assert_eq!(write(&mut full, huge).unwrap_err().to_string(), "full");
        assert!(full.0 <= 1 << 20);
    }

    fn dict(header: &[u8]) -> &str {
        std::str::from_utf8(&header[PREAMBLE_LEN..]).unwrap()
    }

    fn parse(bytes: &[u8], expected: &Expected<'_>) -> Result<NpyArray> {
        read_from(bytes, bytes.len() as u64, Path::new("t.npy"), expected)
    }

    /// A file with `dict` as its header, written as version `major`.0, then `data`.
    fn file(major: u8, dict: &str, data: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[major, 0]);
        if major == 1 {
            out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(dict.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(dict.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn format_reason(result: Result<NpyArray>) -> String {
        match result {
            Err(Error::Format { path, format, reason }) => {
                assert_eq!(path, Path::new("t.npy"));
                assert_eq!(format, ".npy");
                reason
            }
            other => panic!("expected a format error, got {other:?}"),
        }
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
            let h = header::<f32>(&shape).unwrap();
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
        assert!(dict(&header::<bf16>(&[2]).unwrap()).starts_with("{'descr': '<u2'"));
    }

    #[test]
    fn data_follows_the_header_in_c_order_little_endian() {
        let a = array![[1.0f32, -2.5, 3.0], [0.1, 5.0, 6.0]];
        let mut bytes = Vec::new();
        write(&mut bytes, a.t()).unwrap();
        let h = header::<f32>(&[3, 2]).unwrap();
        assert_eq!(&bytes[..h.len()], h.as_slice());
        let values: Vec<f32> = bytes[h.len()..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(values, [1.0, 0.1, -2.5, 5.0, 3.0, 6.0]);
    }

    #[test]
    fn every_written_type_reads_back() {
        fn round_trip<T: Element>(a: Array2<T>) -> NpyArray {
            let mut bytes = Vec::new();
            write(&mut bytes, a.view()).unwrap();
            parse(&bytes, &ANY).unwrap()
        }
        let f = array![[1.5f32, -0.0], [f32::INFINITY, 7.0]];
        assert_eq!(round_trip(f.clone()), NpyArray::F32(f.into_dyn()));
        let d = array![[0.1f64, -f64::MIN_POSITIVE], [f64::MAX, 1.0 / 3.0]];
        assert_eq!(round_trip(d.clone()), NpyArray::F64(d.into_dyn()));
        let h = array![[f16::from_f32(0.5), f16::NEG_INFINITY]];
        assert_eq!(round_trip(h.clone()), NpyArray::F16(h.into_dyn()));
        // bfloat16 goes out as '<u2' and comes back as its raw bits.
        let b = array![[bf16::from_f32(-1.5), bf16::from_f32(3.0e38)]];
        let bits = b.mapv(bf16::to_bits);
        assert_eq!(round_trip(b), NpyArray::U16(bits.into_dyn()));
        let i = array![[i32::MIN, -1, 0, i32::MAX]];
        assert_eq!(round_trip(i.clone()), NpyArray::I32(i.into_dyn()));
        let l = array![[i64::MIN], [i64::MAX]];
        assert_eq!(round_trip(l.clone()), NpyArray::I64(l.into_dyn()));
        let u = Array2::from_shape_fn((0, 3), |(r, c)| (r + c) as u32);
        assert_eq!(round_trip(u.clone()), NpyArray::U32(u.into_dyn()));
    }

    #[test]
    fn versions_2_and_3_double_quotes_python2_longs_and_odd_spacing_parse() {
        let data: Vec<u8> = [1u32, 2, 3, 4, 5, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
        for (major, d) in [
            (2, "{'descr': '<u4', 'fortran_order': False, 'shape': (2, 3), }\n"),
            (3, "{\"shape\":(2,3),\"descr\":\"|u4\",\"fortran_order\":False}"),
            (1, "{ 'descr' : '<u4' ,\n'fortran_order':False,'shape':( 2L , 3L , ) , }   \n"),
        ] {
            let got = parse(&file(major, d, &data), &ANY).unwrap();
            assert_eq!(got, NpyArray::U32(array![[1u32, 2, 3], [4, 5, 6]].into_dyn()), "{d}");
        }
    }

    #[test]
    fn fortran_order_comes_back_in_c_order() {
        // Column-major [[1, 2, 3], [4, 5, 6]] stores 1, 4, 2, 5, 3, 6.
        let data: Vec<u8> = [1i32, 4, 2, 5, 3, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
        let d = "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }";
        match parse(&file(1, d, &data), &ANY).unwrap() {
            NpyArray::I32(a) => {
                assert_eq!(a, array![[1, 2, 3], [4, 5, 6]].into_dyn());
                assert!(a.is_standard_layout());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn truncated_files_are_format_errors() {
        let mut good = Vec::new();
        write(&mut good, array![[1.0f32, 2.0]].view()).unwrap();
        for cut in [0, 3, 6, 9, 20, good.len() - 1] {
            let reason = format_reason(parse(&good[..cut], &ANY));
            assert!(reason.contains("ended") || reason.contains("needs"), "{cut}: {reason}");
        }
        // A reader that holds fewer bytes than its stated length.
        let short = read_from(&good[..good.len() - 2], good.len() as u64, Path::new("t.npy"), &ANY);
        assert!(format_reason(short).contains("ended early"));
    }

    #[test]
    fn wrong_magic_and_versions_are_named() {
        let mut bad = Vec::new();
        write(&mut bad, array![1u32].view()).unwrap();
        bad[1] = b'X';
        assert!(format_reason(parse(&bad, &ANY)).contains("magic"));
        let d = "{'descr': '<u4', 'fortran_order': False, 'shape': (), }";
        let mut v4 = file(1, d, &[0; 4]);
        v4[6] = 4;
        assert!(format_reason(parse(&v4, &ANY)).contains("version 4.0"));
    }

    #[test]
    fn huge_header_lengths_and_shapes_allocate_nothing() {
        let mut huge_header = MAGIC.to_vec();
        huge_header.extend_from_slice(&[2, 0]);
        huge_header.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(format_reason(parse(&huge_header, &ANY)).contains("over the limit"));

        let d = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }";
        assert!(format_reason(parse(&file(1, d, &[0; 8]), &ANY)).contains("more bytes than any"));
        let d = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000000), }";
        let reason = format_reason(parse(&file(1, d, &[0; 8]), &ANY));
        assert!(reason.contains("needs 4000000000000000 bytes, but 8 bytes"), "{reason}");
        let d = "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }";
        assert!(format_reason(parse(&file(1, d, &[]), &ANY)).contains("too large"));
        // No data at all, but ndarray could not index the axes.
        let d = "{'descr': '<u4', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4), }";
        assert!(format_reason(parse(&file(1, d, &[]), &ANY)).contains("too large for an array"));
        // Empty, with other axes whose product overflows: named as too large for an array,
        // not as needing more bytes than a file holds (it needs none).
        let shape = "(4294967296, 4294967296, 0, 128)";
        let d = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
        let reason = format_reason(parse(&file(1, &d, &[]), &ANY));
        assert!(reason.contains("too large for an array"), "{reason}");
    }

    #[test]
    fn data_length_must_match_the_shape_exactly() {
        let d = "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }";
        for n in [8, 15, 17, 24] {
            let reason = format_reason(parse(&file(1, d, &vec![0; n]), &ANY));
            assert!(reason.contains(&format!("needs 16 bytes, but {n} bytes")), "{reason}");
        }
        assert!(parse(&file(1, d, &[0; 16]), &ANY).is_ok());
    }

    #[test]
    fn malformed_dicts_are_format_errors() {
        for (d, needle) in [
            ("", "expected '{'"),
            ("{'descr': '<f4', 'shape': (1,), }", "\"fortran_order\" is missing"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", "unexpected key"),
            ("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", "twice"),
            ("{'descr': 4, 'fortran_order': False, 'shape': (1,)}", "\"descr\" must be a string"),
            ("{'descr': '<f4', 'fortran_order': 'no', 'shape': (1,)}", "True or False, found 'no'"),
            ("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", "True or False, found 0"),
            ("{'descr': '<f4', 'fortran_order': Falsey, 'shape': (1,)}", "found Falsey"),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 5]}",
                "\"shape\" must be a tuple of dimensions such as (2, 5), found [2, 5]",
            ),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 5], }", "found [2, 5]"),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': 10}",
                "a tuple of dimensions such as (2, 5), found 10",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': }",
                "a tuple of dimensions such as (2, 5), found nothing",
            ),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': {'a': (1,)}}", "found {'a': (1,)}"),
            (
                "{'shape': (1,), 'fortran_order': False, 'descr': None}",
                "\"descr\" must be a string such as '<f4', found None",
            ),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", "non-negative"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", "only whitespace"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", "expected '}'"),
            ("{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}", "expected '}' at byte 17"),
            ("{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}", "expected ':'"),
            (
                "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}",
                "[('a', '<f4')], a structured dtype: structured dtypes are not supported",
            ),
            ("{'descr': '<f\\4', 'fortran_order': False, 'shape': (1,)}", "escapes"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (1 }", "expected ')'"),
            ("{'descr\x00': '<f4'}", "escapes or non-ASCII"),
        ] {
            let reason = format_reason(parse(&file(1, d, &[0; 4]), &ANY));
            assert!(reason.contains(needle), "{d:?}: {reason}");
        }
    }

    #[test]
    fn dtypes_outside_the_expected_set_are_dtype_errors() {
        let ids = Expected { what: "ids", dtypes: &[NpyDtype::I32, NpyDtype::I64], ranks: &[1] };
        for (descr, shown) in [
            ("<f8", "'<f8'"),
            (">i4", "'>i4' (big-endian)"),
            ("<u4", "'<u4'"),
            ("=i4", "'=i4'"),
            ("|b1", "'|b1'"),
        ] {
            let d = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (1,), }}");
            match parse(&file(1, &d, &[0; 4]), &ids) {
                Err(Error::Dtype { what, dtype, allowed, .. }) => {
                    assert_eq!(what, "ids");
                    assert_eq!(dtype, shown);
                    assert_eq!(allowed, "'<i4' or '<i8'");
                }
                other => panic!("{descr}: {other:?}"),
            }
        }
    }

    #[test]
    fn ranks_outside_the_expected_set_are_rank_errors_naming_the_shape() {
        let mut bytes = Vec::new();
        write(&mut bytes, ndarray::Array3::<u32>::zeros((2, 3, 4)).view()).unwrap();
        let positions = Expected { what: "positions", dtypes: &[NpyDtype::U32], ranks: &[1, 2] };
        let err = parse(&bytes, &positions).unwrap_err();
        assert!(matches!(&err, Error::Rank { expected, actual, .. }
            if expected == &[1, 2] && actual == &[2, 3, 4]));
        assert_eq!(err.to_string(), "t.npy: positions must have rank 1 or 2, got shape (2, 3, 4)");
    }

    proptest::proptest! {
        /// Damaged files (bytes overwritten, the end cut off) give an array or an error,
        /// never a panic, and never an array whose size disagrees with the file.
        #[test]
        fn damaged_files_never_panic(
            edits in proptest::collection::vec((0usize..200, proptest::num::u8::ANY), 0..6),
            cut in 0usize..300,
            major in 1u8..=3,
        ) {
            let d = "{'descr': '<i8', 'fortran_order': False, 'shape': (3, 2), }";
            let data: Vec<u8> = (0..48).collect();
            let mut bytes = file(major, d, &data);
            for (at, byte) in edits {
                if let Some(b) = bytes.get_mut(at) {
                    *b = byte;
                }
            }
            bytes.truncate(cut);
            if let Ok(array) = parse(&bytes, &ANY) {
                let elements: usize = array.shape().iter().product();
                proptest::prop_assert!(elements * array.dtype().size() < bytes.len());
            }
        }
    }

    #[test]
    fn a_missing_file_is_an_io_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.npy");
        assert!(matches!(read(&path, &ANY), Err(Error::Io { path: p, .. }) if p == path));
    }
}
