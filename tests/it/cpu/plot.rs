//! `posenc::plot`: the pictures encode their data (cells and curve points have the colours
//! of their values), the PNGs decode to the same pixels, the similarity matrix and the error
//! curve hold what the README says, bench bars have the heights of their values, and bad
//! sizes are errors rather than panics.

use crate::support::Png;
use ndarray::Array2;
use posenc::plot::{self, Image};
use posenc::{Error, PeSpec, cpu};

/// Similarities from float32 tables: each value is within 6e-8 of exact, so a normalised
/// dot product of them is within about 2 x 6e-8 of exact, plus the final f32 rounding.
const SIMILARITY_TOLERANCE: f64 = 2.5e-7;

fn table(dim: u32, len: u32) -> Array2<f32> {
    cpu::table(&PeSpec::new(dim).unwrap(), &(0..len).collect::<Vec<_>>())
}

fn png_of(image: &Image) -> Png {
    let mut bytes = Vec::new();
    image.write_png(&mut bytes).unwrap();
    Png::decode(&bytes)
}

/// Every pixel of every cell has the colour map's colour for the cell's value.
fn assert_cells_encode(image: &Image, layout: &plot::MatrixLayout, values: &Array2<f32>) {
    assert_eq!((image.width(), image.height()), (layout.width(), layout.height()));
    assert_eq!((layout.rows(), layout.cols()), values.dim());
    let (cw, ch) = layout.cell_size();
    for ((r, c), &v) in values.indexed_iter() {
        let (x0, y0) = layout.cell_origin(r, c).unwrap();
        let want = plot::diverging(v);
        for (x, y) in (x0..x0 + cw).flat_map(|x| (y0..y0 + ch).map(move |y| (x, y))) {
            assert_eq!(image.pixel(x, y), Some(want), "cell ({r}, {c}) = {v}, pixel ({x}, {y})");
        }
    }
}

#[test]
fn heatmap_cells_have_the_colours_of_their_values() {
    let values = table(128, 50);
    let image = plot::heatmap(values.view(), "test").unwrap();
    let layout = plot::heatmap_layout(50, 128).unwrap();
    assert_cells_encode(&image, &layout, &values);

    // The issue's own check: PE(0, 1) = cos 0 = 1 and PE(0, 0) = sin 0 = 0.
    let (x, y) = layout.cell_centre(0, 1).unwrap();
    assert_eq!(image.pixel(x, y), Some(plot::diverging(1.0)));
    let (x, y) = layout.cell_centre(0, 0).unwrap();
    assert_eq!(image.pixel(x, y), Some(plot::diverging(0.0)));
    assert_ne!(plot::diverging(1.0), plot::diverging(0.0));
    assert_eq!(layout.cell_centre(50, 0), None);
    assert_eq!(layout.cell_centre(0, 128), None);
}

#[test]
fn no_label_covers_a_cell_whatever_the_shape() {
    for (rows, cols) in [(1, 2), (2, 8), (7, 4), (300, 2), (1, 1000), (33, 66)] {
        let values =
            Array2::from_shape_fn((rows, cols), |(r, c)| ((r * 7 + c * 3) % 9) as f32 / 4.0 - 1.0);
        let image = plot::heatmap(values.view(), &"a long title ".repeat(20)).unwrap();
        assert_cells_encode(&image, &plot::heatmap_layout(rows, cols).unwrap(), &values);
        if rows == cols || rows < 40 {
            let square = values.slice(ndarray::s![..rows.min(cols), ..rows.min(cols)]).to_owned();
            let image = plot::similarity(square.view(), "t").unwrap();
            assert_cells_encode(&image, &plot::similarity_layout(square.nrows()).unwrap(), &square);
        }
    }
}

#[test]
fn heatmap_of_the_default_size_has_two_pixel_columns_and_a_sane_size() {
    let layout = plot::heatmap_layout(50, 512).unwrap();
    assert_eq!(layout.cell_size(), (2, 8));
    assert!((1000..1400).contains(&layout.width()), "{}", layout.width());
    assert!((400..600).contains(&layout.height()), "{}", layout.height());
    // Small matrices still get a readable picture, centred.
    let tiny = plot::heatmap_layout(1, 2).unwrap();
    assert_eq!(tiny.cell_size(), (24, 24));
    assert!(tiny.width() >= 700);
}

#[test]
fn png_decodes_to_the_same_pixels() {
    let image = plot::heatmap(table(16, 5).view(), "round trip").unwrap();
    let png = png_of(&image);
    assert_eq!((png.width, png.height), (image.width(), image.height()));
    assert_eq!(png.rgb, image.as_rgb());
}

#[test]
fn similarity_matrix_is_symmetric_with_unit_diagonal_and_depends_only_on_distance() {
    for (dim, len) in [(64u32, 32u32), (8, 20), (512, 40)] {
        let spec = PeSpec::new(dim).unwrap();
        let m = plot::similarity_matrix(table(dim, len).view());
        assert_eq!(m.dim(), (len as usize, len as usize));
        // The closed form: PE(p) . PE(q) = sum_i cos((p - q) w_i), and |PE(p)|^2 = d / 2.
        let w: Vec<f64> =
            (0..dim / 2).map(|i| spec.base().powf(-f64::from(2 * i) / f64::from(dim))).collect();
        let exact = |k: f64| w.iter().map(|wi| (k * wi).cos()).sum::<f64>() / w.len() as f64;
        for ((i, j), &v) in m.indexed_iter() {
            assert_eq!(v.to_bits(), m[[j, i]].to_bits(), "d = {dim}: ({i}, {j}) not symmetric");
            if i == j {
                assert_eq!(v, 1.0, "d = {dim}: diagonal at {i}");
            }
            let want = exact(i as f64 - j as f64);
            let err = (f64::from(v) - want).abs();
            assert!(err <= SIMILARITY_TOLERANCE, "d = {dim}: ({i}, {j}) = {v}, exact {want}");
        }
    }
}

#[test]
fn similarity_of_zero_rows_is_zero_and_shapes_are_checked() {
    let mut t = table(8, 3);
    t.row_mut(1).fill(0.0);
    let m = plot::similarity_matrix(t.view());
    assert_eq!(m.row(1).to_vec(), [0.0; 3]);
    assert_eq!(m[[0, 0]], 1.0);

    let not_square = Array2::<f32>::zeros((3, 4));
    assert!(matches!(plot::similarity(not_square.view(), "x"), Err(Error::Shape { .. })));
    let empty = Array2::<f32>::zeros((0, 0));
    assert!(matches!(plot::similarity(empty.view(), "x"), Err(Error::Shape { .. })));
}

#[test]
fn similarity_picture_has_the_colour_of_1_on_its_diagonal() {
    let m = plot::similarity_matrix(table(64, 32).view());
    let image = plot::similarity(m.view(), "test").unwrap();
    let layout = plot::similarity_layout(32).unwrap();
    let (cw, ch) = layout.cell_size();
    assert_eq!(cw, ch, "square cells");
    assert_cells_encode(&image, &layout, &m);
    for i in 0..32 {
        let (x, y) = layout.cell_centre(i, i).unwrap();
        assert_eq!(image.pixel(x, y), Some(plot::diverging(1.0)), "diagonal {i}");
    }
}

#[test]
fn bad_sizes_are_errors_not_panics() {
    let limit = |r: Result<plot::MatrixLayout, Error>| match r {
        Err(Error::Limit { requested, limit, .. }) => (requested, limit),
        other => panic!("{other:?}"),
    };
    let max = plot::MAX_CELLS as u64;
    assert_eq!(limit(plot::heatmap_layout(plot::MAX_CELLS + 1, 8)), (max + 1, max));
    assert_eq!(limit(plot::heatmap_layout(8, usize::MAX)), (usize::MAX as u64, max));
    assert_eq!(limit(plot::similarity_layout(plot::MAX_CELLS + 1)), (max + 1, max));
    assert!(matches!(plot::heatmap_layout(0, 8), Err(Error::Shape { .. })));
    assert!(matches!(plot::heatmap_layout(8, 0), Err(Error::Shape { .. })));
    assert!(matches!(plot::similarity_layout(0), Err(Error::Shape { .. })));
    let empty = Array2::<f32>::zeros((0, 512));
    assert!(matches!(plot::heatmap(empty.view(), "x"), Err(Error::Shape { .. })));
    // The largest allowed picture lays out without overflow.
    let big = plot::heatmap_layout(plot::MAX_CELLS, plot::MAX_CELLS).unwrap();
    assert!(big.width() < 5000 && big.height() < 5000);
}

#[test]
fn error_positions_are_log_spaced_from_1_to_the_last_u32() {
    let p = plot::error_positions();
    assert_eq!(p[0], 1);
    assert_eq!(*p.last().unwrap(), u32::MAX);
    assert!(p.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
    for octave in 8..32 {
        let (lo, hi) = (1u64 << octave, 1u64 << (octave + 1));
        let n = p.iter().filter(|&&q| (lo..hi).contains(&u64::from(q))).count() as u32;
        // The last octave also holds 2^32 - 1, standing in for 2^32.
        let extra = u32::from(octave == 31);
        assert_eq!(n, plot::ERROR_SAMPLES_PER_OCTAVE + extra, "octave {octave}");
    }
}

#[test]
fn error_curve_posenc_stays_under_its_bound_and_far_below_naive_at_large_positions() {
    let curve = plot::error_curve(&PeSpec::new(512).unwrap());
    assert_eq!(curve.positions, plot::error_positions());
    assert_eq!(curve.posenc.len(), curve.positions.len());
    assert_eq!(curve.naive.len(), curve.positions.len());
    for ((&p, &ours), &naive) in curve.positions.iter().zip(&curve.posenc).zip(&curve.naive) {
        assert!(ours <= posenc::ACCURACY_BOUND, "posenc at {p}: {ours:e}");
        if p >= 1 << 8 {
            assert!(naive > 10.0 * ours, "at {p}: naive {naive:e}, posenc {ours:e}");
        }
        if p >= 1 << 26 {
            assert!(naive > 1.0, "naive at {p}: {naive:e} (the sign is wrong by now)");
        }
    }
}

#[test]
fn error_plot_draws_each_curve_through_its_points() {
    let curve = plot::error_curve(&PeSpec::new(64).unwrap());
    let image = plot::error_plot(&curve);
    let layout = plot::error_layout();
    assert_eq!((image.width(), image.height()), (layout.width(), layout.height()));
    let at = |p: u32, e: f64| {
        let (x, y) = layout.point(f64::from(p), e);
        image.pixel(x.round() as u32, y.round() as u32)
    };
    // Past 2^12 the curves are decades apart, and clear of the legend.
    let mut checked = 0;
    for ((&p, &ours), &naive) in curve.positions.iter().zip(&curve.posenc).zip(&curve.naive) {
        if p >= 1 << 12 {
            assert_eq!(at(p, ours), Some(plot::POSENC_COLOUR), "posenc at {p}: {ours:e}");
            assert_eq!(at(p, naive), Some(plot::NAIVE_COLOUR), "naive at {p}: {naive:e}");
            checked += 1;
        }
    }
    assert!(checked > 100);
    // Zero errors land on the floor, inside the picture.
    let (_, floor) = layout.point(1.0, 0.0);
    let (_, at_floor) = layout.point(1.0, plot::ERROR_FLOOR);
    assert_eq!(floor, at_floor);
    assert!(floor < f64::from(layout.height()));
}

fn bench_groups() -> Vec<plot::BenchGroup> {
    let group = |label: &str, values| plot::BenchGroup {
        label: label.into(),
        detail: format!("{label} detail"),
        values,
    };
    vec![
        group("bert-base", [Some(26.2), Some(33.7), Some(3.56), Some(9.9)]),
        // A decode step: tiny throughputs still get a visible bar.
        group("llama3-8b-decode", [Some(11.4), Some(55.9), Some(0.0004), Some(2.27)]),
        // A CPU-only run has no GPU bars; a zero has no height; NaN and negatives no bar.
        group("cpu only", [Some(0.0), Some(68.0), None, Some(f64::NAN)]),
        group("odd", [Some(-1.0), Some(f64::INFINITY), Some(12.5), Some(40.0)]),
    ]
}

#[test]
fn bench_bars_have_their_series_colour_and_the_height_of_their_value() {
    let groups = bench_groups();
    let image = plot::bench_chart(&groups, "bench").unwrap();
    let layout = plot::bench_layout(&groups).unwrap();
    let png = png_of(&image);
    assert_eq!((png.width, png.height), (layout.width(), layout.height()));
    assert_eq!(layout.groups(), groups.len());
    // The axis holds the largest value with room for its label.
    assert!(layout.axis_max() >= 68.0 * 1.25, "{}", layout.axis_max());
    let scale = f64::from(layout.plot_height()) / layout.axis_max();
    let mut drawn = 0;
    for (g, group) in groups.iter().enumerate() {
        for (s, (name, colour)) in plot::BENCH_SERIES.iter().enumerate() {
            let value = group.values[s].filter(|v| v.is_finite() && *v >= 0.0);
            let Some(value) = value else {
                // No bar: the slot a bar would fill holds none of the series' colour.
                let (x, _, w, _) = layout.bar(g, s, layout.axis_max()).unwrap();
                for (x, y) in (x..x + w).flat_map(|x| (0..png.height).map(move |y| (x, y))) {
                    assert_ne!(png.pixel(x, y), *colour, "{name} of group {g} at ({x}, {y})");
                }
                continue;
            };
            let (x, y, w, h) = layout.bar(g, s, value).unwrap();
            let want = if value > 0.0 { (value * scale).round().max(1.0) } else { 0.0 };
            assert_eq!(f64::from(h), want, "{name} of group {g}: {value}");
            assert_eq!(y + h, layout.baseline(), "bars stand on the baseline");
            for (px, py) in (x..x + w).flat_map(|x| (y..y + h).map(move |y| (x, y))) {
                assert_eq!(png.pixel(px, py), *colour, "{name} of group {g} at ({px}, {py})");
            }
            // Read the height back from the pixels: the run of the colour up the middle.
            let mid = x + w / 2;
            let run = (0..layout.baseline())
                .rev()
                .take_while(|&row| png.pixel(mid, row) == *colour)
                .count();
            assert_eq!(run as u32, h, "{name} of group {g}: {value}");
            drawn += 1;
        }
    }
    assert_eq!(drawn, 12);
    assert_eq!(layout.bar(groups.len(), 0, 1.0), None);
    assert_eq!(layout.bar(0, plot::BENCH_SERIES.len(), 1.0), None);
    assert_eq!(layout.bar(0, 0, f64::NAN), None);
}

#[test]
fn bench_chart_sizes_are_checked() {
    assert!(matches!(plot::bench_chart(&[], "x"), Err(Error::Shape { .. })));
    let many = vec![bench_groups()[0].clone(); plot::MAX_BENCH_GROUPS + 1];
    match plot::bench_layout(&many) {
        Err(Error::Limit { requested, limit, .. }) => {
            assert_eq!((requested, limit), (33, 32));
        }
        other => panic!("{other:?}"),
    }
    // The most groups, with labels far too long, lay out within bounds.
    let long = plot::BenchGroup { label: "x".repeat(500), ..bench_groups()[0].clone() };
    let layout = plot::bench_layout(&vec![long; plot::MAX_BENCH_GROUPS]).unwrap();
    assert!(layout.width() < 12_000, "{}", layout.width());
    // One group, nothing measured: still a picture, with its axis.
    let empty = plot::BenchGroup { values: [None; 4], ..bench_groups()[0].clone() };
    let image = plot::bench_chart(&[empty], "nothing").unwrap();
    assert!(image.width() >= 720);
}
