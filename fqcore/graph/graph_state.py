"""What saving, loading and copying a graph share: the check that an op belongs to the graph, the
initializer stream's state read back, and short reprs for error messages."""
import numpy as np

from .core import Operation

_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def check_member(graph, op, what):
    """ValueError unless `op` is an operation of `graph` (`what` names it in the message)."""
    if not isinstance(op, Operation) or op.graph is not graph or \
            graph._ops.get(op.name) is not op:
        raise ValueError(f"{what} is not an operation of this graph")


def decode_rng(state, where):
    """The Generator a saved numpy bit-generator state describes; ValueError naming `where`."""
    if not isinstance(state, dict) or state.get("bit_generator") not in _BIT_GENERATORS:
        raise ValueError(f"{where} is not a numpy bit generator state: {short(state)}")
    bit_generator = getattr(np.random, state["bit_generator"])()
    try:
        bit_generator.state = state
    except Exception as error:  # numpy's setter raises various types on malformed states
        raise ValueError(f"{where} is not a valid {state['bit_generator']} state "
                         f"({type(error).__name__}: {error})") from None
    return np.random.Generator(bit_generator)


def short(value, limit=80):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
