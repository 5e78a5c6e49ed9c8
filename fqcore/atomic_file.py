"""Atomic file replacement, shared by every save in fqcore: an interrupted save never destroys the
last good file, and the next save removes the temporary file it left behind."""
import contextlib
import os
import stat
import uuid

try:
    import fcntl
except ImportError:  # Windows: an open file cannot be deleted, which protects it just as well
    fcntl = None

# Seconds, by the file system's clock. The margin covers the instant between a save creating its
# temporary file and locking it, and saves by an older fqcore, which did not lock (while such a
# save writes, its file stays younger than this).
STALE_AFTER = 10.0
_HEX = frozenset("0123456789abcdef")


def write_atomically(path, write):
    """Runs write(binary_file) on a fresh temporary file beside `path`, fsyncs it and renames it
    over `path` (then fsyncs the directory). On any error or interrupt the temporary file is
    removed and `path` is untouched. A new file gets open()'s permissions (0666 minus the umask),
    a replaced one keeps its own.

    The temporary file is `.<name>.<32 hex digits>.tmp`. A save killed midway (kill -9, power
    loss) cannot remove its own, so each save first removes those that earlier saves to the same
    `path` left behind: files named exactly so, that no live save holds, last modified more than
    STALE_AFTER seconds before this save's own temporary file was created. A live save holds its
    temporary file from just after creating it until the rename: with an exclusive flock(2),
    which the kernel drops when the process dies, or where there is no flock (Windows) by having
    it open, which makes it undeletable. So a concurrent save, however slow, keeps its file; on a
    file system without locks nothing is removed; other files are never touched."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    prefix = f".{os.path.basename(path)}."
    temporary = os.path.join(directory, f"{prefix}{uuid.uuid4().hex}.tmp")
    # O_EXCL on a fresh name; mode 0o666 lets the umask decide, as open() would.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            if _lock(f.fileno()):
                _remove_stale(directory, prefix, temporary, os.fstat(f.fileno()).st_mtime)
            write(f)
            f.flush()
            os.fsync(f.fileno())
            with contextlib.suppress(OSError):
                os.chmod(temporary, stat.S_IMODE(os.stat(path).st_mode))
            if fcntl is not None:
                os.replace(temporary, path)  # renamed while still locked
        if fcntl is None:
            os.replace(temporary, path)  # Windows renames only closed files
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_directory(directory)


def _lock(fd):
    """Holds `fd` with an exclusive flock (where there is none, an open file is held already);
    False where the file system refuses locks: then nothing tells a live save's temporary file
    from a dead one's, and none is removed."""
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        return False
    return True


def _remove_stale(directory, prefix, own, started):
    """Removes the temporary files of dead saves to the same target (see write_atomically)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        candidate = os.path.join(directory, name)
        if _is_temporary(name, prefix) and candidate != own:
            with contextlib.suppress(OSError):
                _remove_if_dead(candidate, started)


def _is_temporary(name, prefix):
    """Whether `name` is exactly what write_atomically names a temporary file of its target."""
    middle = name[len(prefix):-len(".tmp")]
    return name.startswith(prefix) and name.endswith(".tmp") and len(middle) == 32 and \
        set(middle) <= _HEX


def _remove_if_dead(candidate, started):
    info = os.lstat(candidate)
    if not stat.S_ISREG(info.st_mode) or info.st_mtime > started - STALE_AFTER:
        return
    if fcntl is None:
        os.unlink(candidate)  # fails while a live save has it open
        return
    fd = os.open(candidate, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: a live save holds it
        os.unlink(candidate)
    finally:
        os.close(fd)


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
