#!/usr/bin/env python3
"""Prints a two-link mix (the format of scripts/mix.sh) whose link LINK loses its packets
in bursts: remote outages (neither end is told) of DUR_MS each, starting 0.3-1.5 s apart
at random (seeded by SEED), from 1 s on, beside 0.5 % random loss on the same link. One
TCP flow, the aggregate policy, 1000-packet FIFOs, 20 s.

  scripts/outage-mix.py DIRECTION DUR_MS LINK SEED RATE_A RATE_B DELAY_A DELAY_B > FILE

  e.g. scripts/outage-mix.py down 50 0 1 20 5 10 100 > /tmp/o.toml
       latebind sim /tmp/o.toml --mode late --json
"""
import random
import sys

if len(sys.argv) != 9 or sys.argv[1] not in ("up", "down"):
    sys.exit(__doc__)
direction, dur, which, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rates, delays = sys.argv[5:7], sys.argv[7:9]
rng = random.Random(seed)
t, outages = 1.0, []
while t < 19.5:
    outages.append([round(t, 3), round(t + dur / 1000, 3)])
    t += dur / 1000 + rng.uniform(0.3, 1.5)
print(f'[scenario]\nname = "outage-mix"\nduration_s = 20.0\nseed = {seed}')
for i in range(2):
    print(f'[[links]]\nname = "l{i}"\nrate_mbps = {rates[i]}\ndelay_ms = {delays[i]}\nqueue_packets = 1000')
    if i == which:
        print(f"loss = 0.005\noutage_local = false\noutages = {outages}")
print(f'[[flows]]\nname = "bulk"\nkind = "tcp-bulk"\ndirection = "{direction}"')
print('[late]\npolicy = "aggregate"')
