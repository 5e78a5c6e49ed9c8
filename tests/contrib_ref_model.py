"""Builds the contrib_ref networks (tests/data/contrib_ref, made by TF 1.15's contrib.quantize)
with fqcore.graph from their recorded layer lists, and trains/evaluates them as the reference did."""
import json
import os

import numpy as np

import fqcore.graph as G

DATA = os.path.join(os.path.dirname(__file__), "data", "contrib_ref")


def load(config):
    with open(os.path.join(DATA, config + ".json")) as f:
        description = json.load(f)
    return description, np.load(os.path.join(DATA, config + ".npz"), allow_pickle=False)


def _scope(op_name):
    return op_name.rsplit("/", 1)[0] if "/" in op_name else ""


def build(description, training):
    """The network of `description` in a fresh graph; batch norm in training or inference mode."""
    layers = description["architecture"]["layers_training_graph" if training else "layers_eval_graph"]
    g = G.Graph()
    tensors = {}
    with g.as_default():
        for layer in layers:
            kind, op = layer["kind"], layer["op"]
            if kind == "placeholder":
                tensors[layer["output"]] = G.placeholder(layer["dtype"], layer["output_shape"], name=op)
                continue
            x = tensors[layer["inputs"][0]]
            scope = _scope(op)
            if kind in ("conv2d", "matmul"):
                with g.name_scope(scope):
                    weights = G.variable("weights", np.zeros(layer.get("kernel_shape") or
                                                             layer["weights_shape"], np.float32))
                    y = (G.conv2d(x, weights.read, strides=layer["strides"], padding=layer["padding"])
                         if kind == "conv2d" else G.matmul(x, weights.read))
            elif kind == "bias_add":
                with g.name_scope(scope + "/"):
                    channels = x.shape[-1]
                    y = G.bias_add(x, G.variable("biases", np.zeros(channels, np.float32)).read)
            elif kind in ("relu", "relu6"):
                with g.name_scope(scope + "/"):
                    y = G.relu(x) if kind == "relu" else G.relu6(x)
            elif kind == "fused_batch_norm":
                with g.name_scope(_scope(scope) + "/"):
                    y = G.layers.batch_norm(x, momentum=layer["momentum"],
                                                  epsilon=layer["epsilon"],
                                                  is_training=layer["is_training"])
            elif kind == "reduce_mean" and op == "pool":
                y = G.reduce_mean(x, axis=layer["axes"], name="pool")
            elif kind == "sparse_softmax_cross_entropy_with_logits":
                with g.name_scope("loss"), g.name_scope("xent"):
                    y = G.sparse_softmax_cross_entropy_with_logits(tensors[layer["labels"]], x,
                                                                   name="xent")
            elif kind == "reduce_mean":
                with g.name_scope("loss/"):
                    y = G.reduce_mean(x, name="mean")
            else:
                raise ValueError(f"unknown layer kind {kind!r}")
            tensors[layer["output"]] = y
    return g


def logits_tensors(g):
    """(the tensor the cross-entropy reads, the final BiasAdd before its act_quant)."""
    logits = g.get_operation_by_name("loss/xent/xent").inputs[0]
    final = "fc/BiasAdd:0" if "fc/BiasAdd" in {o.name for o in g.get_operations()} else "fc2/BiasAdd:0"
    return logits, g.get_tensor_by_name(final)


def train(description, data, rewrite):
    """Rewrites, attaches SGD(0.05), initializes from init__*, runs the reference's 8 steps.
    Returns per-step (loss, logits, logits_float) and per-step variable values."""
    g = build(description, training=True)
    rewrite(g)
    loss = g.get_tensor_by_name("loss/mean:0")
    with g.as_default():
        train_op = G.GradientDescentOptimizer(description["optimizer"]["learning_rate"]).minimize(loss)
        init = G.global_variables_initializer()
    session = G.Session(g)
    session.run(init)
    for var in description["variables"]:
        if var["created_by"] == "model":
            session.set_variable_value(var["name"], data[var["npz_init"]])
    logits, logits_float = logits_tensors(g)
    updates = g.get_collection(G.GraphKeys.UPDATE_OPS)
    feed = {"input:0": data["x_train"], "labels:0": data["labels_train"]}
    steps, trajectory = [], []
    for _ in range(description["training_loop"]["num_steps"]):
        _, _, *values = session.run([train_op, updates, loss, logits, logits_float], feed)
        steps.append(values)
        trajectory.append({v["name"]: session.variable_value(v["name"]) for v in description["variables"]})
    return g, steps, trajectory


def evaluate(description, data, rewrite):
    """Builds the eval graph, rewrites it, loads final__* by name; returns the graph and
    (logits, logits_float, loss) on x_eval and logits on x_train."""
    g = build(description, training=False)
    rewrite(g)
    with g.as_default():
        init = G.global_variables_initializer()
    session = G.Session(g)
    session.run(init)
    for var in G.global_variables(g):
        session.set_variable_value(var.op.name, data["final__" + var.op.name.replace("/", ".")])
    logits, logits_float = logits_tensors(g)
    loss = g.get_tensor_by_name("loss/mean:0")
    on_eval = session.run([logits, logits_float, loss],
                          {"input:0": data["x_eval"], "labels:0": data["labels_eval"]})
    on_train = session.run(logits, {"input:0": data["x_train"], "labels:0": data["labels_train"]})
    return g, on_eval, on_train
