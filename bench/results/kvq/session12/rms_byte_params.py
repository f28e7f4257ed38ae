#!/usr/bin/env python3
# Session 12 analysis (issue 12): relative RMS error of K and V (q8, q4) under the v1.3 parameters
# (f16 scale and minimum) and the byte-parameter variants, on an f32 ratio-0.3 cache of the Normans
# article, rotated rows, channel scales, prefix rows left out (bench/kvq_grouping.py's reader).
# Run with the pyenv python3 (numpy): python3 rms_byte_params.py f32_0.3.kvz
import os
import sys, numpy as np
sys.argv=[sys.argv[0]]+sys.argv[1:]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../..'))
import kvq_grouping as K
K.SKIP_PREFIX=True
E=np.array([ (16+(c&15))*2.0**((c>>4)-22) for c in range(256)])
def qb(x,bits,zero=True,byte_s=True,byte_z=True):
    levels=(1<<bits)-1
    lo,hi=x.min(1,keepdims=True),x.max(1,keepdims=True)
    if zero: lo,hi=np.minimum(lo,0),np.maximum(hi,0)
    need=(hi-lo)/levels
    if byte_s:
        idx=np.searchsorted(E,need[:,0]); idx=np.minimum(idx,255); s=E[idx][:,None]
    else: s=K.f16(need)
    if byte_z:
        z=np.clip(np.rint(-lo/s*2.0**(8-bits)),0,255); m=-s*z*2.0**(bits-8)
    else: m=K.f16(lo); s=s if byte_s else K.f16((hi-m)/levels)
    q=np.clip(np.rint((x-m)/s),0,levels); return m+s*q
def sch(**kw):
    return K.rotated(lambda x,b: K.per_token(x,b,x.shape[1],True,K.chan_absmax(x)) if not kw else pt(x,b,kw))
def pt(x,b,kw):
    c=K.chan_absmax(x); y=x/c; return qb(y,b,**kw)*c
layers,D=K.read_kvz(sys.argv[1])
schemes={"v1.3":sch(),"byte s+z":sch(zero=True),"zero-incl f16":sch(zero=True,byte_s=False,byte_z=False),
 "byte s only":sch(zero=False,byte_s=True,byte_z=False),"byte z only":sch(zero=True,byte_s=False,byte_z=True)}
for name,fn in schemes.items():
    cells=[]
    for which in (0,1):
        for bits in (8,4):
            num=den=0.0
            for layer in layers:
                for head in layer:
                    x=head[which].astype(np.float64)
                    if x.shape[0]==0: continue
                    r=fn(x,bits); num+=((x-r)**2).sum(); den+=(x**2).sum()
            cells.append(f"{np.sqrt(num/den):.4f}")
    print(name, cells, flush=True)
