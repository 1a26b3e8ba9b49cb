#!/usr/bin/env python3
"""Writes the malformed-input corpus that tests/it/cpu/bad_input.rs feeds through posenc's
parsers.

Standard library only (no numpy), so every byte is spelled out here. Run from anywhere:
    python3 tests/corpus/generate.py
It rewrites tests/corpus/{npy,safetensors,positions}/ and tests/corpus/MANIFEST.tsv, whose
rows say which parser reads each file and which error kind it must give, and writes its own
files of tests/corpus/rope_scaling/ (tests/it/cpu/rope.rs reads that directory; each file's
name gives the field its error names). The committed files are the corpus; this script documents
how each was made.
"""

import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = []


def npy_bytes(descr, shape, data, major=1, fortran=False, dict_text=None):
    shape_text = "(" + "".join(f"{d}, " for d in shape).rstrip(" ") + ")"
    if len(shape) == 1:
        shape_text = f"({shape[0]},)"
    text = dict_text or (
        f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape_text}, }}"
    )
    length_field = 2 if major == 1 else 4
    unpadded = 8 + length_field + len(text) + 1
    text = text + " " * ((-unpadded) % 64) + "\n"
    out = b"\x93NUMPY" + bytes([major, 0])
    out += struct.pack("<H" if major == 1 else "<I", len(text))
    return out + text.encode("latin-1") + data


def safetensors_bytes(header, data, length=None):
    raw = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def put(kind_dir, name, content, role, kind, why):
    path = os.path.join(HERE, kind_dir, name)
    with open(path, "wb") as f:
        f.write(content if isinstance(content, bytes) else content.encode("utf-8"))
    ROWS.append((f"{kind_dir}/{name}", role, kind, why))


def i32s(*v):
    return struct.pack(f"<{len(v)}i", *v)


def i64s(*v):
    return struct.pack(f"<{len(v)}q", *v)


def u32s(*v):
    return struct.pack(f"<{len(v)}I", *v)


def f32s(*v):
    return struct.pack(f"<{len(v)}f", *v)


def f16s(*v):
    return struct.pack(f"<{len(v)}e", *v)


def bf16s(*v):
    return b"".join(struct.pack("<f", x)[2:] for x in v)


NAN, INF = float("nan"), float("inf")


def npy_corpus():
    good_ids = npy_bytes("<i8", [2, 3], i64s(0, 1, 2, 3, 4, 5))
    put("npy", "empty.npy", b"", "ids", "Format", "zero bytes")
    put("npy", "magic_only.npy", b"\x93NUMPY", "ids", "Format", "the preamble ends after the magic")
    put("npy", "truncated_header.npy", good_ids[:40], "ids", "Format", "cut inside the header dict")
    put("npy", "truncated_data.npy", good_ids[:-5], "ids", "Format", "data 5 bytes short of the shape")
    put("npy", "extra_data.npy", good_ids + b"\0" * 8, "ids", "Format", "8 bytes more data than the shape")
    put("npy", "bad_magic.npy", b"\x93NUMPZ" + good_ids[6:], "ids", "Format", "wrong magic string")
    put("npy", "version_9.npy", good_ids[:6] + b"\x09\x00" + good_ids[8:], "ids", "Format", "format version 9.0")
    huge_len = b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFFF) + b"{" * 100
    put("npy", "header_len_4gib.npy", huge_len, "ids", "Format", "a v2 header length of 4 GiB in a 114-byte file")
    put(
        "npy",
        "shape_2pow40_elements.npy",
        npy_bytes("<i4", [1 << 40], i32s(0) * 8),
        "ids",
        "Format",
        "a header claiming 2^40 elements in a 160-byte file",
    )
    put(
        "npy",
        "weights_2pow40_elements.npy",
        npy_bytes("<f4", [1 << 20, 1 << 20], f32s(0.0) * 8),
        "weights",
        "Format",
        "a 2^20 x 2^20 float32 table (4 TiB) declared in a 160-byte file",
    )
    put(
        "npy",
        "shape_overflows_u64.npy",
        npy_bytes("<i8", [1 << 62, 1 << 62], b""),
        "ids",
        "Format",
        "the element count overflows 64 bits",
    )
    put(
        "npy",
        "shape_zero_times_huge.npy",
        npy_bytes("<u4", [0, 1 << 63], b""),
        "ids",
        "Format",
        "no data, but axes no array can index (hidden by the zero axis)",
    )
    put(
        "npy",
        "shape_digits_overflow.npy",
        npy_bytes("<i4", [], b"", dict_text="{'descr': '<i4', 'fortran_order': False, 'shape': (123456789012345678901234567890,), }"),
        "ids",
        "Format",
        "a dimension too large for any integer type",
    )
    put("npy", "ids_float32.npy", npy_bytes("<f4", [2], f32s(1.0, 2.0)), "ids", "Dtype", "float ids")
    put("npy", "ids_big_endian.npy", npy_bytes(">i4", [2], struct.pack(">2i", 1, 2)), "ids", "Dtype", "big-endian int32")
    put("npy", "ids_int16.npy", npy_bytes("<i2", [2], struct.pack("<2h", 1, 2)), "ids", "Dtype", "int16 ids")
    put("npy", "ids_rank3.npy", npy_bytes("<u4", [1, 2, 2], u32s(0, 1, 2, 3)), "ids", "Rank", "a [1, 2, 2] batch")
    put("npy", "ids_rank0.npy", npy_bytes("<u4", [], u32s(1), dict_text="{'descr': '<u4', 'fortran_order': False, 'shape': (), }"), "ids", "Rank", "a scalar")
    put("npy", "ids_negative_i64.npy", npy_bytes("<i8", [2, 2], i64s(0, 1, 2, -3)), "ids", "TokenId", "id -3 at row 1, column 1")
    put("npy", "ids_negative_i32.npy", npy_bytes("<i4", [3], i32s(5, -2147483648, 1)), "ids", "TokenId", "id i32::MIN")
    put("npy", "ids_out_of_range_u32.npy", npy_bytes("<u4", [3], u32s(0, 15, 16)), "ids", "TokenId", "id 16 with a 16-row vocabulary")
    put("npy", "ids_u32_max.npy", npy_bytes("<u4", [1], u32s(0xFFFFFFFF)), "ids", "TokenId", "id 4294967295")
    put("npy", "ids_2pow40_i64.npy", npy_bytes("<i8", [1], i64s(1 << 40)), "ids", "TokenId", "an id beyond u32")
    put("npy", "positions_int64.npy", npy_bytes("<i8", [2, 3], i64s(0, 1, 2, 0, 1, 2)), "positions", "Dtype", "positions must be uint32")
    put("npy", "positions_rank3.npy", npy_bytes("<u4", [1, 1, 2], u32s(0, 1)), "positions", "Rank", "positions of rank 3")
    put("npy", "weights_nan_f32.npy", npy_bytes("<f4", [2, 2], f32s(0.5, 1.0, NAN, 2.0)), "weights", "NonFinite", "NaN at row 1, column 0")
    put("npy", "weights_inf_f32.npy", npy_bytes("<f4", [1, 4], f32s(0.0, 0.0, 0.0, -INF)), "weights", "NonFinite", "-inf at row 0, column 3")
    put("npy", "weights_inf_f16.npy", npy_bytes("<f2", [2, 2], f16s(1.0, INF, 0.0, 0.0)), "weights", "NonFinite", "f16 +inf")
    put("npy", "weights_nan_f16_fortran.npy", npy_bytes("<f2", [2, 2], f16s(1.0, 2.0, NAN, 3.0), fortran=True), "weights", "NonFinite", "f16 NaN in a Fortran-order file (row 0, column 1 in C order)")
    put("npy", "weights_float64.npy", npy_bytes("<f8", [1, 2], struct.pack("<2d", 1.0, 2.0)), "weights", "Dtype", "float64 table")
    put("npy", "weights_bf16_as_u2.npy", npy_bytes("<u2", [1, 2], bf16s(1.0, 2.0)), "weights", "Dtype", "bfloat16 bits as <u2 (NumPy has no bfloat16)")
    put("npy", "weights_rank1.npy", npy_bytes("<f4", [4], f32s(1, 2, 3, 4)), "weights", "Rank", "a vector, not a table")
    put("npy", "weights_rank3.npy", npy_bytes("<f4", [1, 1, 2], f32s(1, 2)), "weights", "Rank", "a 3-D table")
    for name, text, why in [
        ("dict_structured.npy", "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", "a structured dtype"),
        ("dict_missing_shape.npy", "{'descr': '<i4', 'fortran_order': False, }", "no shape key"),
        ("dict_duplicate_key.npy", "{'descr': '<i4', 'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", "descr twice"),
        ("dict_negative_dim.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (-1,), }", "a negative dimension"),
        ("dict_trailing_garbage.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), } __import__('os')", "code after the dict"),
        ("dict_unclosed_string.npy", "{'descr: '<i4', 'fortran_order': False, 'shape': (1,), }", "an unclosed string"),
        ("dict_not_a_dict.npy", "[1, 2, 3]", "a list where the dict belongs"),
        ("dict_non_ascii.npy", "{'descr': '<i\u00e94', 'fortran_order': False, 'shape': (1,), }", "a non-ASCII byte in a string"),
    ]:
        put("npy", name, npy_bytes("<i4", [1], i32s(7), dict_text=text), "ids", "Format", why)


def derived_shape_corpus():
    """Valid headers, often with no data at all, whose danger is the shape of what posenc
    would build from them (an output, positions) rather than anything read: the issue
    "Hold up, round two", items 2 to 4. The roles run the CLI's up-front checks
    (posenc::inputs): encode with a 16 x 8 table (encode:pad adds --pad-id 0,
    encode:fairseq --variant fairseq), rope with --layout blhd."""
    put(
        "npy",
        "encode_ids_empty_rows_2pow62.npy",
        npy_bytes("<i8", [0, (1 << 62) - 1], b""),
        "encode",
        "TooLarge",
        "ids (0, 2^62 - 1): an output (0, 2^62 - 1, 8) that panicked ndarray (CPU) and the GPU path",
    )
    put(
        "npy",
        "encode_ids_empty_rows_2pow60.npy",
        npy_bytes("<i8", [0, (1 << 60) - 1], b""),
        "encode",
        "TooLarge",
        "ids (0, 2^60 - 1): exited 0 writing an .npy numpy refuses to load",
    )
    put(
        "npy",
        "encode_ids_empty_rows_2pow31.npy",
        npy_bytes("<i4", [1 << 31, 0], b""),
        "encode",
        "TooLarge",
        "2^31 rows of no tokens: (2^31, 0, 8) is 2^34 values with the zero axis set aside",
    )
    put(
        "npy",
        "encode_ids_2pow63_empty_rows_pad.npy",
        npy_bytes("<i8", [(1 << 63) - 1, 0], b""),
        "encode:pad",
        "TooLarge",
        "2^63 - 1 empty rows with --pad-id: a loop over every row (an effective hang)",
    )
    put(
        "npy",
        "encode_ids_2pow63_empty_rows_fairseq.npy",
        npy_bytes("<i8", [(1 << 63) - 1, 0], b""),
        "encode:fairseq",
        "TooLarge",
        "2^63 - 1 empty rows with --variant fairseq: a loop over every row (an effective hang)",
    )
    put(
        "npy",
        "rope_input_empty_heads_2pow20.npy",
        npy_bytes("<f4", [1 << 20, 1 << 20, 0, 8], b""),
        "rope",
        "TooLarge",
        "(2^20, 2^20, 0, 8): positions for 2^40 tokens (4 TiB) were allocated, then abort",
    )
    put(
        "npy",
        "rope_input_empty_heads_2pow16.npy",
        npy_bytes("<f4", [1 << 16, 1 << 16, 0, 8], b""),
        "rope",
        "TooLarge",
        "(2^16, 2^16, 0, 8): positions for 2^32 tokens (16 GiB) from 128 bytes",
    )
    put(
        "npy",
        "rope_input_empty_batch_huge_head_dim.npy",
        npy_bytes("<u2", [0, 4, 4, 1 << 40], b""),
        "rope",
        "TooLarge",
        "no data, and a head_dim of 2^40",
    )
    put(
        "npy",
        "position_table_nan.npy",
        npy_bytes("<f4", [4, 8], f32s(*([0.5] * 13 + [NAN] + [0.0] * 18))),
        "position_table",
        "NonFinite",
        "a learned position table (--position-table) with NaN at row 1, column 5",
    )


def rope_scaling_corpus():
    """Files of tests/corpus/rope_scaling/ added with this script; the older ones there were
    written by hand. Each is named <field>__<what>.json after the field its error names."""
    for name, text in [
        ("factor__duplicate_key.json", '{"rope_type": "linear", "factor": 2.0, "factor": 8.0}'),
        ("rope_type__duplicate_key.json", '{"rope_type": "linear", "rope_type": "dynamic", "factor": 2.0}'),
        ("type__disagrees_with_rope_type.json", '{"rope_type": "linear", "type": "dynamic", "factor": 2.0}'),
    ]:
        with open(os.path.join(HERE, "rope_scaling", name), "w") as f:
            f.write(text + "\n")


def safetensors_corpus():
    table = f32s(*[0.25 * k for k in range(16)])
    good_header = {"embed": {"dtype": "F32", "shape": [2, 8], "data_offsets": [0, 64]}}
    good = safetensors_bytes(good_header, table)
    put("safetensors", "too_short.safetensors", b"abc", "weights", "Format", "shorter than the 8-byte length")
    put("safetensors", "header_len_u64_max.safetensors", struct.pack("<Q", 2**64 - 1) + good[8:], "weights", "Format", "a header length of 2^64 - 1")
    put("safetensors", "header_len_past_end.safetensors", struct.pack("<Q", 5000) + good[8:], "weights", "Format", "a header length past the end of the file")
    put("safetensors", "header_not_json.safetensors", struct.pack("<Q", 10) + b"{not json}", "weights", "Format", "a header that is not JSON")
    put("safetensors", "header_json_array.safetensors", struct.pack("<Q", 2) + b"[]", "weights", "Format", "a JSON array header")
    put("safetensors", "truncated_data.safetensors", good[:-3], "weights", "Format", "data 3 bytes short")
    put("safetensors", "extra_data.safetensors", good + b"\0" * 4, "weights", "Format", "4 bytes past the last tensor")
    put(
        "safetensors",
        "shape_2pow40_elements.safetensors",
        safetensors_bytes({"e": {"dtype": "F32", "shape": [1 << 20, 1 << 20], "data_offsets": [0, 1 << 42]}}, b"\0" * 64),
        "weights",
        "Format",
        "a 4 TiB table declared in a 160-byte file",
    )
    put(
        "safetensors",
        "shape_overflows.safetensors",
        safetensors_bytes({"e": {"dtype": "F32", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 64]}}, table),
        "weights",
        "Format",
        "a shape whose element count overflows 64 bits",
    )
    put(
        "safetensors",
        "shape_disagrees_with_offsets.safetensors",
        safetensors_bytes({"e": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 64]}}, table),
        "weights",
        "Format",
        "8 elements declared over 64 bytes",
    )
    put(
        "safetensors",
        "offsets_reversed.safetensors",
        safetensors_bytes({"e": {"dtype": "F32", "shape": [2, 8], "data_offsets": [64, 0]}}, table),
        "weights",
        "Format",
        "a byte range that ends before it starts",
    )
    put(
        "safetensors",
        "offsets_gap.safetensors",
        safetensors_bytes(
            {
                "a": {"dtype": "F32", "shape": [1, 4], "data_offsets": [0, 16]},
                "b": {"dtype": "F32", "shape": [1, 4], "data_offsets": [32, 48]},
            },
            table[:48],
        ),
        "weights",
        "Format",
        "tensors that leave a hole in the data",
    )
    put(
        "safetensors",
        "negative_dim.safetensors",
        safetensors_bytes({"e": {"dtype": "F32", "shape": [-2, 8], "data_offsets": [0, 64]}}, table),
        "weights",
        "Format",
        "a negative dimension",
    )
    put(
        "safetensors",
        "unknown_dtype.safetensors",
        safetensors_bytes({"e": {"dtype": "Q4", "shape": [2, 8], "data_offsets": [0, 64]}}, table),
        "weights",
        "Format",
        "a dtype safetensors does not know",
    )
    put(
        "safetensors",
        "dtype_i32.safetensors",
        safetensors_bytes({"e": {"dtype": "I32", "shape": [2, 8], "data_offsets": [0, 64]}}, table),
        "weights",
        "Dtype",
        "an int32 table",
    )
    put(
        "safetensors",
        "dtype_f64.safetensors",
        safetensors_bytes({"e": {"dtype": "F64", "shape": [2, 4], "data_offsets": [0, 64]}}, table),
        "weights",
        "Dtype",
        "a float64 table",
    )
    put(
        "safetensors",
        "no_2d_tensor.safetensors",
        safetensors_bytes({"e": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}}, table),
        "weights",
        "Tensor",
        "only a vector, and no tensor named",
    )
    put(
        "safetensors",
        "two_tables_unnamed.safetensors",
        safetensors_bytes(
            {
                "a": {"dtype": "F32", "shape": [1, 8], "data_offsets": [0, 32]},
                "b": {"dtype": "F32", "shape": [1, 8], "data_offsets": [32, 64]},
            },
            table,
        ),
        "weights",
        "Tensor",
        "two 2-D tensors and none named",
    )
    put(
        "safetensors",
        "named_vector.safetensors",
        safetensors_bytes({"e": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}}, table),
        "weights:e",
        "Rank",
        "the named tensor is a vector",
    )
    put(
        "safetensors",
        "named_missing.safetensors",
        good,
        "weights:embedding",
        "Tensor",
        "no tensor of that name",
    )
    put("safetensors", "empty_header.safetensors", safetensors_bytes({}, b""), "weights", "Tensor", "no tensors at all")
    put(
        "safetensors",
        "nan_bf16.safetensors",
        safetensors_bytes({"e": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}, bf16s(1.0, 2.0, 3.0, NAN)),
        "weights",
        "NonFinite",
        "bfloat16 NaN at row 1, column 1",
    )
    put(
        "safetensors",
        "inf_f32.safetensors",
        safetensors_bytes({"e": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, f32s(INF, 0.0, 0.0, 0.0)),
        "weights",
        "NonFinite",
        "+inf at row 0, column 0",
    )
    put(
        "safetensors",
        "nan_f16.safetensors",
        safetensors_bytes({"e": {"dtype": "F16", "shape": [1, 4], "data_offsets": [0, 8]}}, f16s(0.0, 1.0, NAN, 0.0)),
        "weights",
        "NonFinite",
        "float16 NaN",
    )


def positions_corpus():
    for name, text, why in [
        ("empty.txt", "", "no items"),
        ("empty_item.txt", "1,,2", "an empty item"),
        ("trailing_comma.txt", "0..4,", "a trailing comma"),
        ("above_u32.txt", "4294967296", "one above the largest position"),
        ("negative.txt", "-1", "a negative position"),
        ("backwards.txt", "5..2", "a range that runs backwards"),
        ("range_end_too_far.txt", "0..4294967297", "a range past 2^32"),
        ("too_many.txt", "0..4294967296", "2^32 positions, over the 2^24 cap"),
        ("too_many_in_sum.txt", "0..10000000,0..10000000", "two ranges that sum past the cap"),
        ("exponent.txt", "1e3", "scientific notation"),
        ("hex.txt", "0x10", "hexadecimal"),
        ("fraction.txt", "1.5", "a fraction"),
        ("open_range.txt", "5..", "a range without an end"),
        ("triple_dot.txt", "1...3", "three dots"),
        ("huge_number.txt", "99999999999999999999999999999999", "a number past u64"),
        ("fullwidth_digits.txt", "\uff11\uff12", "Unicode digits that are not ASCII"),
        ("nul_byte.txt", "1\u0000", "a NUL byte"),
        ("plus_sign.txt", "+5", "a sign"),
    ]:
        put("positions", name, text, "spec", "PositionSpec", why)


def main():
    for d in ("npy", "safetensors", "positions"):
        shutil.rmtree(os.path.join(HERE, d), ignore_errors=True)
        os.makedirs(os.path.join(HERE, d))
    npy_corpus()
    derived_shape_corpus()
    safetensors_corpus()
    positions_corpus()
    rope_scaling_corpus()
    with open(os.path.join(HERE, "MANIFEST.tsv"), "w") as f:
        f.write("# file\trole\texpected error\twhat is wrong with it\n")
        f.write("# roles: ids (int32/int64/uint32 [B, L] or [L], checked against a 16-row\n")
        f.write("# vocabulary), positions (uint32), weights (.npy or .safetensors table;\n")
        f.write("# weights:NAME names the tensor), position_table (--position-table),\n")
        f.write("# encode (ids through encode's up-front checks with a 16 x 8 table;\n")
        f.write("# encode:pad adds --pad-id 0, encode:fairseq --variant fairseq),\n")
        f.write("# rope (rope --input, --layout blhd),\n")
        f.write("# spec (a --positions SPEC string). Written by generate.py.\n")
        for row in ROWS:
            f.write("\t".join(row) + "\n")


if __name__ == "__main__":
    main()
