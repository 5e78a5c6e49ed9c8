"""A small op-pattern matcher (contrib's graph_matcher): types, inputs, unordered inputs, one-of."""


class Op:
    """Matches an op whose type is in `types` ('*' for any) and whose inputs match `inputs`
    (None: not checked); with ordered=False, two inputs may match either way round."""

    def __init__(self, types, inputs=None, ordered=True):
        self.types = None if types == "*" else set(types.split("|"))
        self.inputs = inputs
        self.ordered = ordered

    def match(self, tensor, found):
        op = tensor.op
        if self.types is not None and op.type not in self.types:
            return False
        if self.inputs is None:
            found[self] = (op, tensor)
            return True
        if len(op.inputs) != len(self.inputs):
            return False
        orders = [op.inputs]
        if not self.ordered and len(op.inputs) == 2:
            orders.append(op.inputs[::-1])
        for inputs in orders:
            trial = dict(found)
            if all(p.match(t, trial) for p, t in zip(self.inputs, inputs)):
                trial[self] = (op, tensor)
                found.clear()
                found.update(trial)
                return True
        return False


class OneOf:
    """Matches the first of `patterns` that matches."""

    def __init__(self, patterns):
        self.patterns = patterns

    def match(self, tensor, found):
        for pattern in self.patterns:
            trial = dict(found)
            if pattern.match(tensor, trial):
                found.clear()
                found.update(trial)
                return True
        return False


ANY = Op("*")


def match_graph(graph, pattern):
    """Matches of `pattern` rooted at each op's first output, in graph order."""
    for op in graph.get_operations():
        if not op.outputs:
            continue
        found = {}
        if pattern.match(op.outputs[0], found):
            yield found


def get_op(found, pattern):
    entry = found.get(pattern)
    return entry[0] if entry else None


def get_tensor(found, pattern):
    entry = found.get(pattern)
    return entry[1] if entry else None
