//! `posenc plot`: the PNGs it writes have the library's layouts and encode the data, the
//! similarity text is the matrix, and bad requests are one line, exit 2 and no file.

use crate::support::Png;
use crate::support::cli::{assert_ok, assert_rejected, files_in, posenc, stderr};
use std::fs;
use std::path::Path;

use posenc::{PeSpec, Variant, cpu, plot};

/// `--format text` prints 6 decimals: half a unit of the last one, plus the float32 noise
/// of the similarity itself.
const TEXT_TOLERANCE: f64 = 5e-7 + 2.5e-7;

/// Runs `posenc plot ARGS -o DIR/NAME` and decodes the PNG it writes.
fn plot_png(dir: &Path, name: &str, args: &[&str]) -> Png {
    let path = dir.join(name);
    let mut all = vec!["plot"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", path.to_str().unwrap()]);
    let out = posenc(&all);
    assert_ok(&out, &format!("{all:?}"));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{all:?}: {}", stderr(&out));
    Png::decode(&fs::read(&path).unwrap())
}

#[test]
fn heatmap_png_has_the_layout_and_every_cell_has_its_values_colour() {
    let dir = tempfile::tempdir().unwrap();
    let png = plot_png(dir.path(), "pe.png", &["heatmap", "--dim", "128", "--len", "50"]);
    let layout = plot::heatmap_layout(50, 128).unwrap();
    assert_eq!((png.width, png.height), (layout.width(), layout.height()));

    // The check: position 0, column 1 is cos 0 = 1; column 0 is sin 0 = 0.
    let (x, y) = layout.cell_centre(0, 1).unwrap();
    assert_eq!(png.pixel(x, y), plot::diverging(1.0));
    let (x, y) = layout.cell_centre(0, 0).unwrap();
    assert_eq!(png.pixel(x, y), plot::diverging(0.0));

    let table = cpu::table(&PeSpec::new(128).unwrap(), &(0..50).collect::<Vec<_>>());
    for ((r, c), &v) in table.indexed_iter() {
        let (x, y) = layout.cell_centre(r, c).unwrap();
        assert_eq!(png.pixel(x, y), plot::diverging(v), "position {r}, column {c}: {v}");
    }
    assert_eq!(files_in(dir.path()), ["pe.png"]);
}

#[test]
fn heatmap_defaults_to_dim_512_len_50_and_the_vaswani_variant() {
    let dir = tempfile::tempdir().unwrap();
    let default = plot_png(dir.path(), "a.png", &["heatmap"]);
    let layout = plot::heatmap_layout(50, 512).unwrap();
    assert_eq!((default.width, default.height), (layout.width(), layout.height()));
    let named = plot_png(dir.path(), "b.png", &["heatmap", "--variant", "vaswani"]);
    assert_eq!(default.rgb, named.rgb);
    // --base reaches the table: column 2 of position 1 is sin(base^(-2/d)).
    let based = plot_png(dir.path(), "c.png", &["heatmap", "--dim", "4", "--base", "2"]);
    let layout = plot::heatmap_layout(50, 4).unwrap();
    let (x, y) = layout.cell_centre(1, 2).unwrap();
    let want = cpu::table(&PeSpec::new(4).unwrap().with_base(2.0).unwrap(), &[1])[[0, 2]];
    assert_eq!(based.pixel(x, y), plot::diverging(want));
    // Every variant is pictured as its own table: fairseq at an odd dim has a zero column
    // and a zero row (position 1, its padding_idx).
    let fairseq = plot_png(dir.path(), "d.png", &["heatmap", "--dim", "7", "--variant", "fairseq"]);
    let layout = plot::heatmap_layout(50, 7).unwrap();
    let table = cpu::table(&PeSpec::for_variant(Variant::Fairseq, 7).unwrap(), &[0, 1, 2]);
    for (r, c) in [(0, 3), (1, 0), (2, 6), (2, 1)] {
        let (x, y) = layout.cell_centre(r, c).unwrap();
        assert_eq!(fairseq.pixel(x, y), plot::diverging(table[[r, c]]), "fairseq ({r}, {c})");
    }
}

#[test]
fn similarity_png_has_the_colour_of_1_on_its_diagonal() {
    let dir = tempfile::tempdir().unwrap();
    let png = plot_png(dir.path(), "sim.png", &["similarity"]);
    let layout = plot::similarity_layout(32).unwrap();
    assert_eq!((png.width, png.height), (layout.width(), layout.height()));
    for i in 0..32 {
        let (x, y) = layout.cell_centre(i, i).unwrap();
        assert_eq!(png.pixel(x, y), plot::diverging(1.0), "diagonal {i}");
    }
}

fn parse_matrix(text: &str) -> Vec<Vec<f64>> {
    text.lines()
        .map(|l| {
            l.split_whitespace().map(|v| v.parse().unwrap_or_else(|e| panic!("{v}: {e}"))).collect()
        })
        .collect()
}

#[test]
fn similarity_text_is_symmetric_with_unit_diagonal_and_depends_only_on_distance() {
    for (dim, len) in [("64", 32usize), ("16", 7)] {
        let out = posenc(&[
            "plot",
            "similarity",
            "--dim",
            dim,
            "--len",
            &len.to_string(),
            "--format",
            "text",
        ]);
        assert_ok(&out, "similarity text");
        let m = parse_matrix(&String::from_utf8(out.stdout).unwrap());
        assert_eq!(m.len(), len);
        assert!(m.iter().all(|row| row.len() == len));
        for i in 0..len {
            assert_eq!(m[i][i], 1.0, "diagonal {i}");
            for j in 0..len {
                assert_eq!(m[i][j], m[j][i], "({i}, {j})");
                let same_distance = m[i.abs_diff(j)][0];
                let diff = (m[i][j] - same_distance).abs();
                assert!(
                    diff <= 2.0 * TEXT_TOLERANCE,
                    "({i}, {j}) = {} vs {same_distance}",
                    m[i][j]
                );
            }
        }
        // And it is the library's matrix, to the printed precision.
        let spec = PeSpec::new(dim.parse().unwrap()).unwrap();
        let table = cpu::table(&spec, &(0..len as u32).collect::<Vec<_>>());
        let want = plot::similarity_matrix(table.view());
        for ((i, j), &v) in want.indexed_iter() {
            assert!((m[i][j] - f64::from(v)).abs() <= 5e-7, "({i}, {j})");
        }
    }
}

#[test]
fn similarity_text_goes_to_a_file_with_o() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.txt");
    let p = path.to_str().unwrap();
    let out = posenc(&["plot", "similarity", "--len", "3", "--format", "text", "-o", p]);
    assert_ok(&out, "similarity text to a file");
    assert!(out.stdout.is_empty());
    let m = parse_matrix(&fs::read_to_string(&path).unwrap());
    assert_eq!(m.len(), 3);
}

#[test]
fn error_png_has_the_layout_and_both_curves() {
    let dir = tempfile::tempdir().unwrap();
    let start = std::time::Instant::now();
    let png = plot_png(dir.path(), "err.png", &["error"]);
    let seconds = start.elapsed().as_secs_f64();
    let layout = plot::error_layout();
    assert_eq!((png.width, png.height), (layout.width(), layout.height()));
    let curve = plot::error_curve(&PeSpec::new(512).unwrap());
    let last = curve.positions.len() - 1;
    let at = |p: u32, e: f64| {
        let (x, y) = layout.point(f64::from(p), e);
        png.pixel(x.round() as u32, y.round() as u32)
    };
    assert_eq!(at(curve.positions[last], curve.posenc[last]), plot::POSENC_COLOUR);
    assert_eq!(at(curve.positions[last], curve.naive[last]), plot::NAIVE_COLOUR);
    assert!(curve.naive[last] > 1e6 * curve.posenc[last]);
    // "Finishes in seconds" is the promise; a loaded test machine gets a wide margin.
    assert!(seconds < 30.0, "plot error took {seconds:.1} s");
}

#[test]
fn a_png_goes_to_a_redirected_stdout() {
    let out = posenc(&["plot", "similarity", "--len", "4"]);
    assert_ok(&out, "PNG on stdout");
    let png = Png::decode(&out.stdout);
    let layout = plot::similarity_layout(4).unwrap();
    assert_eq!((png.width, png.height), (layout.width(), layout.height()));
}

/// Requests refused before anything is computed or written, and a word the error names.
const BAD_PLOT_ARGS: &[(&[&str], &str)] = &[
    (&["heatmap", "--dim", "0"], "invalid dim: 0"),
    (&["heatmap", "--dim", "7"], "invalid dim: 7"),
    (&["heatmap", "--dim", "-2"], "-2"),
    (&["heatmap", "--dim", "8192"], "columns of the picture"),
    (&["heatmap", "--len", "0"], "invalid len: 0"),
    (&["heatmap", "--len", "4097"], "plot::MAX_CELLS is 4096"),
    (&["heatmap", "--dim", "4097"], "plot::MAX_CELLS is 4096"),
    (&["heatmap", "--len", "99999999999999999999"], "99999999999999999999"),
    (&["heatmap", "--len", "-1"], "-1"),
    (&["heatmap", "--base", "1"], "invalid base: 1"),
    (&["heatmap", "--variant", "bert"], "possible values: vaswani"),
    (&["heatmap", "--variant", "whisper", "--dim", "5"], "variant whisper"),
    (&["similarity", "--len", "0"], "invalid len: 0"),
    (&["similarity", "--len", "5000"], "plot::MAX_CELLS"),
    (&["similarity", "--len", "4096", "--dim", "512"], "MAX_SIMILARITY_WORK"),
    (&["similarity", "--format", "svg"], "svg"),
    (&["similarity", "--dim", "65538"], "invalid dim: 65538"),
    (&["error", "--dim", "3"], "invalid dim: 3"),
    (&["error", "--base", "1e8"], "invalid base"),
    (&["error", "--len", "5"], "--len"),
    (&["contour"], "contour"),
];

#[test]
fn invalid_plot_requests_exit_2_with_one_line_and_leave_files_alone() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("fresh.png");
    let existing = dir.path().join("keep.png");
    fs::write(&existing, "keep me\n").unwrap();
    for &(case, needle) in BAD_PLOT_ARGS {
        for target in [&fresh, &existing] {
            let mut args = vec!["plot"];
            args.extend_from_slice(case);
            args.extend_from_slice(&["-o", target.to_str().unwrap()]);
            assert_rejected(&posenc(&args), case, needle);
            assert_eq!(fs::read_to_string(&existing).unwrap(), "keep me\n", "{case:?}");
            assert_eq!(files_in(dir.path()), ["keep.png"], "{case:?}");
        }
    }
}

#[test]
fn plot_without_a_kind_shows_help_and_exits_2() {
    let out = posenc(&["plot"]);
    assert_eq!(out.status.code(), Some(2));
    let help = stderr(&out);
    for kind in ["heatmap", "similarity", "error"] {
        assert!(help.contains(kind), "{kind} missing from:\n{help}");
    }
}

#[test]
fn an_unwritable_output_exits_1_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for kind in ["heatmap", "similarity", "error"] {
        let path = dir.path().join("missing").join("p.png");
        let out = posenc(&["plot", kind, "--dim", "8", "-o", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{kind}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("posenc: ") && err.contains("p.png"), "{err}");
        assert!(files_in(dir.path()).is_empty());
    }
}

#[test]
fn help_names_the_options_and_defaults() {
    let help = String::from_utf8(posenc(&["plot", "heatmap", "--help"]).stdout).unwrap();
    for needle in ["[default: 512]", "[default: 50]", "--variant", "vaswani", "Exit status"] {
        assert!(help.contains(needle), "{needle:?} missing from plot heatmap --help");
    }
    let help = String::from_utf8(posenc(&["plot", "similarity", "--help"]).stdout).unwrap();
    for needle in ["[default: 64]", "[default: 32]", "text"] {
        assert!(help.contains(needle), "{needle:?} missing from plot similarity --help");
    }
}

#[test]
fn the_readme_pictures_are_what_the_readme_commands_make() {
    let dir = tempfile::tempdir().unwrap();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let committed = |name: &str| Png::decode(&fs::read(docs.join(name)).unwrap());
    let regenerate = "regenerate it with the command in docs/pictures.md";
    for (name, args) in [
        ("heatmap.png", &["heatmap", "--dim", "128", "--len", "50"][..]),
        ("similarity.png", &["similarity"]),
    ] {
        let made = plot_png(dir.path(), name, args);
        let old = committed(name);
        assert_eq!((made.width, made.height), (old.width, old.height), "docs/{name}: {regenerate}");
        assert!(made.rgb == old.rgb, "docs/{name} differs from a fresh one: {regenerate}");
    }
    // The error curve goes through libm's float32 sin and cos, which may round differently
    // on other platforms; its size is fixed.
    let made = plot_png(dir.path(), "error.png", &["error"]);
    let old = committed("error.png");
    assert_eq!((made.width, made.height), (old.width, old.height), "docs/error.png: {regenerate}");
    for name in ["heatmap.png", "similarity.png", "error.png"] {
        let bytes = fs::metadata(docs.join(name)).unwrap().len();
        assert!(bytes < 100_000, "docs/{name} is {bytes} bytes; keep the docs' pictures small");
    }
}
