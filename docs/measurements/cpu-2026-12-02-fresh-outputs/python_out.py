import numpy as np, posenc, time, statistics as st, json
rng=np.random.default_rng(0)
x=rng.standard_normal((1,2048,32,128)).astype(np.float32)
o=np.empty_like(x); y=x.copy()
W=(rng.integers(0,2**16,(32000,4096)) & 0x3f7f).astype(np.uint16)
ids=rng.integers(0,32000,(1,2048)); eo=np.empty((1,2048,4096),np.float32)
def tm(f,n=15):
    ts=[]
    for _ in range(n):
        a=time.perf_counter(); f(); ts.append((time.perf_counter()-a)*1e3)
    return round(st.median(ts),2), round(min(ts),2)
for r in range(3):
    res={"round":r}
    res["rope_new"]=tm(lambda: posenc.rope(x, layout="blhd", device="cpu"))
    res["rope_out"]=tm(lambda: posenc.rope(x, layout="blhd", device="cpu", out=o))
    res["rope_inplace"]=tm(lambda: posenc.rope(y, layout="blhd", device="cpu", out=y))
    res["encode_new"]=tm(lambda: posenc.encode(W, ids, device="cpu"))
    res["encode_out"]=tm(lambda: posenc.encode(W, ids, device="cpu", out=eo))
    print(json.dumps(res), flush=True)
