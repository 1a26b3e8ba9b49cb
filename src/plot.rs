//! Pictures of positional encodings, as PNG images: the table as a heatmap, the cosine
//! similarity between positions, and posenc's error against the naive float32 formula; and
//! of `posenc bench` results, as a bar chart of throughput against ceilings.
//!
//! Everything is drawn here, pixel by pixel, into an RGB [`Image`] (axis labels with a
//! built-in bitmap font, so no system fonts are needed) and encoded with the `png` crate.
//! The functions take ready data (a table, a similarity matrix, an [`ErrorCurve`]) rather
//! than a variant or a spec, so any table can be pictured. Where each cell or point lands is
//! public ([`MatrixLayout`], [`ErrorLayout`], [`BarLayout`]), so tests can read the data back
//! from pixels.
//!
//! ```
//! use posenc::{PeSpec, cpu, plot};
//!
//! let spec = PeSpec::new(64)?;
//! let table = cpu::table(&spec, &(0..20).collect::<Vec<u32>>());
//! let image = plot::heatmap(table.view(), "d = 64")?;
//! let layout = plot::heatmap_layout(20, 64)?;
//! // PE(0, 1) = cos(0) = 1: the cell of position 0, column 1 has the colour of 1.0.
//! let (x, y) = layout.cell_centre(0, 1).unwrap();
//! assert_eq!(image.pixel(x, y), Some(plot::diverging(1.0)));
//! let mut png = Vec::new();
//! image.write_png(&mut png)?;
//! assert_eq!(&png[1..4], b"PNG");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod font;

use std::io::{self, Write};

use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::spec::PeSpec;
use crate::{cpu, naive, reference};

/// The most rows or columns a matrix picture may have: every cell gets at least one pixel,
/// and a picture more than 4096 cells across is no longer something to look at.
pub const MAX_CELLS: usize = 4096;

/// An sRGB colour.
pub type Rgb = [u8; 3];

/// The colour of [`error_plot`]'s posenc curve.
pub const POSENC_COLOUR: Rgb = [31, 89, 201];
/// The colour of [`error_plot`]'s naive float32 curve.
pub const NAIVE_COLOUR: Rgb = [226, 110, 18];
/// What [`diverging`] gives for NaN.
pub const NAN_COLOUR: Rgb = [128, 128, 128];

const WHITE: Rgb = [255, 255, 255];
const BLACK: Rgb = [0, 0, 0];
const GRID: Rgb = [222, 222, 222];
const MUTED: Rgb = [110, 110, 110];

/// The diverging map's anchors at -1, -0.5, 0, 0.5 and 1: deep blue through near-white to
/// deep red, so the sign reads at a glance and 0 is the background.
const DIVERGING: [Rgb; 5] =
    [[38, 62, 150], [122, 160, 218], [246, 246, 246], [228, 138, 108], [158, 20, 42]];

/// Screen pixels per font pixel.
const TEXT_SCALE: u32 = 2;
/// Height of a line of text, descenders included.
const LINE_H: u32 = font::HEIGHT * TEXT_SCALE;
/// Height of capitals and digits, for centring labels on a tick.
const CAP_H: u32 = 7 * TEXT_SCALE;
/// Space around the figure and between its parts.
const PAD: u32 = 12;
/// Length of a tick mark.
const TICK: u32 = 5;
/// The narrowest figure: small matrices are centred in it, and titles fit.
const MIN_WIDTH: u32 = 720;

/// The diverging colour map of the heatmap and the similarity plot: -1 is deep blue, 0 is
/// near-white, 1 is deep red, linear in between. Values outside [-1, 1] get the colour of
/// the nearer end; NaN is [`NAN_COLOUR`].
///
/// ```
/// use posenc::plot::diverging;
/// assert_eq!(diverging(2.0), diverging(1.0));
/// assert_ne!(diverging(1.0), diverging(-1.0));
/// ```
pub fn diverging(value: f32) -> Rgb {
    if value.is_nan() {
        return NAN_COLOUR;
    }
    let t = (value.clamp(-1.0, 1.0) + 1.0) * 2.0;
    let k = (t as usize).min(3);
    let frac = t - k as f32;
    let (a, b) = (DIVERGING[k], DIVERGING[k + 1]);
    std::array::from_fn(|c| {
        (f32::from(a[c]) + (f32::from(b[c]) - f32::from(a[c])) * frac).round() as u8
    })
}

/// An RGB picture, 8 bits per channel, row-major from the top-left corner.
#[derive(Clone, PartialEq, Eq)]
pub struct Image {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Image({} x {})", self.width, self.height)
    }
}

impl Image {
    /// A white picture. The layouts keep sizes far below anything that could overflow.
    fn new(width: u32, height: u32) -> Self {
        Self { width, height, rgb: WHITE.repeat(width as usize * height as usize) }
    }

    /// A white picture whose size comes from the caller's data: the allocator's refusal is
    /// an error rather than an abort.
    fn try_new(width: u32, height: u32) -> Result<Self> {
        let pixels = width as usize * height as usize;
        let mut rgb: Vec<u8> = crate::alloc::try_zeroed_vec("the picture", pixels * 3)?;
        for pixel in rgb.chunks_exact_mut(3) {
            pixel.copy_from_slice(&WHITE);
        }
        Ok(Self { width, height, rgb })
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The colour at column `x`, row `y` (from the top-left), or `None` outside the picture.
    pub fn pixel(&self, x: u32, y: u32) -> Option<Rgb> {
        if x >= self.width || y >= self.height {
            return None;
        }
        let i = 3 * (y as usize * self.width as usize + x as usize);
        Some([self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]])
    }

    /// The pixels, three bytes (R, G, B) each, row-major from the top-left.
    pub fn as_rgb(&self) -> &[u8] {
        &self.rgb
    }

    /// Writes the picture as an 8-bit RGB PNG.
    ///
    /// # Errors
    /// What writing to `w` returns; an encoder failure as [`io::ErrorKind::Other`].
    pub fn write_png(&self, w: impl Write) -> io::Result<()> {
        let to_io = |e: png::EncodingError| match e {
            png::EncodingError::IoError(e) => e,
            other => io::Error::other(other),
        };
        let mut encoder = png::Encoder::new(w, self.width, self.height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(to_io)?;
        writer.write_image_data(&self.rgb).map_err(to_io)?;
        writer.finish().map_err(to_io)
    }

    fn put(&mut self, x: i64, y: i64, colour: Rgb) {
        if (0..i64::from(self.width)).contains(&x) && (0..i64::from(self.height)).contains(&y) {
            let i = 3 * (y as usize * self.width as usize + x as usize);
            self.rgb[i..i + 3].copy_from_slice(&colour);
        }
    }

    /// Fills a rectangle, clipped to the picture.
    fn fill(&mut self, x: i64, y: i64, w: u32, h: u32, colour: Rgb) {
        for yy in y..y + i64::from(h) {
            for xx in x..x + i64::from(w) {
                self.put(xx, yy, colour);
            }
        }
    }

    /// A one-pixel frame just outside the rectangle `x, y, w, h`.
    fn frame(&mut self, x: u32, y: u32, w: u32, h: u32, colour: Rgb) {
        let (x, y) = (i64::from(x), i64::from(y));
        self.fill(x - 1, y - 1, w + 2, 1, colour);
        self.fill(x - 1, y + i64::from(h), w + 2, 1, colour);
        self.fill(x - 1, y, 1, h, colour);
        self.fill(x + i64::from(w), y, 1, h, colour);
    }

    /// A line two pixels thick between two points, by Bresenham's walk between the pixels
    /// nearest to them.
    fn line(&mut self, from: (f64, f64), to: (f64, f64), colour: Rgb) {
        let (mut x, mut y) = (from.0.round() as i64, from.1.round() as i64);
        let (x1, y1) = (to.0.round() as i64, to.1.round() as i64);
        let (dx, dy) = ((x1 - x).abs(), -(y1 - y).abs());
        let (sx, sy) = ((x1 - x).signum(), (y1 - y).signum());
        let mut err = dx + dy;
        loop {
            self.fill(x, y, 2, 2, colour);
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// Draws `text` with the top of its capitals at `y`, aligned on `x` as `align` says.
    fn text(&mut self, x: i64, y: i64, text: &str, align: Align, colour: Rgb) {
        let width = i64::from(text_width(text));
        let left = match align {
            Align::Left => x,
            Align::Centre => x - width / 2,
            Align::Right => x - width,
        };
        self.glyphs(text, colour, |gx, gy| (left + gx, y + gy));
    }

    /// Draws `text` turned a quarter left (read from bottom to top), centred vertically on
    /// `y_centre`, the top of its capitals at column `x`.
    fn text_up(&mut self, x: i64, y_centre: i64, text: &str, colour: Rgb) {
        let bottom = y_centre + i64::from(text_width(text)) / 2;
        self.glyphs(text, colour, |gx, gy| (x + gy, bottom - gx));
    }

    /// Sets the pixels of `text`'s glyphs, `place` mapping a position in the unrotated text
    /// (screen pixels from its top-left) to the picture.
    fn glyphs(&mut self, text: &str, colour: Rgb, place: impl Fn(i64, i64) -> (i64, i64)) {
        let scale = i64::from(TEXT_SCALE);
        for (k, c) in text.chars().enumerate() {
            let origin = k as i64 * i64::from(font::ADVANCE) * scale;
            for (row, bits) in font::glyph(c).iter().enumerate() {
                for col in 0..font::WIDTH {
                    if bits >> (font::WIDTH - 1 - col) & 1 == 0 {
                        continue;
                    }
                    for (sx, sy) in (0..scale).flat_map(|sx| (0..scale).map(move |sy| (sx, sy))) {
                        let (px, py) =
                            place(origin + i64::from(col) * scale + sx, row as i64 * scale + sy);
                        self.put(px, py, colour);
                    }
                }
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Align {
    Left,
    Centre,
    Right,
}

/// Width in pixels of `text` drawn at [`TEXT_SCALE`].
fn text_width(text: &str) -> u32 {
    font::text_width(text) * TEXT_SCALE
}

/// `text`, shortened with `...` to fit `width` pixels.
fn fit(text: &str, width: u32) -> String {
    if text_width(text) <= width {
        return text.to_string();
    }
    let keep = (width / (font::ADVANCE * TEXT_SCALE)).saturating_sub(3) as usize;
    text.chars().take(keep).chain("...".chars()).collect()
}

/// Where a matrix picture ([`heatmap`], [`similarity`]) puts each cell: row `r` of the data
/// is the `r`-th band from the top, column `c` the `c`-th from the left, each cell a
/// rectangle of whole pixels. A colour bar from -1 (bottom) to 1 (top) stands to the right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixLayout {
    rows: usize,
    cols: usize,
    cell_w: u32,
    cell_h: u32,
    plot_x: u32,
    plot_y: u32,
    bar_x: u32,
    bar_h: u32,
    /// Left edge of the content (past [`PAD`]), where the turned y-axis title goes.
    left: u32,
    width: u32,
    height: u32,
}

/// Width of the colour bar.
const BAR_W: u32 = 20;
/// Gap between the matrix and the colour bar, wide enough for the last x tick label.
const BAR_GAP: u32 = 40;
/// The shortest colour bar, so its five labels never crowd.
const MIN_BAR_H: u32 = 200;
/// The colour bar's labelled values.
const BAR_TICKS: [(f32, &str); 5] =
    [(1.0, "1"), (0.5, "0.5"), (0.0, "0"), (-0.5, "-0.5"), (-1.0, "-1")];

impl MatrixLayout {
    /// Lays out `rows x cols` cells of `cell_w x cell_h` pixels.
    fn new(rows: usize, cols: usize, cell_w: u32, cell_h: u32) -> Self {
        let plot_w = cols as u32 * cell_w;
        let plot_h = rows as u32 * cell_h;
        let bar_h = plot_h.max(MIN_BAR_H);
        let y_labels = text_width(&(rows - 1).to_string());
        let bar_labels = BAR_TICKS.iter().map(|(_, l)| text_width(l)).max().unwrap_or(0);
        // Left to right: axis title (turned), tick labels, ticks, matrix, gap, bar, labels.
        let plot_x = PAD + LINE_H + PAD + y_labels + 4 + TICK;
        let content_w = plot_x + plot_w + BAR_GAP + BAR_W + TICK + 4 + bar_labels + PAD;
        let shift = MIN_WIDTH.saturating_sub(content_w) / 2;
        let plot_y = PAD + LINE_H + PAD;
        // Below the matrix: ticks, tick labels, axis title.
        let height = plot_y + plot_h.max(bar_h) + TICK + 4 + LINE_H + 8 + LINE_H + PAD;
        Self {
            rows,
            cols,
            cell_w,
            cell_h,
            plot_x: plot_x + shift,
            plot_y,
            bar_x: plot_x + shift + plot_w + BAR_GAP,
            bar_h,
            left: PAD + shift,
            width: content_w.max(MIN_WIDTH),
            height,
        }
    }

    /// Rows of cells (of the data).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of cells (of the data).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Width of the whole picture in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height of the whole picture in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The size of one cell in pixels, `(width, height)`.
    pub fn cell_size(&self) -> (u32, u32) {
        (self.cell_w, self.cell_h)
    }

    /// The top-left pixel of the cell of data row `row`, column `col`, or `None` if there is
    /// no such cell.
    pub fn cell_origin(&self, row: usize, col: usize) -> Option<(u32, u32)> {
        (row < self.rows && col < self.cols).then(|| {
            (self.plot_x + col as u32 * self.cell_w, self.plot_y + row as u32 * self.cell_h)
        })
    }

    /// The pixel at the centre of the cell of data row `row`, column `col` (the upper-left
    /// of the two or four central pixels when a side is even), or `None` if there is no such
    /// cell.
    pub fn cell_centre(&self, row: usize, col: usize) -> Option<(u32, u32)> {
        self.cell_origin(row, col)
            .map(|(x, y)| (x + (self.cell_w - 1) / 2, y + (self.cell_h - 1) / 2))
    }

    fn plot_w(&self) -> u32 {
        self.cols as u32 * self.cell_w
    }

    fn plot_h(&self) -> u32 {
        self.rows as u32 * self.cell_h
    }

    /// The colour bar's row for `value` in [-1, 1]: 1 on the top row, -1 on the bottom one.
    fn bar_row(&self, value: f32) -> u32 {
        ((1.0 - value) / 2.0 * (self.bar_h - 1) as f32).round() as u32
    }
}

/// The layout [`heatmap`] uses for a `[rows, cols]` table: cells about 768 pixels across in
/// all and 400 down, between 1 and 24 pixels a side.
///
/// # Errors
/// [`Error::Shape`] if `rows` or `cols` is 0; [`Error::Limit`] if either exceeds
/// [`MAX_CELLS`].
pub fn heatmap_layout(rows: usize, cols: usize) -> Result<MatrixLayout> {
    check_cells("plot heatmap", "rows", rows, cols)?;
    Ok(MatrixLayout::new(rows, cols, cell_side(768, cols), cell_side(400, rows)))
}

/// The layout [`similarity`] uses for an `n x n` matrix: square cells, about 480 pixels
/// across in all, between 1 and 24 pixels a side.
///
/// # Errors
/// [`Error::Shape`] if `n` is 0; [`Error::Limit`] if it exceeds [`MAX_CELLS`].
pub fn similarity_layout(n: usize) -> Result<MatrixLayout> {
    check_cells("plot similarity", "positions", n, n)?;
    let side = cell_side(480, n);
    Ok(MatrixLayout::new(n, n, side, side))
}

/// Pixels per cell so that `cells` cells span about `span` pixels.
fn cell_side(span: u32, cells: usize) -> u32 {
    ((f64::from(span) / cells as f64).round() as u32).clamp(1, 24)
}

fn check_cells(op: &'static str, what: &'static str, rows: usize, cols: usize) -> Result<()> {
    if rows == 0 || cols == 0 {
        return Err(Error::Shape {
            op,
            what: "matrix",
            expected: "at least one row and one column".into(),
            actual: format!("{:?}", (rows, cols)),
        });
    }
    for (what, n) in [(what, rows), ("columns", cols)] {
        if n > MAX_CELLS {
            return Err(Error::Limit {
                op,
                what,
                requested: n as u64,
                limit_name: "plot::MAX_CELLS",
                limit: MAX_CELLS as u64,
            });
        }
    }
    Ok(())
}

/// The classic picture of a positional-encoding table: one row of cells per position
/// (position 0 at the top), one column per dimension, coloured by [`diverging`] from -1 to
/// 1, with labelled axes, a colour bar and `title` (shortened with `...` if it does not
/// fit). Row `r` is labelled as position `r`: pass the table of positions `0..n`.
///
/// # Errors
/// As [`heatmap_layout`] for the table's shape; [`Error::Alloc`] if the picture's memory
/// cannot be had.
pub fn heatmap(table: ArrayView2<'_, f32>, title: &str) -> Result<Image> {
    let layout = heatmap_layout(table.nrows(), table.ncols())?;
    draw_matrix(table, &layout, title, "dimension", "position")
}

/// The cosine similarity between every pair of rows of `table`, `[n, n]`: for sinusoidal
/// encodings it depends only on the distance between the two positions,
/// `sum_i cos((p - q) w_i) / (d / 2)`. Computed in float64, rounded to float32; exactly
/// symmetric, and 1 on the diagonal. A row of zeros has similarity 0 with every row, itself
/// included.
///
/// The work is `n^2 x d` multiply-adds; callers taking `n` and `d` from users should bound
/// them.
///
/// ```
/// let spec = posenc::PeSpec::new(64)?;
/// let table = posenc::cpu::table(&spec, &[0, 1, 2, 3]);
/// let s = posenc::plot::similarity_matrix(table.view());
/// assert_eq!(s[[2, 2]], 1.0);
/// assert!((s[[0, 1]] - s[[2, 3]]).abs() < 1e-6);
/// # Ok::<(), posenc::Error>(())
/// ```
pub fn similarity_matrix(table: ArrayView2<'_, f32>) -> Array2<f32> {
    let n = table.nrows();
    let table = table.as_standard_layout();
    let row = |i: usize| table.row(i).to_slice().expect("a standard-layout row is contiguous");
    let norms: Vec<f64> = (0..n).into_par_iter().map(|i| dot(row(i), row(i)).sqrt()).collect();
    let mut out = Array2::<f32>::zeros((n, n));
    let Some(flat) = out.as_slice_mut() else { return out };
    // The upper triangle, then its mirror: half the work, and exactly symmetric.
    flat.par_chunks_mut(n.max(1)).enumerate().for_each(|(i, out_row)| {
        for (j, v) in out_row.iter_mut().enumerate().skip(i) {
            let denominator = norms[i] * norms[j];
            *v = if denominator > 0.0 { (dot(row(i), row(j)) / denominator) as f32 } else { 0.0 };
        }
    });
    for i in 1..n {
        for j in 0..i {
            flat[i * n + j] = flat[j * n + i];
        }
    }
    out
}

/// The dot product of two rows in float64, with four running sums so that it vectorises.
fn dot(a: &[f32], b: &[f32]) -> f64 {
    let (quads_a, quads_b) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: f64 = quads_a
        .remainder()
        .iter()
        .zip(quads_b.remainder())
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let mut sums = [0f64; 4];
    for (x, y) in quads_a.zip(quads_b) {
        for k in 0..4 {
            sums[k] += f64::from(x[k]) * f64::from(y[k]);
        }
    }
    (sums[0] + sums[1]) + (sums[2] + sums[3]) + tail
}

/// A similarity matrix as a picture: cell `(i, j)` is the similarity of positions `i` and
/// `j`, coloured by [`diverging`] from -1 to 1, so the diagonal has the colour of 1.
///
/// # Errors
/// [`Error::Shape`] if `matrix` is not square or is empty; [`Error::Limit`] if it has more
/// than [`MAX_CELLS`] rows; [`Error::Alloc`] if the picture's memory cannot be had.
pub fn similarity(matrix: ArrayView2<'_, f32>, title: &str) -> Result<Image> {
    let (n, m) = matrix.dim();
    if n != m {
        return Err(Error::Shape {
            op: "plot similarity",
            what: "matrix (must be square)",
            expected: format!("{:?}", (n, n)),
            actual: format!("{:?}", (n, m)),
        });
    }
    let layout = similarity_layout(n)?;
    draw_matrix(matrix, &layout, title, "position j", "position i")
}

fn draw_matrix(
    values: ArrayView2<'_, f32>,
    layout: &MatrixLayout,
    title: &str,
    x_title: &str,
    y_title: &str,
) -> Result<Image> {
    let mut image = Image::try_new(layout.width, layout.height)?;
    let (cw, ch) = (layout.cell_w, layout.cell_h);
    for ((r, c), &v) in values.indexed_iter() {
        let (x, y) = layout.cell_origin(r, c).expect("the layout has the data's shape");
        image.fill(i64::from(x), i64::from(y), cw, ch, diverging(v));
    }
    let (px, py, pw, ph) = (layout.plot_x, layout.plot_y, layout.plot_w(), layout.plot_h());
    image.frame(px, py, pw, ph, BLACK);

    // Ticks at cell centres, every `step` cells, far enough apart for their labels.
    let x_step = tick_step(cw, text_width(&(layout.cols - 1).to_string()) + 2 * PAD);
    let below = i64::from(py + ph);
    for c in (0..layout.cols).step_by(x_step) {
        let x = i64::from(px + c as u32 * cw + (cw - 1) / 2);
        image.fill(x, below + 1, 1, TICK, BLACK);
        image.text(x, below + i64::from(TICK + 4), &c.to_string(), Align::Centre, BLACK);
    }
    let y_step = tick_step(ch, LINE_H + 8);
    for r in (0..layout.rows).step_by(y_step) {
        let y = i64::from(py + r as u32 * ch + (ch - 1) / 2);
        let left = i64::from(px) - 1 - i64::from(TICK);
        image.fill(left, y, TICK, 1, BLACK);
        let top = y - i64::from(CAP_H) / 2;
        image.text(left - 4, top, &r.to_string(), Align::Right, BLACK);
    }

    // Axis titles: y turned, left of its tick labels, centred on the matrix or, beside a
    // matrix shorter than itself, hanging from its top; x centred below the tick labels
    // and below the y title (a wide x title under a narrow matrix reaches that far left).
    // The colour bar is taller than either title, so the layout's height has room.
    let y_extent = ph.max(text_width(y_title));
    image.text_up(i64::from(layout.left), i64::from(py + y_extent / 2), y_title, BLACK);
    let x_title_y = i64::from(py + y_extent + TICK + 4 + LINE_H + 8);
    image.text(i64::from(px + pw / 2), x_title_y, x_title, Align::Centre, BLACK);
    let title = fit(title, layout.width - 2 * PAD);
    image.text(i64::from(layout.width / 2), i64::from(PAD), &title, Align::Centre, BLACK);

    // The colour bar: 1 at the top, -1 at the bottom, labelled at the quarters.
    let (bx, bh) = (layout.bar_x, layout.bar_h);
    for row in 0..bh {
        let value = 1.0 - 2.0 * row as f32 / (bh - 1) as f32;
        image.fill(i64::from(bx), i64::from(py + row), BAR_W, 1, diverging(value));
    }
    image.frame(bx, py, BAR_W, bh, BLACK);
    for (value, label) in BAR_TICKS {
        let y = i64::from(py + layout.bar_row(value));
        let right = i64::from(bx + BAR_W + 1);
        image.fill(right, y, TICK, 1, BLACK);
        let top = y - i64::from(CAP_H) / 2;
        image.text(right + i64::from(TICK + 4), top, label, Align::Left, BLACK);
    }
    Ok(image)
}

/// The smallest of 1, 2, 5, 10, 20, 50, ... cells that spans at least `min_pixels`.
fn tick_step(cell: u32, min_pixels: u32) -> usize {
    let mut decade = 1usize;
    loop {
        for m in [1, 2, 5] {
            if (m * decade) as u64 * u64::from(cell) >= u64::from(min_pixels) {
                return m * decade;
            }
        }
        decade *= 10;
    }
}

/// Samples per octave of position in [`error_positions`].
pub const ERROR_SAMPLES_PER_OCTAVE: u32 = 8;
/// Errors below this are drawn at it on the log axis of [`error_plot`] (an exact zero has
/// no logarithm).
pub const ERROR_FLOOR: f64 = 1e-10;
/// The top of [`error_plot`]'s error axis (errors are at most 2).
const ERROR_CEILING: f64 = 10.0;
/// posenc's documented bound, drawn as a dashed line.
const POSENC_BOUND: f64 = crate::ACCURACY_BOUND;

/// The positions [`error_curve`] samples: `round(2^(k/8))` for `k = 0..=256`, duplicates
/// dropped and `2^32` replaced by 4294967295; log-spaced from 1 to the last u32.
pub fn error_positions() -> Vec<u32> {
    let mut positions: Vec<u32> = (0..=32 * ERROR_SAMPLES_PER_OCTAVE)
        .map(|k| {
            let p = 2f64.powf(f64::from(k) / f64::from(ERROR_SAMPLES_PER_OCTAVE)).round();
            p.min(f64::from(u32::MAX)) as u32
        })
        .collect();
    positions.dedup();
    positions
}

/// Max absolute errors against the high-precision reference ([`reference::table`]), one per
/// position over all `dim` values of its row, for posenc ([`cpu::table()`], the same bits as
/// the GPU) and for the naive float32 formula ([`naive::table`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorCurve {
    /// The model dimension.
    pub dim: u32,
    /// The frequency base.
    pub base: f64,
    /// The positions sampled, increasing.
    pub positions: Vec<u32>,
    /// posenc's max abs error at each position.
    pub posenc: Vec<f64>,
    /// The naive float32 formula's max abs error at each position.
    pub naive: Vec<f64>,
}

/// Measures [`ErrorCurve`] at [`error_positions`]: about 250 rows of the reference table,
/// so a second or less for d = 512 and a few seconds at d = 65536. Memory stays bounded
/// (rows are taken a few at a time).
///
/// ```
/// let curve = posenc::plot::error_curve(&posenc::PeSpec::new(64)?);
/// let last = curve.positions.len() - 1;
/// assert_eq!(curve.positions[last], u32::MAX);
/// assert!(curve.posenc[last] <= posenc::ACCURACY_BOUND && curve.naive[last] > 0.1);
/// # Ok::<(), posenc::Error>(())
/// ```
pub fn error_curve(spec: &PeSpec) -> ErrorCurve {
    let positions = error_positions();
    // About a million values per chunk, whatever the dim.
    let rows = ((1usize << 20) / spec.dim() as usize).max(1);
    let mut posenc = Vec::with_capacity(positions.len());
    let mut naive_err = Vec::with_capacity(positions.len());
    for chunk in positions.chunks(rows) {
        let exact = reference::table(spec, chunk);
        let max_err = |fast: Array2<f32>, into: &mut Vec<f64>| {
            for (f, e) in fast.rows().into_iter().zip(exact.rows()) {
                let worst = f.iter().zip(e).map(|(&v, &x)| (f64::from(v) - x).abs());
                into.push(worst.fold(0.0, f64::max));
            }
        };
        max_err(cpu::table(spec, chunk), &mut posenc);
        max_err(naive::table(spec, chunk), &mut naive_err);
    }
    ErrorCurve { dim: spec.dim(), base: spec.base(), positions, posenc, naive: naive_err }
}

/// Where [`error_plot`] puts a point: position on a log2 axis from 1 to 2^32, error on a
/// log10 axis from [`ERROR_FLOOR`] to 10.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorLayout {
    plot_x: u32,
    plot_y: u32,
    plot_w: u32,
    plot_h: u32,
    width: u32,
    height: u32,
}

impl ErrorLayout {
    /// Width of the whole picture in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height of the whole picture in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The pixel coordinates (x from the left, y from the top, unrounded) of the point
    /// `(position, error)`; errors below [`ERROR_FLOOR`] land on the floor. Positions below
    /// 1 land at 1.
    pub fn point(&self, position: f64, error: f64) -> (f64, f64) {
        let fx = position.max(1.0).log2() / 32.0;
        let (lo, hi) = (ERROR_FLOOR.log10(), ERROR_CEILING.log10());
        let fy = (error.max(ERROR_FLOOR).log10() - lo) / (hi - lo);
        (
            f64::from(self.plot_x) + fx * f64::from(self.plot_w - 1),
            f64::from(self.plot_y) + (1.0 - fy) * f64::from(self.plot_h - 1),
        )
    }
}

/// The layout of [`error_plot`] (it has a fixed size).
pub fn error_layout() -> ErrorLayout {
    let (plot_w, plot_h) = (768, 440);
    let plot_x = PAD + LINE_H + PAD + text_width("1e-10") + 4 + TICK;
    let plot_y = PAD + LINE_H + PAD;
    let height = plot_y + plot_h + TICK + 4 + LINE_H + 8 + LINE_H + PAD;
    // Room on the right for half of the last x label.
    let width = plot_x + plot_w + text_width("2^32") / 2 + PAD;
    ErrorLayout { plot_x, plot_y, plot_w, plot_h, width, height }
}

/// posenc's accuracy story as a picture: max abs error against the high-precision reference
/// as a function of position, log-log, posenc's curve over the naive float32 formula's,
/// with posenc's bound of 6e-8 dashed. Errors below [`ERROR_FLOOR`] are drawn at it (the
/// legend says so).
pub fn error_plot(curve: &ErrorCurve) -> Image {
    let layout = error_layout();
    let mut image = Image::new(layout.width, layout.height);
    let (px, py, pw, ph) = (layout.plot_x, layout.plot_y, layout.plot_w, layout.plot_h);
    let (left, right) = (i64::from(px), i64::from(px + pw));
    let (top, bottom) = (i64::from(py), i64::from(py + ph));

    // Grid and ticks: every 4 octaves of position, every decade of error.
    for octave in (0..=32).step_by(4) {
        let (x, _) = layout.point(2f64.powi(octave), 1.0);
        let x = x.round() as i64;
        image.fill(x, top, 1, ph, GRID);
        image.fill(x, bottom + 1, 1, TICK, BLACK);
        let label = format!("2^{octave}");
        image.text(x, bottom + i64::from(TICK + 4), &label, Align::Centre, BLACK);
    }
    for exponent in ERROR_FLOOR.log10() as i32..=ERROR_CEILING.log10() as i32 {
        let (_, y) = layout.point(1.0, 10f64.powi(exponent));
        let y = y.round() as i64;
        image.fill(left, y, pw, 1, GRID);
        image.fill(left - 1 - i64::from(TICK), y, TICK, 1, BLACK);
        let label = format!("1e{exponent}");
        let text_top = y - i64::from(CAP_H) / 2;
        image.text(left - 1 - i64::from(TICK + 4), text_top, &label, Align::Right, BLACK);
    }
    image.frame(px, py, pw, ph, BLACK);

    // posenc's bound, dashed, labelled at the right end.
    let (_, bound_y) = layout.point(1.0, POSENC_BOUND);
    let bound_y = bound_y.round() as i64;
    for x in (left..right).step_by(12) {
        image.fill(x, bound_y, 6, 1, MUTED);
    }
    let bound_label = format!("{POSENC_BOUND:.0e} bound");
    let label_top = bound_y - i64::from(LINE_H) - 2;
    image.text(right - 8, label_top, &bound_label, Align::Right, MUTED);

    // Legend, top left, where both curves are low, on white so the grid stays out of it;
    // drawn before the curves, so it never hides data.
    let floor_note = format!("errors below {ERROR_FLOOR:e} are drawn at {ERROR_FLOOR:e}");
    let lx = left + 16;
    let mut ly = top + 14;
    let legend_w = text_width(&floor_note) + 16;
    image.fill(lx - 8, ly - 8, legend_w, 3 * (LINE_H + 6) + 8, WHITE);
    for (colour, label) in [(POSENC_COLOUR, "posenc"), (NAIVE_COLOUR, "naive float32")] {
        let mid = ly + i64::from(CAP_H) / 2;
        image.line((lx as f64, mid as f64), ((lx + 28) as f64, mid as f64), colour);
        image.text(lx + 38, ly, label, Align::Left, BLACK);
        ly += i64::from(LINE_H) + 6;
    }
    image.text(lx, ly, &floor_note, Align::Left, MUTED);

    // Naive first, so posenc's curve stays visible where they meet.
    for (errors, colour) in [(&curve.naive, NAIVE_COLOUR), (&curve.posenc, POSENC_COLOUR)] {
        let points: Vec<(f64, f64)> = curve
            .positions
            .iter()
            .zip(errors)
            .map(|(&p, &e)| layout.point(f64::from(p), e))
            .collect();
        for pair in points.windows(2) {
            image.line(pair[0], pair[1], colour);
        }
        if let [only] = points[..] {
            image.line(only, only, colour);
        }
    }

    let title =
        format!("Max abs error vs exact, d = {}, base {}, float32 output", curve.dim, curve.base);
    let title = fit(&title, layout.width - 2 * PAD);
    image.text(i64::from(layout.width / 2), i64::from(PAD), &title, Align::Centre, BLACK);
    let x_title_y = bottom + i64::from(TICK + 4 + LINE_H + 8);
    image.text(i64::from(px + pw / 2), x_title_y, "position", Align::Centre, BLACK);
    image.text_up(i64::from(PAD), i64::from(py + ph / 2), "max abs error", BLACK);
    image
}

/// One group of bars in [`bench_chart`]: a shape's throughputs in GB/s.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchGroup {
    /// The first line under the group (a model's name, or the shape).
    pub label: String,
    /// The second line, in grey (shape and types).
    pub detail: String,
    /// GB/s of each of [`BENCH_SERIES`], in its order. `None`, or a value that is not a
    /// finite number >= 0, draws no bar.
    pub values: [Option<f64>; 4],
}

/// The bars of each group in [`bench_chart`], left to right: name (for the legend) and
/// colour. Each encode stands left of its ceiling, in a lighter shade of its colour.
pub const BENCH_SERIES: [(&str, Rgb); 4] = [
    ("CPU encode", [31, 89, 201]),
    ("CPU copy ceiling", [152, 182, 232]),
    ("GPU encode", [226, 110, 18]),
    ("GPU copy ceiling", [246, 192, 140]),
];

/// The most groups [`bench_chart`] draws.
pub const MAX_BENCH_GROUPS: usize = 32;

/// Width of one bar of [`bench_chart`].
const BENCH_BAR_W: u32 = 28;
/// Gap between the bars of a group.
const BENCH_BAR_GAP: u32 = 4;
/// The least space between two groups' bars.
const BENCH_GROUP_GAP: u32 = 28;
/// The widest group: longer labels are shortened.
const BENCH_MAX_GROUP_W: u32 = 360;
/// Height of the plot area.
const BENCH_PLOT_H: u32 = 360;
/// The tallest bar reaches at most 1 / this of the axis, leaving room for its label above.
const BENCH_HEADROOM: f64 = 1.25;

/// Where [`bench_chart`] puts each bar: groups side by side from the left, the bars of a
/// group in the order of [`BENCH_SERIES`], on a linear GB/s axis from 0 (the baseline) to
/// [`BarLayout::axis_max`] (the top of the plot area).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BarLayout {
    groups: usize,
    group_w: u32,
    plot_x: u32,
    plot_y: u32,
    plot_w: u32,
    plot_h: u32,
    legend_y: u32,
    axis_max: f64,
    step: f64,
    width: u32,
    height: u32,
}

impl BarLayout {
    /// Width of the whole picture in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height of the whole picture in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Groups of bars.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// The GB/s at the top of the plot area.
    pub fn axis_max(&self) -> f64 {
        self.axis_max
    }

    /// Height of the plot area in pixels: a bar of [`BarLayout::axis_max`] would fill it.
    pub fn plot_height(&self) -> u32 {
        self.plot_h
    }

    /// The first row below the plot area: every bar's bottom row is the one above it.
    pub fn baseline(&self) -> u32 {
        self.plot_y + self.plot_h
    }

    /// The bar of `series` in `group` for `value` GB/s as `(x, y, width, height)`, `(x, y)`
    /// its top-left pixel: `value / axis_max` of the plot area's height, rounded, and at
    /// least one pixel for a positive value. `None` if there is no such group or series, or
    /// `value` is not a finite number >= 0 (no bar is drawn for it).
    pub fn bar(&self, group: usize, series: usize, value: f64) -> Option<(u32, u32, u32, u32)> {
        if group >= self.groups || series >= BENCH_SERIES.len() || drawable(Some(value)).is_none() {
            return None;
        }
        let scaled = (value / self.axis_max * f64::from(self.plot_h)).round();
        // Clamped: a value past the axis (never, as the axis is fitted to the values) stays
        // inside the plot.
        let mut h = scaled.min(f64::from(self.plot_h)) as u32;
        if value > 0.0 {
            h = h.max(1);
        }
        let bars_w = BENCH_SERIES.len() as u32 * (BENCH_BAR_W + BENCH_BAR_GAP) - BENCH_BAR_GAP;
        let left = self.plot_x + group as u32 * self.group_w + (self.group_w - bars_w) / 2;
        let x = left + series as u32 * (BENCH_BAR_W + BENCH_BAR_GAP);
        Some((x, self.baseline() - h, BENCH_BAR_W, h))
    }

    /// The column at the centre of `group`.
    fn group_centre(&self, group: usize) -> u32 {
        self.plot_x + group as u32 * self.group_w + self.group_w / 2
    }

    /// The row of `value` on the axis.
    fn row_of(&self, value: f64) -> i64 {
        (f64::from(self.baseline()) - value / self.axis_max * f64::from(self.plot_h)).round() as i64
    }

    /// The tick values, 0 included, and the decimals their labels need.
    fn ticks(&self) -> (Vec<f64>, usize) {
        let n = (self.axis_max / self.step).round() as u32;
        let decimals = if self.step >= 1.0 { 0 } else { (-self.step.log10().floor()) as usize };
        ((0..=n).map(|k| f64::from(k) * self.step).collect(), decimals)
    }
}

/// A value drawn as a bar.
fn drawable(value: Option<f64>) -> Option<f64> {
    value.filter(|v| v.is_finite() && *v >= 0.0)
}

/// The axis for values up to `max`: a step of 1, 2 or 5 times a power of ten giving about
/// five ticks, and the top, a whole number of steps at or above `max` times the headroom.
fn bar_axis(max: f64) -> (f64, f64) {
    let top = if max > 0.0 { max * BENCH_HEADROOM } else { 1.0 };
    let raw = top / 5.0;
    let decade = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * decade).find(|&s| s >= raw);
    let step = step.unwrap_or(10.0 * decade);
    (step, (top / step).ceil() * step)
}

/// `value` GB/s with three significant digits or so, at most five characters below 10^5.
fn gbps_label(value: f64) -> String {
    match value {
        v if v >= 100.0 => format!("{v:.0}"),
        v if v >= 10.0 => format!("{v:.1}"),
        v if v >= 1.0 => format!("{v:.2}"),
        v => format!("{v:.3}"),
    }
}

/// The series that have a bar in some group, for the legend.
fn present_series(groups: &[BenchGroup]) -> Vec<usize> {
    (0..BENCH_SERIES.len())
        .filter(|&s| groups.iter().any(|g| drawable(g.values[s]).is_some()))
        .collect()
}

/// Width of the legend's entries for `series`: a swatch, a gap, the name, and space.
fn legend_width(series: &[usize]) -> u32 {
    series.iter().map(|&s| CAP_H + 8 + text_width(BENCH_SERIES[s].0) + 24).sum()
}

/// The layout [`bench_chart`] uses for `groups`: each group as wide as its widest label
/// (within limits) or its bars, the picture at least wide enough for the legend, the axis
/// fitted to the largest value.
///
/// # Errors
/// [`Error::Shape`] if `groups` is empty; [`Error::Limit`] if it holds more than
/// [`MAX_BENCH_GROUPS`].
pub fn bench_layout(groups: &[BenchGroup]) -> Result<BarLayout> {
    const OP: &str = "plot bench";
    if groups.is_empty() {
        return Err(Error::Shape {
            op: OP,
            what: "groups of bars",
            expected: "at least one".into(),
            actual: "0".into(),
        });
    }
    if groups.len() > MAX_BENCH_GROUPS {
        return Err(Error::Limit {
            op: OP,
            what: "groups of bars",
            requested: groups.len() as u64,
            limit_name: "plot::MAX_BENCH_GROUPS",
            limit: MAX_BENCH_GROUPS as u64,
        });
    }
    let max = groups.iter().flat_map(|g| g.values).filter_map(drawable).fold(0.0, f64::max);
    let (step, axis_max) = bar_axis(max);
    let bars_w = BENCH_SERIES.len() as u32 * (BENCH_BAR_W + BENCH_BAR_GAP) - BENCH_BAR_GAP;
    let labels = groups.iter().map(|g| text_width(&g.label).max(text_width(&g.detail)) + PAD * 2);
    let mut group_w = labels.fold(bars_w + BENCH_GROUP_GAP, u32::max).min(BENCH_MAX_GROUP_W);

    let mut layout = BarLayout {
        groups: groups.len(),
        group_w,
        plot_x: 0,
        plot_y: PAD + LINE_H + PAD + LINE_H + PAD,
        plot_w: 0,
        plot_h: BENCH_PLOT_H,
        legend_y: PAD + LINE_H + PAD,
        axis_max,
        step,
        width: 0,
        height: 0,
    };
    let (ticks, decimals) = layout.ticks();
    let tick_w = ticks.iter().map(|t| text_width(&format!("{t:.decimals$}"))).max().unwrap_or(0);
    let plot_x = PAD + LINE_H + PAD + tick_w + 4 + TICK;
    // Wide enough for the legend and the narrowest figure: wider groups, not a margin.
    let least = (legend_width(&present_series(groups)) + 2 * PAD).max(MIN_WIDTH);
    let n = groups.len() as u32;
    group_w = group_w.max(least.saturating_sub(plot_x + PAD).div_ceil(n));
    layout.group_w = group_w;
    layout.plot_x = plot_x;
    layout.plot_w = n * group_w;
    layout.width = plot_x + layout.plot_w + PAD;
    layout.height = layout.baseline() + 8 + LINE_H + 4 + LINE_H + PAD;
    Ok(layout)
}

/// A bar chart of bench results: per group (a shape), CPU and GPU encode throughput next to
/// their copy ceilings ([`BENCH_SERIES`]), in GB/s on a linear axis from 0, each bar
/// labelled with its value, each group with its label and detail, and a legend of the
/// series that have bars. Missing values draw no bar.
///
/// # Errors
/// As [`bench_layout`].
pub fn bench_chart(groups: &[BenchGroup], title: &str) -> Result<Image> {
    let layout = bench_layout(groups)?;
    let mut image = Image::new(layout.width, layout.height);
    let (px, py, pw, ph) = (layout.plot_x, layout.plot_y, layout.plot_w, layout.plot_h);
    let left = i64::from(px);

    // Grid and ticks at each step; the baseline's grid line is hidden by the frame.
    let (ticks, decimals) = layout.ticks();
    for value in ticks {
        let y = layout.row_of(value);
        image.fill(left, y, pw, 1, GRID);
        image.fill(left - 1 - i64::from(TICK), y, TICK, 1, BLACK);
        let label = format!("{value:.decimals$}");
        let top = y - i64::from(CAP_H) / 2;
        image.text(left - 1 - i64::from(TICK + 4), top, &label, Align::Right, BLACK);
    }
    image.frame(px, py, pw, ph, BLACK);

    // Bars, each labelled above, turned so that neighbouring labels never collide.
    for (g, group) in groups.iter().enumerate() {
        for (s, &(_, colour)) in BENCH_SERIES.iter().enumerate() {
            let Some(value) = drawable(group.values[s]) else { continue };
            let Some((x, y, w, h)) = layout.bar(g, s, value) else { continue };
            image.fill(i64::from(x), i64::from(y), w, h, colour);
            let label = gbps_label(value);
            let label_x = i64::from(x + (w - CAP_H) / 2);
            let centre = i64::from(y) - 4 - i64::from(text_width(&label)) / 2;
            image.text_up(label_x, centre, &label, BLACK);
        }
        let centre = i64::from(layout.group_centre(g));
        let room = layout.group_w - PAD;
        let below = i64::from(layout.baseline()) + 8;
        image.text(centre, below, &fit(&group.label, room), Align::Centre, BLACK);
        let detail_y = below + i64::from(LINE_H) + 4;
        image.text(centre, detail_y, &fit(&group.detail, room), Align::Centre, MUTED);
    }

    // Legend, centred between the title and the plot.
    let series = present_series(groups);
    let mut x = i64::from(layout.width.saturating_sub(legend_width(&series)) / 2);
    let ly = i64::from(layout.legend_y);
    for s in series {
        let (name, colour) = BENCH_SERIES[s];
        image.fill(x, ly, CAP_H, CAP_H, colour);
        image.text(x + i64::from(CAP_H + 8), ly, name, Align::Left, BLACK);
        x += i64::from(CAP_H + 8 + text_width(name) + 24);
    }

    let title = fit(title, layout.width - 2 * PAD);
    image.text(i64::from(layout.width / 2), i64::from(PAD), &title, Align::Centre, BLACK);
    image.text_up(i64::from(PAD), i64::from(py + ph / 2), "GB/s", BLACK);
    Ok(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_colour_map_hits_its_anchors_and_is_white_at_zero() {
        assert_eq!(diverging(-1.0), DIVERGING[0]);
        assert_eq!(diverging(-0.5), DIVERGING[1]);
        assert_eq!(diverging(0.0), DIVERGING[2]);
        assert_eq!(diverging(0.5), DIVERGING[3]);
        assert_eq!(diverging(1.0), DIVERGING[4]);
        assert_eq!(diverging(f32::INFINITY), DIVERGING[4]);
        assert_eq!(diverging(f32::NEG_INFINITY), DIVERGING[0]);
        assert_eq!(diverging(f32::NAN), NAN_COLOUR);
    }

    #[test]
    fn tick_steps_are_round_and_wide_enough() {
        assert_eq!(tick_step(24, 20), 1);
        assert_eq!(tick_step(8, 30), 5);
        assert_eq!(tick_step(2, 60), 50);
        assert_eq!(tick_step(1, 60), 100);
    }

    #[test]
    fn long_titles_are_shortened_to_fit() {
        assert_eq!(fit("abc", 1000), "abc");
        let short = fit(&"x".repeat(200), 240);
        assert!(short.ends_with("...") && text_width(&short) <= 240, "{short}");
    }

    #[test]
    fn turned_text_reads_from_bottom_to_top() {
        let mut image = Image::new(40, 40);
        image.text_up(0, 20, "l", BLACK);
        // 'l' has its foot (row 6, three pixels wide) on the right when turned left; its
        // top-left pixel (row 0, columns 1-2) ends near the bottom left.
        let black: Vec<(u32, u32)> = (0..40)
            .flat_map(|y| (0..40).map(move |x| (x, y)))
            .filter(|&(x, y)| image.pixel(x, y) == Some(BLACK))
            .collect();
        let max_x = black.iter().map(|p| p.0).max().unwrap();
        assert_eq!(max_x, 6 * TEXT_SCALE + TEXT_SCALE - 1);
        // Row 0 of 'l' is columns 1-2 of 5, the left of the glyph, which a left turn puts
        // at the bottom: the text (10 pixels long, centred on 20) ends at row 24.
        let top_row: Vec<u32> = black.iter().filter(|p| p.0 == 0).map(|p| p.1).collect();
        assert_eq!(top_row, [20, 21, 22, 23]);
    }
}
