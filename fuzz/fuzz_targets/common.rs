//! Checks shared by the fuzz targets (included by `#[path]`; not a target of its own).

use posenc::inputs::{self, EncodePositions, Ids, Source};

/// Builds the positions of `ids` every way `posenc encode` can (contiguous, left-padded,
/// fairseq, a positions file, an offsets file, both read from `source`): whatever is
/// accepted has the ids' shape.
pub fn check_position_builders(ids: &Ids, source: Source<'_>, pad_id: u32, padding_idx: u32) {
    let (batch, len) = ids.ids.dim();
    for how in [
        EncodePositions::Contiguous,
        EncodePositions::LeftPadded { pad_id },
        EncodePositions::Fairseq { padding_idx },
        EncodePositions::File(source),
        EncodePositions::Offsets(source),
    ] {
        if let Ok(p) = inputs::encode_positions(ids, how) {
            assert_eq!(p.dim(), (batch, len));
        }
    }
}
