#!/usr/bin/env python3
"""A diagnostic copy of a kernel's WGSL (from `posenc-isa --dump`) with its cold paths cut.

The compiler's instruction count covers every path of a kernel, taken or not. This writes
a copy whose cold branches are stubs, so that the count of the copy is close to the path a
typical invocation takes:

- the exact phase of RoPE positions past the cos/sin cache (`rope_cos_sin` in `cos_sin4`):
  a bench's prefill and decode positions are all cached;
- the general forms of the vec4 half-precision conversions, which run only when the short
  path's test fails (an f16 value that is not normal, a NaN to narrow to bf16).

The copy computes wrong values on those paths: it is for `posenc-isa --wgsl`, never for a
GPU. Usage: hot_path.py IN.wgsl OUT.wgsl (prints the stubs it applied).
"""

import sys

STUBS = [
    (
        "exact phase past the cache",
        "e[i] = rope_cos_sin(p, s[i], scaled, params.scale_bits);",
        "e[i] = vec2<f32>(0.0, 0.0);",
    ),
    (
        "exact phase past the cache (computed4, since 2026-12-03's multimodal pass)",
        "e[i] = rope_cos_sin(q[i], s[i], scaled, params.scale_bits);",
        "e[i] = vec2<f32>(0.0, 0.0);",
    ),
    (
        "exact phase past the cache (before 2026-11-28's vec4 reads of the cache)",
        "e[i] = rope_cos_sin(p, steps[f + i], scaled, params.scale_bits);",
        "e[i] = vec2<f32>(0.0, 0.0);",
    ),
    (
        "narrow4_bf16's general form",
        """    if no_nan4(b & vec4<u32>(0x7fffffffu)) {
        return round4_bf16(b);
    }
    return vec2<u32>(
        f32_to_bf16_bits(b.x) | (f32_to_bf16_bits(b.y) << 16u),
        f32_to_bf16_bits(b.z) | (f32_to_bf16_bits(b.w) << 16u),
    );
}""",
        """    if no_nan4(b & vec4<u32>(0x7fffffffu)) {
        return round4_bf16(b);
    }
    return vec2<u32>(0u, 0u);
}""",
    ),
    (
        "narrow4_f16's general form",
        """    return vec2<u32>(
        f32_to_f16_bits(b.x) | (f32_to_f16_bits(b.y) << 16u),
        f32_to_f16_bits(b.z) | (f32_to_f16_bits(b.w) << 16u),
    );
}""",
        """    return vec2<u32>(0u, 0u);
}""",
    ),
    (
        "widen4_f16's general form",
        """    return bitcast<vec4<f32>>(vec4<u32>(
        f16_to_f32_bits(h.x),
        f16_to_f32_bits(h.y),
        f16_to_f32_bits(h.z),
        f16_to_f32_bits(h.w),
    ));
}""",
        """    return vec4<f32>(0.0);
}""",
    ),
]


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    source = open(sys.argv[1]).read()
    applied = 0
    for name, cold, stub in STUBS:
        n = source.count(cold)
        if n:
            source = source.replace(cold, stub)
            applied += n
            print(f"{name}: {n} stubbed")
    if not applied:
        # Not an error: an f32 encode has no cold path. But a kernel whose cold code was
        # reworded would land here too, so say it.
        print("no cold path matched: the copy is the kernel as it is", file=sys.stderr)
    open(sys.argv[2], "w").write(source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
