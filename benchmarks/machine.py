"""What the comparison scripts print about the machine they ran on (standard library only, so a
TensorFlow or PyTorch worker process without fqcore can import it too)."""
import platform


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
