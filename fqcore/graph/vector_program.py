"""Element-wise float32 ops on vectors of one length (a folded batch norm's per-channel factors,
corrections and bias) compiled to programs of fq_f32_vector_program: the forward of a set of ops,
and the gradient that reverse mode would take through them, each one C call. Every instruction is
the numpy operation the op (or its gradient function in op_defs/math.py) computes, in the same
order, so the bits are the ops' bits; the compiler only decides which rows hold what."""
import numpy as np

FLOAT32 = np.dtype(np.float32)

COPY, NEGATE, RECIPROCAL, RSQRT, SQUARE, ADD, SUBTRACT, MULTIPLY, DIVIDE = range(9)

# The opcode of each op type a program runs; Identity and Reshape pass their input's row on.
FORWARD = {"AddV2": ADD, "Add": ADD, "Sub": SUBTRACT, "Mul": MULTIPLY, "RealDiv": DIVIDE,
           "Neg": NEGATE, "Reciprocal": RECIPROCAL, "Rsqrt": RSQRT, "Square": SQUARE}
PASSING = ("Identity", "Reshape")

# The constants the gradient formulas multiply by, as float32 (math.py's np.float32 literals).
NEGATIVE_HALF, TWO = np.array(-0.5, FLOAT32), np.array(2.0, FLOAT32)
CONSTANTS = (NEGATIVE_HALF, TWO)  # the sources a gradient program has after the forward's inputs


def data_inputs(op):
    """The inputs of `op` a program reads (a Reshape's shape is not data)."""
    return op.inputs[:1] if op.type == "Reshape" else op.inputs


class Forward:
    """The forward program of `ops` (in an order their data allows) reading `inputs` (sources
    0 .. len(inputs) - 1, in that order): `code` [instructions, 4], `registers` (how many rows it
    writes) and `row` (each tensor's row: a source's index, or len(inputs) + its register)."""

    def __init__(self, ops, inputs):
        self.row = {t: k for k, t in enumerate(inputs)}
        self.sources = len(inputs)
        code = []
        for op in ops:
            operands = [self.row[t] for t in data_inputs(op)]
            if op.type in PASSING:
                self.row[op.outputs[0]] = operands[0]
                continue
            destination = self.sources + len(code)
            code.append((FORWARD[op.type], destination, operands[0], operands[-1]))
            self.row[op.outputs[0]] = destination
        self.registers = len(code)
        self.code = np.array(code, np.int32).reshape(-1, 4)


class Gradient:
    """The reverse-mode program of a Forward: the gradients of the inputs where `needed` says so,
    from the gradients of the exits that have one (`given`, in order). Its rows: the forward's
    registers (kept), the forward's inputs, NEGATIVE_HALF and TWO, the given gradients, then its
    own registers. `returned` [(input position, row)]. `possible` is False when an input that
    needs a gradient is a scalar read by vector ops (its gradient is a sum, which numpy's
    reduction order decides): the caller then runs the ops' own gradient functions."""

    def __init__(self, forward, ops, inputs, given, needed, length):
        kept, sources = forward.registers, forward.sources
        self.code, self.returned, self.possible = [], [], True
        useful = {t for t, need in zip(inputs, needed) if need}
        for op in ops:  # in the forward's order: each after the ops that make its inputs
            if any(t in useful for t in data_inputs(op)):
                useful.add(op.outputs[0])
        if any(t in useful and elements(t) != length for t in inputs):
            self.possible = False
            return
        self.first_register = kept + sources + 2 + len(given)
        negative_half, two = kept + sources, kept + sources + 1

        def old(t):  # a forward tensor's row among this program's sources
            row = forward.row[t]
            return row - sources if row >= sources else kept + row
        grad = {t: kept + sources + 2 + k for k, t in enumerate(given)}

        def emit(opcode, a, b=0):
            self.code.append((opcode, self.first_register + len(self.code), a, b))
            return self.code[-1][1]

        for op in reversed(ops):
            g = grad.get(op.outputs[0])
            if g is None:
                continue
            operands = data_inputs(op)
            wanted = [t in useful for t in operands]
            x = old(operands[0])
            y = old(operands[-1])
            z = old(op.outputs[0])
            parts = [None] * len(operands)
            kind = op.type
            if kind in PASSING:
                parts[0] = g
            elif kind in ("AddV2", "Add"):
                parts = [g, g]
            elif kind == "Sub":
                parts = [g, emit(NEGATE, g) if wanted[1] else None]
            elif kind == "Mul":
                parts = [emit(MULTIPLY, g, y) if wanted[0] else None,
                         emit(MULTIPLY, x, g) if wanted[1] else None]
            elif kind == "RealDiv":
                parts[0] = emit(DIVIDE, g, y) if wanted[0] else None
                if wanted[1]:  # g * ((-x / y) / y)
                    parts[1] = emit(MULTIPLY, g, emit(DIVIDE, emit(DIVIDE, emit(NEGATE, x), y), y))
            elif kind == "Neg":
                parts[0] = emit(NEGATE, g)
            elif kind == "Reciprocal":  # -g * y * y
                parts[0] = emit(MULTIPLY, emit(MULTIPLY, emit(NEGATE, g), z), z)
            elif kind == "Rsqrt":  # -0.5 * (g * y) * (y * y)
                parts[0] = emit(MULTIPLY, emit(MULTIPLY, negative_half, emit(MULTIPLY, g, z)),
                                emit(MULTIPLY, z, z))
            elif kind == "Square":  # g * (2 * x)
                parts[0] = emit(MULTIPLY, g, emit(MULTIPLY, two, x))
            for t, part, want in zip(operands, parts, wanted):
                if part is None or not want:
                    continue
                # Reverse mode's order: what the later readers gave first, then this part.
                grad[t] = part if t not in grad else emit(ADD, grad[t], part)
        self.returned = [(k, grad[t]) for k, (t, need) in enumerate(zip(inputs, needed))
                         if need and t in grad]
        self.registers = len(self.code)
        self.code = np.array(self.code, np.int32).reshape(-1, 4)


def elements(tensor):
    """A tensor's element count, from its fully known shape."""
    return int(np.prod(tensor.shape, dtype=np.int64))
