"""What the comparison scripts print about the machine they ran on, and the busy processes they
compete with (standard library only, so a TensorFlow or PyTorch worker process without fqcore can
import it too)."""
import contextlib
import os
import platform
import subprocess
import sys
import time


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@contextlib.contextmanager
def busy_processes(count, settle=1.0):
    """`count` processes running `while True: pass` for the block (after `settle` seconds, so the
    scheduler and the load estimates see them); yields the 1-minute load average then."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(settle if count else 0.0)
        yield os.getloadavg()[0]
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
