"""Atomic file replacement, shared by every save in fqcore: an interrupted save never destroys the
last good file."""
import contextlib
import os
import stat
import uuid


def write_atomically(path, write):
    """Runs write(binary_file) on a fresh temporary file beside `path`, fsyncs it and renames it
    over `path` (then fsyncs the directory). On any error or interrupt the temporary file is
    removed and `path` is untouched. A new file gets open()'s permissions (0666 minus the umask),
    a replaced one keeps its own."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    # O_EXCL on a fresh name; mode 0o666 lets the umask decide, as open() would.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            os.chmod(temporary, stat.S_IMODE(os.stat(path).st_mode))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory):
    """Makes the rename durable (POSIX); where directories cannot be opened (Windows) there is
    nothing to do."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
