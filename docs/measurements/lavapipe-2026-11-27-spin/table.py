"""Prints the medians (us) of each wall-clock item, spin 0 against 300, three runs each."""
import collections, json, os, sys

NAMES = ('gpu_encode_call', 'gpu_encode_host', 'gpu_encode_mapped', 'gpu_encode_stream',
         'gpu_readback', 'gpu_copy_ceiling_call', 'gpu_encode')
for form in ('spin', 'yield', 'workdone', 'final'):
    print(f'## {form}')
    for m in ('llama3-8b-decode', 'mistral-7b-decode', 'bert-base'):
        for s in (0, 300):
            rows = collections.defaultdict(list)
            for i in (1, 2, 3):
                f = os.path.join(os.path.dirname(__file__) or '.', form, f'{m}-spin{s}-{i}.json')
                if os.path.exists(f) and os.path.getsize(f):
                    for it in json.load(open(f))['results']:
                        if it['name'] in NAMES:
                            rows[it['name']].append(it['median_s'] * 1e6)
            cells = '  '.join('%s %s' % (k.replace('gpu_', ''), ' / '.join('%.0f' % x for x in v))
                              for k, v in rows.items())
            print(f'{m} POSENC_GPU_SPIN_US={s}: {cells}')
