#!/usr/bin/env python3
"""Two builds' `posenc bench --suite --json` runs side by side: every item's median in
milliseconds with its ratio, the runs of each build in order (copies, floors and readbacks
left out). DIR holds old-1.json, old-2.json, new-1.json and new-2.json.

    python3 benches/device/suites.py DIR > DIR/compare.txt
"""
import collections
import json
import sys
from pathlib import Path


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = Path(sys.argv[1])
    runs = collections.defaultdict(dict)
    for v in ('old', 'new'):
        for i in (1, 2):
            d = json.load(open(folder / f'{v}-{i}.json'))
            for sec in ('suite', 'ops'):
                for r in d.get(sec, []):
                    m = r.get('model') or r.get('preset') or r.get('name')
                    sizes = r.get('sizes')
                    key = (sec, m, sizes.get('dtype') if isinstance(sizes, dict) else None)
                    for it in r.get('results', r.get('items', [])):
                        runs[(key, it['name'])].setdefault(v, []).append(
                            (it['median_s'], it.get('ratio')))
    print("%-45s %-28s %-22s %-22s" % ('preset', 'item', 'old ms (ratio)', 'new ms (ratio)'))
    for (key, name), vv in runs.items():
        if 'copy' in name or 'floor' in name or 'readback' in name:
            continue

        def cells(runs_of):
            return ' '.join('%.3g(%s)' % (s * 1e3, '-' if r is None else '%.2f' % r)
                            for s, r in runs_of)

        print("%-45s %-28s %-22s %-22s" % (str(key[1]) + ' ' + str(key[2] or ''), name,
                                           cells(vv.get('old', [])), cells(vv.get('new', []))))


if __name__ == '__main__':
    main()
