// The axis (0 time, 1 height, 2 width) of frequency i of a multimodal RoPE, shared by the
// host-array path's cos/sin pass (rope_cs.wgsl) and the recorded step (rope_pass.wgsl), so
// both gather each frequency from the same axis. `flags` holds FLAG_INTERLEAVED or
// FLAG_ALTERNATING for those layouts (neither: sections); `section` holds the config's
// mrope_section counts in its order, each at most 32768. CPU twin: Mrope::axis in
// src/rope/families.rs.
fn mrope_axis(i: u32, flags: u32, section: vec3<u32>) -> u32 {
    if (flags & FLAG_ALTERNATING) != 0u {
        // ERNIE 4.5 VL's: the first two counts are the height and width runs. At most 32768
        // each: their sum does not wrap.
        if i < section.x + section.y {
            return 1u + (i & 1u);
        }
        return 0u;
    }
    if (flags & FLAG_INTERLEAVED) != 0u {
        let r = i % 3u;
        if r == 1u && i < 3u * section.y {
            return 1u;
        }
        if r == 2u && i < 3u * section.z {
            return 2u;
        }
        return 0u;
    }
    if i < section.x {
        return 0u;
    }
    if i - section.x < section.y {
        return 1u;
    }
    return 2u;
}
