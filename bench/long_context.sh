#!/bin/bash
# Long-context measurements (docs/performance.md "Long context"): A/B prefill/decode at 16K/64K
# (OLD: a build of the previous version, NEW: this tree), perplexity and logits error per --cache-type,
# k3 bench -d. Needs /tmp/k3-lc-16k.txt and /tmp/k3-lc-64k.txt (the first 70,000 / 280,000
# characters of the KJV text of tools/train/data.py).
cd "$(dirname "$0")/.."
OLD=${OLD:-/work/main/build/tools/cli/k3}; NEW=${NEW:-build/tools/cli/k3}; M=models/k3-mini
echo "== A/B prefill+decode, K3-mini, 2 threads, interleaved (OLD vs NEW)"; uptime
for r in 1 2 3; do for b in OLD NEW; do eval bin=\$$b
  echo -n "$b 16K r$r: "; $bin run -m $M -f /tmp/k3-lc-16k.txt -c 17000 -n 16 --temp 0 -t 2 2>&1 | tail -1 | cut -c1-120; done; done
uptime
for b in OLD NEW; do eval bin=\$$b
  echo -n "$b 64K: "; $bin run -m $M -f /tmp/k3-lc-64k.txt -c 66000 -n 16 --temp 0 -t 2 2>&1 | tail -1 | cut -c1-120; done
uptime
echo "== perplexity heldout by cache type"
for c in 4096 14600; do for t in f32 bf16 fp8; do echo -n "ctx $c $t: "; $NEW perplexity -m $M -f $M/heldout.txt -c $c -t 2 --cache-type $t --json 2>/dev/null | tr -d '\n' | cut -c1-200; echo; done; done
echo "== logits rel-L2 vs f32 (first 8192 KJV tokens, teacher-forced)"
$NEW tokenize -m $M -f /tmp/k3-lc-16k.txt --ids-only | tr ' ' '\n' | head -8192 | tr '\n' ',' | sed 's/,$//' > /tmp/k3-lc-ids8k.txt
for t in f32 bf16 fp8; do $NEW logits -m $M --ids-file /tmp/k3-lc-ids8k.txt --cache-type $t --out /tmp/k3-lc-logits-$t.npy -t 2 > /dev/null 2>&1 || $NEW logits -m $M --ids-file /tmp/k3-lc-ids8k.txt --cache-type $t --out /tmp/k3-lc-logits-$t.npy > /dev/null; done
.venv/bin/python - <<'PY'
import numpy as np
f=np.load('/tmp/k3-lc-logits-f32.npy')
for t in ['bf16','fp8']:
    g=np.load(f'/tmp/k3-lc-logits-{t}.npy')
    for lo,hi in [(0,1024),(0,8192),(7168,8192)]:
        a,b=f[lo:hi],g[lo:hi]
        print(t, f'rows {lo}-{hi}', 'rel-L2 %.3e'%(np.linalg.norm(a-b)/np.linalg.norm(a)), 'argmax agree %.4f'%np.mean(a.argmax(1)==b.argmax(1)))
PY
rm -f /tmp/k3-lc-logits-*.npy
echo "== bench -d (K3-mini)"; uptime
for t in f32 bf16; do $NEW bench -m $M -t 2 -p 256 -n 32 -r 2 -d 1024,8192,32768 --cache-type $t; done
uptime
