"""Optimizers (SGD with momentum, Adam) as TF1 builds them: a Gradients op and one Apply* op per
variable, grouped into a train op."""
import numbers
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import numpy as np

from . import build
from .core import GraphKeys, Operation, Tensor, get_default_graph
from .variables import Variable, trainable_variables, variable


class Optimizer:
    """minimize(loss) adds the gradient and update ops and returns the train op."""
    _name = "Optimizer"
    # Each subclass's update of one variable: _apply(graph, variable, gradient) -> its Apply* op.
    _apply: Callable[..., Any]

    def __init__(self, learning_rate: Union[float, Tensor], name: Optional[str] = None):
        """learning_rate: a positive number, or a scalar float32 Tensor (e.g. a placeholder fed
        each step, for a schedule)."""
        if isinstance(learning_rate, Tensor):
            if learning_rate.shape not in (None, ()):
                raise ValueError(f"learning_rate must be a scalar tensor, got shape {learning_rate.shape}")
        elif isinstance(learning_rate, bool) or not isinstance(learning_rate, numbers.Real) or \
                not np.isfinite(learning_rate) or learning_rate <= 0:
            raise ValueError(f"learning_rate must be a positive number or a scalar tensor, got "
                             f"{learning_rate!r}")
        else:
            learning_rate = float(learning_rate)
        self.learning_rate = learning_rate
        self.name = name or self._name

    def _learning_rate(self):
        if isinstance(self.learning_rate, Tensor):
            return self.learning_rate
        return build.constant(np.float32(self.learning_rate), name="learning_rate")

    def minimize(self, loss: Tensor, var_list: Optional[Sequence[Variable]] = None,
                 name: Optional[str] = None) -> Operation:
        """Adds the gradient and update ops for `loss` and returns the train op.

        Parameters
        ----------
        loss : Tensor
            A float32 scalar.
        var_list : list of Variable, optional
            The variables to update (default: the trainable variables).
        name : str, optional
            The train op's name.

        Returns
        -------
        Operation
            Running it computes the gradients and applies one update to each variable.

        Raises
        ------
        ValueError
            No variables to update, or a loss that is not a scalar.
        """
        g = loss.graph
        var_list = list(var_list) if var_list is not None else trainable_variables(g)
        if not var_list:
            raise ValueError("minimize: there are no trainable variables")
        if loss.shape not in (None, ()):
            raise ValueError(f"minimize needs a scalar loss, got shape {loss.shape}")
        with g.as_default():
            grads = g.create_op("Gradients", [loss] + [v.op.outputs[0] for v in var_list],
                                name="gradients").outputs
            with g.name_scope(name or self.name) as scope:
                updates = [self._apply(g, var, grad) for var, grad in zip(var_list, grads)]
                finish = self._finish(g, updates)
            train_op = g.create_op("NoOp", [], full_name=scope[:-1], control_inputs=finish)
        g.add_to_collection(GraphKeys.TRAIN_OP, train_op)
        return train_op

    def _finish(self, g, updates):
        return updates

    def _slot(self, var, suffix):
        with get_default_graph().name_scope(var.op.name + "/"):
            return variable(suffix, np.zeros(var.shape, np.float32), trainable=False,
                            initializer_name="zeros")


class GradientDescentOptimizer(Optimizer):
    """Plain SGD, as TF1 builds it: ``var -= learning_rate * grad`` (ApplyGradientDescent).

    Parameters
    ----------
    learning_rate : float or Tensor
        A positive number, or a scalar float32 Tensor (e.g. a placeholder fed each step, for a
        schedule).
    name : str, optional
        The name scope of its ops (default ``GradientDescent``).

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None], name="x")
    ...     target = G.placeholder("float32", [None], name="target")
    ...     w = G.variable("w", 0.0)
    ...     error = G.subtract(G.multiply(x, w), target)
    ...     loss = G.reduce_mean(G.multiply(error, error))
    ...     train_op = G.GradientDescentOptimizer(0.1).minimize(loss)
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> session.run(train_op, {x: [1.0], target: [2.0]})
    >>> round(float(session.variable_value("w")), 4)     # 0 - 0.1 * 2 * (0 - 2)
    0.4
    """
    _name = "GradientDescent"

    def _apply(self, g, var, grad):
        with g.name_scope(f"update_{var.op.name}"):
            return g.create_op("ApplyGradientDescent",
                               [var.op.outputs[0], self._learning_rate(), grad],
                               name="ApplyGradientDescent")


class MomentumOptimizer(Optimizer):
    """SGD with momentum, as TF1 builds it (ApplyMomentum): ``accum = momentum * accum + grad;
    var -= learning_rate * accum``.

    Parameters
    ----------
    learning_rate : float or Tensor
        A positive number, or a scalar float32 Tensor fed each step.
    momentum : float, default 0.9
        The accumulator's decay.
    use_nesterov : bool, default False
        Nesterov's variant.
    name : str, optional
        The name scope of its ops (default ``Momentum``).

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None], name="x")
    ...     target = G.placeholder("float32", [None], name="target")
    ...     w = G.variable("w", 0.0)
    ...     error = G.subtract(G.multiply(x, w), target)
    ...     loss = G.reduce_mean(G.multiply(error, error))
    ...     train_op = G.MomentumOptimizer(0.1, 0.9).minimize(loss)
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> for _ in range(2):
    ...     session.run(train_op, {x: [1.0], target: [2.0]})
    >>> round(float(session.variable_value("w")), 4)     # 0.4, then 0.4 + 0.1 * (0.9 * 4 + 3.2)
    1.08
    """
    _name = "Momentum"

    def __init__(self, learning_rate: Union[float, Tensor], momentum: float = 0.9,
                 use_nesterov: bool = False, name: Optional[str] = None):
        super().__init__(learning_rate, name)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
        self.momentum = float(momentum)
        self.use_nesterov = bool(use_nesterov)

    def _apply(self, g, var, grad):
        accum = self._slot(var, self.name)
        with g.name_scope(f"update_{var.op.name}"):
            lr = self._learning_rate()
            momentum = build.constant(np.float32(self.momentum), name="momentum")
            return g.create_op("ApplyMomentum", [var.op.outputs[0], accum.op.outputs[0], lr, grad,
                                                 momentum], {"use_nesterov": self.use_nesterov},
                               name="ApplyMomentum")


class AdamOptimizer(Optimizer):
    """Adam, as TF1 builds it (ApplyAdam, with beta1_power and beta2_power variables).

    Parameters
    ----------
    learning_rate : float or Tensor, default 0.001
        A positive number, or a scalar float32 Tensor fed each step.
    beta1, beta2 : float, default 0.9, 0.999
        The decays of the first and second moment estimates.
    epsilon : float, default 1e-8
        Added to the second moment's square root.
    name : str, optional
        The name scope of its ops (default ``Adam``).

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None], name="x")
    ...     target = G.placeholder("float32", [None], name="target")
    ...     w = G.variable("w", 0.0)
    ...     error = G.subtract(G.multiply(x, w), target)
    ...     loss = G.reduce_mean(G.multiply(error, error))
    ...     train_op = G.AdamOptimizer(0.01).minimize(loss)
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> session.run(train_op, {x: [1.0], target: [2.0]})
    >>> round(float(session.variable_value("w")), 4)     # Adam's first step is the learning rate
    0.01
    """
    _name = "Adam"

    def __init__(self, learning_rate: Union[float, Tensor] = 0.001, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-8, name: Optional[str] = None):
        super().__init__(learning_rate, name)
        for key, value in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{key} must be in [0, 1), got {value!r}")
        if not epsilon > 0:
            raise ValueError(f"epsilon must be positive, got {epsilon!r}")
        self.beta1, self.beta2, self.epsilon = float(beta1), float(beta2), float(epsilon)
        self._powers: Optional[Tuple[Variable, Variable]] = None

    def minimize(self, loss: Tensor, var_list: Optional[Sequence[Variable]] = None,
                 name: Optional[str] = None) -> Operation:
        g = loss.graph
        with g.as_default(), g.name_scope(""):
            self._powers = (
                variable("beta1_power", np.float32(self.beta1), trainable=False),
                variable("beta2_power", np.float32(self.beta2), trainable=False))
        return super().minimize(loss, var_list, name)

    def _apply(self, g, var, grad):
        m = self._slot(var, self.name)
        v = self._slot(var, self.name + "_1")
        b1p, b2p = self._powers
        with g.name_scope(f"update_{var.op.name}"):
            hyper = [self._learning_rate()] + [build.constant(np.float32(x), name=n) for x, n in (
                (self.beta1, "beta1"), (self.beta2, "beta2"), (self.epsilon, "epsilon"))]
            return g.create_op("ApplyAdam", [var.op.outputs[0], m.op.outputs[0], v.op.outputs[0],
                                             b1p.read, b2p.read] + hyper + [grad], name="ApplyAdam")

    def _finish(self, g, updates):
        """beta1_power *= beta1 and beta2_power *= beta2 after every variable's update."""
        b1p, b2p = self._powers
        with g.control_dependencies(updates):
            new1 = build.multiply(b1p.read, np.float32(self.beta1), name="mul")
            new2 = build.multiply(b2p.read, np.float32(self.beta2), name="mul_1")
            assign1 = g.create_op("Assign", [b1p.op.outputs[0], new1], name="Assign")
            assign2 = g.create_op("Assign", [b2p.op.outputs[0], new2], name="Assign_1")
        return updates + [assign1, assign2]
