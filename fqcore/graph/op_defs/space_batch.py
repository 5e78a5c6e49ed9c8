"""SpaceToBatchND and BatchToSpaceND: TF's moves of spatial blocks into the batch and back."""
import numpy as np

from ..op_registry import register
from ._infer import constant_value


def _layout(label, block_shape, pairs, pairs_name, input_rank):
    """block_shape [M] and paddings or crops [M, 2] as ints, checked as TF's kernels check them."""
    block, pairs = np.asarray(block_shape), np.asarray(pairs)
    for name, value in (("block_shape", block), (pairs_name, pairs)):
        if value.size and value.dtype.kind not in "iu":
            raise ValueError(f"{label}: {name} must be integers, "
                             f"got {value.dtype} {value.tolist()}")
    if block.ndim != 1:
        raise ValueError(f"{label}: block_shape must be 1-D, got shape {block.shape}")
    m = block.shape[0]
    if pairs.shape != (m, 2):
        raise ValueError(f"{label}: {pairs_name} must have shape [{m}, 2] (a pair per block "
                         f"dimension), got shape {pairs.shape}")
    if input_rank is not None and input_rank < 1 + m:
        raise ValueError(f"{label}: input needs rank >= {1 + m} (batch and {m} block dimensions), "
                         f"got rank {input_rank}")
    if (block < 1).any():
        raise ValueError(f"{label}: block_shape values must be >= 1, got {block.tolist()}")
    if (pairs < 0).any():
        raise ValueError(f"{label}: {pairs_name} must be non-negative, got {pairs.tolist()}")
    return [int(b) for b in block], [(int(a), int(b)) for a, b in pairs]


def _space_to_batch_shape(label, shape, block, paddings):
    """The output shape (None: unknown dimension); each padded size must divide by its block."""
    batch = shape[0]
    out = [None if batch is None else batch * int(np.prod(block))]
    for i, (b, (before, after)) in enumerate(zip(block, paddings)):
        size = shape[1 + i]
        if size is None:
            out.append(None)
            continue
        padded = size + before + after
        if padded % b:
            raise ValueError(f"{label}: padded size {padded} (size {size} + paddings "
                             f"{[before, after]}) of dimension {1 + i} is not divisible by "
                             f"block_shape[{i}] = {b}")
        out.append(padded // b)
    return tuple(out) + tuple(shape[1 + len(block):])


def _batch_to_space_shape(label, shape, block, crops):
    """The output shape (None: unknown dimension); the batch must divide by prod(block_shape)
    and the crops must fit in each uncropped size."""
    batch, count = shape[0], int(np.prod(block))
    if batch is not None and batch % count:
        raise ValueError(f"{label}: batch size {batch} is not divisible by prod(block_shape) = "
                         f"{count} (block_shape {block})")
    out = [None if batch is None else batch // count]
    for i, (b, (before, after)) in enumerate(zip(block, crops)):
        size = shape[1 + i]
        if size is None:
            out.append(None)
            continue
        if before + after > size * b:
            raise ValueError(f"{label}: crops {[before, after]} of dimension {1 + i} exceed its "
                             f"size {size} * block_shape[{i}] {b} = {size * b}")
        out.append(size * b - before - after)
    return tuple(out) + tuple(shape[1 + len(block):])


def space_to_batch(label, x, block_shape, paddings):
    """TF's SpaceToBatchND: zero-pad the block dimensions, split each into (size / block, block),
    move the block factors in front of the batch and merge them into it."""
    x = np.asarray(x)
    block, paddings = _layout(label, block_shape, paddings, "paddings", x.ndim)
    out_shape = _space_to_batch_shape(label, x.shape, block, paddings)
    m, rest = len(block), x.shape[1 + len(block):]
    padded = np.pad(x, [(0, 0)] + paddings + [(0, 0)] * len(rest))
    split = [x.shape[0]]
    for size, b in zip(out_shape[1:1 + m], block):
        split += [size, b]
    split = padded.reshape(split + list(rest))
    order = ([2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)]
             + list(range(1 + 2 * m, split.ndim)))
    return np.transpose(split, order).reshape(out_shape)


def batch_to_space(label, x, block_shape, crops):
    """TF's BatchToSpaceND: split the batch into (block..., batch / prod(block)), interleave each
    block factor after its spatial dimension, merge the pairs and crop."""
    x = np.asarray(x)
    block, crops = _layout(label, block_shape, crops, "crops", x.ndim)
    out_shape = _batch_to_space_shape(label, x.shape, block, crops)
    m = len(block)
    split = x.reshape(block + [out_shape[0]] + list(x.shape[1:]))
    order = [m]
    for i in range(m):
        order += [m + 1 + i, i]
    order += list(range(2 * m + 1, split.ndim))
    merged = np.transpose(split, order).reshape(
        [out_shape[0]] + [size * b for size, b in zip(x.shape[1:1 + m], block)]
        + list(x.shape[1 + m:]))
    window = tuple(slice(before, merged.shape[1 + i] - after)
                   for i, (before, after) in enumerate(crops))
    return merged[(slice(None),) + window]


def _infer(op_type, pairs_name, output_shape):
    """Static shapes: exact when block_shape and the pairs are Consts; otherwise the rank is kept,
    with the dimensions after the blocked ones known when block_shape's length is."""
    def infer(inputs, attrs):
        x, block_input, pairs_input = inputs
        block, pairs = constant_value(block_input), constant_value(pairs_input)
        rank = None if x.shape is None else len(x.shape)
        if block is not None and pairs is not None:
            block, pairs = _layout(op_type, block, pairs, pairs_name, rank)
            if x.shape is not None:
                return [(output_shape(op_type, x.shape, block, pairs), x.dtype)]
        if x.shape is None:
            return [(None, x.dtype)]
        m = block_input.shape[0] if block_input.shape is not None and len(
            block_input.shape) == 1 else None
        if m is None or 1 + m > rank:
            return [((None,) * rank, x.dtype)]
        return [((None,) * (1 + m) + tuple(x.shape[1 + m:]), x.dtype)]
    return infer


def _space_to_batch_grad(op, inputs, outputs, grads):
    x, block_shape, paddings = inputs
    return [batch_to_space(op.name, grads[0], block_shape, paddings), None, None]


def _batch_to_space_grad(op, inputs, outputs, grads):
    x, block_shape, crops = inputs
    return [space_to_batch(op.name, grads[0], block_shape, crops), None, None]


@register("SpaceToBatchND", _infer("SpaceToBatchND", "paddings", _space_to_batch_shape),
          gradient=_space_to_batch_grad)
def space_to_batch_nd(op, inputs, ctx):
    return (space_to_batch(op.name, *inputs),)


@register("BatchToSpaceND", _infer("BatchToSpaceND", "crops", _batch_to_space_shape),
          gradient=_batch_to_space_grad)
def batch_to_space_nd(op, inputs, ctx):
    return (batch_to_space(op.name, *inputs),)
