"""Atrous (dilated) 2-D convolution as TF 1.15 builds it: SpaceToBatchND -> VALID stride-1 conv ->
BatchToSpaceND (nn_ops.with_space_to_batch), the form contrib.quantize's folding steps over."""
import numpy as np

from . import build
from .core import get_default_graph


def pair(value, name, layer):
    """An int, an (h, w) pair or TF's [1, h, w, 1] of positive ints as (h, w)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value, value)
    if isinstance(value, (list, tuple)) and len(value) == 4 and value[0] == 1 and value[3] == 1:
        value = value[1:3]
    try:
        h, w = value
    except (TypeError, ValueError):
        raise ValueError(f"{layer}: {name} must be a positive int or an (h, w) pair, "
                         f"got {value!r}") from None
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1
               for v in (h, w)):
        raise ValueError(f"{layer}: {name} must be a positive int or an (h, w) pair, got {value!r}")
    return int(h), int(w)


def check_stride(stride, rate, layer):
    """slim (nn.convolution) refuses a dilated convolution with a stride > 1."""
    if max(rate) > 1 and max(pair(stride, "stride", layer)) > 1:
        raise ValueError(f"{layer}: stride {stride!r} with dilation {rate!r}: a dilated (atrous) "
                         f"convolution needs stride 1, as in TF")


def space_to_batch_paddings(spatial, kernel, rate, padding):
    """(paddings, crops) of TF's with_space_to_batch for NHWC spatial sizes `spatial`: the base
    padding makes SAME a VALID conv over the dilated filter ((k-1)*r+1), and
    required_space_to_batch_paddings pads the end so each padded size divides by its rate."""
    if padding not in ("SAME", "VALID"):
        raise ValueError(f"padding must be 'SAME' or 'VALID', got {padding!r}")
    paddings, crops = [], []
    for size, k, r in zip(spatial, kernel, rate):
        total = (k - 1) * r if padding == "SAME" else 0   # dilated filter size - 1
        start = total // 2
        end = total - start
        extra = (r - (size + start + end) % r) % r
        paddings.append([start, end + extra])
        crops.append([0, extra])
    return paddings, crops


def with_space_to_batch(x, kernel, rate, padding, container, make_op, layer):
    """SpaceToBatchND and BatchToSpaceND (named `<container>/...`) around make_op(space_batched),
    which builds the conv (padding VALID, strides 1) in the caller's current scope."""
    if x.shape is None or len(x.shape) != 4 or x.shape[1] is None or x.shape[2] is None:
        raise ValueError(f"{layer}: a dilated convolution needs an NHWC input with known height "
                         f"and width, got shape {x.shape}")
    for size, k, r in zip(x.shape[1:3], kernel, rate):
        if padding == "VALID" and size < (k - 1) * r + 1:
            raise ValueError(f"{layer}: padding='VALID' needs the input size ({size}) to be at "
                             f"least the dilated kernel size ({(k - 1) * r + 1}), got input "
                             f"shape {x.shape}")
    g = get_default_graph()
    paddings, crops = space_to_batch_paddings(x.shape[1:3], kernel, rate, padding)
    with g.name_scope(container + "/"):
        y = build.space_to_batch_nd(x, list(rate), paddings)
    y = make_op(y)
    with g.name_scope(container + "/"):
        return build.batch_to_space_nd(y, list(rate), crops)
