#!/usr/bin/env bash
# Placement of epilogues on the CPU: octune run each network three ways, alternating, twice.
cd /work/main
# The database: .venv/bin/octune tune --model mobilenet_v2 --time 60s --device 0 --db sqlite:////tmp/cpu19/m.db
#               .venv/bin/octune tune --model resnet18 --time 60s --device 0 --db sqlite:////tmp/cpu19/m.db
for round in 1 2; do
  for net in mobilenet_v2 resnet18; do
    for mode in --fuse --no-fuse default; do
      flag=$mode; [[ $mode == default ]] && flag=""
      start=$(date +%s.%N)
      .venv/bin/octune run $net --device 0 --db sqlite:////tmp/cpu19/m.db --configs tuned --repeat 10 $flag \
          --json /tmp/cpu19/$net.$mode.$round.json > /tmp/cpu19/$net.$mode.$round.log 2>&1
      end=$(date +%s.%N)
      python3 -c "
import json; d=json.load(open('/tmp/cpu19/$net.$mode.$round.json'))
print('$round $net $mode', 'kernel_ms', round(d.get('kernel_ms', 0),2), 'wall_ms', round(d.get('wall_ms',0),2), 'launches', d['launches'], 'load+run s', round($end-$start,1))"
    done
  done
done
