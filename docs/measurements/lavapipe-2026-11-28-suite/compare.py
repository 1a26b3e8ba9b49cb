import json,sys,collections
runs=collections.defaultdict(dict)
for v in ('old','new'):
    for i in (1,2):
        d=json.load(open(f'./{v}-{i}.json'))
        for sec in ('suite','ops'):
            for r in d.get(sec,[]):
                m=r.get('model') or r.get('preset') or r.get('name')
                key=(sec,m, r.get('sizes',{}).get('dtype') if isinstance(r.get('sizes'),dict) else None)
                for it in r.get('results',r.get('items',[])):
                    runs[(key,it['name'])].setdefault(v,[]).append((it['median_s'], it.get('ratio')))
print("%-45s %-28s %-22s %-22s"%('preset','item','old ms (ratio)','new ms (ratio)'))
for (key,name),vv in runs.items():
    if 'copy' in name or 'floor' in name or 'readback' in name: continue
    f=lambda l: ' '.join('%.3g(%s)'%(s*1e3, '-' if r is None else '%.2f'%r) for s,r in l)
    print("%-45s %-28s %-22s %-22s"%(str(key[1])+' '+str(key[2] or ''),name,f(vv.get('old',[])),f(vv.get('new',[]))))
