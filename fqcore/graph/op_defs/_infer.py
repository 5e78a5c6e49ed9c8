"""Static shape and dtype inference helpers shared by the op definitions."""
import numpy as np

FLOAT32 = np.dtype(np.float32)


def broadcast(a, b):
    """The broadcast of two static shapes (None: unknown rank or dimension)."""
    if a is None or b is None:
        return None
    out = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x == 1:
            out.append(y)
        elif y == 1 or y == x:
            out.append(x)
        elif x is None or y is None:
            out.append(x if y is None else y)
        else:
            raise ValueError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast")
    return tuple(reversed(out))


def like_input(index=0, count=1):
    """Outputs shaped and typed like input `index`."""
    def infer(inputs, attrs):
        return [(inputs[index].shape, inputs[index].dtype)] * count
    return infer


def binary(inputs, attrs):
    return [(broadcast(inputs[0].shape, inputs[1].shape), inputs[0].dtype)]


def comparison(inputs, attrs):
    return [(broadcast(inputs[0].shape, inputs[1].shape), np.dtype(bool))]


def constant_value(tensor):
    """The value of a Const tensor, or None when it is not a constant."""
    if tensor.op.type == "Const":
        return tensor.op.attrs["value"]
    return None


def unbroadcast(grad, shape):
    """Sums `grad` down to `shape` (the gradient of numpy broadcasting)."""
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(
        i + extra for i, n in enumerate(shape) if n == 1 and grad.shape[i + extra] != 1)
    # np.add.reduce is what ndarray.sum runs, without its Python-level wrapper.
    summed = np.add.reduce(grad, axis=axes, keepdims=True, dtype=grad.dtype) if axes else grad
    return summed.reshape(shape)
