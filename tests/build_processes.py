"""Tests' view of the detached build processes (``jitgrad/codegen/native/build_procs.py``): which run on a
cache directory, and waiting for them by their progress (they outlive the script that started them)."""
import os
import time


def builders(cache_dir) -> dict:
    """{pid: CPU ticks used so far} of the build processes working on ``cache_dir`` (their command lines name
    the job files in it)."""
    found = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = open(f"/proc/{d}/cmdline", "rb").read()
                if b"jitgrad.codegen.native.build" not in cmd or str(cache_dir).encode() not in cmd:
                    continue
                stat = open(f"/proc/{d}/stat").read()
            except OSError:
                continue        # it exited meanwhile
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z":                            # (a zombie has finished)
                found[d] = int(fields[11]) + int(fields[12])    # utime + stime
    return found


def wait_for_builders(cache_dir, stall=120, limit=900):
    """Build processes are detached: wait until none runs on this cache directory.  A loaded machine only makes
    them slower, so the wait is bounded by their progress, not by a deadline: it fails when they use no CPU time
    for ``stall`` seconds (a hung build), or after ``limit`` seconds whatever they do."""
    t0 = last_progress = time.monotonic()
    seen = {}
    while True:
        now_running = builders(cache_dir)
        if not now_running:
            return
        now = time.monotonic()
        if any(seen.get(pid) != ticks for pid, ticks in now_running.items()):
            last_progress = now
        seen = now_running
        if now - last_progress > stall:
            raise AssertionError(f"build processes {sorted(now_running)} used no CPU time for {stall} s")
        if now - t0 > limit:
            raise AssertionError(f"build processes {sorted(now_running)} still running after {limit} s")
        time.sleep(0.2)
