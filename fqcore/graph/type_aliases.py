"""The types fqcore.graph's annotations name. Imported for type checking only (the modules that
use them import them under TYPE_CHECKING), so it adds no import at run time."""
from typing import Sequence, Union

import numpy.typing as npt

from .core import Operation, Tensor
from .variables import Variable

# What an op takes where TF takes a tensor: a Tensor, a Variable (its read tensor), or a value
# that becomes a Const.
TensorLike = Union[Tensor, Variable, npt.ArrayLike]
# A window, stride or dilation: an int, an (h, w) pair or TF's [1, h, w, 1].
Window = Union[int, Sequence[int]]
# What control inputs and group() take.
OpLike = Union[Operation, Tensor]
