# Type stub of the compiled Cython extension (_kernels.pyx): mypy cannot read the .so, and the
# Python layer above it is where the public types are declared, so every name here is Any.
from typing import Any

def __getattr__(name: str) -> Any: ...
