import json,glob,statistics as st,collections
rows=collections.defaultdict(list)
for f in sorted(glob.glob('sbs-*.json')):
    _,phase,bin,sync,rnd=f[:-5].split('-')
    r=json.load(open(f))
    copy=sum(o['copy_us']*o.get('layers',1) for o in r['per_op'])
    pcopy=sum(o['predicted_copy_us']*o.get('layers',1) for o in r['per_op'])
    rows[(phase,bin,sync)].append((r['measured_us'],r['predicted_us'],r['ratio'],copy,pcopy,r['check']['passed'],r['check']['outputs'],r['dispatch']['median_us']))
    print(f, round(r['predicted_us']), round(r['measured_us']), round(r['ratio'],3), 'copy', round(copy), 'pred copy', round(pcopy), 'check', r['check']['passed'], '/', r['check']['outputs'], 'dispatch', round(r['dispatch']['median_us'],2), round(r['dispatch']['p90_us'],2))
for k,v in sorted(rows.items()):
    print(k, 'ratios', [round(x[2],3) for x in v], 'median', round(st.median(x[2] for x in v),3), 'copy median', round(st.median(x[3] for x in v)))
