#!/usr/bin/env bash
# Session 20: a first-use confirmation kept in the database, on the CPU (device 0, Intel's
# OpenCL CPU runtime, a 2-core Xeon): MobileNet v2 tuned 60 s at batch 1, then run at batch 4
# with --configs confirmed: once with --no-record on a copy, then twice recording.
set -e
cd /work/main
d=/tmp/cpu20
rm -f $d/base.db $d/kept.db
.venv/bin/octune tune --model mobilenet_v2 --time 60s --device 0 --db sqlite:///$d/base.db > $d/tune.log 2>&1
cp $d/base.db $d/kept.db
for run in no-record first second; do
  db=$d/kept.db; flag=""
  [[ $run == no-record ]] && { cp $d/base.db $d/plain.db; db=$d/plain.db; flag=--no-record; }
  .venv/bin/octune run mobilenet_v2 --batch 4 --device 0 --configs confirmed --db sqlite:///$db --repeat 10 $flag \
      --json $d/$run.json > $d/$run.log 2>&1
  python3 -c "
import json, collections; d=json.load(open('$d/$run.json'))
m=collections.Counter(l['match'] for l in d['layers'] if l.get('match') not in (None,'-'))
print('$run', 'kernel_ms', round(d['kernel_s']*1e3,2), 'wall_ms', round(d['wall_s']*1e3,2), 'launches', d['launches'], dict(m))"
  grep -o 'loaded in [0-9.]* s' $d/$run.log
done
