// The parameters of the recorded encode's kernels (src/gpu/encode/pass.rs, mirror
// `EncodePassParams`) and each token's position. The importing kernel (or the host's header)
// provides `position_word(i)`, word i of the bound positions.
struct Params {
    // Output words of the batch.
    n_words: u32,
    dim: u32,
    vocab: u32,
    // Rows of every table chunk but the last.
    rows_per_chunk: u32,
    // This dispatch's window: the first chunk bound, and how many are.
    first_chunk: u32,
    n_slots: u32,
    // Indices of the batch's first id and position (u32 elements) and output word (the
    // kernel's output word: u32 for `encode_pass`, OutWord for `encode_pass_x4`) in the bound buffers.
    ids_base: u32,
    pos_base: u32,
    out_base: u32,
    // With FLAG_OFFSETS, tokens per sequence: positions[b] is sequence b's first position.
    seq_len: u32,
    // Positions below this have their PE row in `cache`.
    cached_rows: u32,
    pad_id: u32,
    scale_bits: u32,
    // FLAG_SCALE, FLAG_PAD_ID, FLAG_OFFSETS, FLAG_FIRST_WINDOW.
    flags: u32,
    in_dtype: u32,
    out_dtype: u32,
    // `encode_pass`: workgroups along x of a dispatch folded into 2-D.
    groups_x: u32,
    // The spec, as the table kernel takes it: FLAG_F32, FLAG_PADDING, FLAG_ZERO_COL.
    spec_flags: u32,
    n_freqs: u32,
    stride: u32,
    cos_offset: u32,
    zero_col: u32,
    start: u32,
    padding_idx: u32,
    // `encode_pass_x4`: tokens of the batch, units of four elements per row, and workgroups
    // along y (tokens beyond fold into z).
    n_tokens: u32,
    row_units: u32,
    groups_y: u32,
    // The batch's first token served by this dispatch: a step whose output is larger than
    // one binding is served in parts, each bound at its own output range, and ids and
    // positions are indexed by the token's index in the whole batch.
    token_base: u32,
    // Always 0: the opaque zero of rounded.wgsl.
    zero: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

// The position of token t of the whole batch.
fn position(t: u32) -> u32 {
    if (params.flags & FLAG_OFFSETS) != 0u {
        let b = t / params.seq_len;
        // Wraps past 2^32 - 1, as documented.
        return position_word(params.pos_base + b) + (t - b * params.seq_len);
    }
    return position_word(params.pos_base + t);
}
