"""The rule for names that become entry names in saved archives (graph ops and variables, quantizer
weights): none may read as a path that leaves the archive."""
import re

_DRIVE = re.compile(r"[A-Za-z]:")
_SEPARATORS = re.compile(r"[/\\]")


def path_problem(name):
    """Why `name` would read as a path outside its archive (a phrase for an error message), or
    None when it is safe. Refused: NUL characters, absolute forms ('/x', '\\x', 'C:x') and a
    component, between '/' or '\\' separators, that is '.' or '..'. A '/' inside a name, as in
    'conv1/weights_quant/min', or a '.' inside a component, as in 'a.npy', is fine."""
    if "\0" in name:
        return "it contains a NUL character"
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        return "it is an absolute path"
    if any(part in (".", "..") for part in _SEPARATORS.split(name)):
        return "it has a '.' or '..' path component"
    return None
