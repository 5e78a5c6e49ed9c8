"""Reverse mode over a plan's path as one generated function. The path of a training step is a
hundred or more gradient calls, most of them on vectors and scalars, where a loop that looks up
each op's output gradients and operands and sums its input gradients costs more than the call.
The generated function does the same calls, checks and sums in the same order, with the tensors
as names bound once instead of tuples unpacked each step, and an Identity's gradient (a
variable's read passes its gradient on) written out in place of its call."""
from .op_defs.array import pass_gradient


def compile_path(path, can_die, given=()):
    """run(values, grads, dead) for `path` (the plan's (op, gradient, summed, needed) entries, in
    reverse execution order): each entry whose outputs have a gradient and whose op did not die
    calls its gradient function on the run's values (a unit's with its `needed` too) and adds
    each input gradient it gives to `grads` (summed: the (position, tensor) pairs that take
    one). Only the ops in `can_die` (those a dead branch can reach) are looked up in `dead`.
    `grads` holds gradients of the tensors `given` when the run starts, of no others: a
    tensor's first term on the path is stored as it is, the later ones added to what is there."""
    scope, names = {}, {}
    stored = set(given)  # tensors whose gradient an earlier line of the path may have stored

    def store(tensor, term):
        """The lines that add `term` to the gradient of `tensor`."""
        target = name_of(tensor)
        if tensor in stored:
            return [f"p = get({target})", f"grads[{target}] = {term} if p is None else p + {term}"]
        stored.add(tensor)
        return [f"grads[{target}] = {term}"]

    def name_of(tensor):
        if tensor not in names:
            names[tensor] = f"t{len(names)}"
            scope[names[tensor]] = tensor
        return names[tensor]
    lines = ["def run(values, grads, dead):", "    get = grads.get"]
    for k, (op, gradient, summed, needed) in enumerate(path):
        scope[f"op{k}"], scope[f"gradient{k}"], scope[f"needed{k}"] = op, gradient, needed
        outputs = [name_of(t) for t in op.outputs]
        incoming = [f"a{j}" for j in range(len(outputs))]
        for a, t in zip(incoming, outputs):
            lines.append(f"    {a} = get({t})")
        has_gradient = " or ".join(f"{a} is not None" for a in incoming) or "False"
        alive = f" and op{k} not in dead" if op in can_die else ""
        lines.append(f"    if ({has_gradient}){alive}:")
        if gradient is pass_gradient and len(outputs) == 1 and [p for p, _ in summed] == [0]:
            # An Identity (a variable's read): its input's gradient is its output's.
            lines.extend("        " + line for line in store(summed[0][1], "a0"))
            continue
        operands = ", ".join(f"values[{name_of(t)}]" for t in op.inputs)
        results = ", ".join(f"values[{t}]" for t in outputs)
        unit_needs = f", needed{k}" if needed is not None else ""
        lines.append(f"        r = gradient{k}(op{k}, [{operands}], [{results}], "
                     f"[{', '.join(incoming)}]{unit_needs})")
        for position, t in summed:
            lines.append(f"        g = r[{position}]")
            lines.append("        if g is not None:")
            lines.extend("            " + line for line in store(t, "g"))
    lines.append("    return grads")
    exec("\n".join(lines), scope)  # noqa: S102 (generated from indices only)
    return scope["run"]
