"""How many of this process's CPUs other processes keep busy: the busy time /proc/stat counts on
those CPUs (steal included: a hypervisor's other guests), minus this process's own CPU time,
over the interval since the previous reading. Linux only; elsewhere the load average stands in."""
import os
import threading
import time


def process_cpus():
    """The CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _read_proc_stat(cpus):
    """(busy, total) jiffies of `cpus`, or None when /proc/stat cannot be read."""
    wanted = {f"cpu{c}" for c in cpus}
    busy = total = 0
    try:
        with open("/proc/stat") as stat:
            for line in stat:
                fields = line.split()
                if fields and fields[0] in wanted:
                    # user nice system idle iowait irq softirq steal (guest is within user).
                    values = [int(v) for v in fields[1:9]]
                    total += sum(values)
                    busy += sum(values) - values[3] - values[4]
    except (OSError, ValueError, IndexError):
        return None
    return busy, total


def _own_cpu_seconds():
    times = os.times()
    return times.user + times.system


class OtherLoad:
    """Cores of this process's CPUs that other processes used, averaged over the last interval
    of at least `interval` seconds; `read_stat`, `own_cpu` and `clock` are injectable for tests."""

    def __init__(self, interval=0.25, read_stat=_read_proc_stat, own_cpu=_own_cpu_seconds,
                 clock=time.monotonic):
        self.cpus = process_cpus()
        self.interval = interval
        self._read_stat, self._own_cpu, self._clock = read_stat, own_cpu, clock
        self._ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last = self._checked = None
        self._cores = self._load_average()
        self._lock = threading.Lock()

    def _sample(self, clock):
        stat = self._read_stat(self.cpus)
        return None if stat is None else (clock, stat[0], self._own_cpu())

    def _load_average(self):
        """Before two readings exist: the load average, this process included (it may have
        just started), so a busy machine is not taken for a quiet one; the first interval
        corrects a quiet machine's estimate."""
        try:
            return max(0.0, min(float(len(self.cpus)), os.getloadavg()[0]))
        except (AttributeError, OSError):
            return 0.0

    def cores(self):
        """The current estimate (cores, a float from 0 to the number of CPUs)."""
        with self._lock:
            return self._update()

    def _update(self):
        """A new estimate at most once an interval (a run may be much shorter than one)."""
        clock = self._clock()
        if self._checked is not None and clock - self._checked < self.interval:
            return self._cores
        self._checked = clock
        now = self._sample(clock)
        if now is None:
            self._cores = self._load_average()
        elif self._last is not None:
            wall = now[0] - self._last[0]
            busy = (now[1] - self._last[1]) / self._ticks
            own = now[2] - self._last[2]
            self._cores = min(float(len(self.cpus)), max(0.0, (busy - own) / wall))
        self._last = now
        return self._cores

_shared = None


def shared():
    """One estimate for the whole process, so every Session starts from what earlier runs saw."""
    global _shared
    if _shared is None:
        _shared = OtherLoad()
    return _shared
