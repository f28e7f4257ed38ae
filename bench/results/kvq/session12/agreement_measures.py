#!/usr/bin/env python3
# Session 12 analysis (issue 12): agreement of each non-f32 cache's answers with the f32 cache's
# answers of the same ratio, four ways: exact (all 24 tokens equal, what `kvzip eval` reports),
# first sentence equal, first five words equal (SQuAD-normalised), and the SQuAD token F1 of the
# answer against the f32 answer. Input: `kvzip eval --answers` files (.jsonl or .jsonl.gz), one
# ratio each. Run with any python3: python3 agreement_measures.py variant_*_answers.jsonl.gz
import gzip
import json, sys, re, collections
def norm(s):
    s=s.lower(); s=re.sub(r'[^\w\s]',' ',s); s=re.sub(r'\b(a|an|the)\b',' ',s); return s.split()
def f1(a,b):
    a,b=norm(a),norm(b)
    if not a or not b: return float(a==b)
    c=sum((collections.Counter(a)&collections.Counter(b)).values())
    if c==0: return 0.0
    p=c/len(a); r=c/len(b); return 2*p*r/(p+r)
for path in sys.argv[1:]:
    rows=[json.loads(l) for l in (gzip.open(path, 'rt') if path.endswith('.gz') else open(path))]
    f32={(r['id'], r['ratio']):r for r in rows if r['kv_dtype']=='f32' and r['method']!='full'}
    for ratio in sorted({r['ratio'] for r in rows if r['method']!='full'}, reverse=True):
        for dt in sorted({r['kv_dtype'] for r in rows} - {'f32'}):
            q=[r for r in rows if r['kv_dtype']==dt and r['ratio']==ratio]
            if not q: continue
            ref=lambda r: f32[(r['id'], r['ratio'])]['answer']
            ex=sum(r['answer']==ref(r) for r in q)/len(q)
            ff=sum(f1(r['answer'],ref(r)) for r in q)/len(q)
            first=sum(r['answer'].split('.')[0]==ref(r).split('.')[0] for r in q)/len(q)
            w5=sum(norm(r['answer'])[:5]==norm(ref(r))[:5] for r in q)/len(q)
            print(f"{path} ratio {ratio} {dt}: exact {100*ex:.1f}  first-sentence {100*first:.1f}  first5words {100*w5:.1f}  F1-vs-f32 {100*ff:.1f}")
