"""PyTorch on CUDA at posenc's bench shapes, device time per call from CUDA graphs.

Run beside `posenc bench --suite --json` on the same machine (benches/peers/README.md).

Encode: out[b,t] = f32(E[ids[b,t]]) + pe[pos[b,t]] (pe an f32 table cached on the device),
eager and torch.compile'd. RoPE: Hugging Face's rotary (cos/sin from position ids in
float32, then q*cos + rotate_half(q)*sin for q and k; partial rotary as Phi's), eager and
compiled. ALiBi: BLOOM's bias (slopes times -distance), eager and compiled. Ceilings in the
same run: a device copy of the output's bytes; reading the output back to pageable and to
pinned host memory; a copy of the encode's bytes as posenc's bench counts them; a
one-element kernel per call (CUDA's floor, beside posenc's dispatch floor). One JSON line
per figure on stdout.
"""
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

dev = torch.device("cuda")
T0 = time.time()
COMPILE_BUDGET = float(os.environ.get("COMPILE_BUDGET", "150"))
compile_spent = 0.0


def emit(**kw):
    print(json.dumps(kw), flush=True)


def graph_time(fn, calls=20, replays=7):
    """Seconds per call of fn, device time, from a CUDA graph of `calls` calls."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / calls)
    times.sort()
    return times[len(times) // 2]


def wall_time(fn, iters=20):
    """Seconds per call by the wall clock, synchronising after each (a blocking call)."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]


def compiled(fn):
    global compile_spent
    if compile_spent > COMPILE_BUDGET:
        return None
    c = torch.compile(fn, fullgraph=True, dynamic=False)
    return c


PRESETS = [
    ("default", 8, 1024, 1024, 32000, torch.float32),
    ("bert-base", 32, 128, 768, 30522, torch.float32),
    ("gpt2", 8, 1024, 768, 50257, torch.float32),
    ("llama3-8b", 1, 2048, 4096, 128256, torch.bfloat16),
    ("llama3-8b-decode", 8, 1, 4096, 128256, torch.bfloat16),
    ("mistral-7b-decode", 1, 1, 4096, 32768, torch.bfloat16),
    ("whisper-small", 8, 448, 768, 51865, torch.float32),
]


def sinusoid(n, d):
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float64)
    ang = pos * torch.exp(-i * (torch.log(torch.tensor(10000.0, dtype=torch.float64)) / d))
    pe = torch.zeros(n, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(ang)
    pe[:, 1::2] = torch.cos(ang)
    return pe.float()


def encode_presets():
    global compile_spent
    g = torch.Generator(device="cpu").manual_seed(0)
    for name, B, L, D, V, dt in PRESETS:
        E = (torch.rand(V, D, generator=g) - 0.5).to(dt).to(dev)
        ids = torch.randint(0, V, (B, L), generator=g).to(dev)
        pos = (torch.arange(L)[None, :].expand(B, L)).contiguous().to(dev)
        pe = sinusoid(max(L, 4096), D).to(dev)
        out = torch.empty(B, L, D, dtype=torch.float32, device=dev)
        src = torch.empty_like(out)
        bytes_rw = 2 * out.numel() * 4  # the copy ceiling's bytes, read + written
        enc_bytes = B * L * (4 + 4 + D * (E.element_size() + 4))  # ids, pos, rows, out (posenc counts ids + rows + out)

        def eager():
            torch.add(F.embedding(ids, E).float(), pe[pos], out=out)

        copy_t = graph_time(lambda: out.copy_(src))
        # A copy of the bytes the encode moves (posenc's bench counts the same since
        # 2026-12-04): ids and positions, gathered rows, each distinct position's f32 PE row
        # once, the output; half read, half written.
        # As f32 words: a uint8 tensor's copy took 8.1 us for whisper-small's bytes on an
        # H200 where its f32 output's took 4.3 (2026-12-04), a slow path of the byte copy.
        moved = B * L * 8 + B * L * D * E.element_size() + L * D * 4 + B * L * D * 4
        half = moved // 8 * 4
        a32 = torch.empty(half // 4, dtype=torch.float32, device=dev)
        b32 = torch.empty_like(a32)
        moved_t = graph_time(lambda: b32.copy_(a32))
        del a32, b32
        eager_t = graph_time(eager)
        eager_wall = wall_time(eager)
        emit(op="encode", model=name, shape=[B, L, D, V], dtype=str(dt), copy_s=copy_t,
             copy_gbps=bytes_rw / copy_t / 1e9, moved_bytes=2 * half, moved_copy_s=moved_t,
             eager_s=eager_t, eager_ratio=copy_t / eager_t, eager_wall_s=eager_wall)
        # Readback ceilings of the output (what a host result costs).
        host = torch.empty(out.shape, dtype=out.dtype)
        pinned = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
        nb = out.numel() * 4
        pageable_t = wall_time(lambda: host.copy_(out), iters=10)
        pinned_t = wall_time(lambda: pinned.copy_(out, non_blocking=True), iters=10)
        emit(op="readback", model=name, bytes=nb, pageable_s=pageable_t,
             pageable_gbps=nb / pageable_t / 1e9, pinned_s=pinned_t, pinned_gbps=nb / pinned_t / 1e9)
        t = time.time()
        c = compiled(lambda: F.embedding(ids, E).float() + pe[pos])
        if c is not None:
            try:
                def comp():
                    out.copy_(c())
                r = c()
                torch.cuda.synchronize()
                compile_spent += time.time() - t
                ref = F.embedding(ids, E).float() + pe[pos]
                same = bool(torch.equal(r, ref))
                # Timed without the extra copy: the compiled kernel writes its own output.
                comp_t = graph_time(lambda: c())
                emit(op="encode_compiled", model=name, compiled_s=comp_t, compiled_ratio=copy_t / comp_t,
                     same_as_eager=same, compile_s=time.time() - t)
            except Exception as e:  # noqa: BLE001
                emit(op="encode_compiled", model=name, error=str(e)[:300])


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def llama3_inv_freq(d=128, base=500000.0, factor=8.0, low=1.0, high=4.0, orig=8192):
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    low_wl = orig / low
    high_wl = orig / high
    wl = 2 * torch.pi / inv
    inv_l = torch.where(wl > low_wl, inv / factor, inv)
    smooth = (orig / wl - low) / (high - low)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    med = ~(wl < high_wl) * ~(wl > low_wl)
    return torch.where(med, smoothed, inv_l)


def default_inv_freq(r, base):
    return 1.0 / (base ** (torch.arange(0, r, 2, dtype=torch.int64).float() / r))


# (name, B, L, q heads, k heads, head dim, rotary dim, dtype, inv_freq, first position,
# mrope_section), as posenc bench's RoPE presets: llama3-8b-rope, llama3-8b-rope-decode,
# phi-2-rope, qwen2.5-vl-7b-rope.
ROPE_SHAPES = [
    ("llama3-8b-rope", 1, 2048, 32, 8, 128, 128, torch.bfloat16, lambda: llama3_inv_freq(), 0, None),
    ("llama3-8b-rope-decode", 8, 1, 32, 8, 128, 128, torch.bfloat16, lambda: llama3_inv_freq(), 1000, None),
    ("phi-2-rope", 1, 2048, 32, 32, 80, 32, torch.float16, lambda: default_inv_freq(32, 10000.0), 0, None),
    ("qwen2.5-vl-7b-rope", 1, 2048, 28, 4, 128, 128, torch.bfloat16, lambda: default_inv_freq(128, 1e6), 0,
     [16, 24, 24]),
]


def mrope_position_ids(B, L, before=16, side=36):
    """[3, B, L] position ids as Qwen2-VL's get_rope_index numbers `before` text tokens, one
    still image of side x side tokens, then text (posenc's bench::ops::mrope_positions)."""
    pos = torch.empty(3, L, dtype=torch.int64)
    for l in range(L):
        if l < before:
            pos[:, l] = l
        elif l < before + side * side:
            i = l - before
            pos[:, l] = torch.tensor([before, before + i // side, before + i % side])
        else:
            pos[:, l] = before + side + (l - before - side * side)
    return pos[:, None, :].expand(3, B, L).contiguous()


def rope_shapes():
    global compile_spent
    for name, B, L, HQ, HK, D, R, dt, make_inv, start, section in ROPE_SHAPES:
        inv = make_inv().to(dev)
        q = torch.randn(B, HQ, L, D, dtype=dt, device=dev)
        k = torch.randn(B, HK, L, D, dtype=dt, device=dev)
        pid = (torch.arange(L)[None, :] + start).expand(B, L).contiguous().to(dev)
        if section is not None:
            pid3 = (mrope_position_ids(B, L) + start).to(dev)
        qo = torch.empty_like(q)
        ko = torch.empty_like(k)

        def rotated(x, cos, sin):
            # Hugging Face's partial rotary (Phi, GPT-NeoX): rotate the first R dims only.
            if R == D:
                return x * cos + rotate_half(x) * sin
            xr, xp = x[..., :R], x[..., R:]
            return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)

        def cos_sin():
            if section is not None:
                # Qwen2.5-VL's rotary embedding and apply_multimodal_rotary_pos_emb: cos/sin
                # per axis, then each run of the section (twice over) from its axis.
                inv3 = inv[None, None, :, None].float().expand(3, B, -1, 1)
                freqs = (inv3 @ pid3[:, :, None, :].float()).transpose(2, 3)
                emb = torch.cat((freqs, freqs), dim=-1)

                def pick(t):
                    parts = t.split(section * 2, dim=-1)
                    return torch.cat([m[i % 3] for i, m in enumerate(parts)], dim=-1)

                return pick(emb.cos().to(dt)).unsqueeze(1), pick(emb.sin().to(dt)).unsqueeze(1)
            freqs = (inv[None, :, None].float() @ pid[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(dt).unsqueeze(1), emb.sin().to(dt).unsqueeze(1)

        def hf():
            cos, sin = cos_sin()
            qo.copy_(rotated(q, cos, sin))
            ko.copy_(rotated(k, cos, sin))

        nbytes = (q.numel() + k.numel()) * q.element_size()
        qs, ks = torch.empty_like(q), torch.empty_like(k)

        def cp():
            qs.copy_(q)
            ks.copy_(k)

        copy_t = graph_time(cp)
        hf_t = graph_time(hf)
        emit(op="rope", model=name, q=list(q.shape), k=list(k.shape), rotary_dim=R, bytes_rw=2 * nbytes,
             copy_s=copy_t, copy_gbps=2 * nbytes / copy_t / 1e9, hf_eager_s=hf_t, hf_eager_ratio=copy_t / hf_t)
        t = time.time()

        def hf_ret():
            cos, sin = cos_sin()
            return rotated(q, cos, sin), rotated(k, cos, sin)

        c = compiled(hf_ret)
        if c is not None:
            try:
                c()
                torch.cuda.synchronize()
                compile_spent += time.time() - t
                comp_t = graph_time(lambda: c())
                emit(op="rope_compiled", model=name, compiled_s=comp_t, compiled_ratio=copy_t / comp_t,
                     compile_s=time.time() - t)
            except Exception as e:  # noqa: BLE001
                emit(op="rope_compiled", model=name, error=str(e)[:300])


def alibi_shapes():
    """ALiBi bias [heads, len, kv_len] f32 as BLOOM builds it (slopes times -distance), eager
    and compiled, beside a device write (fill) of the same bytes."""
    global compile_spent
    for name, H, L, KV in [("bloom-7b1-alibi", 32, 512, 512), ("bloom-7b1-alibi-decode", 32, 1, 2048)]:
        n = 2 ** math.floor(math.log2(H))
        base = 2 ** (-(2 ** -(math.log2(n) - 3)))
        slopes = torch.tensor([base ** (i + 1) for i in range(H)], dtype=torch.float32, device=dev)
        q = torch.arange(KV - L, KV, device=dev)
        kpos = torch.arange(KV, device=dev)
        out = torch.empty(H, L, KV, dtype=torch.float32, device=dev)

        def eager():
            d = (q[:, None] - kpos[None, :]).abs().float()
            torch.mul(slopes[:, None, None], -d[None], out=out)

        fill_t = graph_time(lambda: out.fill_(1.0))
        eager_t = graph_time(eager)
        nbytes = out.numel() * 4
        emit(op="alibi", model=name, shape=[H, L, KV], bytes=nbytes, fill_s=fill_t, fill_gbps=nbytes / fill_t / 1e9,
             eager_s=eager_t, eager_ratio=fill_t / eager_t)
        t = time.time()
        c = compiled(lambda: -(slopes[:, None, None] * (q[:, None] - kpos[None, :]).abs().float()[None]))
        if c is not None:
            try:
                c()
                torch.cuda.synchronize()
                compile_spent += time.time() - t
                comp_t = graph_time(lambda: c())
                emit(op="alibi_compiled", model=name, compiled_s=comp_t, compiled_ratio=fill_t / comp_t)
            except Exception as e:  # noqa: BLE001
                emit(op="alibi_compiled", model=name, error=str(e)[:300])


if __name__ == "__main__":
    emit(op="info", torch=torch.__version__, device=torch.cuda.get_device_name(0))
    # CUDA's floor, beside posenc's gpu_dispatch_floor: a one-element kernel per call in a
    # CUDA graph (a kernel boundary with nothing to do).
    one = torch.zeros(1, device=dev)
    emit(op="floor", floor_s=graph_time(lambda: one.add_(1.0), calls=200))
    which = sys.argv[1:] or ["encode", "rope", "alibi"]
    for part, fn in (("rope", rope_shapes), ("alibi", alibi_shapes), ("encode", encode_presets)):
        if part in which:
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                emit(op=part, error=repr(e)[:400])
    emit(op="done", seconds=time.time() - T0, compile_spent=compile_spent)
