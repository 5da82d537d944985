#!/usr/bin/env python3
"""Redis's usec_per_call (INFO commandstats) of Lua script variants, interleaved.

Each round runs every variant once in a shuffled order (FLUSHALL, CONFIG
RESETSTAT, redis-benchmark -c 1 -n N -r 10^8, then EVALSHA's usec_per_call)
on one redis-server started here; printed per variant: min and median over
the rounds, the median of the per-round ratios to `bare`, and every round.
Used for the "what each cut saved" table of BENCHMARKS.md: copy a script,
remove one part, measure it beside the original and the bare script.

    crates/redis/benches/script_variants.py ROUNDS N name:file:mode ...

mode: `bare` (TIME+GET+SET, file ignored), `empty` (return 1), or the call
the file gets: `admit`/`deny` (one GCRA limit, as server_cost.sh's
lean_admit/lean_deny) or `fadmit`/`fdeny` (one fixed window).
"""
import random
import statistics
import subprocess
import sys
import time

ADMIT_KEY = 'tollgate{bench|u:__rand_int__}W1t9Xq'
HOT_KEY = 'tollgate{bench|hot}c4F2e8'
CALLS = {
    'admit': (ADMIT_KEY, 'c,,1,10,0,g,1,1,1000000,9000000000000,0'),
    'deny': (HOT_KEY, 'c,,1,10,0,g,1,3600000000000,3600000000000,9000000000000,0'),
    'fadmit': (ADMIT_KEY, 'c,,1,10,0,f,1000000,1000000000,0,0,0'),
    'fdeny': (HOT_KEY, 'c,,1,10,0,f,3600000000,1,0,0,0'),
}
BARE = ("local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) "
        "redis.call('SET', KEYS[1], t[2], 'PX', 60000) return 1")


def main():
    rounds, n = int(sys.argv[1]), int(sys.argv[2])
    specs = [s.split(':') for s in sys.argv[3:]]
    port = str(30000 + random.randrange(9000))
    subprocess.run(['redis-server', '--port', port, '--save', '', '--appendonly', 'no',
                    '--daemonize', 'yes', '--pidfile', f'/tmp/tollgate-variants-{port}.pid',
                    '--logfile', f'/tmp/tollgate-variants-{port}.log'], check=True)

    def cli(*args, stdin=None):
        return subprocess.run(['redis-cli', '-p', port, *args], capture_output=True,
                              text=True, input=stdin).stdout.strip()

    for _ in range(50):
        if cli('ping') == 'PONG':
            break
        time.sleep(0.1)
    try:
        cmds = {}
        for name, path, mode in specs:
            if mode == 'empty':
                cmds[name] = ['EVALSHA', cli('SCRIPT', 'LOAD', 'return 1'), '0']
            elif mode == 'bare':
                cmds[name] = ['EVALSHA', cli('SCRIPT', 'LOAD', BARE), '1', 'bare:__rand_int__']
            else:
                with open(path) as f:
                    sha = cli('-x', 'SCRIPT', 'LOAD', stdin=f.read())
                key, args = CALLS[mode]
                cmds[name] = ['EVALSHA', sha, '1', key, *args.split(',')]
        print('load before', open('/proc/loadavg').read().strip())
        usec = {name: [] for name, _, _ in specs}
        for _ in range(rounds):
            order = list(specs)
            random.shuffle(order)
            for name, _, _ in order:
                cli('FLUSHALL')
                cli('CONFIG', 'RESETSTAT')
                subprocess.run(['redis-benchmark', '-p', port, '-c', '1', '-n', str(n),
                                '-r', '100000000', '-q', *cmds[name]], capture_output=True)
                stat = [line for line in cli('INFO', 'commandstats').splitlines()
                        if line.startswith('cmdstat_evalsha:')][0]
                usec[name].append(float(stat.split('usec_per_call=')[1].split(',')[0]))
        print('load after', open('/proc/loadavg').read().strip())
        base = usec.get('bare')
        for name, _, _ in specs:
            v = usec[name]
            line = f'{name:14s} min {min(v):5.2f} med {statistics.median(v):5.2f}'
            if base:
                ratios = [a / b for a, b in zip(v, base)]
                line += (f' ratio med {statistics.median(ratios):.3f} max {max(ratios):.2f}'
                         f' | rounds {" ".join(f"{x:.2f}" for x in v)}')
            print(line)
    finally:
        cli('shutdown', 'nosave')


if __name__ == '__main__':
    main()
